//! The x402 wire types, one module per protocol version.
//!
//! Field names follow the protocol (`PaymentRequirements`, `PaymentPayload`,
//! `SettleResponse`, ...) and are mapped with serde. Every type tolerates
//! unknown fields on input; the ones the server forwards or echoes
//! ([`v1::PaymentPayload`], [`v2::PaymentPayload`], both `PaymentRequirements`)
//! keep them and write them back unchanged.
//!
//! Types that both versions share ([`VerifyResponse`], [`SettleResponse`],
//! [`SupportedResponse`]) live here; [`PaymentPayload`] and
//! [`PaymentRequirements`] are the version-tagged unions the engine and the
//! facilitator clients pass around.

use std::fmt;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::money::AtomicAmount;

pub mod v1;
pub mod v2;

/// A JSON object, as used for `extra`, `extensions` and scheme payloads.
pub type JsonObject = Map<String, Value>;

/// [`serde_json::from_slice`], with the document's UTF-8 checked once.
///
/// `from_slice` checks each string of the document on its own as it reads
/// it (a payment has about thirty), where one pass over the whole buffer
/// is a fraction of that; a document that is valid UTF-8 parses the same
/// either way. A document that is not is handed to `from_slice`, so that
/// its error is the one it always was.
pub(crate) fn from_json_bytes<T: de::DeserializeOwned>(json: &[u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(json) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(json),
    }
}

/// The value of `key` in `object`, found by a scan: the objects of a
/// payment (`extra`, a payload, an extension's `info`) have a handful of
/// keys, and a scan hashes none of them, where [`Map::get`] hashes the key
/// with SipHash first. Keys are unique in a parsed object, so this finds
/// what `get` finds; a buyer's object with many keys costs one pass, no
/// more than parsing it did.
pub(crate) fn field<'a>(object: &'a JsonObject, key: &str) -> Option<&'a Value> {
    object.iter().find_map(|(k, v)| (k == key).then_some(v))
}

/// Whether `object` has `key` with a value other than `null`: how a
/// payment's payload says which of its parts it carries (an EVM payload's
/// `authorization` or `permit2Authorization`).
pub(crate) fn has_field(object: &JsonObject, key: &str) -> bool {
    field(object, key).is_some_and(|v| !v.is_null())
}

/// [`field`] of `value` when it is an object.
pub(crate) fn field_of<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    value.as_object().and_then(|object| field(object, key))
}

/// The `x402Version` field of a version-`N` message: writes `N`, and refuses
/// to read any other number.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Version<const N: u8>;

impl<const N: u8> Version<N> {
    /// The version number.
    pub const NUMBER: u8 = N;
}

impl<const N: u8> fmt::Debug for Version<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{N}")
    }
}

impl<const N: u8> Serialize for Version<N> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u8(N)
    }
}

impl<'de, const N: u8> Deserialize<'de> for Version<N> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let v = u64::deserialize(deserializer)?;
        if v == u64::from(N) {
            Ok(Self)
        } else {
            Err(de::Error::custom(format_args!(
                "expected x402Version {N}, got {v}"
            )))
        }
    }
}

/// A protocol version this crate speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum X402Version {
    /// Version 1: `X-PAYMENT`, `X-PAYMENT-RESPONSE`, the challenge in the body.
    V1,
    /// Version 2: `PAYMENT-SIGNATURE`, `PAYMENT-RESPONSE`, `PAYMENT-REQUIRED`.
    V2,
}

impl X402Version {
    /// The number written in `x402Version`.
    pub fn number(self) -> u8 {
        match self {
            Self::V1 => 1,
            Self::V2 => 2,
        }
    }

    /// The version for a number, if this crate speaks it.
    pub fn from_number(n: u64) -> Option<Self> {
        match n {
            1 => Some(Self::V1),
            2 => Some(Self::V2),
            _ => None,
        }
    }
}

impl Serialize for X402Version {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u8(self.number())
    }
}

impl<'de> Deserialize<'de> for X402Version {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let n = u64::deserialize(deserializer)?;
        Self::from_number(n)
            .ok_or_else(|| de::Error::custom(format_args!("unsupported x402Version {n}")))
    }
}

