//! The protected handler: counts its calls, logs `handler` into the
//! [`EventLog`], answers as it is told, and on `upto` routes reports the
//! usage it is told to (through the meter the adapter hands it, or the
//! `Settlement-Overrides` response header).

use std::{
    sync::{
        atomic::{AtomicU8, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use axum::body::Body;
use bytes::Bytes;
use http::{Method, Response, StatusCode};
use serde_json::json;
use x402_core::{meter::Meter, VerifiedPayment};

use crate::{EventLog, SECRET};

/// How the handler answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum HandlerMode {
    /// 200 JSON `{"secret": SECRET, "path", "method", "payer"}`.
    Json = 0,
    /// 500 `handler exploded`.
    Error500 = 1,
    /// 200, a chunked body of [`STREAM_CHUNKS`] sent with pauses.
    Stream = 2,
    /// 200 JSON, whose body comes only after [`SLOW_BODY`]: a handler
    /// still at work.
    Slow = 3,
}

/// How long a [`HandlerMode::Slow`] handler works before its body comes.
pub const SLOW_BODY: Duration = Duration::from_millis(800);

/// The chunks of a streaming body.
pub const STREAM_CHUNKS: [&str; 3] = ["chunk-1;", "chunk-2;", SECRET];
/// The body of a failing handler.
pub const HANDLER_ERROR_BODY: &str = "handler exploded";

/// What the handler reports as the cost of a call (`upto` routes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Usage {
    /// Reports nothing.
    #[default]
    Nothing,
    /// `Meter::add(n)` on the meter the adapter handed over; a 500
    /// ([`NO_METER_BODY`]) when the adapter handed none.
    Meter(u64),
    /// A `Settlement-Overrides: <value>` response header.
    Override(String),
}

/// The body of a handler told to use a meter it was not given.
pub const NO_METER_BODY: &str = "no usage meter reached the handler";

/// A handler shared by an adapter's server and the test.
#[derive(Debug)]
pub struct TestHandler {
    calls: AtomicUsize,
    mode: AtomicU8,
    usage: Mutex<Usage>,
    cache_control: Mutex<Option<&'static str>>,
    events: EventLog,
}

impl TestHandler {
    pub fn new(events: EventLog) -> Arc<Self> {
        Arc::new(Self {
            calls: AtomicUsize::new(0),
            mode: AtomicU8::new(HandlerMode::Json as u8),
            usage: Mutex::new(Usage::Nothing),
            cache_control: Mutex::new(None),
            events,
        })
    }

    /// What the next calls report as their cost.
    pub fn set_usage(&self, usage: Usage) {
        *self.usage.lock().unwrap() = usage;
    }

    /// The `Cache-Control` the next responses carry (`None`: none).
    pub fn set_cache_control(&self, value: Option<&'static str>) {
        *self.cache_control.lock().unwrap() = value;
    }

    pub fn set_mode(&self, mode: HandlerMode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    fn mode(&self) -> HandlerMode {
        match self.mode.load(Ordering::SeqCst) {
            1 => HandlerMode::Error500,
            2 => HandlerMode::Stream,
            3 => HandlerMode::Slow,
            _ => HandlerMode::Json,
        }
    }

    /// How many times the handler ran.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Asserts the handler call count.
    #[track_caller]
    pub fn assert_calls(&self, n: usize) {
        assert_eq!(self.calls(), n, "handler call count");
    }

    /// Answers a request (any framework: the adapter passes the parts), with
    /// no usage meter.
    pub fn respond(
        &self,
        method: &Method,
        path: &str,
        payment: Option<&VerifiedPayment>,
    ) -> Response<Body> {
        self.respond_metered(method, path, payment, None)
    }

    /// Answers a request, reporting the [`Usage`] it is set to through
    /// `meter`: the `upto` meter as the adapter's framework hands it to a
    /// handler (an extractor, the request's extensions).
    pub fn respond_metered(
        &self,
        method: &Method,
        path: &str,
        payment: Option<&VerifiedPayment>,
        meter: Option<&Meter>,
    ) -> Response<Body> {
        let mut response = self.answer(method, path, payment, meter);
        if let Some(value) = *self.cache_control.lock().unwrap() {
            response
                .headers_mut()
                .insert(http::header::CACHE_CONTROL, value.parse().unwrap());
        }
        match self.usage.lock().unwrap().clone() {
            Usage::Nothing => {}
            Usage::Meter(n) => match meter {
                Some(meter) => meter.add(n),
                None => {
                    return Response::builder()
                        .status(StatusCode::INTERNAL_SERVER_ERROR)
                        .body(Body::from(NO_METER_BODY))
                        .unwrap()
                }
            },
            Usage::Override(value) => {
                response
                    .headers_mut()
                    .insert("settlement-overrides", value.parse().unwrap());
            }
        }
        response
    }

    fn answer(
        &self,
        method: &Method,
        path: &str,
        payment: Option<&VerifiedPayment>,
        meter: Option<&Meter>,
    ) -> Response<Body> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.events.push("handler");
        match self.mode() {
            HandlerMode::Json => {
                let body = json!({
                    "secret": SECRET,
                    "path": path,
                    "method": method.as_str(),
                    "payer": payment.and_then(|p| p.payer.clone()),
                    "paid": payment.is_some(),
                    "ceiling": meter.map(|m| m.ceiling().to_string()),
                    "sessionRemaining": payment.and_then(|p| p.session.as_ref()).map(|s| s.remaining),
                });
                handler_response(
                    StatusCode::OK,
                    "application/json",
                    Body::from(body.to_string()),
                )
            }
            HandlerMode::Error500 => handler_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                Body::from(HANDLER_ERROR_BODY),
            ),
            HandlerMode::Slow => {
                let body = json!({"secret": SECRET, "path": path, "slow": true}).to_string();
                let stream = futures_util::stream::once(async move {
                    tokio::time::sleep(SLOW_BODY).await;
                    Ok::<_, std::io::Error>(Bytes::from(body))
                });
                handler_response(
                    StatusCode::OK,
                    "application/json",
                    Body::from_stream(stream),
                )
            }
            HandlerMode::Stream => {
                let stream = futures_util::stream::unfold(0usize, |i| async move {
                    let chunk = STREAM_CHUNKS.get(i)?;
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Some((
                        Ok::<_, std::io::Error>(Bytes::from_static(chunk.as_bytes())),
                        i + 1,
                    ))
                });
                handler_response(StatusCode::OK, "text/plain", Body::from_stream(stream))
            }
        }
    }
}

/// A response of the handler: `status`, `content_type`, the `x-handler`
/// marker and `body`.
fn handler_response(status: StatusCode, content_type: &str, body: Body) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header("x-handler", "yes")
        .body(body)
        .unwrap()
}
