//! Reading a 402: the v2 `PAYMENT-REQUIRED` header or the v1 JSON body, and
//! the offers in it.

use x402_core::{
    codec,
    money::AtomicAmount,
    proto::{v1, v2, JsonObject},
};

use crate::{
    error::{BuyerError, ChallengeError},
    session::{self, OfferDecl},
};

/// The most bytes read from a 402 body when looking for a v1 challenge.
pub const MAX_CHALLENGE_BODY_BYTES: usize = 256 * 1024;
/// The most bytes accepted in a `PAYMENT-REQUIRED` or receipt header.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The 402 challenge a purchase answered.
// One per purchase; boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Challenge {
    /// A v1 challenge, from the JSON body.
    V1(v1::PaymentRequirementsResponse),
    /// A v2 challenge, from the `PAYMENT-REQUIRED` header.
    V2(v2::PaymentRequired),
}

impl Challenge {
    /// The challenge's `error`: why the request was not served
    /// (`payment_required`, `session_exhausted`, ...), if it says.
    pub fn error(&self) -> Option<&str> {
        match self {
            Self::V1(c) => (!c.error.is_empty()).then_some(c.error.as_str()),
            Self::V2(c) => c.error.as_deref(),
        }
    }

    /// The session offers of a v2 challenge.
    pub(crate) fn session_offers(&self) -> Vec<OfferDecl> {
        match self {
            Self::V1(_) => Vec::new(),
            Self::V2(c) => session::offers(c),
        }
    }

    /// The per-call offers, in challenge order.
    pub(crate) fn rows(&self) -> Vec<Row<'_>> {
        match self {
            Self::V1(c) => c.accepts.iter().map(Row::v1).collect(),
            Self::V2(c) => c.accepts.iter().map(|row| Row::v2(c, row)).collect(),
        }
    }
}

/// An offer of either version, borrowed, with what the payment will need
/// to copy from its challenge.
#[derive(Debug)]
pub(crate) struct Row<'a> {
    pub(crate) scheme: &'a str,
    pub(crate) network: &'a str,
    pub(crate) amount: AtomicAmount,
    pub(crate) asset: &'a str,
    pub(crate) pay_to: &'a str,
    pub(crate) max_timeout_seconds: u64,
    pub(crate) extra: Option<&'a JsonObject>,
    source: Source<'a>,
}

#[derive(Debug)]
enum Source<'a> {
    V1(&'a v1::PaymentRequirements),
    V2 {
        challenge: &'a v2::PaymentRequired,
        row: &'a v2::PaymentRequirements,
    },
}

/// What a payment copies from the challenge it answers.
// One per acceptable offer; boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub(crate) enum Terms {
    /// A v1 payment names the offer's scheme and network.
    V1 { scheme: String, network: String },
    /// A v2 payment copies the resource, the row it accepts and the
    /// challenge's extensions.
    V2 {
        resource: v2::ResourceInfo,
        accepted: v2::PaymentRequirements,
        extensions: JsonObject,
    },
}

impl<'a> Row<'a> {
    fn v1(r: &'a v1::PaymentRequirements) -> Self {
        Row {
            scheme: &r.scheme,
            network: &r.network,
            amount: r.max_amount_required,
            asset: &r.asset,
            pay_to: &r.pay_to,
            max_timeout_seconds: r.max_timeout_seconds,
            extra: r.extra.as_ref(),
            source: Source::V1(r),
        }
    }

    /// A row of `challenge`, or of one of its session offers.
    pub(crate) fn v2(challenge: &'a v2::PaymentRequired, row: &'a v2::PaymentRequirements) -> Self {
        Row {
            scheme: &row.scheme,
            network: &row.network,
            amount: row.amount,
            asset: &row.asset,
            pay_to: &row.pay_to,
            max_timeout_seconds: row.max_timeout_seconds,
            extra: Some(&row.extra),
            source: Source::V2 { challenge, row },
        }
    }

    pub(crate) fn terms(&self) -> Terms {
        match self.source {
            Source::V1(r) => Terms::V1 {
                scheme: r.scheme.clone(),
                network: r.network.clone(),
            },
            Source::V2 { challenge, row } => Terms::V2 {
                resource: challenge.resource.clone(),
                accepted: row.clone(),
                extensions: challenge.extensions.clone(),
            },
        }
    }
}

/// Reads the challenge of a 402 response (its header and at most
/// [`MAX_CHALLENGE_BODY_BYTES`] of its body).
pub(crate) async fn read(
    response: reqwest::Response,
    prefer_v1: bool,
) -> Result<Challenge, BuyerError> {
    let header = response
        .headers()
        .get(codec::PAYMENT_REQUIRED)
        .map(|v| v.as_bytes().to_vec());
    let body = read_limited(response, MAX_CHALLENGE_BODY_BYTES).await?;
    parse(header.as_deref(), body.as_deref(), prefer_v1)
}