/// A buyer's payment in either protocol version.
// One per paid request, moved rarely: boxing the larger variant would buy
// nothing but an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum PaymentPayload {
    /// A version 1 payment (`X-PAYMENT`).
    V1(v1::PaymentPayload),
    /// A version 2 payment (`PAYMENT-SIGNATURE`).
    V2(v2::PaymentPayload),
}

impl PaymentPayload {
    /// The payment's protocol version.
    pub fn version(&self) -> X402Version {
        match self {
            Self::V1(_) => X402Version::V1,
            Self::V2(_) => X402Version::V2,
        }
    }

    /// The scheme the buyer paid with.
    pub fn scheme(&self) -> &str {
        match self {
            Self::V1(p) => &p.scheme,
            Self::V2(p) => &p.accepted.scheme,
        }
    }

    /// The network as the payment names it (a v1 name or a CAIP-2 id).
    pub fn network(&self) -> &str {
        match self {
            Self::V1(p) => &p.network,
            Self::V2(p) => &p.accepted.network,
        }
    }

    /// The scheme-specific payload object.
    pub fn payload(&self) -> &Value {
        match self {
            Self::V1(p) => &p.payload,
            Self::V2(p) => &p.payload,
        }
    }

    /// Parses a payment from JSON, reading `x402Version` before the rest.
    pub fn from_json_slice(json: &[u8]) -> Result<Self, PayloadParseError> {
        #[derive(Deserialize)]
        struct Peek {
            #[serde(rename = "x402Version")]
            version: Option<Value>,
        }
        // A payment that starts with its version (as upstream's example
        // payments do) has it read from the first bytes instead of a pass
        // over the whole document (a document that also repeats the key
        // later is refused by the parse below, as by the peek).
        let version = match leading_version(json) {
            Some(version) => Some(version),
            None => {
                let peek: Peek = from_json_bytes(json).map_err(PayloadParseError::Json)?;
                match peek.version {
                    None => return Err(PayloadParseError::MissingVersion),
                    Some(Value::Number(n)) => n.as_u64(),
                    Some(_) => None,
                }
            }
        };
        match version.and_then(X402Version::from_number) {
            Some(X402Version::V1) => from_json_bytes(json)
                .map(Self::V1)
                .map_err(PayloadParseError::Json),
            Some(X402Version::V2) => from_json_bytes(json)
                .map(Self::V2)
                .map_err(PayloadParseError::Json),
            None => Err(PayloadParseError::UnsupportedVersion),
        }
    }

    /// Parses a payment from a JSON value, reading `x402Version` first.
    pub fn from_value(value: Value) -> Result<Self, PayloadParseError> {
        let version = value
            .get("x402Version")
            .ok_or(PayloadParseError::MissingVersion)?
            .as_u64()
            .and_then(X402Version::from_number)
            .ok_or(PayloadParseError::UnsupportedVersion)?;
        match version {
            X402Version::V1 => serde_json::from_value(value)
                .map(Self::V1)
                .map_err(PayloadParseError::Json),
            X402Version::V2 => serde_json::from_value(value)
                .map(Self::V2)
                .map_err(PayloadParseError::Json),
        }
    }
}

/// `N` when `json` starts with `{"x402Version":N,` for a one-digit `N`.
fn leading_version(json: &[u8]) -> Option<u64> {
    const PREFIX: &[u8] = b"{\"x402Version\":";
    match json.strip_prefix(PREFIX)? {
        [digit @ b'0'..=b'9', b',', ..] => Some(u64::from(digit - b'0')),
        _ => None,
    }
}

impl Serialize for PaymentPayload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::V1(p) => p.serialize(serializer),
            Self::V2(p) => p.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for PaymentPayload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_value(value).map_err(de::Error::custom)
    }
}

