//! The upstream `payment-identifier` extension, seller side: a buyer that
//! lost the response to a paid request sends the same payment again and
//! gets that response back, instead of `payment_replayed` for a payment
//! whose money moved and whose handler ran.
//!
//! A route opts in with [`Route::payment_identifier`], which declares the
//! extension in the v2 challenge (`extensions["payment-identifier"]`, the
//! declaration upstream's `declarePaymentIdentifierExtension` writes). A
//! buyer then echoes it in its payment with `info.id`, 16 to 128 characters
//! of `[A-Za-z0-9_-]` (the official clients' `appendPaymentIdentifierToExtensions`).
//! The engine looks the id up **before verifying** (a resend of a settled
//! payment no longer verifies):
//!
//! | Request | Answer | Handler runs? |
//! |---|---|---|
//! | route not opted in | the id is ignored | as without it |
//! | no id, `required: false` | as without the extension | yes |
//! | no id, `required: true` | 400 `payment_identifier_required` | no |
//! | an id that is not 16–128 of `[A-Za-z0-9_-]` | 400 `invalid_payment_identifier` | no |
//! | new id | reserved, then verified and served as usual | yes |
//! | same id, same payload, original settled | the stored response: status, headers (`PAYMENT-RESPONSE` / `X-PAYMENT-RESPONSE` included), body, byte for byte | no |
//! | same id, another payload (settled or in flight) | 409 `payment_identifier_conflict` | no |
//! | same id, same payload, original still in flight | waits for it (at most [`PaymentIdentifiers::wait`], 10 s by default), then the stored response; past the wait, 409 `payment_identifier_in_progress` with `Retry-After` | no |
//! | the store errors or misses its [deadline](PaymentIdentifiers::deadline) | 503 `payment_identifier_unavailable` with `Retry-After` (fail closed) | no |
//!
//! "Same payload" is the exact payment: the SHA-256 of the decoded header's
//! JSON, keys sorted, no whitespace. The lookup runs before anything is
//! verified, so it binds the id to the signed payload itself: only a holder
//! of that exact payment (signature included) gets the response back.
//!
//! A still-running original is answered with 409 past the wait, as the
//! IETF `Idempotency-Key` draft does for a request still being processed
//! (its `Retry-After` says when to come back); the `error` reason tells it
//! from the conflict of another payload.
//!
//! # What is stored, and for how long
//!
//! Only responses that were **settled** are kept for replay. Every other
//! outcome of the design's outcomes table releases the id, so that an
//! honest retry (a new payment, or the same one once the cause is fixed)
//! can run:
//!
//! | Original's outcome | Id |
//! |---|---|
//! | 402 of any kind (invalid, replayed, no match), 502 at verify, 503 claim store | released |
//! | handler answered ≥ 400, or failed | released (nothing was charged) |
//! | settlement refused (402 with a failure receipt) | released (nothing moved) |
//! | settlement outcome unknown (502) | released: there is no response to give back; the replay claim, kept, still refuses a copy (`payment_replayed`) |
//! | client hung up before its handler answered | released (nothing settled) |
//! | settled | the response is stored, even if the client hung up while it settled |
//!
//! The stored response is what the engine sent: the handler's status and
//! headers with the receipt added, and its body. A body over
//! [`PaymentIdentifiers::max_body_bytes`] (64 KiB by default) is not kept:
//! a replay then gets the status and headers, receipt included, with an
//! empty body and `X-Payment-Identifier-Body: omitted`. The same holds for
//! routes that settle before their handler (their bodies stream and are not
//! held), and for integrators that call
//! [`PaidRequest::complete`](crate::PaidRequest::complete) with the body
//! in their own hands. A session token (`X-PAYMENT-SESSION`) is never
//! stored: tokens are shown once.
//!
//! A settled response is kept at least as long as the payment's replay
//! claim ([`claim_key`](crate::claim::claim_key): the authorization's expiry
//! plus a minute, at least 900 s) and at least
//! [`PaymentIdentifiers::retention`]. A reservation of a request in flight
//! lapses after [`PaymentIdentifiers::pending_lifetime`] (5 minutes), so
//! that a process that died mid-request does not hold its id for ever; the
//! replay claim keeps the handler from running twice after that.
//!
//! Ids are scoped per route (method and pattern): the same id on two
//! routes names two payments.
//!
//! # Stores
//!
//! [`MemoryPaymentIdStore`] (one process; the default) and
//! `RedisPaymentIdStore` (feature `redis`; shared by every instance, on one
//! server or a Redis Cluster through [`RedisConnection`](crate::redis_conn::RedisConnection)).
//! Put them beside the claims: an engine whose claims are in Redis wants its
//! payment ids there too.
//!
//! ```
//! use std::time::Duration;
//!
//! use x402_core::payment_id::{MemoryPaymentIdStore, PaymentIdentifiers};
//! use x402_core::{Engine, Offer, Route};
//! # use x402_core::testing::StandIn;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::builder(StandIn::new())
//!     .route(
//!         Route::post("/orders")
//!             .offer(Offer::exact("eip155:84532", "$0.01", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"))
//!             // Buyers may send an id (`true`: they must).
//!             .payment_identifier(false),
//!     )
//!     .payment_identifiers(
//!         PaymentIdentifiers::new(MemoryPaymentIdStore::new())
//!             .wait(Duration::from_secs(5))
//!             .max_body_bytes(16 * 1024),
//!     )
//!     .build()?;
//! # let _ = engine; Ok(()) }
//! ```
//!
//! # Writing a store
//!
//! A store keeps, per key, the payload digest that reserved it and, once
//! settled, the response. [`reserve`](PaymentIdStore::reserve) must be
//! atomic across every instance that shares the store (Redis: one Lua
//! script on one key); see [`MemoryPaymentIdStore`] for the reference
//! semantics.

