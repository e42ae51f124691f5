//! Header codecs: standard padded base64 of JSON.
//!
//! Every x402 header carries `base64(UTF-8 JSON)` in the standard alphabet
//! with `=` padding (Go and Python decoders insist on padding, so this crate
//! always writes it). Decoding is bounded: a header longer than the limit is
//! refused before any base64 or JSON work, and a payment's `x402Version` is
//! read before the rest of it is parsed.
//!
//! ```
//! use x402_core::codec;
//! use x402_core::proto::{PaymentPayload, X402Version};
//!
//! let header = "eyJ4NDAyVmVyc2lvbiI6MSwic2NoZW1lIjoiZXhhY3QiLCJuZXR3b3JrIjoiYmFzZS1zZXBvbGlhIiwicGF5bG9hZCI6e319";
//! let payment = codec::decode_payment(header.as_bytes(), codec::DEFAULT_MAX_HEADER_BYTES)?;
//! assert_eq!(payment.version(), X402Version::V1);
//! assert_eq!(payment.network(), "base-sepolia");
//! # Ok::<(), codec::DecodeError>(())
//! ```

use base64::{
    alphabet,
    engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig},
    Engine as _,
};
use http::HeaderName;
use serde::{de::DeserializeOwned, Serialize};

use crate::proto::{PayloadParseError, PaymentPayload};

/// `PAYMENT-REQUIRED`: the v2 challenge, on a 402.
pub const PAYMENT_REQUIRED: HeaderName = HeaderName::from_static("payment-required");
/// `PAYMENT-SIGNATURE`: a v2 payment, on a request.
pub const PAYMENT_SIGNATURE: HeaderName = HeaderName::from_static("payment-signature");
/// `PAYMENT-RESPONSE`: a v2 settlement receipt.
pub const PAYMENT_RESPONSE: HeaderName = HeaderName::from_static("payment-response");
/// `X-PAYMENT`: a v1 payment, on a request.
pub const X_PAYMENT: HeaderName = HeaderName::from_static("x-payment");
/// `X-PAYMENT-RESPONSE`: a v1 settlement receipt.
pub const X_PAYMENT_RESPONSE: HeaderName = HeaderName::from_static("x-payment-response");

/// The default limit on an incoming payment header, in bytes (16 KiB).
pub const DEFAULT_MAX_HEADER_BYTES: usize = 16 * 1024;

/// Writes padded output; reads padded or unpadded input.
pub(crate) const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Encodes a value as standard padded base64 of its JSON.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<String, EncodeError> {
    let json = serde_json::to_vec(value).map_err(EncodeError)?;
    Ok(BASE64.encode(json))
}

/// Encodes raw JSON bytes as standard padded base64.
pub fn encode_json_bytes(json: &[u8]) -> String {
    BASE64.encode(json)
}

/// Decodes a header value to its JSON bytes, refusing values over
/// `max_bytes` before decoding.
pub fn decode_to_json(value: &[u8], max_bytes: usize) -> Result<Vec<u8>, DecodeError> {
    if value.len() > max_bytes {
        return Err(DecodeError::TooLarge { limit: max_bytes });
    }
    let trimmed = value.trim_ascii();
    if trimmed.is_empty() {
        return Err(DecodeError::Empty);
    }
    BASE64.decode(trimmed).map_err(|_| DecodeError::NotBase64)
}

/// Decodes a header value into any JSON type.
pub fn decode<T: DeserializeOwned>(value: &[u8], max_bytes: usize) -> Result<T, DecodeError> {
    let json = decode_to_json(value, max_bytes)?;
    crate::proto::from_json_bytes(&json).map_err(|e| DecodeError::Invalid(e.to_string()))
}

/// Decodes a `PAYMENT-SIGNATURE` or `X-PAYMENT` value into a payment of
/// either version, reading `x402Version` before the rest.
pub fn decode_payment(value: &[u8], max_bytes: usize) -> Result<PaymentPayload, DecodeError> {
    let json = decode_to_json(value, max_bytes)?;
    PaymentPayload::from_json_slice(&json).map_err(|e| match e {
        PayloadParseError::MissingVersion => DecodeError::MissingVersion,
        PayloadParseError::UnsupportedVersion => DecodeError::UnsupportedVersion,
        PayloadParseError::Json(e) if e.is_syntax() || e.is_eof() => DecodeError::NotJson,
        PayloadParseError::Json(e) => DecodeError::Invalid(e.to_string()),
    })
}

/// A value could not be written as JSON (only a custom `Serialize` can fail).
#[derive(Debug, thiserror::Error)]
#[error("could not encode x402 header JSON")]
pub struct EncodeError(#[source] serde_json::Error);

/// Why a header value could not be decoded. [`DecodeError::reason`] is the
/// code written into a 402's `error` field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The header is longer than the limit.
    #[error("payment header is larger than {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The header is empty.
    #[error("payment header is empty")]
    Empty,
    /// Not standard base64.
    #[error("payment header is not valid base64")]
    NotBase64,
    /// Base64 of something that is not JSON.
    #[error("payment header is not JSON")]
    NotJson,
    /// JSON without `x402Version`.
    #[error("payment header has no x402Version")]
    MissingVersion,
    /// An `x402Version` other than 1 or 2.
    #[error("payment header has an unsupported x402Version")]
    UnsupportedVersion,
    /// JSON of the wrong shape (the serde message, which names a field and
    /// never contains secrets from this server).
    #[error("payment header is not a valid x402 payload: {0}")]
    Invalid(String),
}

impl DecodeError {
    /// The machine-readable reason for the 402 `error` field.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "payment_header_too_large",
            Self::Empty | Self::NotBase64 => "invalid_payment_header_base64",
            Self::NotJson => "invalid_payment_header_json",
            Self::MissingVersion | Self::UnsupportedVersion => "invalid_x402_version",
            Self::Invalid(_) => "invalid_payload",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_before_decoding() {
        let big = vec![b'A'; 100];
        assert_eq!(
            decode_to_json(&big, 99),
            Err(DecodeError::TooLarge { limit: 99 })
        );
        assert_eq!(decode_to_json(b"", 99), Err(DecodeError::Empty));
        assert_eq!(decode_to_json(b"***", 99), Err(DecodeError::NotBase64));
        assert_eq!(decode_to_json(b"e30-", 99), Err(DecodeError::NotBase64));
        assert_eq!(
            decode_payment(b"bm90IGpzb24=", 99),
            Err(DecodeError::NotJson)
        );
        assert_eq!(
            decode_payment(&encode_json_bytes(b"{}").into_bytes(), 99),
            Err(DecodeError::MissingVersion)
        );
        let v3 = encode_json_bytes(br#"{"x402Version":3}"#);
        assert_eq!(
            decode_payment(v3.as_bytes(), 99),
            Err(DecodeError::UnsupportedVersion)
        );
        let v2_bad = encode_json_bytes(br#"{"x402Version":2,"payload":{}}"#);
        assert!(matches!(
            decode_payment(v2_bad.as_bytes(), 999),
            Err(DecodeError::Invalid(_))
        ));
    }

    #[test]
    fn unpadded_input_is_accepted_and_output_is_padded() {
        assert_eq!(encode_json_bytes(b"{}"), "e30=");
        assert_eq!(decode_to_json(b"e30", 10).unwrap(), b"{}");
        assert_eq!(decode_to_json(b"e30=", 10).unwrap(), b"{}");
    }
}
