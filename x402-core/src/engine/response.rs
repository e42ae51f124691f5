//! Every response the engine makes, mapped in one place.

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

pub use crate::refusal::Refusal;
use crate::{
    challenge, codec, network,
    paywall::{ContentSecurityPolicy, CspNonce, PaywallPage},
    proto::{v2, JsonObject, SettleResponse, X402Version},
};

/// The response type the engine produces; adapters convert the body.
pub type EngineResponse = Response<Bytes>;

/// `Access-Control-Expose-Headers` value on every engine response, so browser
/// clients can read the payment headers cross-origin.
pub const EXPOSE_HEADERS: HeaderValue = HeaderValue::from_static(
    "PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-PAYMENT-RESPONSE, X-PAYMENT-SESSION, X-PAYMENT-SESSION-REMAINING, X-PAYMENT-SESSION-ERROR",
);

/// What a challenge is built from.
#[derive(Debug)]
pub(crate) struct ChallengeParts<'a> {
    pub(crate) resource: &'a v2::ResourceInfo,
    pub(crate) accepts: &'a [v2::PaymentRequirements],
    pub(crate) extensions: &'a JsonObject,
    pub(crate) output_schema: Option<&'a JsonObject>,
}

/// A pre-encoded challenge: the header and body of a `payment_required` 402,
/// and every header of its response, so that answering is a copy.
#[derive(Debug, Clone)]
pub(crate) struct EncodedChallenge {
    pub(crate) header: HeaderValue,
    pub(crate) body: Bytes,
    /// The 402's headers: the challenge, JSON, expose and no-store.
    headers: HeaderMap,
}

impl ChallengeParts<'_> {
    pub(crate) fn encode(&self, error: &str, payer: Option<&str>) -> Option<EncodedChallenge> {
        let v2 = challenge::payment_required(self.resource, self.accepts, self.extensions, error);
        let mut v1 = challenge::v1_body(self.resource, self.accepts, self.output_schema, error);
        v1.payer = payer.map(str::to_owned);
        let header = HeaderValue::try_from(codec::encode(&v2).ok()?).ok()?;
        let body = Bytes::from(serde_json::to_vec(&v1).ok()?);
        let mut headers = HeaderMap::with_capacity(5);
        headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, EXPOSE_HEADERS);
        headers.insert(header::CACHE_CONTROL, NO_STORE);
        headers.insert(codec::PAYMENT_REQUIRED, header.clone());
        headers.insert(header::CONTENT_TYPE, APPLICATION_JSON);
        // Known now: servers that would add it to a copy of this map (axum
        // does) need not grow the copy.
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        Some(EncodedChallenge {
            header,
            body,
            headers,
        })
    }
}

const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");
const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");

fn base(status: StatusCode) -> http::response::Builder {
    Response::builder()
        .status(status)
        .header(header::ACCESS_CONTROL_EXPOSE_HEADERS, EXPOSE_HEADERS)
        .header(header::CACHE_CONTROL, NO_STORE)
}

fn json_error(status: StatusCode, reason: &str) -> EngineResponse {
    let body = serde_json::json!({ "error": reason }).to_string();
    base(status)
        .header(header::CONTENT_TYPE, APPLICATION_JSON)
        .body(Bytes::from(body))
        .unwrap_or_else(|_| fallback())
}

/// The last resort when a response cannot be built (never expected: every
/// header value here is ASCII). Opaque, like every 5xx.
fn fallback() -> EngineResponse {
    let mut r = Response::new(Bytes::from_static(b"{\"error\":\"internal_error\"}"));
    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    r
}

/// A 402 challenge with a pre-encoded header and body.
pub(crate) fn challenge_response(encoded: &EncodedChallenge) -> EngineResponse {
    let mut response = Response::new(encoded.body.clone());
    *response.status_mut() = StatusCode::PAYMENT_REQUIRED;
    *response.headers_mut() = encoded.headers.clone();
    response
}

