//! Standard Webhooks signatures: secrets, signing, verification.

use std::{fmt, sync::Arc, time::Duration};

use base64::{engine::general_purpose::STANDARD, Engine as _};
use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::Sha256;

use super::{time::unix_now, WebhookEvent};

type HmacSha256 = Hmac<Sha256>;

/// The `webhook-id` header.
pub const WEBHOOK_ID: http::HeaderName = http::HeaderName::from_static("webhook-id");
/// The `webhook-timestamp` header (unix seconds of the attempt).
pub const WEBHOOK_TIMESTAMP: http::HeaderName = http::HeaderName::from_static("webhook-timestamp");
/// The `webhook-signature` header (`v1,<base64>` entries, space-separated).
pub const WEBHOOK_SIGNATURE: http::HeaderName = http::HeaderName::from_static("webhook-signature");

const SECRET_PREFIX: &str = "whsec_";

/// A signing secret, written `whsec_<base64>`; the key is the decoded bytes.
///
/// Its `Debug` output never shows the key.
///
/// ```
/// use x402_core::webhook::WebhookSecret;
///
/// let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?;
/// assert_eq!(format!("{secret:?}"), "WebhookSecret(<redacted>)");
/// assert!(WebhookSecret::parse("not-a-secret").is_err());
/// # Ok::<(), x402_core::webhook::SecretError>(())
/// ```
#[derive(Clone)]
pub struct WebhookSecret(Arc<[u8]>);

impl WebhookSecret {
    /// Parses `whsec_<base64>`. A bare base64 string (no prefix) is accepted
    /// too, as the Standard Webhooks libraries do.
    pub fn parse(secret: &str) -> Result<Self, SecretError> {
        let encoded = secret
            .trim()
            .strip_prefix(SECRET_PREFIX)
            .unwrap_or(secret.trim());
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| SecretError::NotBase64)?;
        Self::from_bytes(key)
    }

    /// A secret from raw key bytes (at least 16).
    pub fn from_bytes(key: impl Into<Vec<u8>>) -> Result<Self, SecretError> {
        let key = key.into();
        if key.len() < 16 {
            return Err(SecretError::TooShort);
        }
        Ok(Self(Arc::from(key)))
    }

    /// A fresh random 32-byte secret.
    pub fn generate() -> Self {
        let key: [u8; 32] = rand::random();
        Self(Arc::from(key.as_slice()))
    }

    /// The secret written as `whsec_<base64>`, to hand to a receiver. Treat
    /// the result as a credential.
    pub fn to_whsec(&self) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(&self.0))
    }

    fn mac(&self, id: &str, timestamp: &str, body: &[u8]) -> HmacSha256 {
        // HMAC takes keys of any length; `new_from_slice` cannot fail.
        let mut mac = match HmacSha256::new_from_slice(&self.0) {
            Ok(mac) => mac,
            Err(_) => unreachable_hmac(),
        };
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`.
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let tag = self
            .mac(id, &timestamp.to_string(), body)
            .finalize()
            .into_bytes();
        format!("v1,{}", STANDARD.encode(tag))
    }
}

#[allow(clippy::panic)]
#[cold]
fn unreachable_hmac() -> ! {
    // `Hmac::new_from_slice` accepts every key length.
    panic!("HMAC rejected a key")
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

/// The `webhook-signature` value for a message: one `v1,` entry per secret,
/// space-separated (several secrets let receivers rotate).
///
/// ```
/// use x402_core::webhook::{sign, WebhookSecret};
///
/// let (old, new) = (WebhookSecret::generate(), WebhookSecret::generate());
/// let header = sign(&[old, new], "msg_1", 1_700_000_000, b"{}");
/// assert_eq!(header.split(' ').filter(|s| s.starts_with("v1,")).count(), 2);
/// ```
pub fn sign(secrets: &[WebhookSecret], id: &str, timestamp: u64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|s| s.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A secret could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The part after `whsec_` is not base64.
    #[error("webhook secret is not whsec_<base64>")]
    NotBase64,
    /// Fewer than 16 key bytes.
    #[error("webhook secret is shorter than 16 bytes")]
    TooShort,
    /// No secret given.
    #[error("no webhook secret given")]
    Empty,
}

/// Why a webhook was refused. Receivers answer 401 (400 for
/// [`InvalidBody`](Self::InvalidBody) is also reasonable) and log it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// A required header is absent or not visible ASCII.
    #[error("missing or malformed {0} header")]
    MissingHeader(&'static str),
    /// `webhook-timestamp` is not an integer.
    #[error("webhook-timestamp is not a unix time")]
    InvalidTimestamp,
    /// `webhook-timestamp` is further from now than the tolerance allows
    /// (replayed or delayed).
    #[error("webhook-timestamp is outside the tolerance")]
    TimestampOutOfTolerance,
    /// No `v1,` signature matches any of the verifier's secrets.
    #[error("no webhook signature matches")]
    InvalidSignature,
    /// The body is larger than the verifier accepts.
    #[error("webhook body is too large")]
    BodyTooLarge,
    /// The signature is valid but the body is not an event.
    #[error("webhook body is not a valid event: {0}")]
    InvalidBody(#[source] serde_json::Error),
}

/// Checks `webhook-*` headers and parses the event.
///
/// Accepts a signature by any of its secrets (list the old and the new one
/// while rotating), compares in constant time, and refuses timestamps more
/// than the tolerance (5 minutes by default) away from now.
///
/// ```
/// use http::HeaderMap;
/// use x402_core::webhook::{sign, WebhookError, WebhookSecret, WebhookVerifier};
///
/// let secret = WebhookSecret::generate();
/// let verifier = WebhookVerifier::new([secret.clone()]);
/// let body = br#"{"type":"payment.settled","timestamp":"2025-01-01T00:00:00.000Z","data":{
///   "network":"eip155:8453","asset":"0xa","amount":"10000","payer":"0xb","payTo":"0xc",
///   "transaction":"0xd","resource":null,"route":"/r","scheme":"exact","x402Version":2}}"#;
/// let now = 1_700_000_000;
/// let mut headers = HeaderMap::new();
/// headers.insert("webhook-id", "msg_1".parse()?);
/// headers.insert("webhook-timestamp", now.to_string().parse()?);
/// headers.insert("webhook-signature", sign(&[secret], "msg_1", now, body).parse()?);
///
/// let event = verifier.verify_at(&headers, body, now)?;
/// assert_eq!(event.id, "msg_1");
/// assert_eq!(event.data.amount, "10000");
///
/// let tampered = verifier.verify_at(&headers, b"{}", now);
/// assert!(matches!(tampered, Err(WebhookError::InvalidSignature)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct WebhookVerifier {
    secrets: Arc<[WebhookSecret]>,
    tolerance: Duration,
    max_body_bytes: usize,
}

impl fmt::Debug for WebhookVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookVerifier")
            .field("secrets", &self.secrets.len())
            .field("tolerance", &self.tolerance)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish()
    }
}