/// Why a JSON document is not a payment this crate understands.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadParseError {
    /// No `x402Version` field.
    #[error("payment has no x402Version")]
    MissingVersion,
    /// An `x402Version` other than 1 or 2.
    #[error("payment has an unsupported x402Version")]
    UnsupportedVersion,
    /// Not JSON, or JSON of the wrong shape.
    #[error("payment is not a valid x402 payload: {0}")]
    Json(#[source] serde_json::Error),
}

/// A seller's requirement in the shape of either protocol version: what is
/// sent to a facilitator along with a payment of the same version.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum PaymentRequirements {
    /// The version 1 shape (`maxAmountRequired`, `resource`, ...).
    V1(v1::PaymentRequirements),
    /// The version 2 shape (`amount`).
    V2(v2::PaymentRequirements),
}

impl PaymentRequirements {
    /// The scheme.
    pub fn scheme(&self) -> &str {
        match self {
            Self::V1(r) => &r.scheme,
            Self::V2(r) => &r.scheme,
        }
    }

    /// The network, in this version's naming.
    pub fn network(&self) -> &str {
        match self {
            Self::V1(r) => &r.network,
            Self::V2(r) => &r.network,
        }
    }

    /// The amount (`amount` in v2, `maxAmountRequired` in v1).
    pub fn amount(&self) -> AtomicAmount {
        match self {
            Self::V1(r) => r.max_amount_required,
            Self::V2(r) => r.amount,
        }
    }

    /// The asset.
    pub fn asset(&self) -> &str {
        match self {
            Self::V1(r) => &r.asset,
            Self::V2(r) => &r.asset,
        }
    }

    /// The recipient.
    pub fn pay_to(&self) -> &str {
        match self {
            Self::V1(r) => &r.pay_to,
            Self::V2(r) => &r.pay_to,
        }
    }

    /// The scheme's `extra` object (empty when absent).
    pub fn extra(&self) -> &JsonObject {
        static EMPTY: std::sync::OnceLock<JsonObject> = std::sync::OnceLock::new();
        match self {
            Self::V1(r) => r
                .extra
                .as_ref()
                .unwrap_or_else(|| EMPTY.get_or_init(JsonObject::new)),
            Self::V2(r) => &r.extra,
        }
    }

    /// The longest time, in seconds, the seller waits for the payment.
    pub fn max_timeout_seconds(&self) -> u64 {
        match self {
            Self::V1(r) => r.max_timeout_seconds,
            Self::V2(r) => r.max_timeout_seconds,
        }
    }

    /// A copy with the amount replaced (an `upto` charge).
    pub fn with_amount(&self, amount: AtomicAmount) -> Self {
        let mut copy = self.clone();
        match &mut copy {
            Self::V1(r) => r.max_amount_required = amount,
            Self::V2(r) => r.amount = amount,
        }
        copy
    }
}

impl Serialize for PaymentRequirements {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::V1(r) => r.serialize(serializer),
            Self::V2(r) => r.serialize(serializer),
        }
    }
}

/// The body of a facilitator's `POST /verify` and `POST /settle`.
///
/// The requirement is always in the payment's own version shape. It is
/// shared (an [`Arc`](std::sync::Arc)): the engine hands every payment of an
/// offer the same requirement instead of a copy; change one with
/// [`Arc::make_mut`](std::sync::Arc::make_mut), which copies it if it is
/// shared.
#[derive(Debug, Clone, PartialEq)]
pub struct FacilitatorRequest {
    /// The buyer's payment, exactly as it was sent.
    pub payment_payload: PaymentPayload,
    /// The seller's requirement the payment was matched to.
    pub payment_requirements: std::sync::Arc<PaymentRequirements>,
}

/// Whether a payment and a requirement are of one protocol version.
fn same_version(payment: &PaymentPayload, requirements: &PaymentRequirements) -> bool {
    matches!(
        (payment, requirements),
        (PaymentPayload::V1(_), PaymentRequirements::V1(_))
            | (PaymentPayload::V2(_), PaymentRequirements::V2(_))
    )
}

