//! Every response the engine makes, mapped in one place.

use bytes::Bytes;
use http::{
    header::{self, Entry},
    HeaderMap, HeaderName, HeaderValue, Response, StatusCode,
};

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

/// `Cache-Control` of every answer the engine makes itself.
pub(crate) const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");
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
    r.headers_mut().insert(header::CACHE_CONTROL, NO_STORE);
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

const PRIVATE: HeaderValue = HeaderValue::from_static("private");

/// Makes a paid response one that no shared cache may store: a cache in
/// front of the seller (a CDN, a reverse proxy) keys a `GET` on its URL
/// alone, so a paid body it kept would be served to the next caller, paid
/// or not. The buyer's own cache may keep it, for as long as the handler
/// said.
///
/// No `Cache-Control`: `private`. One that already has an unqualified
/// `private` or `no-store`: left as it is. Otherwise the handler's
/// directives are kept but `public` and `s-maxage` (which only shared
/// caches read), and `private` is added: `public, max-age=60` becomes
/// `max-age=60, private`. A value that is not text is replaced by
/// `private`.
pub(crate) fn keep_private(headers: &mut HeaderMap) {
    // One lookup: most handlers send no `Cache-Control`.
    let mut entry = match headers.entry(header::CACHE_CONTROL) {
        Entry::Vacant(vacant) => {
            vacant.insert(PRIVATE);
            return;
        }
        Entry::Occupied(entry) => entry,
    };
    let mut merged = String::new();
    for value in entry.iter() {
        let Ok(text) = value.to_str() else {
            merged.clear();
            break;
        };
        for directive in directives(text) {
            let (name, argument) = match directive.split_once('=') {
                Some((name, argument)) => (name.trim_end(), Some(argument)),
                None => (directive, None),
            };
            let is = |n: &str| name.eq_ignore_ascii_case(n);
            if argument.is_none() && (is("private") || is("no-store")) {
                return;
            }
            if is("public") || is("s-maxage") {
                continue;
            }
            merged.push_str(directive);
            merged.push_str(", ");
        }
    }
    merged.push_str("private");
    // Built from header values and ASCII: always a header value. Replaces
    // every value the handler gave.
    entry.insert(HeaderValue::try_from(merged).unwrap_or(PRIVATE));
}

/// The directives of a `Cache-Control` value, trimmed, empty ones left
/// out: split at the commas outside quoted strings (`private="a, b"` is one
/// directive). A last directive whose quoted string is never closed is left
/// out too: whatever came after it would be read as inside it.
fn directives(value: &str) -> impl Iterator<Item = &str> {
    let mut rest = value;
    std::iter::from_fn(move || loop {
        if rest.is_empty() {
            return None;
        }
        let (mut quoted, mut escaped) = (false, false);
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    _ if escaped => escaped = false,
                    '\\' if quoted => escaped = true,
                    '"' => quoted = !quoted,
                    ',' if !quoted => return true,
                    _ => {}
                }
                false
            })
            .map_or(rest.len(), |(i, _)| i);
        let directive = rest[..end].trim();
        rest = rest.get(end + 1..).unwrap_or("");
        if !directive.is_empty() && !quoted {
            return Some(directive);
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The `Cache-Control` a paid response leaves with, from the handler's
    /// values.
    fn kept_private(handler: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut headers = HeaderMap::new();
        for value in handler {
            let value = HeaderValue::from_bytes(value).expect("a header value");
            headers.append(header::CACHE_CONTROL, value);
        }
        keep_private(&mut headers);
        headers
            .get_all(header::CACHE_CONTROL)
            .iter()
            .map(|v| v.as_bytes().to_vec())
            .collect()
    }

    /// `Cache-Control` values, one per header line.
    type Values<'a> = &'a [&'a [u8]];

    #[test]
    fn a_paid_response_is_private_to_its_buyer() {
        let cases: &[(Values<'_>, Values<'_>)] = &[
            (&[], &[b"private"]),
            (&[b"max-age=60"], &[b"max-age=60, private"]),
            (&[b"public, max-age=60"], &[b"max-age=60, private"]),
            (
                &[b"public", b"max-age=5, S-MAXAGE=100, must-revalidate"],
                &[b"max-age=5, must-revalidate, private"],
            ),
            (&[b"no-store"], &[b"no-store"]),
            (&[b"Private, max-age=9"], &[b"Private, max-age=9"]),
            (&[b"public", b"no-store"], &[b"public", b"no-store"]),
            // Qualified, `private` covers only the fields it names.
            (
                &[b"private=\"set-cookie\", max-age=5"],
                &[b"private=\"set-cookie\", max-age=5, private"],
            ),
            (
                &[b"no-cache=\"a, public\", public"],
                &[b"no-cache=\"a, public\", private"],
            ),
            (
                &[b"private=\"a\\\", no-store\", s-maxage = 3"],
                &[b"private=\"a\\\", no-store\", private"],
            ),
            (&[b" , ,public,"], &[b"private"]),
            (
                &[b"max-age=4, a=\"unclosed, no-store"],
                &[b"max-age=4, private"],
            ),
            (&[b"max-age=1", b"caf\xc3\xa9"], &[b"private"]),
        ];
        for (handler, expected) in cases {
            let expected: Vec<Vec<u8>> = expected.iter().map(|v| v.to_vec()).collect();
            assert_eq!(
                kept_private(handler),
                expected,
                "{:?}",
                handler
                    .iter()
                    .map(|v| String::from_utf8_lossy(v))
                    .collect::<Vec<_>>()
            );
        }
    }

    proptest! {
        /// Whatever the handler wrote, the response leaves with one
        /// `Cache-Control` in which a shared cache finds `private` or
        /// `no-store`, and no `public` it could read as leave to store.
        #[test]
        fn no_handler_value_lets_a_shared_cache_keep_a_paid_response(
            values in proptest::collection::vec(
                "[ a-zA-Z=,\"\\\\-]{0,40}|(public|private|no-store|s-maxage=1|max-age=2)(, ?(public|private|no-store|s-maxage=1|max-age=2)){0,3}",
                0..3,
            ),
        ) {
            let handler: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
            let after = kept_private(&handler);
            let unchanged = after == values.iter().map(|v| v.as_bytes().to_vec()).collect::<Vec<_>>();
            let texts: Vec<String> = after
                .iter()
                .map(|v| String::from_utf8(v.clone()).expect("text"))
                .collect();
            let found: Vec<&str> = texts.iter().flat_map(|t| directives(t)).collect();
            let unqualified = |name: &str| found.iter().any(|d| d.eq_ignore_ascii_case(name));
            prop_assert!(unqualified("private") || unqualified("no-store"), "{texts:?}");
            if !unchanged {
                prop_assert_eq!(after.len(), 1);
                prop_assert!(!unqualified("public"), "{:?}", texts);
            }
        }
    }
}