impl WebhookVerifier {
    /// The default timestamp tolerance: 5 minutes either way.
    pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);
    /// The default body limit for framework extractors: 1 MiB.
    pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

    /// A verifier accepting signatures by any of `secrets`.
    pub fn new(secrets: impl IntoIterator<Item = WebhookSecret>) -> Self {
        Self {
            secrets: secrets.into_iter().collect(),
            tolerance: Self::DEFAULT_TOLERANCE,
            max_body_bytes: Self::DEFAULT_MAX_BODY_BYTES,
        }
    }

    /// A verifier from `whsec_` strings (e.g. a comma-separated environment
    /// variable split by the caller).
    pub fn from_whsec<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Result<Self, SecretError> {
        let secrets = secrets
            .into_iter()
            .map(WebhookSecret::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if secrets.is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(Self::new(secrets))
    }

    /// How far `webhook-timestamp` may be from now.
    #[must_use]
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The largest body framework extractors read (1 MiB by default).
    #[must_use]
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// The body limit extractors should apply.
    pub fn body_limit(&self) -> usize {
        self.max_body_bytes
    }

    /// Verifies a webhook received now.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<WebhookEvent, WebhookError> {
        self.verify_at(headers, body, unix_now())
    }

    /// Verifies a webhook as if received at `now` (unix seconds).
    pub fn verify_at(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: u64,
    ) -> Result<WebhookEvent, WebhookError> {
        if body.len() > self.max_body_bytes {
            return Err(WebhookError::BodyTooLarge);
        }
        let header = |name: &http::HeaderName, label: &'static str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .ok_or(WebhookError::MissingHeader(label))
        };
        let id = header(&WEBHOOK_ID, "webhook-id")?;
        let timestamp = header(&WEBHOOK_TIMESTAMP, "webhook-timestamp")?;
        let signatures = header(&WEBHOOK_SIGNATURE, "webhook-signature")?;

        let ts: u64 = timestamp
            .parse()
            .map_err(|_| WebhookError::InvalidTimestamp)?;
        if ts.abs_diff(now) > self.tolerance.as_secs() {
            return Err(WebhookError::TimestampOutOfTolerance);
        }

        let candidates: Vec<Vec<u8>> = signatures
            .split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|sig| STANDARD.decode(sig).ok())
            .collect();
        let matched = self.secrets.iter().any(|secret| {
            candidates.iter().any(|candidate| {
                // `verify_slice` compares in constant time.
                secret
                    .mac(id, timestamp, body)
                    .verify_slice(candidate)
                    .is_ok()
            })
        });
        if !matched {
            return Err(WebhookError::InvalidSignature);
        }
        let mut event: WebhookEvent =
            serde_json::from_slice(body).map_err(WebhookError::InvalidBody)?;
        id.clone_into(&mut event.id);
        Ok(event)
    }
}
