//! Permit2 witness-transfer payloads (through the x402 Permit2 proxies).

use std::borrow::Cow;

use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_sol_types::{Eip712Domain, SolStruct};
use serde::{Deserialize, Serialize};

use super::{
    signature::{recover_signer, SignatureError},
    wire, PERMIT2_ADDRESS,
};
use crate::money::AtomicAmount;

/// The `exact` scheme's types: `Witness(address to,uint256 validAfter)`.
mod exact_sol {
    alloy_sol_types::sol! {
        struct TokenPermissions {
            address token;
            uint256 amount;
        }

        struct Witness {
            address to;
            uint256 validAfter;
        }

        struct PermitWitnessTransferFrom {
            TokenPermissions permitted;
            address spender;
            uint256 nonce;
            uint256 deadline;
            Witness witness;
        }
    }
}

/// The `upto` scheme's types: the witness also names the facilitator allowed
/// to settle, `Witness(address to,address facilitator,uint256 validAfter)`.
mod upto_sol {
    alloy_sol_types::sol! {
        struct TokenPermissions {
            address token;
            uint256 amount;
        }

        struct Witness {
            address to;
            address facilitator;
            uint256 validAfter;
        }

        struct PermitWitnessTransferFrom {
            TokenPermissions permitted;
            address spender;
            uint256 nonce;
            uint256 deadline;
            Witness witness;
        }
    }
}

/// The `payload` of an EVM payment made with a Permit2 witness transfer.
///
/// On the wire: `{"signature": "0x…", "permit2Authorization": {…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2Payload {
    /// The payer's signature over the permit (65 bytes for an externally owned
    /// account; longer for a smart wallet).
    #[serde(with = "wire::prefixed_hex")]
    pub signature: Bytes,
    /// What the payer permitted.
    pub permit2_authorization: Permit2Authorization,
}

impl Permit2Payload {
    /// Recovers who signed the permit on `chain_id`. The payment is the
    /// payer's only if this equals `permit2_authorization.from`.
    pub fn recover_signer(&self, chain_id: u64) -> Result<Address, SignatureError> {
        recover_signer(
            self.permit2_authorization.signing_hash(chain_id),
            &self.signature,
        )
    }
}

/// The parameters of a Permit2 `PermitWitnessTransferFrom`, plus the payer.
///
/// `nonce`, `deadline` and `witness.validAfter` are read from decimal or
/// `0x`-hex strings and written as decimal strings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2Authorization {
    /// The payer (the permit's owner; not part of the signed message).
    #[serde(with = "wire::checksummed")]
    pub from: Address,
    /// The token and the (maximum) amount.
    pub permitted: TokenPermissions,
    /// Who may execute the transfer: [`EXACT_PERMIT2_PROXY`] or
    /// [`UPTO_PERMIT2_PROXY`].
    ///
    /// [`EXACT_PERMIT2_PROXY`]: super::EXACT_PERMIT2_PROXY
    /// [`UPTO_PERMIT2_PROXY`]: super::UPTO_PERMIT2_PROXY
    #[serde(with = "wire::checksummed")]
    pub spender: Address,
    /// Permit2's unordered nonce, unique per owner across all tokens.
    #[serde(with = "crate::money::decimal_or_hex")]
    pub nonce: U256,
    /// Unix time (seconds) after which Permit2 refuses the signature.
    #[serde(with = "crate::money::decimal_or_hex")]
    pub deadline: U256,
    /// What the x402 proxy checks on top: recipient, start time and, for
    /// `upto`, the facilitator.
    pub witness: Permit2Witness,
}

/// Permit2's `TokenPermissions`: which token, and how much of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenPermissions {
    /// The ERC-20 token.
    #[serde(with = "wire::checksummed")]
    pub token: Address,
    /// The amount in the token's atomic units (the maximum, for `upto`).
    pub amount: AtomicAmount,
}

/// The x402 witness bound into a Permit2 signature.
///
/// With `facilitator` unset it is the `exact` scheme's
/// `Witness(address to,uint256 validAfter)`; with it set, the `upto` scheme's
/// `Witness(address to,address facilitator,uint256 validAfter)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2Witness {
    /// The recipient (the seller's `payTo`).
    #[serde(with = "wire::checksummed")]
    pub to: Address,
    /// The facilitator allowed to settle (the `upto` scheme only).
    #[serde(
        with = "wire::checksummed_opt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub facilitator: Option<Address>,
    /// Unix time (seconds) after which the transfer may happen.
    #[serde(with = "crate::money::decimal_or_hex")]
    pub valid_after: U256,
}

