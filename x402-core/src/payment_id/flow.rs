//! The engine's side of payment ids: the look-up before verifying
//! ([`begin`]) and the reservation a paid request holds until it is
//! recorded or released ([`Held`]).

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, StatusCode};

use super::{
    error_response, payment_id, PayloadDigest, PaymentIdStore, PaymentIdentifiers, Reservation,
    StoredResponse,
};
use crate::{
    codec,
    engine::{EngineResponse, Refusal, SettledHeaders},
    late::Late,
    proto::{FacilitatorRequest, PaymentPayload},
    route::Route,
    session::{X_PAYMENT_SESSION, X_PAYMENT_SESSION_REMAINING},
};

/// How long a resend waits between two looks at an original in flight, at
/// most.
const MAX_POLL: Duration = Duration::from_millis(100);

/// A reserved id, held by the paid request that reserved it: recorded once
/// the payment settled, released otherwise. Dropped unrecorded (the request
/// went away, a refusal), it is released on a task.
pub(crate) struct Held {
    store: Arc<dyn PaymentIdStore>,
    key: String,
    digest: PayloadDigest,
    deadline: Duration,
    max_body_bytes: usize,
    expires_at: SystemTime,
    /// The handler's status and headers, once it answered.
    head: Option<(StatusCode, HeaderMap)>,
    /// The handler's body, when the engine held it.
    body: Option<Bytes>,
    done: bool,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// Looks a payment's id up, before it is verified, on a route that
/// declares the extension (`required` as it declares it, see
/// [`declared`](super::declared)): `Ok(Some)` with the id reserved for this
/// payload, `Ok(None)` when the payment carries no id and none is required,
/// `Err` with the answer otherwise (400, 409, 503, or the stored response).
pub(crate) async fn begin(
    config: &PaymentIdentifiers,
    route: &Route,
    required: bool,
    payload: &PaymentPayload,
    header: &HeaderValue,
    max_header_bytes: usize,
) -> Result<Option<Box<Held>>, EngineResponse> {
    let refuse = |status: StatusCode, reason: &'static str, retry: Option<Duration>| {
        crate::metrics::refusal(
            route.pattern(),
            &Refusal::Forbidden {
                status,
                reason: reason.to_owned(),
            },
        );
        error_response(status, reason, retry)
    };
    let id = match payment_id(payload) {
        Ok(Some(id)) => id,
        Ok(None) if required => {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "payment_identifier_required",
                None,
            ))
        }
        Ok(None) => return Ok(None),
        Err(_) => {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "invalid_payment_identifier",
                None,
            ))
        }
    };
    // The payload decoded once more, as JSON: the digest covers every field
    // the buyer sent, known to this crate or not.
    let digest = codec::decode_to_json(header.as_bytes(), max_header_bytes)
        .ok()
        .and_then(|json| serde_json::from_slice(&json).ok())
        .map(|json| PayloadDigest::of_json(&json));
    let Some(digest) = digest else {
        // `decode_payment` read it a moment ago.
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_payment_identifier",
            None,
        ));
    };
    let method = route.method().map_or("*", |m| m.as_str());
    let key = format!("x402:pid:{method}:{}:{id}", route.pattern());

    let started = Instant::now();
    let mut pause = Duration::from_millis(10);
    loop {
        match reserve(config, &key, &digest).await {
            Some(Reservation::Reserved) => {
                return Ok(Some(Box::new(Held {
                    store: config.store.clone(),
                    key,
                    digest,
                    deadline: config.deadline,
                    max_body_bytes: config.max_body_bytes,
                    expires_at: SystemTime::now() + config.retention,
                    head: None,
                    body: None,
                    done: false,
                })))
            }
            Some(Reservation::Stored(stored)) => {
                tracing::debug!(
                    route = route.pattern(),
                    "x402: payment id seen settled; replaying its response"
                );
                return Err(stored.to_response());
            }
            Some(Reservation::Conflict) => {
                return Err(refuse(
                    StatusCode::CONFLICT,
                    "payment_identifier_conflict",
                    None,
                ))
            }
            Some(Reservation::InFlight) => {
                if started.elapsed() + pause > config.wait {
                    return Err(refuse(
                        StatusCode::CONFLICT,
                        "payment_identifier_in_progress",
                        Some(Duration::from_secs(1)),
                    ));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_POLL);
            }
            None => {
                let unavailable = Refusal::Unavailable {
                    reason: "payment_identifier_unavailable",
                    retry_after: Duration::from_secs(1),
                };
                crate::metrics::refusal(route.pattern(), &unavailable);
                return Err(error_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "payment_identifier_unavailable",
                    Some(Duration::from_secs(1)),
                ));
            }
        }
    }
}

