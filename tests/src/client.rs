//! The buyer side: a reqwest client, replies with decoding helpers, and a
//! [`Fixture`] tying a stand-in, a handler and an adapter together.

use std::sync::Arc;

use http::{HeaderMap, StatusCode};
use serde_json::Value;
use x402_core::{
    codec,
    route::{Offer, RequestInfo, Route},
    Engine, EngineBuilder, Facilitator,
};

use crate::{payment, Adapter, EventLog, StandIn, TestHandler, DESCRIPTION, PAY_TO, SECRET};

/// What a request got back.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: bytes::Bytes,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (panics with the body when it is not).
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// A base64 JSON header decoded with the crate's codec.
    #[track_caller]
    pub fn decoded(&self, name: &str) -> Option<Value> {
        let raw = self.headers.get(name)?;
        Some(codec::decode::<Value>(raw.as_bytes(), usize::MAX).unwrap())
    }

    /// The decoded `PAYMENT-REQUIRED` header (must be present).
    #[track_caller]
    pub fn payment_required(&self) -> Value {
        self.decoded("payment-required")
            .expect("PAYMENT-REQUIRED header")
    }

    /// The `error` of the v2 challenge header.
    #[track_caller]
    pub fn challenge_error(&self) -> String {
        self.payment_required()["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Whether the secret handler text is anywhere in the body.
    pub fn leaks_secret(&self) -> bool {
        self.text().contains(SECRET)
    }

    #[track_caller]
    pub fn assert_status(&self, status: u16) {
        assert_eq!(
            self.status.as_u16(),
            status,
            "status; body: {}",
            self.text()
        );
    }
}

/// A client that never uses a proxy.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// Sends a request and reads the whole reply.
pub async fn send(request: reqwest::RequestBuilder) -> Reply {
    let response = request.send().await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.bytes().await.unwrap();
    Reply {
        status,
        headers,
        body,
    }
}

/// The standard engine: `GET /paid` ($0.01), `GET /stream` ($0.01, settled
/// before the handler), `GET /dynamic` (priced per request: `?free=1` free,
/// `?tier=gold` $0.02, else $0.01). `/free` is not protected.
pub fn standard_engine(facilitator: impl Facilitator) -> Engine {
    standard_builder(facilitator).build().unwrap()
}

/// [`standard_engine`]'s builder, before `build`.
pub fn standard_builder(facilitator: impl Facilitator) -> EngineBuilder {
    Engine::builder(facilitator)
        .route(
            Route::get("/paid")
                .offer(Offer::exact("eip155:84532", "$0.01", PAY_TO))
                .description(DESCRIPTION)
                .mime_type("application/json"),
        )
        .route(
            Route::get("/stream")
                .offer(Offer::exact("eip155:84532", "$0.01", PAY_TO))
                .settle_before_handler(),
        )
        .route(Route::get("/dynamic").dynamic_pricing(dynamic_price))
}

/// The dynamic price of `/dynamic`.
pub async fn dynamic_price(request: RequestInfo) -> Option<Vec<Offer>> {
    let query = request.uri.query().unwrap_or_default().to_owned();
    let has = |kv: &str| query.split('&').any(|p| p == kv);
    if has("free=1") {
        return None;
    }
    let price = if has("tier=gold") { "$0.02" } else { "$0.01" };
    Some(vec![Offer::exact("eip155:84532", price, PAY_TO)])
}

/// One adapter server with its stand-in facilitator, handler and log.
#[derive(Debug)]
pub struct Fixture {
    pub base: String,
    pub standin: StandIn,
    pub handler: Arc<TestHandler>,
    pub events: EventLog,
    pub client: reqwest::Client,
}

impl Fixture {
    /// The adapter serving [`standard_engine`] against a fresh stand-in.
    pub async fn new<A: Adapter>() -> Self {
        Self::with_engine::<A>(|standin| standard_builder(standin.facilitator())).await
    }

    /// The adapter serving the engine `build` starts from a fresh stand-in,
    /// with the server's own URL as its public origin.
    pub async fn with_engine<A: Adapter>(build: impl FnOnce(&StandIn) -> EngineBuilder) -> Self {
        Self::with_engine_and_log::<A>(|standin, _| build(standin)).await
    }

    /// [`with_engine`](Self::with_engine), `build` also getting the
    /// fixture's [`EventLog`] (for hooks that log into it).
    pub async fn with_engine_and_log<A: Adapter>(
        build: impl FnOnce(&StandIn, &EventLog) -> EngineBuilder,
    ) -> Self {
        let events = EventLog::default();
        let standin = StandIn::start(events.clone()).await;
        let handler = TestHandler::new(events.clone());
        let (listener, base) = crate::adapters::bind().await;
        let engine = build(&standin, &events)
            .public_origin(&base)
            .build()
            .unwrap();
        A::serve(listener, engine, handler.clone()).await;
        Self {
            base,
            standin,
            handler,
            events,
            client: client(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// `GET path` with extra headers.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = self.client.get(self.url(path));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        send(request).await
    }

    /// The decoded 402 challenge of `path` (asserting it is one).
    pub async fn challenge(&self, path: &str) -> Value {
        let reply = self.get(path, &[]).await;
        reply.assert_status(402);
        reply.payment_required()
    }

    /// The first requirement the 402 of `path` offers.
    pub async fn first_row(&self, path: &str) -> Value {
        self.challenge(path).await["accepts"][0].clone()
    }

    /// Pays `path` with a v2 payment copying its first offered row.
    pub async fn pay_v2(&self, path: &str) -> Reply {
        let row = self.first_row(path).await;
        self.get(path, &[("PAYMENT-SIGNATURE", &payment::v2_header(&row))])
            .await
    }

    /// Pays `path` with a v2 payment for `row` (a requirement it offers).
    pub async fn pay_row(&self, path: &str, row: &Value) -> Reply {
        self.get(path, &[("PAYMENT-SIGNATURE", &payment::v2_header(row))])
            .await
    }

    /// Pays `path` with a v1 `exact` payment on `base-sepolia`.
    pub async fn pay_v1(&self, path: &str) -> Reply {
        self.get(path, &[("X-PAYMENT", &payment::v1_header("base-sepolia"))])
            .await
    }
}
