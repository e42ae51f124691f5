//! EVM payments: the `payload` of an x402 `exact` (or `upto`) payment on an
//! `eip155:*` network, its EIP-712 signing hashes, signer recovery and the
//! keys that replay protection claims.
//!
//! A client pays in one of two ways, told apart by the payload's shape:
//!
//! | Payload key | Method | What was signed |
//! |---|---|---|
//! | `authorization` | [EIP-3009] `transferWithAuthorization` | `TransferWithAuthorization`, in the token's own domain ([`eip3009_domain`]) |
//! | `permit2Authorization` | [Permit2] through the x402 proxy | `PermitWitnessTransferFrom` with a `Witness`, in Permit2's domain ([`permit2_domain`]) |
//!
//! [`EvmPayload::from_value`] parses either. Addresses are accepted in any
//! case and written back in their [EIP-55] checksum form; integers are written
//! as decimal strings.
//!
//! ```
//! use x402_core::evm::{eip3009_domain, EvmPayload};
//!
//! let payload: serde_json::Value = serde_json::from_str(r#"{
//!   "signature": "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c",
//!   "authorization": {
//!     "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
//!     "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
//!     "value": "10000",
//!     "validAfter": "1740672089",
//!     "validBefore": "1740672154",
//!     "nonce": "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
//!   }
//! }"#)?;
//! let EvmPayload::Eip3009(exact) = EvmPayload::from_value(&payload)? else {
//!     return Err("expected an EIP-3009 payload".into());
//! };
//! let usdc = "0x036CbD53842c5426634e7929541eC2318f3dCF7e".parse()?;
//! let domain = eip3009_domain("USDC", "2", 84532, usdc);
//! assert_eq!(exact.recover_signer(&domain)?, exact.authorization.from);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [EIP-3009]: https://eips.ethereum.org/EIPS/eip-3009
//! [Permit2]: https://github.com/Uniswap/permit2
//! [EIP-55]: https://eips.ethereum.org/EIPS/eip-55

use alloy_primitives::{address, Address, Bytes};
use serde::{Deserialize, Deserializer, Serialize};

pub(crate) mod check;
mod claim_key;
mod eip3009;
mod permit2;
pub mod reason;
mod signature;
#[cfg(test)]
mod test_signer;
mod wire;

use claim_key::ClaimKeyWriter;

pub use eip3009::{
    eip3009_claim_expiry, eip3009_claim_key, eip3009_domain, Eip3009Authorization, ExactEvmPayload,
};
pub use permit2::{
    permit2_claim_expiry, permit2_claim_key, permit2_domain, Permit2Authorization, Permit2Payload,
    Permit2Witness, TokenPermissions,
};
pub use signature::{recover_signer, SignatureError};

/// The canonical Uniswap Permit2 contract, at the same address on every EVM
/// chain. It is the `verifyingContract` of every Permit2 signature.
pub const PERMIT2_ADDRESS: Address = address!("000000000022D473030F116dDEE9F6B43aC78BA3");

/// The x402 proxy that is the Permit2 `spender` for the `exact` scheme
/// (`x402ExactPermit2Proxy`): it transfers exactly the permitted amount.
pub const EXACT_PERMIT2_PROXY: Address = address!("402085c248EeA27D92E8b30b2C58ed07f9E20001");

/// The x402 proxy that is the Permit2 `spender` for the `upto` scheme
/// (`x402UptoPermit2Proxy`): the facilitator named in the witness may transfer
/// up to the permitted amount.
pub const UPTO_PERMIT2_PROXY: Address = address!("4020A4f3b7b90ccA423B9fabCc0CE57C6C240002");

/// The `payload` of an EVM payment, in either of its two shapes.
///
/// It serialises as the inner payload (no tag); it deserialises from either
/// shape, as [`EvmPayload::from_value`] does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum EvmPayload {
    /// An EIP-3009 `transferWithAuthorization` (the payload has `authorization`).
    Eip3009(ExactEvmPayload),
    /// A Permit2 witness transfer (the payload has `permit2Authorization`).
    Permit2(Permit2Payload),
}

