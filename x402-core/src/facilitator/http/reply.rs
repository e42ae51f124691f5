//! Reading a facilitator's answers: verdicts, settlements and `/supported`,
//! with the variations real facilitators send.

use std::collections::BTreeMap;

use http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::{Endpoint, MAX_BODY_BYTES, MAX_LOG_MESSAGE_CHARS, MAX_REASON_CODE_LEN, SIGNER_KEYS};
use crate::capped::truncate_chars;
use crate::facilitator::FacilitatorError;
use crate::proto::{
    from_json_bytes, JsonObject, SettleResponse, SupportedKind, SupportedResponse, VerifyResponse,
};

/// A facilitator's reply.
pub(super) struct Reply {
    pub(super) status: StatusCode,
    pub(super) body: Vec<u8>,
    /// The body was longer than [`MAX_BODY_BYTES`] and was cut.
    pub(super) truncated: bool,
    /// The `EXTENSION-RESPONSES` header, if any.
    pub(super) extension_responses: Option<http::HeaderValue>,
}

impl Reply {
    /// The body as a JSON object, if it is one (and was read whole).
    pub(super) fn json_object(&self) -> Option<JsonObject> {
        if self.truncated {
            return None;
        }
        match from_json_bytes(&self.body) {
            Ok(Value::Object(object)) => Some(object),
            _ => None,
        }
    }

    /// The whole body read as `T`, if it reads.
    pub(super) fn typed<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        if self.truncated {
            return None;
        }
        from_json_bytes(&self.body).ok()
    }

    /// A success reply's body as JSON.
    pub(super) fn success_json(&self, endpoint: Endpoint) -> Result<Value, FacilitatorError> {
        if self.truncated {
            return Err(FacilitatorError::Malformed(format!(
                "/{endpoint} reply is larger than {MAX_BODY_BYTES} bytes"
            )));
        }
        from_json_bytes(&self.body).map_err(|e| malformed(endpoint, &e))
    }

    /// The error for a non-success reply without a usable verdict.
    pub(super) fn status_error(&self, object: Option<&JsonObject>) -> FacilitatorError {
        let from_json = object.and_then(|o| {
            ["error", "message", "errorMessage"]
                .iter()
                .find_map(|key| o.get(*key).and_then(Value::as_str))
                .map(str::to_owned)
        });
        let text = from_json.unwrap_or_else(|| String::from_utf8_lossy(&self.body).into_owned());
        let text = text.trim();
        FacilitatorError::Status {
            status: self.status.as_u16(),
            message: (!text.is_empty()).then(|| truncate_chars(text, MAX_LOG_MESSAGE_CHARS)),
        }
    }
}

pub(super) fn malformed(endpoint: Endpoint, error: &serde_json::Error) -> FacilitatorError {
    FacilitatorError::Malformed(format!("/{endpoint} reply: {error}"))
}

/// The reason code of an `error` text `"<code>: <message>"` (or `"<code>"`),
/// if it is snake_case (`^[a-z][a-z0-9_]*$`).
pub(super) fn reason_code(error: &str) -> Option<&str> {
    let code = error.split_once(": ").map_or(error, |(code, _)| code);
    let mut bytes = code.bytes();
    let starts_lower = bytes.next().is_some_and(|b| b.is_ascii_lowercase());
    let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    (starts_lower && rest_ok && code.len() <= MAX_REASON_CODE_LEN).then_some(code)
}

/// Statuses that say something about the facilitator or the seller's access
/// to it, not about the payment: their `error` codes are never verdicts
/// (unless the code starts with `invalid_`).
pub(super) fn is_access_status(status: StatusCode) -> bool {
    matches!(status.as_u16(), 401 | 403 | 404 | 405 | 407 | 408 | 429)
}

pub(super) fn verify_reply(reply: &Reply) -> Result<VerifyResponse, FacilitatorError> {
    if reply.status.is_success() {
        // The common answer reads straight into the type; anything else
        // takes the slower path, for its error message.
        if let Some(verdict) = reply.typed() {
            return Ok(verdict);
        }
        let json = reply.success_json(Endpoint::Verify)?;
        return serde_json::from_value(json).map_err(|e| malformed(Endpoint::Verify, &e));
    }
    let object = reply.json_object();
    if let Some(object) = &object {
        if object.get("isValid") == Some(&Value::Bool(false)) {
            if let Ok(verdict) = serde_json::from_value(Value::Object(object.clone())) {
                return Ok(verdict);
            }
        }
        if let Some(code) = object
            .get("error")
            .and_then(Value::as_str)
            .and_then(reason_code)
        {
            let request_problem = reply.status.is_client_error() && !is_access_status(reply.status);
            if request_problem || code.starts_with("invalid_") {
                return Ok(VerifyResponse::invalid(code, None));
            }
        }
    }
    Err(reply.status_error(object.as_ref()))
}