impl FacilitatorRequest {
    /// Pairs a payment with a requirement (owned or shared); `None` when
    /// their versions differ.
    pub fn new(
        payment_payload: PaymentPayload,
        payment_requirements: impl Into<std::sync::Arc<PaymentRequirements>>,
    ) -> Option<Self> {
        let payment_requirements = payment_requirements.into();
        same_version(&payment_payload, &payment_requirements).then(|| Self {
            payment_payload,
            payment_requirements,
        })
    }

    /// The protocol version of the pair.
    pub fn version(&self) -> X402Version {
        self.payment_payload.version()
    }
}

impl Serialize for FacilitatorRequest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire<'a> {
            x402_version: X402Version,
            payment_payload: &'a PaymentPayload,
            payment_requirements: &'a PaymentRequirements,
        }
        Wire {
            x402_version: self.version(),
            payment_payload: &self.payment_payload,
            payment_requirements: &self.payment_requirements,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for FacilitatorRequest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire {
            payment_payload: Value,
            payment_requirements: Value,
        }
        let wire = Wire::deserialize(deserializer)?;
        let payment_payload =
            PaymentPayload::from_value(wire.payment_payload).map_err(de::Error::custom)?;
        let payment_requirements = match payment_payload.version() {
            X402Version::V1 => PaymentRequirements::V1(
                serde_json::from_value(wire.payment_requirements).map_err(de::Error::custom)?,
            ),
            X402Version::V2 => PaymentRequirements::V2(
                serde_json::from_value(wire.payment_requirements).map_err(de::Error::custom)?,
            ),
        };
        Ok(Self {
            payment_payload,
            payment_requirements: std::sync::Arc::new(payment_requirements),
        })
    }
}

impl AsRef<FacilitatorRequest> for FacilitatorRequest {
    fn as_ref(&self) -> &FacilitatorRequest {
        self
    }
}

/// A [`FacilitatorRequest`] whose JSON body is written at most once, however
/// many times it is sent: the engine sends the same body to `/verify` and
/// then to `/settle`, and a facilitator that posts it
/// ([`HttpFacilitator`](crate::facilitator::HttpFacilitator)) reuses the
/// bytes through [`Facilitator::verify_prepared`] and
/// [`Facilitator::settle_prepared`].
///
/// It reads as the request it holds (it derefs to it) and cannot be changed,
/// so the body always says what the request says.
///
/// [`Facilitator::verify_prepared`]: crate::Facilitator::verify_prepared
/// [`Facilitator::settle_prepared`]: crate::Facilitator::settle_prepared
///
/// ```
/// # use x402_core::proto::{FacilitatorRequest, PreparedRequest};
/// # fn check(request: FacilitatorRequest) -> Result<(), serde_json::Error> {
/// let prepared = PreparedRequest::new(request.clone());
/// assert_eq!(*prepared, request);
/// assert_eq!(prepared.body()?, serde_json::to_vec(&request)?);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    request: FacilitatorRequest,
    body: std::sync::OnceLock<bytes::Bytes>,
    /// The payment's `payload` read as an EVM payment (`None`: it is
    /// not one), once for every reader: the engine's pre-check and the
    /// replay claim's key.
    evm: std::sync::OnceLock<Option<crate::evm::EvmPayload>>,
    /// The requirement's JSON, when it was written once for every request
    /// that shares it (the engine's offers).
    requirement_json: Option<std::sync::Arc<serde_json::value::RawValue>>,
}

impl PreparedRequest {
    /// Wraps `request`; its body is written when first asked for.
    pub fn new(request: FacilitatorRequest) -> Self {
        Self {
            request,
            body: std::sync::OnceLock::new(),
            evm: std::sync::OnceLock::new(),
            requirement_json: None,
        }
    }

    /// `payment` paired with a requirement written once: its body copies
    /// the requirement's JSON instead of writing it again. `None` when
    /// their versions differ. Built in its box, the payment copied once,
    /// from its box into the new one.
    pub(crate) fn with_written(
        payment: Box<PaymentPayload>,
        requirement: &WrittenRequirement,
    ) -> Option<Box<Self>> {
        if !same_version(&payment, &requirement.requirements) {
            return None;
        }
        Some(crate::boxed::boxed_value(|| Self {
            request: FacilitatorRequest {
                payment_payload: *payment,
                payment_requirements: requirement.requirements.clone(),
            },
            body: std::sync::OnceLock::new(),
            evm: std::sync::OnceLock::new(),
            requirement_json: requirement.json.clone(),
        }))
    }