/// The HTML paywall for browsers, still a 402 with the v2 header, sent with
/// the page's `Content-Security-Policy` for a nonce made for this response
/// (a policy that is no header value is replaced by the strict default).
pub(crate) fn paywall_response(
    parts: &ChallengeParts<'_>,
    encoded: &EncodedChallenge,
    paywall: &dyn PaywallPage,
) -> EngineResponse {
    let v2 = challenge::payment_required(
        parts.resource,
        parts.accepts,
        parts.extensions,
        "payment_required",
    );
    let nonce = CspNonce::generate();
    let html = paywall.html_with_nonce(&v2, &nonce);
    let mut response = base(StatusCode::PAYMENT_REQUIRED)
        .header(codec::PAYMENT_REQUIRED, encoded.header.clone())
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::REFERRER_POLICY, "no-referrer");
    if let Some(policy) = paywall.content_security_policy(&nonce) {
        let value = HeaderValue::try_from(policy).unwrap_or_else(|_| {
            tracing::warn!("the paywall page's Content-Security-Policy is no header value; sending the strict default");
            // The strict policy is ASCII: base64url nonce and fixed text.
            HeaderValue::try_from(ContentSecurityPolicy::strict(&nonce))
                .unwrap_or(HeaderValue::from_static("default-src 'none'"))
        });
        response = response.header(header::CONTENT_SECURITY_POLICY, value);
    }
    response
        .body(Bytes::from(html))
        .unwrap_or_else(|_| fallback())
}

/// Whether a request comes from a browser (`Accept` has `text/html` and
/// `User-Agent` has `Mozilla`), which gets the paywall page.
pub(crate) fn is_browser(headers: &HeaderMap) -> bool {
    let has = |name: HeaderName, needle: &str| {
        headers
            .get_all(name)
            .iter()
            .any(|v| v.to_str().map(|s| s.contains(needle)).unwrap_or(false))
    };
    has(header::ACCEPT, "text/html") && has(header::USER_AGENT, "Mozilla")
}

/// The response for a refusal. `parts` is `None` when the offers themselves
/// could not be built (then no challenge can be shown).
pub(crate) fn refusal_response(
    refusal: &Refusal,
    parts: Option<&ChallengeParts<'_>>,
    version: Option<X402Version>,
    payer: Option<&str>,
) -> EngineResponse {
    let status = refusal.status();
    match refusal {
        Refusal::Unavailable {
            reason,
            retry_after,
        } => {
            let mut r = json_error(status, reason);
            let secs = retry_after.as_secs().max(1);
            if let Ok(v) = HeaderValue::try_from(secs.to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            r
        }
        Refusal::RateLimited { retry_after } => {
            let mut r = json_error(status, refusal.reason());
            let secs = crate::limit::retry_after_secs(*retry_after);
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            r
        }
        _ if !refusal.is_challenge() => json_error(status, refusal.reason()),
        _ => {
            let Some(encoded) = parts.and_then(|p| p.encode(refusal.reason(), payer)) else {
                return json_error(status, refusal.reason());
            };
            let mut r = challenge_response(&encoded);
            if let Refusal::SettlementFailed(receipt) = refusal {
                if let Some((name, value)) =
                    receipt_header(receipt, version.unwrap_or(X402Version::V2))
                {
                    r.headers_mut().insert(name, value);
                }
            }
            r
        }
    }
}

/// The receipt header for a settlement, in the payment's version: v2 gets
/// `PAYMENT-RESPONSE` with a CAIP-2 network, v1 `X-PAYMENT-RESPONSE` with the
/// v1 name.
pub(crate) fn receipt_header(
    receipt: &SettleResponse,
    version: X402Version,
) -> Option<(HeaderName, HeaderValue)> {
    let (name, network) = match version {
        X402Version::V2 => (codec::PAYMENT_RESPONSE, network::caip2(&receipt.network)),
        X402Version::V1 => (
            codec::X_PAYMENT_RESPONSE,
            network::v1_name(&receipt.network),
        ),
    };
    // In its version's naming; copied only when it must be renamed.
    let value = match network {
        Some(network) if network != receipt.network => codec::encode(&SettleResponse {
            network: network.to_owned(),
            ..receipt.clone()
        }),
        _ => codec::encode(receipt),
    }
    .ok()?;
    Some((name, HeaderValue::try_from(value).ok()?))
}

/// Adds the expose header to a handler's response.
pub(crate) fn expose(headers: &mut HeaderMap) {
    headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, EXPOSE_HEADERS);
}

/// The response when a paid handler failed without a usable response (its
/// body errored): 500, opaque, nothing charged.
pub fn handler_failed_response() -> EngineResponse {
    json_error(StatusCode::INTERNAL_SERVER_ERROR, "handler_failed")
}

/// The response when an `upto` handler's `Settlement-Overrides` cannot be
/// read: 500, opaque, nothing charged (never the whole ceiling by guess).
pub(crate) fn invalid_override_response() -> EngineResponse {
    json_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "invalid_settlement_override",
    )
}