/// Fixes harmless variations before reading a settle answer: `amount` as a
/// JSON number, `null` for `transaction` or `amount`, `""` for `amount`.
pub(super) fn normalize_settle(object: &mut JsonObject) {
    match object.get("amount") {
        Some(Value::Number(n)) => {
            let text = n.to_string();
            object.insert("amount".to_owned(), Value::String(text));
        }
        // `""`: batch-settlement claims move no funds.
        Some(Value::Null) => {
            object.remove("amount");
        }
        Some(Value::String(s)) if s.is_empty() => {
            object.remove("amount");
        }
        _ => {}
    }
    if object.get("transaction").is_some_and(Value::is_null) {
        object.remove("transaction");
    }
}

pub(super) fn settle_reply(
    reply: &Reply,
    network: &str,
) -> Result<SettleResponse, FacilitatorError> {
    if reply.status.is_success() {
        // A well-formed answer reads straight into the type (what
        // `normalize_settle` fixes fails to); the rest is normalised first.
        if let Some(answer) = reply.typed() {
            return Ok(answer);
        }
        let mut json = reply.success_json(Endpoint::Settle)?;
        if let Value::Object(object) = &mut json {
            normalize_settle(object);
        }
        return serde_json::from_value(json).map_err(|e| malformed(Endpoint::Settle, &e));
    }
    let object = reply.json_object();
    if let Some(object) = &object {
        if object.get("success") == Some(&Value::Bool(false)) {
            let mut object = object.clone();
            normalize_settle(&mut object);
            if !object.get("network").is_some_and(Value::is_string) {
                object.insert("network".to_owned(), Value::String(network.to_owned()));
            }
            if let Ok(answer) = serde_json::from_value(Value::Object(object)) {
                return Ok(answer);
            }
        }
    }
    Err(reply.status_error(object.as_ref()))
}

pub(super) fn supported_reply(reply: &Reply) -> Result<SupportedResponse, FacilitatorError> {
    #[derive(Deserialize)]
    struct Wire {
        kinds: Vec<Value>,
        #[serde(default)]
        extensions: Option<Vec<String>>,
        #[serde(default)]
        signers: Option<BTreeMap<String, Vec<String>>>,
    }

    if !reply.status.is_success() {
        return Err(reply.status_error(reply.json_object().as_ref()));
    }
    let json = reply.success_json(Endpoint::Supported)?;
    let wire: Wire =
        serde_json::from_value(json).map_err(|e| malformed(Endpoint::Supported, &e))?;
    let mut kinds = Vec::with_capacity(wire.kinds.len());
    for kind in wire.kinds {
        // Kinds of protocol versions this crate does not speak are skipped.
        let version = kind.get("x402Version").and_then(Value::as_u64);
        if version.is_some_and(|v| crate::proto::X402Version::from_number(v).is_none()) {
            continue;
        }
        kinds.push(
            serde_json::from_value::<SupportedKind>(kind)
                .map_err(|e| malformed(Endpoint::Supported, &e))?,
        );
    }
    Ok(SupportedResponse {
        kinds,
        extensions: wire.extensions.unwrap_or_default(),
        signers: wire.signers.unwrap_or_default(),
    })
}

pub(super) fn same_address(a: &str, b: &str) -> bool {
    if a.starts_with("0x") && b.starts_with("0x") {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

/// Keeps the cached signer values of each kind while the facilitator still
/// lists them (see [`HttpFacilitator`]'s `supported`).
pub(super) fn stabilize_extras(fresh: &mut SupportedResponse, cached: &SupportedResponse) {
    let listed: Vec<&str> = fresh
        .signers
        .values()
        .flatten()
        .map(String::as_str)
        .collect();
    for kind in &mut fresh.kinds {
        let Some(old) = cached.kinds.iter().find(|old| {
            old.x402_version == kind.x402_version
                && old.scheme == kind.scheme
                && old.network == kind.network
        }) else {
            continue;
        };
        let Some(old_extra) = old.extra.as_ref() else {
            continue;
        };
        if kind.extra.as_ref() == Some(old_extra) {
            continue;
        }
        let old_signers: Vec<(&str, &str)> = SIGNER_KEYS
            .iter()
            .filter_map(|key| Some((*key, old_extra.get(*key)?.as_str()?)))
            .collect();
        let still_listed = !old_signers.is_empty()
            && old_signers
                .iter()
                .all(|(_, signer)| listed.iter().any(|l| same_address(signer, l)));
        if still_listed {
            let extra = kind.extra.get_or_insert_with(JsonObject::new);
            for (key, signer) in old_signers {
                extra.insert(key.to_owned(), Value::String(signer.to_owned()));
            }
        }
    }
}