    /// The payment's `payload` as an EIP-3009 or Permit2 payload, read on
    /// the first call; `None` when it is neither (whatever the network:
    /// callers check the network first).
    pub(crate) fn evm_payload(&self) -> Option<&crate::evm::EvmPayload> {
        self.evm
            .get_or_init(|| {
                crate::evm::EvmPayload::from_value(self.request.payment_payload.payload()).ok()
            })
            .as_ref()
    }

    /// The request.
    pub fn request(&self) -> &FacilitatorRequest {
        &self.request
    }

    /// The request back.
    pub fn into_request(self) -> FacilitatorRequest {
        self.request
    }

    /// The request's JSON body (`{"x402Version":…,"paymentPayload":…,
    /// "paymentRequirements":…}`), written on the first call and shared by
    /// every later one (a clone of [`Bytes`](bytes::Bytes) is a reference
    /// count).
    pub fn body(&self) -> Result<bytes::Bytes, serde_json::Error> {
        if let Some(body) = self.body.get() {
            return Ok(body.clone());
        }
        // A prepared body lives until the settlement ends, the handler's
        // run included: it holds what it uses, not the room it was written
        // in (see `json_body`).
        let body = match &self.requirement_json {
            Some(requirement) => json_body(&WrittenWire {
                request: &self.request,
                requirement,
            })?,
            None => json_body(&self.request)?,
        };
        Ok(self.body.get_or_init(|| body).clone())
    }
}

/// A request's JSON body (`body`), exactly its length: written into the thread's
/// scratch buffer, then copied once. A fresh vector would be
/// grown or over-reserved, and shrinking it reallocates; a body (1.3 to
/// 2 kB) is larger than glibc's allocator serves from the thread's own
/// cache, so each of those steps takes the arena's lock.
pub(crate) fn json_body<T: Serialize + ?Sized>(
    body: &T,
) -> Result<bytes::Bytes, serde_json::Error> {
    let body = SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut scratch) => {
            scratch.clear();
            let written = serde_json::to_writer(&mut *scratch, body);
            let out = written.map(|()| scratch.to_vec());
            if scratch.capacity() > SCRATCH_KEPT {
                // An unusually large request: its room is not kept.
                *scratch = Vec::new();
            }
            out
        }
        // Not reached (serialising a request writes no other request);
        // a fresh vector is as correct.
        Err(_) => serde_json::to_vec(body),
    })?;
    Ok(bytes::Bytes::from(body))
}

/// A requirement written as JSON once, for every facilitator request that
/// shares it: the engine keeps one per offer, beside the shared requirement
/// it hands to payments ([`PreparedRequest::with_written`]).
#[derive(Debug, Clone)]
pub(crate) struct WrittenRequirement {
    requirements: std::sync::Arc<PaymentRequirements>,
    /// `None` had it failed to write (a requirement always writes; then
    /// each body would write it again).
    json: Option<std::sync::Arc<serde_json::value::RawValue>>,
}

impl WrittenRequirement {
    /// `requirements` and its JSON.
    pub(crate) fn new(requirements: PaymentRequirements) -> Self {
        let json = serde_json::value::to_raw_value(&requirements).ok();
        Self {
            requirements: std::sync::Arc::new(requirements),
            json: json.map(Into::into),
        }
    }
}

/// A facilitator request's body with its requirement already written: the
/// same JSON as [`FacilitatorRequest`]'s own `Serialize`, in the same order
/// (`proto::tests` compares the two), with the requirement's JSON copied,
/// and copied as well for the payment's `accepted` when it is the same
/// requirement, field for field and in the same order (as buyers echo it).
struct WrittenWire<'a> {
    request: &'a FacilitatorRequest,
    requirement: &'a serde_json::value::RawValue,
}