use std::{
    error::Error as StdError,
    sync::Arc,
    time::{Duration, SystemTime},
};

use async_trait::async_trait;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use crate::{
    proto::{field, field_of, PaymentPayload},
    route::Route,
};

pub(crate) mod flow;
mod memory;
#[cfg(feature = "redis")]
mod redis;
#[cfg(test)]
mod store_tests;
mod stored;
#[cfg(test)]
mod tests;

pub use memory::MemoryPaymentIdStore;
#[cfg(feature = "redis")]
pub use redis::RedisPaymentIdStore;
pub use stored::StoredResponse;

/// The extension's key, in the challenge's and the payment's `extensions`.
pub const PAYMENT_IDENTIFIER: &str = "payment-identifier";

/// The shortest id accepted.
pub const MIN_ID_LENGTH: usize = 16;

/// The longest id accepted.
pub const MAX_ID_LENGTH: usize = 128;

/// The header a replay carries when its body was not kept (over the cap, or
/// streamed): `X-Payment-Identifier-Body: omitted`.
pub const X_PAYMENT_IDENTIFIER_BODY: HeaderName =
    HeaderName::from_static("x-payment-identifier-body");

/// The extension's declaration for a route, as upstream's server helper
/// writes it: `{"info": {"required": ...}, "schema": {...}}`.
pub fn declaration(required: bool) -> Value {
    json!({
        "info": { "required": required },
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "required": { "type": "boolean" },
                "id": {
                    "type": "string",
                    "minLength": MIN_ID_LENGTH,
                    "maxLength": MAX_ID_LENGTH,
                    "pattern": "^[a-zA-Z0-9_-]+$"
                }
            },
            "required": ["required"]
        }
    })
}

impl Route {
    /// Declares the [`payment-identifier`](crate::payment_id) extension on
    /// this route: buyers may (`required: false`) or must (`true`) send an
    /// id with their payment, and a resend of a settled payment with its
    /// id gets the stored response instead of running the handler again.
    pub fn payment_identifier(self, required: bool) -> Self {
        self.extension(PAYMENT_IDENTIFIER, declaration(required))
    }
}

