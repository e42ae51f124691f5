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

#[cfg(test)]
mod tests {
    use axum::{body::Body, http::Request};
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    use x402_core::testing::{self, SettleAnswer, StandIn, VerifyAnswer};

    use super::*;

    /// Verifies everything as invalid, cannot settle, supports nothing.
    fn stub() -> StandIn {
        let stand_in = StandIn::new();
        stand_in.set_verify(VerifyAnswer::Invalid("nope".into()));
        stand_in.set_settle(SettleAnswer::Unavailable);
        stand_in
    }

    const REQUEST: &str = r#"{"x402Version":2,"paymentPayload":{"x402Version":2,"accepted":{"scheme":"exact","network":"eip155:84532","amount":"1000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,"extra":{}},"payload":{}},"paymentRequirements":{"scheme":"exact","network":"eip155:84532","amount":"1000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,"extra":{}}}"#;

    async fn call(method: &str, path: &str, body: &str) -> (StatusCode, serde_json::Value) {
        let response = facilitator_router(Arc::new(stub()))
            .oneshot(
                Request::builder()
                    .method(method)
                    .uri(path)
                    .header("content-type", "application/json")
                    .body(Body::from(body.to_owned()))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn verify_answers_200_with_the_verdict() {
        let (status, json) = call("POST", "/verify", REQUEST).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(json["isValid"], false);
        assert_eq!(json["invalidReason"], "nope");
        assert_eq!(json["payer"], testing::PAYER);
    }

    #[tokio::test]
    async fn facilitator_errors_answer_502() {
        let (status, json) = call("POST", "/settle", REQUEST).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert_eq!(
            json["error"],
            "facilitator could not answer: facilitator timed out"
        );
    }

    #[tokio::test]
    async fn malformed_bodies_answer_400_without_echoing_input() {
        for body in [
            "",
            "{",
            "[1]",
            r#"{"paymentPayload":{"x402Version":2,"secret":"0xdeadbeefsecret"}}"#,
        ] {
            let (status, json) = call("POST", "/verify", body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
            let error = json["error"].as_str().unwrap();
            assert!(!error.contains("deadbeef"), "{error}");
        }
    }

    #[tokio::test]
    async fn supported_answers_200() {
        let (status, json) = call("GET", "/supported", "").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            json,
            serde_json::json!({"kinds": [], "extensions": [], "signers": {}})
        );
    }
}