impl Serialize for WrittenWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut wire = serializer.serialize_struct("Wire", 3)?;
        wire.serialize_field("x402Version", &self.request.version())?;
        match (
            &self.request.payment_payload,
            &*self.request.payment_requirements,
        ) {
            (PaymentPayload::V2(payment), PaymentRequirements::V2(requirement))
                if same_requirement(&payment.accepted, requirement) =>
            {
                wire.serialize_field(
                    "paymentPayload",
                    &AcceptedWritten {
                        payment,
                        accepted: self.requirement,
                    },
                )?;
            }
            (payment, _) => wire.serialize_field("paymentPayload", payment)?,
        }
        wire.serialize_field("paymentRequirements", self.requirement)?;
        wire.end()
    }
}

/// A version 2 payment whose `accepted` is written already: the fields of
/// `v2::PaymentPayload`'s derived `Serialize`, in its order.
struct AcceptedWritten<'a> {
    payment: &'a v2::PaymentPayload,
    accepted: &'a serde_json::value::RawValue,
}

impl Serialize for AcceptedWritten<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        // Every field named: a field added to the payment fails to compile
        // here until it is written here too.
        let v2::PaymentPayload {
            x402_version,
            resource,
            accepted: _,
            payload,
            extensions,
            other,
        } = self.payment;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("x402Version", x402_version)?;
        if let Some(resource) = resource {
            map.serialize_entry("resource", resource)?;
        }
        map.serialize_entry("accepted", self.accepted)?;
        map.serialize_entry("payload", payload)?;
        if let Some(extensions) = extensions {
            map.serialize_entry("extensions", extensions)?;
        }
        for (key, value) in other {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// Whether `a` is `b` written the same way: equal, and with the keys of
/// their objects in the same order (equal JSON maps may differ in order).
/// Compared pair by pair in order, which hashes no key (map equality looks
/// every key up).
fn same_requirement(a: &v2::PaymentRequirements, b: &v2::PaymentRequirements) -> bool {
    // Every field named, so that a new one cannot be left out.
    let v2::PaymentRequirements {
        scheme,
        network,
        amount,
        asset,
        pay_to,
        max_timeout_seconds,
        extra,
        other,
    } = a;
    *scheme == b.scheme
        && *network == b.network
        && *amount == b.amount
        && *asset == b.asset
        && *pay_to == b.pay_to
        && *max_timeout_seconds == b.max_timeout_seconds
        && same_written(extra, &b.extra)
        && same_written(other, &b.other)
}

/// Whether two objects have the same keys in the same order with values
/// written the same way, nested objects included.
fn same_written(a: &JsonObject, b: &JsonObject) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, va), (kb, vb))| ka == kb && same_value_written(va, vb))
}

fn same_value_written(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => same_written(a, b),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b.iter())
                    .all(|(a, b)| same_value_written(a, b))
        }
        _ => a == b,
    }
}

thread_local! {
    /// Where [`json_body`] writes, per thread.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The most room a thread's scratch buffer keeps between requests.
const SCRATCH_KEPT: usize = 64 * 1024;

impl std::ops::Deref for PreparedRequest {
    type Target = FacilitatorRequest;

    fn deref(&self) -> &FacilitatorRequest {
        &self.request
    }
}

impl AsRef<FacilitatorRequest> for PreparedRequest {
    fn as_ref(&self) -> &FacilitatorRequest {
        &self.request
    }
}

impl From<FacilitatorRequest> for PreparedRequest {
    fn from(request: FacilitatorRequest) -> Self {
        Self::new(request)
    }
}

/// A facilitator's answer to `POST /verify`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    /// Whether the payment is valid for the requirement.
    pub is_valid: bool,
    /// A machine-readable reason when it is not (treat as an opaque code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<String>,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_message: Option<String>,
    /// The paying address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// Per-extension results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<JsonObject>,
    /// Scheme-specific extra data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<JsonObject>,
}

impl VerifyResponse {
    /// A valid verdict for `payer`.
    pub fn valid(payer: impl Into<String>) -> Self {
        Self {
            is_valid: true,
            payer: Some(payer.into()),
            ..Self::default()
        }
    }