/// Whether `id` is 16 to 128 characters of `[A-Za-z0-9_-]`.
pub fn is_valid_id(id: &str) -> bool {
    (MIN_ID_LENGTH..=MAX_ID_LENGTH).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A payment's `extensions["payment-identifier"].info.id` did not make a
/// valid id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("payment identifier must be 16-128 characters of [A-Za-z0-9_-]")]
pub struct InvalidPaymentId;

/// The id a payment carries: `Ok(None)` when it has none (no extension, no
/// `info.id`, or a version 1 payment, which has no extensions).
pub fn payment_id(payload: &PaymentPayload) -> Result<Option<&str>, InvalidPaymentId> {
    let PaymentPayload::V2(v2) = payload else {
        return Ok(None);
    };
    let Some(id) = v2
        .extensions
        .as_ref()
        .and_then(|e| field(e, PAYMENT_IDENTIFIER))
        .and_then(|e| field_of(e, "info"))
        .and_then(|i| field_of(i, "id"))
    else {
        return Ok(None);
    };
    match id.as_str() {
        Some(id) if is_valid_id(id) => Ok(Some(id)),
        _ => Err(InvalidPaymentId),
    }
}

/// Whether a route's extensions declare the extension, and if so whether
/// an id is required.
pub(crate) fn declared(extensions: &crate::proto::JsonObject) -> Option<bool> {
    let info = field_of(field(extensions, PAYMENT_IDENTIFIER)?, "info")?;
    Some(
        field_of(info, "required")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    )
}

/// The SHA-256 of a payment's canonical JSON: what "the exact same payload"
/// is compared by.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PayloadDigest(pub [u8; 32]);

impl std::fmt::Debug for PayloadDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PayloadDigest({})", self.hex())
    }
}

impl PayloadDigest {
    /// The digest of a payment's JSON (the decoded header): its keys
    /// sorted, no whitespace, so that two encodings of one payment are one.
    pub fn of_json(json: &Value) -> Self {
        let mut canonical = Vec::with_capacity(1024);
        write_canonical(json, &mut canonical);
        Self(Sha256::digest(&canonical).into())
    }

    /// Lowercase hex.
    pub fn hex(&self) -> String {
        hex_lower(&self.0)
    }
}

fn hex_lower(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push_hex_lower(&mut out, bytes);
    out
}

