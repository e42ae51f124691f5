//! The adapters under test. Each serves an [`Engine`] in front of a
//! [`TestHandler`] on `127.0.0.1:0` and returns the base URL.

use std::{convert::Infallible, future::Future, sync::Arc};

use axum::{
    extract::{Request, State},
    response::Response,
    routing::get,
    Router,
};
use http::Method;
use hyper_util::{rt::TokioIo, service::TowerToHyperService};
use tokio::net::TcpListener;
use x402_axum::{MissingPaywall, UsageMeter};
use x402_core::{
    discovery::{DiscoveryEndpoints, OpenApiInfo},
    Engine, VerifiedPayment,
};

use crate::TestHandler;

/// The `info` of the OpenAPI document every adapter serves.
pub fn openapi_info() -> OpenApiInfo {
    OpenApiInfo::new("x402 conformance", "1.0.0")
}

/// A framework adapter the conformance suite runs against.
///
/// `serve` must put the handler behind the adapter's paywall for every path
/// (including unknown spellings such as `/PAID`, which must still reach the
/// handler if the paywall let them through), served on `listener`
/// (`127.0.0.1:<port>`, from [`bind`]). Besides:
///
/// - the handler glue hands the `upto` usage meter to
///   [`TestHandler::respond_metered`] the way the framework hands it to a
///   handler (an extractor where the adapter crate has one, the request's
///   extensions otherwise);
/// - `GET /.well-known/x402` and `GET /.well-known/x402/openapi.json` answer
///   the engine's discovery and OpenAPI documents (with [`openapi_info`]),
///   through the adapter crate's discovery service where it has one,
///   without running the handler.
pub trait Adapter: Send + Sync + 'static {
    /// Shown in the scenario count line.
    const NAME: &'static str;

    /// Whether the framework finishes a request whose client hung up
    /// (actix-web does; hyper drops the request's future). The cancellation
    /// scenarios assert what each must then guarantee.
    const FINISHES_ABANDONED_REQUESTS: bool = false;

    fn serve(
        listener: TcpListener,
        engine: Engine,
        handler: Arc<TestHandler>,
    ) -> impl Future<Output = ()> + Send;
}

/// Binds `127.0.0.1:0`.
pub async fn bind() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}

/// The paths the axum router names explicitly; anything else reaches the
/// same handler through the fallback.
pub const ROUTED_PATHS: [&str; 4] = ["/free", "/paid", "/stream", "/dynamic"];

/// The handler, with the meter from `x402_axum::UsageMeter` (rejected on
/// routes that are not `upto`).
async fn axum_handler(
    State(handler): State<Arc<TestHandler>>,
    meter: Result<UsageMeter, MissingPaywall>,
    request: Request,
) -> Response {
    let payment = request.extensions().get::<VerifiedPayment>();
    let meter = meter.ok().map(|UsageMeter(meter)| meter);
    handler.respond_metered(
        request.method(),
        request.uri().path(),
        payment,
        meter.as_ref(),
    )
}

/// An axum router naming [`ROUTED_PATHS`] (GET, so HEAD is axum's) plus a
/// fallback, without any paywall.
pub fn axum_router(handler: Arc<TestHandler>) -> Router {
    let mut router = Router::new();
    for path in ROUTED_PATHS {
        router = router.route(path, get(axum_handler));
    }
    router.fallback(axum_handler).with_state(handler)
}

/// `x402_axum::PaywallLayer` over a whole axum `Router`, with
/// `x402_axum::Discovery` merged beside it.
#[derive(Debug, Clone, Copy)]
pub struct AxumAdapter;

impl Adapter for AxumAdapter {
    const NAME: &'static str = "axum";

    async fn serve(listener: TcpListener, engine: Engine, handler: Arc<TestHandler>) {
        let discovery = x402_axum::Discovery::new(engine.clone())
            .openapi(openapi_info())
            .into_router();
        let app = axum_router(handler)
            .layer(x402_axum::PaywallLayer::new(engine))
            .merge(discovery);
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
}

/// [`AxumAdapter`]'s app served with
/// `into_make_service_with_connect_info::<SocketAddr>()`, so that the
/// paywall knows each request's peer address (abuse limits key by it).
#[derive(Debug, Clone, Copy)]
pub struct AxumConnectInfoAdapter;

impl Adapter for AxumConnectInfoAdapter {
    const NAME: &'static str = "axum (ConnectInfo)";

    async fn serve(listener: TcpListener, engine: Engine, handler: Arc<TestHandler>) {
        let app = axum_router(handler).layer(x402_axum::PaywallLayer::new(engine));
        let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
}

/// `x402_tower::PaywallLayer` over a `tower::service_fn`, served by hyper
/// directly (no axum routing anywhere). A second `service_fn` in front
/// answers the discovery paths with x402-core's `DiscoveryEndpoints` (tower
/// has no discovery service of its own) and hands everything else to the
/// paywalled service.
#[derive(Debug, Clone, Copy)]
pub struct TowerAdapter;

impl Adapter for TowerAdapter {
    const NAME: &'static str = "tower";

    async fn serve(listener: TcpListener, engine: Engine, handler: Arc<TestHandler>) {
        let inner = tower::service_fn(move |request: http::Request<hyper::body::Incoming>| {
            let handler = handler.clone();
            async move {
                let payment = request.extensions().get::<VerifiedPayment>();
                // A tower service reads the meter from the verified payment
                // in the request's extensions.
                let meter = payment.and_then(|p| p.meter.as_ref());
                let mut response =
                    handler.respond_metered(request.method(), request.uri().path(), payment, meter);
                if request.method() == Method::HEAD {
                    *response.body_mut() = axum::body::Body::empty();
                }
                Ok::<_, Infallible>(response)
            }
        });
        let discovery = DiscoveryEndpoints::new(engine.clone()).openapi(openapi_info());
        let paid = tower::ServiceBuilder::new()
            .layer(x402_tower::PaywallLayer::new(engine))
            .service(inner);
        let service = tower::service_fn(move |request: http::Request<hyper::body::Incoming>| {
            let (discovery, paid) = (discovery.clone(), paid.clone());
            async move {
                let (method, path) = (request.method(), request.uri().path());
                if let Some(response) = discovery.respond_to(method, path, request.headers()).await
                {
                    return Ok::<_, Infallible>(response.map(axum::body::Body::from));
                }
                let response = tower::ServiceExt::oneshot(paid, request).await?;
                Ok(response.map(axum::body::Body::new))
            }
        });
        serve_hyper(listener, service);
    }
}

/// Serves a tower service with hyper directly (HTTP/1.1), one task per
/// connection, until the runtime ends.
pub fn serve_hyper<S, B>(listener: TcpListener, service: S)
where
    S: tower::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}