impl Permit2Authorization {
    fn to_exact_sol(&self) -> exact_sol::PermitWitnessTransferFrom {
        exact_sol::PermitWitnessTransferFrom {
            permitted: exact_sol::TokenPermissions {
                token: self.permitted.token,
                amount: self.permitted.amount.get(),
            },
            spender: self.spender,
            nonce: self.nonce,
            deadline: self.deadline,
            witness: exact_sol::Witness {
                to: self.witness.to,
                validAfter: self.witness.valid_after,
            },
        }
    }

    fn to_upto_sol(&self, facilitator: Address) -> upto_sol::PermitWitnessTransferFrom {
        upto_sol::PermitWitnessTransferFrom {
            permitted: upto_sol::TokenPermissions {
                token: self.permitted.token,
                amount: self.permitted.amount.get(),
            },
            spender: self.spender,
            nonce: self.nonce,
            deadline: self.deadline,
            witness: upto_sol::Witness {
                to: self.witness.to,
                facilitator,
                validAfter: self.witness.valid_after,
            },
        }
    }

    /// The EIP-712 `hashStruct` of the `PermitWitnessTransferFrom` message,
    /// with the `upto` witness when `witness.facilitator` is set and the
    /// `exact` one otherwise.
    pub fn struct_hash(&self) -> B256 {
        match self.witness.facilitator {
            None => self.to_exact_sol().eip712_hash_struct(),
            Some(facilitator) => self.to_upto_sol(facilitator).eip712_hash_struct(),
        }
    }

    /// The EIP-712 digest the payer signed on `chain_id`, in Permit2's domain
    /// (see [`permit2_domain`]); the witness type is chosen as in
    /// [`struct_hash`](Self::struct_hash).
    pub fn signing_hash(&self, chain_id: u64) -> B256 {
        let domain = permit2_domain(chain_id);
        match self.witness.facilitator {
            None => self.to_exact_sol().eip712_signing_hash(&domain),
            Some(facilitator) => self.to_upto_sol(facilitator).eip712_signing_hash(&domain),
        }
    }
}

/// Permit2's EIP-712 domain on `chain_id`: `{name: "Permit2", chainId,
/// verifyingContract: PERMIT2_ADDRESS}`, with no version.
pub fn permit2_domain(chain_id: u64) -> Eip712Domain {
    Eip712Domain::new(
        Some(Cow::Borrowed("Permit2")),
        None,
        Some(U256::from(chain_id)),
        Some(PERMIT2_ADDRESS),
        None,
    )
}

/// The replay-protection key of a Permit2 authorization:
/// `x402:{network}:permit2:{from}:{nonce}`, `from` lowercase `0x`-hex and the
/// nonce a decimal integer.
///
/// Permit2 spends each `(owner, nonce)` once across all tokens and spenders,
/// so the token is not part of the key; and since the nonce is keyed as a
/// number, `"1"`, `"01"` and `"0x1"` name one payment.
pub fn permit2_claim_key(network: &str, auth: &Permit2Authorization) -> String {
    let mut key = super::ClaimKeyWriter::new(network, 10 + 2 + 40 + 1 + 78);
    key.text("permit2");
    key.hex(auth.from.as_slice());
    key.decimal(&auth.nonce);
    key.finish()
}

