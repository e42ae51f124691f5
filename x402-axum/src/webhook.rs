//! An extractor for signed x402 webhooks (Standard Webhooks format).

use axum_core::{
    extract::{FromRequest, Request},
    response::{IntoResponse, Response},
};
use http::StatusCode;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use x402_core::webhook::{WebhookError, WebhookEvent, WebhookVerifier};

/// A webhook whose signature and timestamp checked out, parsed.
///
/// The [`WebhookVerifier`] comes from the request's extensions: add it with
/// `axum::Extension(verifier)` as a layer. The body is read up to the
/// verifier's [`body_limit`](WebhookVerifier::body_limit). Rejects with
/// [`WebhookRejection`]: 401 for a bad signature, timestamp or missing
/// headers. Delivery is at-least-once: deduplicate on
/// [`WebhookEvent::id`].
///
/// ```
/// use axum::{routing::post, Extension, Router};
/// use x402_axum::VerifiedWebhook;
/// use x402_core::webhook::{EventType, WebhookSecret, WebhookVerifier};
///
/// async fn receive(VerifiedWebhook(event): VerifiedWebhook) -> &'static str {
///     if event.event_type == EventType::PaymentSettled {
///         // fulfil the order for event.data.transaction ...
///     }
///     "ok"
/// }
///
/// let verifier = WebhookVerifier::new([WebhookSecret::generate()]);
/// let app: Router = Router::new()
///     .route("/webhooks/x402", post(receive))
///     .layer(Extension(verifier));
/// # let _ = app;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedWebhook(pub WebhookEvent);

/// Why [`VerifiedWebhook`] refused a request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookRejection {
    /// No [`WebhookVerifier`] in the request's extensions (500).
    #[error("no WebhookVerifier in the request extensions: add `Extension(verifier)`")]
    MissingVerifier,
    /// The body exceeds the verifier's limit (413).
    #[error("webhook body too large")]
    BodyTooLarge,
    /// The body could not be read (400).
    #[error("webhook body could not be read")]
    BodyUnreadable,
    /// The signature, timestamp or headers did not check out (401).
    #[error("webhook refused: {0}")]
    Invalid(#[source] WebhookError),
}

impl WebhookRejection {
    /// The response status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MissingVerifier => StatusCode::INTERNAL_SERVER_ERROR,
            Self::BodyTooLarge | Self::Invalid(WebhookError::BodyTooLarge) => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Self::BodyUnreadable => StatusCode::BAD_REQUEST,
            Self::Invalid(_) => StatusCode::UNAUTHORIZED,
        }
    }
}

impl IntoResponse for WebhookRejection {
    fn into_response(self) -> Response {
        let status = self.status();
        let reason = match &self {
            Self::MissingVerifier => "webhook_misconfigured",
            Self::BodyTooLarge | Self::Invalid(WebhookError::BodyTooLarge) => "body_too_large",
            Self::BodyUnreadable => "body_unreadable",
            Self::Invalid(_) => "invalid_webhook",
        };
        (status, reason).into_response()
    }
}

impl<S: Send + Sync> FromRequest<S> for VerifiedWebhook {
    type Rejection = WebhookRejection;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let verifier = req
            .extensions()
            .get::<WebhookVerifier>()
            .cloned()
            .ok_or(WebhookRejection::MissingVerifier)?;
        let (parts, body) = req.into_parts();
        let body = Limited::new(body, verifier.body_limit())
            .collect()
            .await
            .map_err(|e| {
                if e.is::<LengthLimitError>() {
                    WebhookRejection::BodyTooLarge
                } else {
                    WebhookRejection::BodyUnreadable
                }
            })?
            .to_bytes();
        verifier
            .verify(&parts.headers, &body)
            .map(Self)
            .map_err(WebhookRejection::Invalid)
    }
}
