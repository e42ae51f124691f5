//! Serving a facilitator over HTTP: the x402 facilitator API (`POST /verify`,
//! `POST /settle`, `GET /supported`) for any [`Facilitator`], so sellers in
//! any language can use it.

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::State,
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Json, Router,
};
use x402_core::{facilitator::FacilitatorError, proto::FacilitatorRequest, Facilitator};

/// An axum [`Router`] serving `facilitator` with the x402 facilitator HTTP API.
///
/// - `POST /verify` and `POST /settle` take a `FacilitatorRequest` JSON body
///   (`{x402Version, paymentPayload, paymentRequirements}`) and answer 200 with
///   the verdict or the receipt, including business failures (`isValid:
///   false`, `success: false`).
/// - `GET /supported` answers 200 with the `SupportedResponse`.
/// - A body that is not a facilitator request: 400 `{"error": "..."}` (the
///   message names the problem's position, never the input).
/// - A facilitator that cannot answer: 502 `{"error": "..."}`.
///
/// Nest it under a prefix with [`Router::nest`], and add authentication with
/// your own layers.
///
/// ```
/// use std::sync::Arc;
/// use x402_axum::facilitator_router;
/// # use x402_core::facilitator::{Facilitator, FacilitatorError};
/// # use x402_core::proto::*;
/// # #[derive(Debug)] struct MyFacilitator;
/// # #[async_trait::async_trait] impl Facilitator for MyFacilitator {
/// #   async fn verify(&self, _: &FacilitatorRequest) -> Result<VerifyResponse, FacilitatorError> { Err(FacilitatorError::Timeout) }
/// #   async fn settle(&self, _: &FacilitatorRequest) -> Result<SettleResponse, FacilitatorError> { Err(FacilitatorError::Timeout) }
/// #   async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> { Ok(Default::default()) }
/// # }
///
/// // e.g. `x402_core::local::LocalFacilitator` (x402-core feature `local-facilitator`)
/// let facilitator = Arc::new(MyFacilitator);
/// let app: axum::Router = axum::Router::new().nest("/facilitator", facilitator_router(facilitator));
/// # let _ = app;
/// ```
pub fn facilitator_router(facilitator: Arc<dyn Facilitator>) -> Router {
    Router::new()
        .route("/verify", post(verify))
        .route("/settle", post(settle))
        .route("/supported", get(supported))
        .with_state(facilitator)
}

type Shared = State<Arc<dyn Facilitator>>;

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CACHE_CONTROL, "no-store")],
        Json(serde_json::json!({ "error": message })),
    )
        .into_response()
}

fn parse(body: &[u8]) -> Result<FacilitatorRequest, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        // serde's message may quote the input; report only where and what kind.
        let kind = match e.classify() {
            serde_json::error::Category::Io => "unreadable body",
            serde_json::error::Category::Syntax => "body is not JSON",
            serde_json::error::Category::Data => {
                "body is not a facilitator request (x402Version, paymentPayload, paymentRequirements)"
            }
            serde_json::error::Category::Eof => "body ends early",
        };
        Box::new(error(
            StatusCode::BAD_REQUEST,
            &format!("{kind} (line {}, column {})", e.line(), e.column()),
        ))
    })
}

fn unavailable(e: &FacilitatorError) -> Response {
    error(
        StatusCode::BAD_GATEWAY,
        &format!("facilitator could not answer: {e}"),
    )
}

async fn verify(State(facilitator): Shared, body: Bytes) -> Response {
    let request = match parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    match facilitator.verify(&request).await {
        Ok(verdict) => Json(verdict).into_response(),
        Err(e) => unavailable(&e),
    }
}

async fn settle(State(facilitator): Shared, body: Bytes) -> Response {
    let request = match parse(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    match facilitator.settle(&request).await {
        Ok(receipt) => Json(receipt).into_response(),
        Err(e) => unavailable(&e),
    }
}

async fn supported(State(facilitator): Shared) -> Response {
    match facilitator.supported().await {
        Ok(supported) => Json(supported).into_response(),
        Err(e) => unavailable(&e),
    }
}
