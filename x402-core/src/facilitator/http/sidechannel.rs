//! The facilitator's `EXTENSION-RESPONSES` sidechannel.
//!
//! Upstream (`bazaar.md`, "Verify and Settlement Response Sidechannel";
//! `@x402/core` 2.27's `HTTPFacilitatorClient`) lets a facilitator report
//! how it processed each extension of a payment in an `EXTENSION-RESPONSES`
//! header on its `/verify` and `/settle` replies: standard base64 of a JSON
//! object keyed by extension (`{"bazaar":{"status":"success"}}`). It is for
//! the resource server only, **never forwarded to the buyer**; what the
//! buyer may see travels in the settlement's `extensions`, inside
//! `PAYMENT-RESPONSE`.
//!
//! The decoded object of a `/settle` reply lands in
//! `SettleResponse::extension_responses` (never serialised), where hooks
//! read it; a `/verify` reply's is logged only. A header that does not
//! decode to an object is ignored. Each
//! one read is logged at `info` with only the fields upstream logs
//! (`status`, `rejectedReason`, `reason`, `code`), since other fields may
//! echo buyer input.

use base64::Engine as _;
use serde_json::Value;

use super::{Endpoint, Reply};
use crate::proto::JsonObject;

/// The longest header read (the rest of the reply is capped at 1 MiB; a
/// sidechannel this large is a facilitator bug).
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The fields of each extension's outcome that are logged.
const LOGGED_FIELDS: [&str; 4] = ["status", "rejectedReason", "reason", "code"];

/// The reply's `EXTENSION-RESPONSES`, decoded, if it is a JSON object.
pub(super) fn read(endpoint: Endpoint, reply: &Reply) -> Option<Box<JsonObject>> {
    let header = reply.extension_responses.as_ref()?;
    if header.len() > MAX_HEADER_BYTES {
        tracing::warn!(%endpoint, bytes = header.len(), "x402: facilitator EXTENSION-RESPONSES too large; ignored");
        return None;
    }
    let decoded = crate::codec::BASE64
        .decode(header.as_bytes())
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    let Some(Value::Object(object)) = decoded else {
        tracing::warn!(%endpoint, "x402: facilitator EXTENSION-RESPONSES is not base64 JSON of an object; ignored");
        return None;
    };
    let logged: JsonObject = object
        .iter()
        .map(|(key, outcome)| {
            let fields: JsonObject = LOGGED_FIELDS
                .iter()
                .filter_map(|f| Some(((*f).to_owned(), outcome.get(*f)?.clone())))
                .collect();
            (key.clone(), Value::Object(fields))
        })
        .collect();
    let logged = Value::Object(logged);
    tracing::info!(%endpoint, extension_responses = %logged, "x402: facilitator extension responses");
    Some(Box::new(object))
}
