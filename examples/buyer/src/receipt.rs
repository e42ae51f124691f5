//! The answer to a paid request: its receipt, and whether the seller
//! accepted the payment.

use http::{HeaderMap, StatusCode};
use x402_core::{codec, proto::SettleResponse};

use crate::challenge::{self, MAX_CHALLENGE_BODY_BYTES, MAX_HEADER_BYTES};

/// The `PAYMENT-RESPONSE` (v2) or `X-PAYMENT-RESPONSE` (v1) receipt, if the
/// response has one; an error when it does not decode.
pub(crate) fn decode(headers: &HeaderMap) -> Result<Option<SettleResponse>, codec::DecodeError> {
    [codec::PAYMENT_RESPONSE, codec::X_PAYMENT_RESPONSE]
        .iter()
        .find_map(|name| headers.get(name))
        .map(|value| codec::decode(value.as_bytes(), MAX_HEADER_BYTES))
        .transpose()
}

/// Whether the seller refused the payment: it answered `402`, or its
/// receipt says `success: false`.
pub(crate) fn refused(status: StatusCode, receipt: Option<&SettleResponse>) -> bool {
    status == StatusCode::PAYMENT_REQUIRED || receipt.is_some_and(|r| !r.success)
}

/// Why the seller refused a payment: the receipt's `errorReason`, else the
/// `error` of the challenge it answered with (header or v1 body). Only
/// a hint: a body that cannot be read leaves it out.
pub(crate) async fn refusal_reason(
    receipt: Option<&SettleResponse>,
    response: reqwest::Response,
) -> Option<String> {
    if let Some(reason) = receipt.and_then(|r| r.error_reason.clone()) {
        return Some(reason);
    }
    let header = response
        .headers()
        .get(codec::PAYMENT_REQUIRED)
        .map(|v| v.as_bytes().to_vec());
    let body = challenge::read_limited(response, MAX_CHALLENGE_BODY_BYTES)
        .await
        .ok()?;
    challenge_error(header.as_deref(), body.as_deref())
}

/// The `error` of the challenge in a header and body, if any says one.
fn challenge_error(header: Option<&[u8]>, body: Option<&[u8]>) -> Option<String> {
    let challenge = challenge::parse(header, body, false).ok()?;
    challenge.error().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use http::HeaderValue;
    use x402_core::proto::X402Version;

    use super::*;

    /// The receipt header name of a protocol version.
    fn header_of(version: X402Version) -> http::HeaderName {
        match version {
            X402Version::V1 => codec::X_PAYMENT_RESPONSE,
            X402Version::V2 => codec::PAYMENT_RESPONSE,
        }
    }

    fn headers(version: X402Version, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header_of(version), HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn a_receipt_of_either_version_decodes() {
        let receipt = SettleResponse::failure("eip155:84532", "insufficient_funds");
        let encoded = codec::encode(&receipt).unwrap();
        for version in [X402Version::V1, X402Version::V2] {
            let decoded = decode(&headers(version, &encoded)).unwrap();
            assert_eq!(decoded.as_ref(), Some(&receipt));
        }
        assert_eq!(decode(&HeaderMap::new()).unwrap(), None);
    }

    #[test]
    fn a_malformed_receipt_is_an_error() {
        for value in ["not base64!", "bm90IGpzb24=", "e30="] {
            let decoded = decode(&headers(X402Version::V2, value));
            assert!(decoded.is_err(), "{value}: {decoded:?}");
        }
    }

    #[test]
    fn a_402_or_a_failed_receipt_is_a_refusal() {
        let failed = SettleResponse::failure("eip155:84532", "insufficient_funds");
        let settled = SettleResponse {
            success: true,
            ..failed.clone()
        };
        assert!(refused(StatusCode::PAYMENT_REQUIRED, None));
        assert!(refused(StatusCode::PAYMENT_REQUIRED, Some(&settled)));
        assert!(refused(StatusCode::OK, Some(&failed)));
        assert!(!refused(StatusCode::OK, Some(&settled)));
        assert!(!refused(StatusCode::OK, None));
        assert!(!refused(StatusCode::INTERNAL_SERVER_ERROR, None));
    }

    #[test]
    fn the_reason_comes_from_the_new_challenge() {
        let required = serde_json::json!({
            "x402Version": 2,
            "error": "invalid_signature",
            "resource": {"url": "http://h/r", "description": "", "mimeType": ""},
            "accepts": [],
        });
        let header = codec::encode(&required).unwrap();
        assert_eq!(
            challenge_error(Some(header.as_bytes()), Some(b"{}")).as_deref(),
            Some("invalid_signature")
        );
        let v1 = br#"{"x402Version":1,"error":"expired","accepts":[]}"#;
        assert_eq!(challenge_error(None, Some(v1)).as_deref(), Some("expired"));
        assert_eq!(challenge_error(None, Some(b"oops")), None);
    }
}