impl EvmPayload {
    /// Parses a payment's `payload` object, choosing the shape by whether it
    /// has an `authorization` (EIP-3009) or a `permit2Authorization` (Permit2)
    /// key; a key whose value is `null` counts as absent. Unknown keys are
    /// ignored.
    pub fn from_value(value: &serde_json::Value) -> Result<Self, EvmPayloadError> {
        let object = value.as_object().ok_or(EvmPayloadError::NotAnObject)?;
        let has = |key: &str| crate::proto::has_field(object, key);
        match (has("authorization"), has("permit2Authorization")) {
            (true, false) => ExactEvmPayload::deserialize(value)
                .map(Self::Eip3009)
                .map_err(EvmPayloadError::InvalidEip3009),
            (false, true) => Permit2Payload::deserialize(value)
                .map(Self::Permit2)
                .map_err(EvmPayloadError::InvalidPermit2),
            (true, true) => Err(EvmPayloadError::AmbiguousAuthorization),
            (false, false) => Err(EvmPayloadError::MissingAuthorization),
        }
    }

    /// The payer: the address whose tokens move and who must have signed.
    pub fn payer(&self) -> Address {
        match self {
            Self::Eip3009(p) => p.authorization.from,
            Self::Permit2(p) => p.permit2_authorization.from,
        }
    }

    /// The signature as sent.
    pub fn signature(&self) -> &Bytes {
        match self {
            Self::Eip3009(p) => &p.signature,
            Self::Permit2(p) => &p.signature,
        }
    }

    /// The replay-protection key of this payment on `network` (a CAIP-2 id
    /// such as `eip155:8453`) for the token `asset`; see [`eip3009_claim_key`]
    /// and [`permit2_claim_key`] (which ignores `asset`: Permit2 nonces are per
    /// owner, across tokens).
    pub fn claim_key(&self, network: &str, asset: &Address) -> String {
        match self {
            Self::Eip3009(p) => eip3009_claim_key(network, asset, &p.authorization),
            Self::Permit2(p) => permit2_claim_key(network, &p.permit2_authorization),
        }
    }

    /// The unix time in seconds after which the signature can no longer be
    /// used, so the claim on [`claim_key`](Self::claim_key) may be dropped;
    /// see [`eip3009_claim_expiry`] and [`permit2_claim_expiry`].
    pub fn claim_expiry(&self) -> Option<u64> {
        match self {
            Self::Eip3009(p) => eip3009_claim_expiry(&p.authorization),
            Self::Permit2(p) => permit2_claim_expiry(&p.permit2_authorization),
        }
    }
}

impl From<ExactEvmPayload> for EvmPayload {
    fn from(payload: ExactEvmPayload) -> Self {
        Self::Eip3009(payload)
    }
}

impl From<Permit2Payload> for EvmPayload {
    fn from(payload: Permit2Payload) -> Self {
        Self::Permit2(payload)
    }
}

impl TryFrom<&serde_json::Value> for EvmPayload {
    type Error = EvmPayloadError;

    fn try_from(value: &serde_json::Value) -> Result<Self, Self::Error> {
        Self::from_value(value)
    }
}

impl<'de> Deserialize<'de> for EvmPayload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Self::from_value(&value).map_err(|e| match std::error::Error::source(&e) {
            Some(source) => serde::de::Error::custom(format_args!("{e}: {source}")),
            None => serde::de::Error::custom(e),
        })
    }
}