    /// An invalid verdict with a reason code.
    pub fn invalid(reason: impl Into<String>, payer: Option<String>) -> Self {
        Self {
            is_valid: false,
            invalid_reason: Some(reason.into()),
            payer,
            ..Self::default()
        }
    }
}

/// A facilitator's answer to `POST /settle`, and the content of the
/// `PAYMENT-RESPONSE` / `X-PAYMENT-RESPONSE` receipt headers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    /// Whether the transfer happened.
    pub success: bool,
    /// A machine-readable reason on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    /// Human-readable detail on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// The paying address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// Transaction hash or signature; `""` on failure or for a zero charge.
    #[serde(default)]
    pub transaction: String,
    /// The network, in the version's naming.
    pub network: String,
    /// The amount actually settled (always set for `upto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<AtomicAmount>,
    /// Per-extension results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<JsonObject>,
    /// Scheme-specific extra data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<JsonObject>,
    /// The facilitator's extension outcomes from its `EXTENSION-RESPONSES`
    /// header (base64 JSON keyed by extension), for the seller's hooks
    /// only. Never serialised: the receipt the buyer gets
    /// (`PAYMENT-RESPONSE`) carries [`extensions`](Self::extensions), never
    /// this (upstream `bazaar.md`, "Verify and Settlement Response
    /// Sidechannel").
    #[serde(skip)]
    pub extension_responses: Option<Box<JsonObject>>,
}

impl SettleResponse {
    /// A failed settlement on `network` with a reason code.
    pub fn failure(network: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            success: false,
            error_reason: Some(reason.into()),
            network: network.into(),
            ..Self::default()
        }
    }
}

/// One `(version, scheme, network)` a facilitator handles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedKind {
    /// The protocol version.
    pub x402_version: X402Version,
    /// The scheme.
    pub scheme: String,
    /// The network: a v1 name for v1 kinds, CAIP-2 for v2 kinds.
    pub network: String,
    /// Values sellers copy into their requirements (`feePayer`,
    /// `facilitatorAddress`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<JsonObject>,
}

/// A facilitator's answer to `GET /supported`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedResponse {
    /// What it handles.
    pub kinds: Vec<SupportedKind>,
    /// Facilitator-side extension keys.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// Signer addresses by CAIP family pattern (`"eip155:*"`).
    #[serde(default)]
    pub signers: std::collections::BTreeMap<String, Vec<String>>,
}

impl SupportedResponse {
    /// Adds `other`'s kinds that `keep` accepts and that are not listed yet
    /// (same version, scheme and network, compared by CAIP-2 id), and the
    /// union of its extensions and signers: several facilitators' answers
    /// as one, the first listing of a kind winning.
    pub(crate) fn absorb(
        &mut self,
        other: SupportedResponse,
        keep: impl Fn(&SupportedKind) -> bool,
    ) {
        for kind in other.kinds {
            let duplicate = self.kinds.iter().any(|k| {
                k.x402_version == kind.x402_version
                    && k.scheme == kind.scheme
                    && crate::network::canonical(&k.network)
                        == crate::network::canonical(&kind.network)
            });
            if !duplicate && keep(&kind) {
                self.kinds.push(kind);
            }
        }
        for extension in other.extensions {
            if !self.extensions.contains(&extension) {
                self.extensions.push(extension);
            }
        }
        for (family, signers) in other.signers {
            let list = self.signers.entry(family).or_default();
            for signer in signers {
                if !list.contains(&signer) {
                    list.push(signer);
                }
            }
        }
    }

    /// The kind for `(version, scheme, network)`, matching the network exactly
    /// or through a family wildcard such as `eip155:*`.
    pub fn kind(
        &self,
        version: X402Version,
        scheme: &str,
        network: &str,
    ) -> Option<&SupportedKind> {
        self.kinds.iter().find(|k| {
            k.x402_version == version
                && k.scheme == scheme
                && crate::network::pattern_matches(&k.network, network)
        })
    }
}

#[cfg(test)]
mod tests;
