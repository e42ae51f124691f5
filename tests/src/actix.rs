//! The actix-web adapter under test: `x402_actix::PaywallLayer` on a whole
//! `App` whose default service is the shared [`TestHandler`], with
//! `x402_actix::Discovery` registered beside it.
//!
//! actix-web's `HttpServer` is `!Send` and brings its own runtime, so each
//! server runs on its own thread in an actix `System`. It is stopped when the
//! test's Tokio runtime shuts down (see [`StopOnDrop`]).

use std::{sync::Arc, thread};

use actix_web::{
    dev::ServerHandle,
    http::{header::HeaderName, header::HeaderValue, StatusCode},
    web, App, HttpRequest, HttpResponse, HttpServer,
};
use http_body::Body as _;
use http_body_util::BodyExt;
use tokio::{net::TcpListener, sync::oneshot};
use x402_actix::{Discovery, Payment, PaywallLayer, UsageMeter};
use x402_core::Engine;

use crate::{Adapter, TestHandler};

/// `x402_actix::PaywallLayer` wrapping an actix `App`, served by actix's
/// own `HttpServer`.
#[derive(Debug, Clone, Copy)]
pub struct ActixAdapter;

impl Adapter for ActixAdapter {
    const NAME: &'static str = "actix";
    const FINISHES_ABANDONED_REQUESTS: bool = true;

    async fn serve(listener: TcpListener, engine: Engine, handler: Arc<TestHandler>) {
        let (tx, rx) = oneshot::channel();
        let listener = listener.into_std().unwrap();
        thread::Builder::new()
            .name("actix-test-server".into())
            .spawn(move || run_server(listener, engine, handler, tx))
            .unwrap();
        let handle = rx.await.expect("actix server failed to start");
        // Lives as long as the test's runtime: when the test ends the runtime
        // drops this task, and the guard stops the server and its thread.
        let guard = StopOnDrop(handle);
        tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
    }
}

/// Stops an actix server when dropped.
#[derive(Debug)]
pub struct StopOnDrop(pub ServerHandle);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        // `stop` sends the command at once; the returned future only waits
        // for completion, which a `Drop` cannot do.
        drop(self.0.stop(false));
    }
}

fn run_server(
    listener: std::net::TcpListener,
    engine: Engine,
    handler: Arc<TestHandler>,
    started: oneshot::Sender<ServerHandle>,
) {
    actix_web::rt::System::new().block_on(async move {
        let server = HttpServer::new(move || {
            App::new()
                .wrap(PaywallLayer::new(engine.clone()))
                .app_data(web::Data::from(handler.clone()))
                .service(Discovery::new(engine.clone()).openapi(crate::adapters::openapi_info()))
                .default_service(web::to(respond))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap();
        let server = server.run();
        let _ = started.send(server.handle());
        let _ = server.await;
    });
}

/// Every path, every method: the shared handler, reading the payment through
/// `Option<Payment>` and the `upto` meter through `Option<UsageMeter>` (the
/// extractors under test).
async fn respond(
    request: HttpRequest,
    handler: web::Data<TestHandler>,
    payment: Option<Payment>,
    meter: Option<UsageMeter>,
) -> HttpResponse {
    let method = http::Method::from_bytes(request.method().as_str().as_bytes()).unwrap();
    let meter = meter.map(|UsageMeter(meter)| meter);
    let response =
        handler.respond_metered(&method, request.path(), payment.as_deref(), meter.as_ref());
    to_actix(response).await
}

/// The handler's `http` 1.x / axum response as an actix response: a body of
/// known length is collected, any other is streamed chunk by chunk.
async fn to_actix(response: http::Response<axum::body::Body>) -> HttpResponse {
    let (parts, body) = response.into_parts();
    let mut builder = HttpResponse::build(StatusCode::from_u16(parts.status.as_u16()).unwrap());
    for (name, value) in &parts.headers {
        builder.append_header((
            HeaderName::from_bytes(name.as_str().as_bytes()).unwrap(),
            HeaderValue::from_bytes(value.as_bytes()).unwrap(),
        ));
    }
    if body.size_hint().exact().is_some() {
        builder.body(body.collect().await.unwrap().to_bytes())
    } else {
        builder.streaming(body.into_data_stream())
    }
}