/// Why a `payload` object is not an EVM payment payload.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvmPayloadError {
    /// The payload is not a JSON object.
    #[error("EVM payment payload is not a JSON object")]
    NotAnObject,
    /// The payload has neither `authorization` nor `permit2Authorization`.
    #[error(
        "EVM payment payload has neither `authorization` (EIP-3009) \
         nor `permit2Authorization` (Permit2)"
    )]
    MissingAuthorization,
    /// The payload has both `authorization` and `permit2Authorization`.
    #[error("EVM payment payload has both `authorization` and `permit2Authorization`")]
    AmbiguousAuthorization,
    /// The payload has an `authorization` but is not a valid EIP-3009 payload.
    #[error("invalid EIP-3009 payment payload")]
    InvalidEip3009(#[source] serde_json::Error),
    /// The payload has a `permit2Authorization` but is not a valid Permit2 payload.
    #[error("invalid Permit2 payment payload")]
    InvalidPermit2(#[source] serde_json::Error),
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use alloy_primitives::U256;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    use super::*;
    use crate::money::AtomicAmount;

    pub(super) const EIP3009_JSON: &str = r#"{"signature":"0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c","authorization":{"from":"0x857b06519E91e3A54538791bDbb0E22373e36b66","to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000","validAfter":"1740672089","validBefore":"1740672154","nonce":"0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"}}"#;

    pub(super) const PERMIT2_JSON: &str = r#"{"signature":"0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c","permit2Authorization":{"from":"0x857b06519E91e3A54538791bDbb0E22373e36b66","permitted":{"token":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","amount":"1000000"},"spender":"0x402085c248EeA27D92E8b30b2C58ed07f9E20001","nonce":"1","deadline":"9999999999","witness":{"to":"0x9876543210987654321098765432109876543210","validAfter":"0"}}}"#;

    #[test]
    fn constants_are_the_checksummed_addresses() {
        assert_eq!(
            PERMIT2_ADDRESS.to_checksum(None),
            "0x000000000022D473030F116dDEE9F6B43aC78BA3"
        );
        assert_eq!(
            EXACT_PERMIT2_PROXY.to_checksum(None),
            "0x402085c248EeA27D92E8b30b2C58ed07f9E20001"
        );
        assert_eq!(
            UPTO_PERMIT2_PROXY.to_checksum(None),
            "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002"
        );
    }

    #[test]
    fn parses_eip3009_payload_by_shape() {
        let value: Value = serde_json::from_str(EIP3009_JSON).unwrap();
        let payload = EvmPayload::from_value(&value).unwrap();
        let EvmPayload::Eip3009(exact) = &payload else {
            panic!("expected EIP-3009, got {payload:?}");
        };
        assert_eq!(exact.authorization.value, AtomicAmount::from(10_000u64));
        assert_eq!(
            exact.authorization.valid_after,
            U256::from(1_740_672_089u64)
        );
        assert_eq!(
            exact.authorization.valid_before,
            U256::from(1_740_672_154u64)
        );
        assert_eq!(exact.signature.len(), 65);
        assert_eq!(
            payload.payer(),
            "0x857b06519E91e3A54538791bDbb0E22373e36b66"
                .parse::<Address>()
                .unwrap()
        );
        assert_eq!(payload.signature(), &exact.signature);
        assert_eq!(payload.claim_expiry(), Some(1_740_672_154));
        // Serialises back to the same JSON value, with no tag.
        assert_eq!(serde_json::to_value(&payload).unwrap(), value);
        // `Deserialize` agrees with `from_value`.
        assert_eq!(
            serde_json::from_str::<EvmPayload>(EIP3009_JSON).unwrap(),
            payload
        );
        assert_eq!(EvmPayload::try_from(&value).unwrap(), payload);
    }

    #[test]
    fn parses_permit2_payload_by_shape() {
        let value: Value = serde_json::from_str(PERMIT2_JSON).unwrap();
        let payload = EvmPayload::from_value(&value).unwrap();
        let EvmPayload::Permit2(p) = &payload else {
            panic!("expected Permit2, got {payload:?}");
        };
        assert_eq!(p.permit2_authorization.spender, EXACT_PERMIT2_PROXY);
        assert_eq!(p.permit2_authorization.nonce, U256::from(1u8));
        assert_eq!(p.permit2_authorization.witness.facilitator, None);
        assert_eq!(payload.claim_expiry(), Some(9_999_999_999));
        assert_eq!(serde_json::to_value(&payload).unwrap(), value);
        assert_eq!(
            serde_json::from_str::<EvmPayload>(PERMIT2_JSON).unwrap(),
            payload
        );
    }

    #[test]
    fn unknown_keys_are_ignored() {
        let mut value: Value = serde_json::from_str(EIP3009_JSON).unwrap();
        value["assetTransferMethod"] = json!("eip3009");
        value["permit2Authorization"] = Value::Null;
        value["authorization"]["extra"] = json!({"anything": [1, 2, 3]});
        assert!(matches!(
            EvmPayload::from_value(&value),
            Ok(EvmPayload::Eip3009(_))
        ));

        let mut value: Value = serde_json::from_str(PERMIT2_JSON).unwrap();
        value["permit2Authorization"]["witness"]["extra"] = json!("0x");
        assert!(matches!(
            EvmPayload::from_value(&value),
            Ok(EvmPayload::Permit2(_))
        ));
    }

    #[test]
    fn shape_errors_are_typed() {
        assert!(matches!(
            EvmPayload::from_value(&json!([1, 2])),
            Err(EvmPayloadError::NotAnObject)
        ));
        assert!(matches!(
            EvmPayload::from_value(&json!({"signature": "0x"})),
            Err(EvmPayloadError::MissingAuthorization)
        ));
        assert!(matches!(
            EvmPayload::from_value(&json!({"authorization": {}, "permit2Authorization": {}})),
            Err(EvmPayloadError::AmbiguousAuthorization)
        ));
        assert!(matches!(
            EvmPayload::from_value(&json!({"authorization": null, "permit2Authorization": 1})),
            Err(EvmPayloadError::InvalidPermit2(_))
        ));
        let err =
            EvmPayload::from_value(&json!({"signature": "0x", "authorization": {}})).unwrap_err();
        assert!(matches!(err, EvmPayloadError::InvalidEip3009(_)));
        assert!(err.source().is_some());
        assert!(matches!(
            EvmPayload::from_value(&json!({"signature": "0x", "permit2Authorization": 7})),
            Err(EvmPayloadError::InvalidPermit2(_))
        ));
        assert!(serde_json::from_str::<EvmPayload>("{}").is_err());
        // Through `Deserialize`, the message keeps serde's detail.
        let err = serde_json::from_str::<EvmPayload>(r#"{"authorization": {}}"#).unwrap_err();
        assert!(err.to_string().contains("missing field"), "{err}");
    }

    #[test]
    fn claim_key_dispatches_on_shape() {
        let asset: Address = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
            .parse()
            .unwrap();
        let exact: EvmPayload = serde_json::from_str(EIP3009_JSON).unwrap();
        assert_eq!(
            exact.claim_key("eip155:84532", &asset),
            "x402:eip155:84532:0x036cbd53842c5426634e7929541ec2318f3dcf7e:\
             0x857b06519e91e3a54538791bdbb0e22373e36b66:\
             0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
        );
        let permit2: EvmPayload = serde_json::from_str(PERMIT2_JSON).unwrap();
        assert_eq!(
            permit2.claim_key("eip155:84532", &asset),
            "x402:eip155:84532:permit2:0x857b06519e91e3a54538791bdbb0e22373e36b66:1"
        );
    }

    #[test]
    fn typed_payloads_convert_into_the_enum() {
        let exact: ExactEvmPayload = serde_json::from_str(EIP3009_JSON).unwrap();
        assert!(matches!(EvmPayload::from(exact), EvmPayload::Eip3009(_)));
        let permit2: Permit2Payload = serde_json::from_str(PERMIT2_JSON).unwrap();
        assert!(matches!(EvmPayload::from(permit2), EvmPayload::Permit2(_)));
    }

    /// Arbitrary JSON, biased towards the keys and string shapes of the
    /// payloads so that parsing gets deep.
    fn arb_json() -> impl Strategy<Value = Value> {
        let key = prop::sample::select(vec![
            "signature",
            "authorization",
            "permit2Authorization",
            "from",
            "to",
            "value",
            "validAfter",
            "validBefore",
            "nonce",
            "permitted",
            "token",
            "amount",
            "spender",
            "deadline",
            "witness",
            "facilitator",
            "x",
        ]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[0-9]{0,80}".prop_map(Value::String),
            "0x[0-9a-fA-F]{0,140}".prop_map(Value::String),
            ".{0,20}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((key.clone(), inner), 0..8).prop_map(|entries| {
                    Value::Object(
                        entries
                            .into_iter()
                            .map(|(k, v)| (k.to_owned(), v))
                            .collect(),
                    )
                }),
            ]
        })
    }

    proptest! {
        #[test]
        fn parsing_arbitrary_json_never_panics(value in arb_json()) {
            if let Ok(payload) = EvmPayload::from_value(&value) {
                let _ = payload.claim_key("eip155:1", &Address::ZERO);
                let _ = payload.claim_expiry();
                let _ = serde_json::to_value(&payload);
            }
            let _ = serde_json::from_value::<ExactEvmPayload>(value.clone());
            let _ = serde_json::from_value::<Permit2Payload>(value.clone());
            let _ = serde_json::from_value::<Eip3009Authorization>(value.clone());
            let _ = serde_json::from_value::<Permit2Authorization>(value);
        }

        #[test]
        fn parsing_arbitrary_bytes_never_panics(
            bytes in prop::collection::vec(any::<u8>(), 0..512),
        ) {
            let _ = serde_json::from_slice::<EvmPayload>(&bytes);
            let _ = serde_json::from_slice::<ExactEvmPayload>(&bytes);
            let _ = serde_json::from_slice::<Permit2Payload>(&bytes);
        }

        #[test]
        fn mutated_payloads_never_panic(index in 0usize..600, byte in any::<u8>()) {
            for json in [EIP3009_JSON, PERMIT2_JSON] {
                let mut bytes = json.as_bytes().to_vec();
                let i = index % bytes.len();
                bytes[i] = byte;
                if let Ok(payload) = serde_json::from_slice::<EvmPayload>(&bytes) {
                    let _ = payload.claim_key("eip155:1", &Address::ZERO);
                }
            }
        }
    }
}