/// Appends `bytes` to `out` as lowercase hex, without a string of its own.
pub(crate) fn push_hex_lower(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

/// JSON with object keys sorted, no whitespace.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(&Value::String(key.clone()), out);
                out.push(b':');
                write_canonical(value, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar(value: &Value, out: &mut Vec<u8>) {
    // Writing a scalar `Value` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// What [`PaymentIdStore::reserve`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Reservation {
    /// The key was free: it is now reserved for this payload, in flight.
    Reserved,
    /// The same payload holds it and is still in flight.
    InFlight,
    /// The same payload holds it and settled: its response.
    Stored(StoredResponse),
    /// Another payload holds it (in flight or settled).
    Conflict,
}

/// Where payment ids and their responses are kept. See the
/// [module docs](self).
///
/// `key` is scoped by the engine (route and id); `digest` names the payload
/// that reserved it. A store may keep entries a little longer than asked
/// but never shorter.
#[async_trait]
pub trait PaymentIdStore: Send + Sync + 'static {
    /// Reserves `key` for `digest` until `pending_until`, unless it is held
    /// (and not expired): atomically, across every instance sharing the
    /// store. Says what holds it otherwise.
    async fn reserve(
        &self,
        key: &str,
        digest: &PayloadDigest,
        pending_until: SystemTime,
    ) -> Result<Reservation, PaymentIdStoreError>;

    /// Stores the settled `response` under `key`, kept until `expires_at`,
    /// if `digest` still holds it in flight or nobody does (its reservation
    /// lapsed); another payload's entry is left alone.
    async fn complete(
        &self,
        key: &str,
        digest: &PayloadDigest,
        response: &StoredResponse,
        expires_at: SystemTime,
    ) -> Result<(), PaymentIdStoreError>;

    /// Releases `key` if `digest` holds it in flight; a settled entry, or
    /// another payload's, is left alone.
    async fn release(&self, key: &str, digest: &PayloadDigest) -> Result<(), PaymentIdStoreError>;
}

#[async_trait]
impl<T: PaymentIdStore + ?Sized> PaymentIdStore for Arc<T> {
    async fn reserve(
        &self,
        key: &str,
        digest: &PayloadDigest,
        pending_until: SystemTime,
    ) -> Result<Reservation, PaymentIdStoreError> {
        (**self).reserve(key, digest, pending_until).await
    }

    async fn complete(
        &self,
        key: &str,
        digest: &PayloadDigest,
        response: &StoredResponse,
        expires_at: SystemTime,
    ) -> Result<(), PaymentIdStoreError> {
        (**self).complete(key, digest, response, expires_at).await
    }

    async fn release(&self, key: &str, digest: &PayloadDigest) -> Result<(), PaymentIdStoreError> {
        (**self).release(key, digest).await
    }
}

/// A [`PaymentIdStore`] call failed. The engine answers `503
/// payment_identifier_unavailable`; the cause is logged, never shown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PaymentIdStoreError {
    /// The expiry cannot be written by this store.
    #[error("payment identifier expiry is out of the store's range")]
    InvalidExpiry,
    /// A stored entry could not be read back.
    #[error("stored payment identifier entry is corrupt")]
    Corrupt,
    /// The backend failed: connection refused, I/O error, protocol error...
    #[error("payment identifier store backend failed")]
    Backend(#[source] Box<dyn StdError + Send + Sync>),
}

impl PaymentIdStoreError {
    /// Wraps a backend's own error.
    pub fn backend(error: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self::Backend(error.into())
    }
}

/// How an engine keeps payment ids: the store and its bounds
/// ([`EngineBuilder::payment_identifiers`](crate::EngineBuilder::payment_identifiers)).
/// The default is [`memory`](Self::memory) with the defaults below.
#[derive(Clone)]
#[must_use]
pub struct PaymentIdentifiers {
    pub(crate) store: Arc<dyn PaymentIdStore>,
    pub(crate) wait: Duration,
    pub(crate) deadline: Duration,
    pub(crate) max_body_bytes: usize,
    pub(crate) pending_lifetime: Duration,
    pub(crate) retention: Duration,
}

impl std::fmt::Debug for PaymentIdentifiers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentIdentifiers")
            .field("wait", &self.wait)
            .field("deadline", &self.deadline)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("pending_lifetime", &self.pending_lifetime)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

impl Default for PaymentIdentifiers {
    fn default() -> Self {
        Self::memory()
    }
}

/// The default [`PaymentIdentifiers::max_body_bytes`]: 64 KiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;

impl PaymentIdentifiers {
    /// Ids in `store`, with the default bounds.
    pub fn new(store: impl PaymentIdStore) -> Self {
        Self::new_arc(Arc::new(store))
    }

    /// Ids in a shared store.
    pub fn new_arc(store: Arc<dyn PaymentIdStore>) -> Self {
        Self {
            store,
            wait: Duration::from_secs(10),
            deadline: Duration::from_millis(250),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            pending_lifetime: Duration::from_secs(300),
            retention: crate::claim::MIN_CLAIM_LIFETIME,
        }
    }

    /// Ids in this process's memory ([`MemoryPaymentIdStore`]).
    pub fn memory() -> Self {
        Self::new(MemoryPaymentIdStore::new())
    }

    /// How long a resend waits for an original still in flight before it
    /// is answered 409 `payment_identifier_in_progress` with `Retry-After`
    /// (default 10 s). Keep it above what a paid request takes, settlement
    /// included, so that a resend mostly gets the response itself.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// How long one store call may take before the request is answered 503
    /// `payment_identifier_unavailable` (default 250 ms).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The largest body kept for replay, in bytes (default 64 KiB). Over
    /// it, only the status and headers (the receipt) are kept.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// How long a reservation in flight lasts if its request never finishes
    /// (its process died): default 5 minutes.
    pub fn pending_lifetime(mut self, lifetime: Duration) -> Self {
        self.pending_lifetime = lifetime.max(Duration::from_secs(1));
        self
    }

    /// The shortest a settled response is kept (default 900 s); it is kept
    /// at least as long as the payment's replay claim in any case.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn PaymentIdStore> {
        &self.store
    }
}

/// Stored header values, for a [`StoredResponse`] built by hand.
pub(crate) fn omitted_marker() -> (HeaderName, HeaderValue) {
    (
        X_PAYMENT_IDENTIFIER_BODY,
        HeaderValue::from_static("omitted"),
    )
}

/// The engine's `{"error": reason}` answers of this module.
pub(crate) fn error_response(
    status: StatusCode,
    reason: &'static str,
    retry_after: Option<Duration>,
) -> crate::engine::EngineResponse {
    let mut response = http::Response::new(Bytes::from(json!({ "error": reason }).to_string()));
    *response.status_mut() = status;
    let headers: &mut HeaderMap = response.headers_mut();
    headers.insert(
        http::header::ACCESS_CONTROL_EXPOSE_HEADERS,
        crate::engine::EXPOSE_HEADERS,
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(after) = retry_after {
        headers.insert(
            http::header::RETRY_AFTER,
            HeaderValue::from(after.as_secs().max(1)),
        );
    }
    response
}
