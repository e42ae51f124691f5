//! The paywall layer, reading what axum's router decided.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, MatchedPath, OriginalUri};
use http::Extensions;
use tower_layer::Layer;
use x402_core::{engine::ConfigError, Engine, Route};
use x402_tower::{Dispatch, Paywall};

/// The x402 paywall for axum: [`x402_tower::PaywallLayer`] told what axum's
/// router decided.
///
/// It reads the route template that dispatched each request
/// ([`MatchedPath`]) and the URI the client sent ([`OriginalUri`], the
/// whole path even inside [`Router::nest`](axum::Router::nest), which strips
/// its prefix before the layer runs). So every placement protects what it
/// wraps, with the engine's routes declared by the path clients send:
///
/// - `Router::layer` and `Router::route_layer`: every route of the router,
///   nested ones included;
/// - a layer on one `MethodRouter` (`get(handler).layer(..)`);
/// - a layer inside a nested router (`nest("/api", Router::new()...layer(..))`)
///   or around a nested service (`nest_service("/api", layer.layer(svc))`);
/// - a layer around the whole router (`ServiceBuilder`), where it sees the
///   request before routing.
///
/// [`route`](Self::route) binds a price to the one route it wraps, next to
/// its handler, with no table to keep in step.
///
/// Around the whole router costs least a call: `Router::layer` wraps each
/// route in one more boxed service, which axum clones for every call it
/// routes there (and the paywall clones the route again for tower's
/// readiness rule); with handlers holding state, each clone is an
/// allocation. Around the router the paywall clones the router, one
/// reference count. The example server's session calls ran 4 % faster
/// there (four allocations and about 1 000 instructions fewer a call),
/// its paid requests 6 %.
/// Around the router the engine matches the path alone, so a path the
/// router would not serve but some reading of which a route prices is
/// challenged rather than left to the router's 404. `axum::serve` takes
/// the paywalled router once its responses are mapped to axum's body
/// (`response.map(axum::body::Body::new)`, with `tower::ServiceExt::map_response`)
/// and it is made a service maker (`axum::ServiceExt::into_make_service`);
/// `examples/paid-api`'s `paywalled` does both.
///
/// ```
/// use axum::{routing::get, Router};
/// use x402_axum::{Payment, PaywallLayer};
/// use x402_core::{Engine, Offer, Route};
/// # use x402_core::facilitator::HttpFacilitator;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// let engine = Engine::builder(HttpFacilitator::new("http://127.0.0.1:4022")?)
///     .route(Route::get("/api/report").offer(Offer::exact("eip155:84532", "$0.01", pay_to)))
///     .public_origin("https://api.example.com")
///     .build()?;
/// let paywall = PaywallLayer::new(engine);
///
/// async fn report(Payment(p): Payment) -> String { format!("paid by {:?}", p.payer) }
/// async fn weather(Payment(p): Payment) -> String { format!("paid by {:?}", p.payer) }
///
/// let app: Router = Router::new()
///     // Priced where it is declared.
///     .route(
///         "/weather/{city}",
///         get(weather).layer(paywall.route(
///             Route::get("/weather/{city}").offer(Offer::exact("eip155:84532", "$0.001", pay_to)),
///         )?),
///     )
///     // Priced by the engine's table, by the full path.
///     .nest("/api", Router::new().route("/report", get(report)).layer(paywall.clone()))
///     .route("/health", get(|| async { "ok" }));
/// # let _ = app; Ok(()) }
/// ```
///
/// A `Router::layer` covers only the routes added before it, as every axum
/// layer does: add paid routes first, or bind them with [`route`](Self::route).
///
/// [Abuse limits](x402_core::limit) key clients by the peer's address,
/// which the layer reads from [`ConnectInfo<SocketAddr>`](ConnectInfo): serve
/// the app with
/// [`into_make_service_with_connect_info::<SocketAddr>()`](axum::Router::into_make_service_with_connect_info)
/// for them to apply (without it, requests have no address and are not
/// limited, unless the limit keys clients by a function of the request).
#[derive(Debug, Clone)]
#[must_use]
pub struct PaywallLayer(x402_tower::PaywallLayer);

impl PaywallLayer {
    /// The paywall driven by `engine`'s route table.
    pub fn new(engine: Engine) -> Self {
        Self(x402_tower::PaywallLayer::new(engine).read_dispatch(axum_dispatch))
    }

    /// A paywall for the one route it wraps, priced by `route` (see
    /// [`x402_tower::PaywallLayer::route`]). Declare `route` with the path
    /// given to axum: discovery lists it, and a template it does not cover
    /// is logged once.
    pub fn route(&self, route: Route) -> Result<Self, ConfigError> {
        Ok(Self(self.0.route(route)?))
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        self.0.engine()
    }
}

impl From<Engine> for PaywallLayer {
    fn from(engine: Engine) -> Self {
        Self::new(engine)
    }
}

impl<S> Layer<S> for PaywallLayer {
    type Service = Paywall<S>;

    fn layer(&self, inner: S) -> Self::Service {
        self.0.layer(inner)
    }
}

/// What axum's router left in the request: the original URI, the template
/// that matched (absent in fallbacks and for `nest_service`, whose tail
/// axum keeps to itself), and the peer's address when the app is served
/// with `ConnectInfo<SocketAddr>`.
fn axum_dispatch(extensions: &Extensions) -> Dispatch<'_> {
    Dispatch::default()
        .original_uri(extensions.get::<OriginalUri>().map(|uri| &uri.0))
        .route_template(extensions.get::<MatchedPath>().map(MatchedPath::as_str))
        .peer(
            extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|info| info.0.ip()),
        )
}