/// One reservation attempt within the deadline; `None` if the store failed
/// or missed it (a reservation that lands late is released).
async fn reserve(
    config: &PaymentIdentifiers,
    key: &str,
    digest: &PayloadDigest,
) -> Option<Reservation> {
    let store = config.store.clone();
    let (owned_key, owned_digest) = (key.to_owned(), *digest);
    let until = SystemTime::now() + config.pending_lifetime;
    let mut call = Late::new(
        "payment id reservation",
        async move { store.reserve(&owned_key, &owned_digest, until).await },
        {
            let (store, key, digest) = (config.store.clone(), key.to_owned(), *digest);
            move |answer| async move {
                if let Ok(Reservation::Reserved) = answer {
                    if let Err(e) = store.release(&key, &digest).await {
                        tracing::error!(error = %e, "x402: could not release a late payment id reservation");
                    }
                }
            }
        },
    );
    match call.answer(config.deadline).await {
        Some(Ok(reservation)) => Some(reservation),
        Some(Err(e)) => {
            tracing::error!(error = %e, source = ?std::error::Error::source(&e), "x402: payment id store failed");
            None
        }
        None => {
            tracing::error!("x402: payment id store missed its deadline");
            None
        }
    }
}

impl Held {
    /// Keeps the settled response at least as long as the payment's replay
    /// claim.
    pub(crate) fn set_lifetime(&mut self, request: &FacilitatorRequest, network: &str) {
        if let Ok(claim) = crate::claim::claim_key(
            &request.payment_payload,
            &request.payment_requirements,
            network,
        ) {
            self.expires_at = self.expires_at.max(claim.expires_at);
        }
    }

    /// The handler's body, held by the engine.
    pub(crate) fn set_body(&mut self, body: &Bytes) {
        self.body = Some(body.clone());
    }

    /// The handler's status and headers, before the receipt is added.
    pub(crate) fn set_head(&mut self, status: StatusCode, headers: &HeaderMap) {
        self.head = Some((status, headers.clone()));
    }

    /// A settlement ended: `Ok` with the receipt's headers records the
    /// response; `Err` releases the id.
    pub(crate) async fn settled(self, result: &Result<SettledHeaders, EngineResponse>) {
        match (result, &self.head) {
            (Ok(receipt), Some((status, head))) => {
                let mut headers = head.clone();
                crate::engine::expose_headers(&mut headers);
                receipt.clone().add_to(&mut headers);
                let status = *status;
                // Boxed, as is `release`: the settlement's box that awaits
                // this stays within 1 032 bytes (see `BoxedDecision`).
                Box::pin(self.record(status, headers)).await;
            }
            _ => Box::pin(self.release()).await,
        }
    }

    /// Records a response whose headers are final (a route that settled
    /// before its handler; its body streamed and is not kept).
    pub(crate) async fn record(mut self, status: StatusCode, mut headers: HeaderMap) {
        self.done = true;
        // Session tokens are shown once, and never stored.
        headers.remove(X_PAYMENT_SESSION);
        headers.remove(X_PAYMENT_SESSION_REMAINING);
        let body = self.body.take().filter(|b| b.len() <= self.max_body_bytes);
        if body.is_some() {
            // The engine sends a held body with its length known.
            headers.remove(header::TRANSFER_ENCODING);
        }
        let stored = StoredResponse {
            status,
            headers,
            body,
        };
        // Bounded by the deadline, but at least a second: the buyer paid.
        let deadline = self.deadline.max(Duration::from_secs(1));
        let write = self
            .store
            .complete(&self.key, &self.digest, &stored, self.expires_at);
        match tokio::time::timeout(deadline, write).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, "x402: a settled response could not be stored for its payment id; a resend will not get it back");
            }
            Err(_) => {
                tracing::error!("x402: storing a settled response for its payment id timed out; a resend may not get it back");
            }
        }
    }

    /// Releases the id, so that a retry can run.
    pub(crate) async fn release(mut self) {
        self.done = true;
        release(
            self.store.clone(),
            self.key.clone(),
            self.digest,
            self.deadline,
        )
        .await;
    }
}

async fn release(
    store: Arc<dyn PaymentIdStore>,
    key: String,
    digest: PayloadDigest,
    deadline: Duration,
) {
    let deadline = deadline.max(Duration::from_secs(1));
    match tokio::time::timeout(deadline, store.release(&key, &digest)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "x402: could not release a payment id; it lapses with its reservation");
        }
        Err(_) => {
            tracing::warn!(
                "x402: releasing a payment id timed out; it lapses with its reservation"
            );
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, key, digest, deadline) = (
            self.store.clone(),
            std::mem::take(&mut self.key),
            self.digest,
            self.deadline,
        );
        runtime.spawn(release(store, key, digest, deadline));
    }
}