/// How long a claim on [`permit2_claim_key`] must be kept: until the permit's
/// `deadline` (unix seconds), after which Permit2 refuses the signature.
///
/// `None` when the deadline does not fit in a `u64`, i.e. the permit never
/// expires in practice: keep the claim for good, or refuse the payment.
pub fn permit2_claim_expiry(auth: &Permit2Authorization) -> Option<u64> {
    u64::try_from(auth.deadline).ok()
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{address, b256, keccak256};
    use proptest::prelude::*;

    use super::*;
    use crate::evm::{test_signer::TestSigner, EXACT_PERMIT2_PROXY, UPTO_PERMIT2_PROXY};

    const TOKEN: Address = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
    const PAYER: Address = address!("857b06519E91e3A54538791bDbb0E22373e36b66");

    /// The cross-SDK vector.
    fn vector() -> Permit2Authorization {
        Permit2Authorization {
            from: PAYER,
            permitted: TokenPermissions {
                token: TOKEN,
                amount: AtomicAmount::from(1_000_000u64),
            },
            spender: EXACT_PERMIT2_PROXY,
            nonce: U256::from(1u8),
            deadline: U256::from(9_999_999_999u64),
            witness: Permit2Witness {
                to: address!("9876543210987654321098765432109876543210"),
                facilitator: None,
                valid_after: U256::ZERO,
            },
        }
    }

    #[test]
    fn witness_type_hashes() {
        let exact = exact_sol::Witness::eip712_encode_type();
        assert_eq!(exact, "Witness(address to,uint256 validAfter)");
        assert_eq!(
            keccak256(exact.as_bytes()),
            b256!("d97b3239a7f32295517bd14cb074edfdd188dfe5eb42f802bb26d4fd1eb12c37")
        );
        let upto = upto_sol::Witness::eip712_encode_type();
        assert_eq!(
            upto,
            "Witness(address to,address facilitator,uint256 validAfter)"
        );
        assert_eq!(
            keccak256(upto.as_bytes()),
            b256!("d4171c445a74218b01d4fd8af34ff1106580ea1e36ff837e64484bfaa2253b75")
        );
    }

    #[test]
    fn full_type_strings_list_referenced_types_alphabetically() {
        assert_eq!(
            exact_sol::PermitWitnessTransferFrom::eip712_encode_type(),
            "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,\
             uint256 nonce,uint256 deadline,Witness witness)\
             TokenPermissions(address token,uint256 amount)\
             Witness(address to,uint256 validAfter)"
        );
        assert_eq!(
            upto_sol::PermitWitnessTransferFrom::eip712_encode_type(),
            "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,\
             uint256 nonce,uint256 deadline,Witness witness)\
             TokenPermissions(address token,uint256 amount)\
             Witness(address to,address facilitator,uint256 validAfter)"
        );
    }

    #[test]
    fn cross_sdk_vector() {
        let auth = vector();
        assert_eq!(
            permit2_domain(84532).separator(),
            b256!("010f27a92fb9a32622f44f001dc4d15706a85b33499cfc2ce9033113ab26592c")
        );
        assert_eq!(
            auth.struct_hash(),
            b256!("a97a0255f1877b56ced10238aca70ad0692b7deb7bc3e81aca308da1e71fd2a5")
        );
        assert_eq!(
            auth.signing_hash(84532),
            b256!("93f7d7cc192fe78957fc114318393187c2fc5194c6d9ac26aba364559fac39d2")
        );
        assert_ne!(auth.signing_hash(8453), auth.signing_hash(84532));
    }

    #[test]
    fn facilitator_selects_the_upto_witness() {
        let exact = vector();
        let mut upto = vector();
        upto.spender = UPTO_PERMIT2_PROXY;
        upto.witness.facilitator = Some(Address::repeat_byte(0xfa));
        let expected = upto_sol::PermitWitnessTransferFrom {
            permitted: upto_sol::TokenPermissions {
                token: TOKEN,
                amount: U256::from(1_000_000u64),
            },
            spender: UPTO_PERMIT2_PROXY,
            nonce: U256::from(1u8),
            deadline: U256::from(9_999_999_999u64),
            witness: upto_sol::Witness {
                to: exact.witness.to,
                facilitator: Address::repeat_byte(0xfa),
                validAfter: U256::ZERO,
            },
        };
        assert_eq!(upto.struct_hash(), expected.eip712_hash_struct());
        assert_eq!(
            upto.signing_hash(84532),
            expected.eip712_signing_hash(&permit2_domain(84532))
        );
        let mut other = upto.clone();
        other.witness.facilitator = Some(Address::repeat_byte(0xfb));
        assert_ne!(other.signing_hash(84532), upto.signing_hash(84532));
    }

    #[test]
    fn json_round_trips_and_accepts_hex_integers() {
        let json = super::super::tests::PERMIT2_JSON;
        let parsed: Permit2Payload = serde_json::from_str(json).unwrap();
        assert_eq!(parsed.permit2_authorization, vector());
        assert_eq!(
            serde_json::to_value(&parsed).unwrap(),
            serde_json::from_str::<serde_json::Value>(json).unwrap()
        );

        let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
        v["permit2Authorization"]["nonce"] = "0x1".into();
        v["permit2Authorization"]["deadline"] = "0x2540be3ff".into();
        v["permit2Authorization"]["witness"]["validAfter"] = "0x0".into();
        let hex: Permit2Payload = serde_json::from_value(v).unwrap();
        assert_eq!(hex, parsed);
        let out = serde_json::to_value(&hex).unwrap();
        assert_eq!(out["permit2Authorization"]["nonce"], "1");
        assert_eq!(out["permit2Authorization"]["deadline"], "9999999999");
    }

    #[test]
    fn upto_json_carries_the_facilitator() {
        let mut v: serde_json::Value =
            serde_json::from_str(super::super::tests::PERMIT2_JSON).unwrap();
        let facilitator = Address::repeat_byte(0xfa).to_checksum(None);
        v["permit2Authorization"]["witness"]["facilitator"] = facilitator.to_lowercase().into();
        let parsed: Permit2Payload = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(
            parsed.permit2_authorization.witness.facilitator,
            Some(Address::repeat_byte(0xfa))
        );
        v["permit2Authorization"]["witness"]["facilitator"] = facilitator.into();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), v);
    }

    #[test]
    fn json_refuses_malformed_fields() {
        let good: serde_json::Value =
            serde_json::from_str(super::super::tests::PERMIT2_JSON).unwrap();
        let mut cases = Vec::new();
        for (path, bad) in [
            (&["nonce"][..], serde_json::json!(1)),
            (&["nonce"], serde_json::json!("0x")),
            (&["deadline"], serde_json::json!("-5")),
            (&["permitted", "amount"], serde_json::json!("0x10")),
            (&["permitted", "token"], serde_json::json!("0x12")),
            (&["witness", "to"], serde_json::json!(false)),
            (&["witness", "facilitator"], serde_json::json!("nope")),
            (&["witness", "validAfter"], serde_json::json!("1.5")),
        ] {
            let mut v = good.clone();
            let mut slot = &mut v["permit2Authorization"];
            for key in path {
                slot = &mut slot[*key];
            }
            *slot = bad;
            cases.push(v);
        }
        for v in cases {
            assert!(
                serde_json::from_value::<Permit2Payload>(v.clone()).is_err(),
                "{v}"
            );
        }
    }

    #[test]
    fn claim_key_reads_the_nonce_as_a_number() {
        let json = super::super::tests::PERMIT2_JSON;
        let mut keys = Vec::new();
        for nonce in ["1", "01", "0x1", "0x01", "0X1"] {
            let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
            v["permit2Authorization"]["nonce"] = nonce.into();
            v["permit2Authorization"]["from"] = if nonce.len() % 2 == 0 {
                PAYER.to_checksum(None).to_lowercase().into()
            } else {
                PAYER.to_checksum(None).into()
            };
            let p: Permit2Payload = serde_json::from_value(v).unwrap();
            keys.push(permit2_claim_key("eip155:84532", &p.permit2_authorization));
        }
        assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
        assert_eq!(
            keys[0],
            "x402:eip155:84532:permit2:0x857b06519e91e3a54538791bdbb0e22373e36b66:1"
        );

        let mut other = vector();
        other.nonce = U256::from(2u8);
        assert_ne!(permit2_claim_key("eip155:84532", &other), keys[0]);
        // Token and spender are not part of it: the nonce is spent for all.
        let mut other = vector();
        other.permitted.token = Address::ZERO;
        other.spender = UPTO_PERMIT2_PROXY;
        assert_eq!(permit2_claim_key("eip155:84532", &other), keys[0]);
        assert_ne!(permit2_claim_key("eip155:8453", &other), keys[0]);
    }

    #[test]
    fn claim_expiry_is_the_deadline() {
        let mut auth = vector();
        assert_eq!(permit2_claim_expiry(&auth), Some(9_999_999_999));
        auth.deadline = U256::from(u64::MAX) + U256::from(1u8);
        assert_eq!(permit2_claim_expiry(&auth), None);
    }

    #[test]
    fn sign_then_recover_with_a_local_key() {
        let signer = TestSigner::from_seed(b"permit2 payer");
        for facilitator in [None, Some(Address::repeat_byte(0xfa))] {
            let mut auth = vector();
            auth.from = signer.address();
            auth.witness.facilitator = facilitator;
            let payload = Permit2Payload {
                signature: signer.sign(auth.signing_hash(84532)),
                permit2_authorization: auth,
            };
            assert_eq!(payload.recover_signer(84532), Ok(signer.address()));
            assert_ne!(payload.recover_signer(8453), Ok(signer.address()));

            // Flipping the witness kind changes the digest.
            let mut flipped = payload.clone();
            flipped.permit2_authorization.witness.facilitator = match facilitator {
                None => Some(Address::ZERO),
                Some(_) => None,
            };
            assert_ne!(flipped.recover_signer(84532), Ok(signer.address()));
        }
    }

    proptest! {
        // Each case runs the slow test signer; a few cases suffice.
        #![proptest_config(ProptestConfig::with_cases(16))]

        #[test]
        fn local_signatures_always_recover(
            seed in any::<[u8; 32]>(),
            nonce in any::<[u64; 4]>(),
            facilitator in proptest::option::of(any::<[u8; 20]>()),
        ) {
            let signer = TestSigner::from_seed(&seed);
            let mut auth = vector();
            auth.from = signer.address();
            auth.nonce = U256::from_limbs(nonce);
            auth.witness.facilitator = facilitator.map(Address::from);
            let signature = signer.sign(auth.signing_hash(84532));
            prop_assert_eq!(
                recover_signer(auth.signing_hash(84532), &signature),
                Ok(signer.address())
            );
        }
    }
}