/// The challenge in a 402's `PAYMENT-REQUIRED` header and body (`None`:
/// over the size limit).
///
/// v2 (the header) wins unless `prefer_v1` and the body is a valid v1
/// challenge. A header that does not decode is an error even when the body
/// is a valid v1 challenge: the seller meant v2.
pub(crate) fn parse(
    header: Option<&[u8]>,
    body: Option<&[u8]>,
    prefer_v1: bool,
) -> Result<Challenge, BuyerError> {
    // A malformed v1 body matters only when there is no header.
    let v1 = body.map(parse_v1_body).transpose().map(Option::flatten);
    match header {
        Some(header) => match v1 {
            Ok(Some(v1)) if prefer_v1 => Ok(Challenge::V1(v1)),
            _ => codec::decode::<v2::PaymentRequired>(header, MAX_HEADER_BYTES)
                .map(Challenge::V2)
                .map_err(|e| ChallengeError::Header(e).into()),
        },
        None => match v1 {
            Ok(Some(v1)) => Ok(Challenge::V1(v1)),
            Ok(None) => Err(BuyerError::ChallengeMissing {
                body_over_limit: body.is_none(),
            }),
            Err(e) => Err(e.into()),
        },
    }
}

/// Reads at most `limit` bytes of a body; `None` when it is longer.
pub(crate) async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// The v1 challenge in a 402 body: `Ok(None)` when the body is not a v1
/// challenge at all, `Err` when it claims `x402Version: 1` but is malformed.
fn parse_v1_body(body: &[u8]) -> Result<Option<v1::PaymentRequirementsResponse>, ChallengeError> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Ok(None);
    };
    if value.get("x402Version").and_then(serde_json::Value::as_u64) != Some(1) {
        return Ok(None);
    }
    serde_json::from_value(value)
        .map(Some)
        .map_err(ChallengeError::V1Body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    fn v2_header() -> String {
        let required = serde_json::json!({
            "x402Version": 2,
            "error": "payment_required",
            "resource": {"url": "http://h/r", "description": "", "mimeType": ""},
            "accepts": [],
        });
        codec::encode(&required).unwrap()
    }

    fn v1_body(accepts: &serde_json::Value) -> Vec<u8> {
        serde_json::json!({"x402Version": 1, "error": "payment_required", "accepts": accepts})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn a_malformed_header_is_a_malformed_challenge() {
        for header in [&b"not base64!"[..], b"", b"bm90IGpzb24="] {
            let result = parse(Some(header), Some(b"{}"), false);
            assert!(
                matches!(
                    result,
                    Err(BuyerError::MalformedChallenge(ChallengeError::Header(_)))
                ),
                "{header:?}: {result:?}"
            );
        }
        // An oversized header is refused before decoding.
        let huge = vec![b'A'; MAX_HEADER_BYTES + 1];
        let result = parse(Some(&huge), None, false);
        assert!(
            matches!(
                result,
                Err(BuyerError::MalformedChallenge(ChallengeError::Header(
                    codec::DecodeError::TooLarge {
                        limit: MAX_HEADER_BYTES
                    }
                )))
            ),
            "{result:?}"
        );
        // A valid v1 body does not rescue a broken header, unless v1 is preferred.
        let body = v1_body(&serde_json::json!([]));
        assert!(parse(Some(b"***"), Some(&body), false).is_err());
        assert!(matches!(
            parse(Some(b"***"), Some(&body), true),
            Ok(Challenge::V1(_))
        ));
    }

    #[test]
    fn a_malformed_v1_body_is_a_malformed_challenge() {
        let body = v1_body(&serde_json::json!([{"scheme": "exact"}]));
        let result = parse(None, Some(&body), false);
        assert!(
            matches!(
                result,
                Err(BuyerError::MalformedChallenge(ChallengeError::V1Body(_)))
            ),
            "{result:?}"
        );
    }

    #[test]
    fn a_402_without_a_challenge_says_why() {
        for body in [
            &b"{\"error\":\"nope\"}"[..],
            b"not json",
            b"{\"x402Version\":2}",
        ] {
            let result = parse(None, Some(body), false);
            assert!(
                matches!(
                    result,
                    Err(BuyerError::ChallengeMissing {
                        body_over_limit: false
                    })
                ),
                "{result:?}"
            );
        }
        let result = parse(None, None, false);
        assert!(
            matches!(
                result,
                Err(BuyerError::ChallengeMissing {
                    body_over_limit: true
                })
            ),
            "{result:?}"
        );
    }

    #[test]
    fn v2_wins_unless_v1_is_preferred() {
        let header = v2_header();
        let body = v1_body(&serde_json::json!([]));
        let v2 = parse(Some(header.as_bytes()), Some(&body), false).unwrap();
        assert!(matches!(v2, Challenge::V2(_)));
        assert_eq!(v2.error(), Some("payment_required"));
        let v1 = parse(Some(header.as_bytes()), Some(&body), true).unwrap();
        assert!(matches!(v1, Challenge::V1(_)));
        // No valid v1 body: v2 even when v1 is preferred.
        let v2 = parse(Some(header.as_bytes()), None, true).unwrap();
        assert!(matches!(v2, Challenge::V2(_)));
        // A malformed v1 body beside a good header is ignored.
        let broken = v1_body(&serde_json::json!([{"scheme": "exact"}]));
        let v2 = parse(Some(header.as_bytes()), Some(&broken), true).unwrap();
        assert!(matches!(v2, Challenge::V2(_)));
    }
}
