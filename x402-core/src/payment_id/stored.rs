//! A settled response as it is kept for replay, and its bytes in a store.

use base64::{engine::general_purpose::STANDARD, Engine as _};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use serde::{Deserialize, Serialize};

use super::{omitted_marker, PaymentIdStoreError};
use crate::engine::EngineResponse;

/// A settled response kept for replay: what the client was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// The status.
    pub status: StatusCode,
    /// Every header the engine sent, the receipt included.
    pub headers: HeaderMap,
    /// The body; `None` when it was not kept (over the cap, or streamed).
    pub body: Option<Bytes>,
}

/// The stored form: header values base64 (they need not be UTF-8).
#[derive(Serialize, Deserialize)]
struct Wire {
    s: u16,
    h: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    b: Option<String>,
}

impl StoredResponse {
    /// The response a replay sends: the stored status, headers and body;
    /// with no body kept, an empty one and `X-Payment-Identifier-Body:
    /// omitted`.
    pub fn to_response(&self) -> EngineResponse {
        let mut response = Response::new(self.body.clone().unwrap_or_default());
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers.clone();
        if self.body.is_none() {
            let headers = response.headers_mut();
            headers.remove(header::CONTENT_LENGTH);
            headers.remove(header::CONTENT_TYPE);
            let (name, value) = omitted_marker();
            headers.insert(name, value);
        }
        response
    }

    /// The bytes a store keeps.
    pub fn to_bytes(&self) -> Vec<u8> {
        let wire = Wire {
            s: self.status.as_u16(),
            h: self
                .headers
                .iter()
                .map(|(n, v)| (n.as_str().to_owned(), STANDARD.encode(v.as_bytes())))
                .collect(),
            b: self.body.as_ref().map(|b| STANDARD.encode(b)),
        };
        // A struct of strings and numbers always serializes.
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// Reads back [`to_bytes`](Self::to_bytes).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, PaymentIdStoreError> {
        let wire: Wire = serde_json::from_slice(bytes).map_err(|_| PaymentIdStoreError::Corrupt)?;
        let status = StatusCode::from_u16(wire.s).map_err(|_| PaymentIdStoreError::Corrupt)?;
        let mut headers = HeaderMap::with_capacity(wire.h.len());
        for (name, value) in wire.h {
            let name =
                HeaderName::try_from(name.as_str()).map_err(|_| PaymentIdStoreError::Corrupt)?;
            let value = STANDARD
                .decode(value)
                .ok()
                .and_then(|v| HeaderValue::from_bytes(&v).ok())
                .ok_or(PaymentIdStoreError::Corrupt)?;
            headers.append(name, value);
        }
        let body = match wire.b {
            None => None,
            Some(b) => Some(Bytes::from(
                STANDARD
                    .decode(b)
                    .map_err(|_| PaymentIdStoreError::Corrupt)?,
            )),
        };
        Ok(Self {
            status,
            headers,
            body,
        })
    }
}
