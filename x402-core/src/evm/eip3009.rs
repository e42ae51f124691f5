//! EIP-3009 `transferWithAuthorization` payloads.

use std::borrow::Cow;

use alloy_primitives::{b256, keccak256, Address, Bytes, B256, U256};
use alloy_sol_types::Eip712Domain;
use serde::{Deserialize, Serialize};

use super::{
    signature::{recover_signer, SignatureError},
    wire,
};
use crate::money::AtomicAmount;

/// alloy's derivation of the message: the reference the hashing below is
/// tested against.
#[cfg(test)]
mod sol {
    alloy_sol_types::sol! {
        /// EIP-3009's signed message.
        struct TransferWithAuthorization {
            address from;
            address to;
            uint256 value;
            uint256 validAfter;
            uint256 validBefore;
            bytes32 nonce;
        }
    }
}

/// The `payload` of an `exact` EVM payment made with EIP-3009
/// `transferWithAuthorization`.
///
/// On the wire: `{"signature": "0x…", "authorization": {…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExactEvmPayload {
    /// The payer's signature over the authorization (65 bytes for an
    /// externally owned account; longer for a smart wallet).
    #[serde(with = "wire::prefixed_hex")]
    pub signature: Bytes,
    /// What the payer authorised.
    pub authorization: Eip3009Authorization,
}

impl ExactEvmPayload {
    /// Recovers who signed the authorization in the token's `domain` (see
    /// [`eip3009_domain`]). The payment is the payer's only if this equals
    /// `authorization.from`.
    pub fn recover_signer(&self, domain: &Eip712Domain) -> Result<Address, SignatureError> {
        recover_signer(self.authorization.signing_hash(domain), &self.signature)
    }
}

/// The parameters of an EIP-3009 `TransferWithAuthorization`, as signed.
///
/// On the wire the integers are decimal strings and the nonce is `0x` and 64
/// hex digits:
///
/// ```json
/// {"from": "0x857b…6b66", "to": "0x2096…287C", "value": "10000",
///  "validAfter": "1740672089", "validBefore": "1740672154", "nonce": "0xf374…3480"}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Eip3009Authorization {
    /// The payer.
    #[serde(with = "wire::checksummed")]
    pub from: Address,
    /// The recipient (the seller's `payTo`).
    #[serde(with = "wire::checksummed")]
    pub to: Address,
    /// The amount in the token's atomic units.
    pub value: AtomicAmount,
    /// Unix time (seconds) after which the authorization is valid.
    #[serde(with = "wire::decimal_u256")]
    pub valid_after: U256,
    /// Unix time (seconds) before which the authorization is valid.
    #[serde(with = "wire::decimal_u256")]
    pub valid_before: U256,
    /// A random 32-byte nonce, unique per payer and token.
    #[serde(with = "wire::prefixed_hex")]
    pub nonce: B256,
}

impl Eip3009Authorization {
    #[cfg(test)]
    fn to_sol(&self) -> sol::TransferWithAuthorization {
        sol::TransferWithAuthorization {
            from: self.from,
            to: self.to,
            value: self.value.get(),
            validAfter: self.valid_after,
            validBefore: self.valid_before,
            nonce: self.nonce,
        }
    }

    /// The EIP-712 `hashStruct` of the `TransferWithAuthorization` message.
    pub fn struct_hash(&self) -> B256 {
        // Its encoding written out: seven 32-byte words, the type hash a
        // constant (alloy's derived version hashes the type string and
        // builds the encoding in a vector on every call; this runs for
        // every payment the engine pre-checks).
        let mut words = [0u8; 7 * 32];
        words[..32].copy_from_slice(TRANSFER_WITH_AUTHORIZATION_TYPEHASH.as_slice());
        words[44..64].copy_from_slice(self.from.as_slice());
        words[76..96].copy_from_slice(self.to.as_slice());
        words[96..128].copy_from_slice(&self.value.get().to_be_bytes::<32>());
        words[128..160].copy_from_slice(&self.valid_after.to_be_bytes::<32>());
        words[160..192].copy_from_slice(&self.valid_before.to_be_bytes::<32>());
        words[192..].copy_from_slice(self.nonce.as_slice());
        keccak256(words)
    }

    /// The EIP-712 digest the payer signed: `keccak256(0x1901 ‖
    /// domainSeparator ‖ hashStruct(message))`, in the token's `domain` (see
    /// [`eip3009_domain`]).
    pub fn signing_hash(&self, domain: &Eip712Domain) -> B256 {
        eip712_digest(domain.separator(), self.struct_hash())
    }

    /// [`signing_hash`](Self::signing_hash) in the domain
    /// [`eip3009_domain`] would build from these parts, its separator
    /// remembered per thread for the few domains a seller uses.
    pub(crate) fn signing_hash_in(
        &self,
        name: &str,
        version: &str,
        chain_id: u64,
        token: Address,
    ) -> B256 {
        eip712_digest(
            separators::get(name, version, chain_id, token),
            self.struct_hash(),
        )
    }
}

/// `keccak256("TransferWithAuthorization(address from,address to,uint256
/// value,uint256 validAfter,uint256 validBefore,bytes32 nonce)")`.
const TRANSFER_WITH_AUTHORIZATION_TYPEHASH: B256 =
    b256!("7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267");

/// `keccak256("EIP712Domain(string name,string version,uint256 chainId,
/// address verifyingContract)")`.
const EIP712_DOMAIN_TYPEHASH: B256 =
    b256!("8b73c3c69bb8fe3d512ecc4cf759cc79239f7b179b0ffacaa9a75d522b39400f");

/// `keccak256(0x1901 ‖ separator ‖ struct_hash)`.
fn eip712_digest(separator: B256, struct_hash: B256) -> B256 {
    let mut bytes = [0u8; 2 + 32 + 32];
    bytes[..2].copy_from_slice(&[0x19, 0x01]);
    bytes[2..34].copy_from_slice(separator.as_slice());
    bytes[34..].copy_from_slice(struct_hash.as_slice());
    keccak256(bytes)
}

/// The separators of the EIP-3009 domains this thread has hashed lately.
mod separators {
    use std::cell::RefCell;

    use alloy_primitives::{keccak256, Address, B256, U256};

    /// Domains kept per thread: a seller takes a few tokens on a few chains.
    const KEPT: usize = 8;

    struct Entry {
        name: Box<str>,
        version: Box<str>,
        chain_id: u64,
        token: Address,
        separator: B256,
    }

    thread_local! {
        static RECENT: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
    }

    /// The separator of `{name, version, chainId, verifyingContract}`.
    pub(super) fn get(name: &str, version: &str, chain_id: u64, token: Address) -> B256 {
        let found = RECENT.with_borrow(|recent| {
            recent
                .iter()
                .find(|e| {
                    e.chain_id == chain_id
                        && e.token == token
                        && *e.name == *name
                        && *e.version == *version
                })
                .map(|e| e.separator)
        });
        if let Some(separator) = found {
            return separator;
        }
        let separator = compute(name, version, chain_id, token);
        RECENT.with_borrow_mut(|recent| {
            if recent.len() == KEPT {
                recent.remove(0);
            }
            recent.push(Entry {
                name: name.into(),
                version: version.into(),
                chain_id,
                token,
                separator,
            });
        });
        separator
    }

    /// `hashStruct(EIP712Domain)`, written out.
    pub(super) fn compute(name: &str, version: &str, chain_id: u64, token: Address) -> B256 {
        let mut words = [0u8; 5 * 32];
        words[..32].copy_from_slice(super::EIP712_DOMAIN_TYPEHASH.as_slice());
        words[32..64].copy_from_slice(keccak256(name.as_bytes()).as_slice());
        words[64..96].copy_from_slice(keccak256(version.as_bytes()).as_slice());
        words[96..128].copy_from_slice(&U256::from(chain_id).to_be_bytes::<32>());
        words[140..].copy_from_slice(token.as_slice());
        keccak256(words)
    }
}

/// The EIP-712 domain of an EIP-3009 token: `{name, version, chainId,
/// verifyingContract: token}`.
///
/// `name` and `version` are the token's own (`"USDC"` and `"2"` for USDC on
/// Base Sepolia, `"USD Coin"` and `"2"` on Base mainnet); sellers advertise them
/// in the payment requirements' `extra`. A wrong one yields a different digest,
/// so the signature recovers to an unrelated address.
pub fn eip3009_domain(name: &str, version: &str, chain_id: u64, token: Address) -> Eip712Domain {
    Eip712Domain::new(
        Some(Cow::Owned(name.to_owned())),
        Some(Cow::Owned(version.to_owned())),
        Some(U256::from(chain_id)),
        Some(token),
        None,
    )
}

/// The replay-protection key of an EIP-3009 authorization:
/// `x402:{network}:{asset}:{from}:{nonce}`, each hex value lowercase with `0x`.
///
/// A token spends each `(from, nonce)` once, so this names the payment on
/// `network` (a CAIP-2 id such as `eip155:8453`) whatever the case it was
/// written in. `asset` is the token contract.
pub fn eip3009_claim_key(network: &str, asset: &Address, auth: &Eip3009Authorization) -> String {
    // Written straight into a buffer of the right size: this runs for every
    // payment, and the formatting machinery cost more than the hashing of
    // the key that follows.
    let mut key = super::ClaimKeyWriter::new(network, 3 + 2 * (2 + 40) + 2 + 64);
    key.hex(asset.as_slice());
    key.hex(auth.from.as_slice());
    key.hex(auth.nonce.as_slice());
    key.finish()
}

/// How long a claim on [`eip3009_claim_key`] must be kept: until `validBefore`
/// (unix seconds), after which the token refuses the authorization anyway.
///
/// `None` when `validBefore` does not fit in a `u64`, i.e. the authorization
/// never expires in practice: keep the claim for good, or refuse the payment.
pub fn eip3009_claim_expiry(auth: &Eip3009Authorization) -> Option<u64> {
    u64::try_from(auth.valid_before).ok()
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{address, b256, bytes, keccak256};
    use proptest::prelude::*;

    use alloy_sol_types::SolStruct;

    use super::*;
    use crate::evm::test_signer::TestSigner;

    const USDC_BASE_SEPOLIA: Address = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
    const PAYER: Address = address!("857b06519E91e3A54538791bDbb0E22373e36b66");

    fn spec_payload() -> ExactEvmPayload {
        ExactEvmPayload {
            signature: bytes!("2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c"),
            authorization: Eip3009Authorization {
                from: PAYER,
                to: address!("209693Bc6afc0C5328bA36FaF03C514EF312287C"),
                value: AtomicAmount::from(10_000u64),
                valid_after: U256::from(1_740_672_089u64),
                valid_before: U256::from(1_740_672_154u64),
                nonce: b256!("f3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"),
            },
        }
    }

    #[test]
    fn type_hash_matches_eip3009() {
        assert_eq!(
            sol::TransferWithAuthorization::eip712_encode_type(),
            "TransferWithAuthorization(address from,address to,uint256 value,\
             uint256 validAfter,uint256 validBefore,bytes32 nonce)"
        );
        assert_eq!(
            keccak256(sol::TransferWithAuthorization::eip712_encode_type().as_bytes()),
            b256!("7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267")
        );
    }

    #[test]
    fn spec_vector_hashes_and_recovers() {
        let payload = spec_payload();
        let domain = eip3009_domain("USDC", "2", 84532, USDC_BASE_SEPOLIA);
        assert_eq!(
            domain.separator(),
            b256!("71f17a3b2ff373b803d70a5a07c046c1a2bc8e89c09ef722fcb047abe94c9818")
        );
        assert_eq!(
            payload.authorization.struct_hash(),
            b256!("49ad644555c7bdf3ea4fc022a4940ae5589b230b1dde0065c5504fa19bbe39a4")
        );
        assert_eq!(
            payload.authorization.signing_hash(&domain),
            b256!("f256992871671abcb27ff92885a7afa46218724e5fc0bac35d050115aa1d22e6")
        );
        assert_eq!(payload.recover_signer(&domain), Ok(PAYER));
    }

    #[test]
    fn wrong_domain_recovers_someone_else() {
        let payload = spec_payload();
        for domain in [
            eip3009_domain("USD Coin", "2", 84532, USDC_BASE_SEPOLIA),
            eip3009_domain("USDC", "2", 8453, USDC_BASE_SEPOLIA),
            eip3009_domain("USDC", "1", 84532, USDC_BASE_SEPOLIA),
            eip3009_domain("USDC", "2", 84532, Address::ZERO),
        ] {
            let signer = payload.recover_signer(&domain);
            assert!(signer.is_ok(), "{signer:?}");
            assert_ne!(signer, Ok(PAYER));
        }
    }

    #[test]
    fn changed_message_recovers_someone_else() {
        let domain = eip3009_domain("USDC", "2", 84532, USDC_BASE_SEPOLIA);
        let mut payload = spec_payload();
        payload.authorization.value = AtomicAmount::from(10_001u64);
        assert_ne!(payload.recover_signer(&domain), Ok(PAYER));
    }

    #[test]
    fn spec_json_round_trips() {
        let json = super::super::tests::EIP3009_JSON;
        let parsed: ExactEvmPayload = serde_json::from_str(json).unwrap();
        assert_eq!(parsed, spec_payload());
        assert_eq!(
            serde_json::to_value(&parsed).unwrap(),
            serde_json::from_str::<serde_json::Value>(json).unwrap()
        );
    }

    #[test]
    fn json_refuses_malformed_fields() {
        let good: serde_json::Value =
            serde_json::from_str(super::super::tests::EIP3009_JSON).unwrap();
        let cases: [(&str, serde_json::Value); 7] = [
            ("value", serde_json::json!(10000)),
            ("value", serde_json::json!("0x2710")),
            ("validAfter", serde_json::json!("-1")),
            ("validBefore", serde_json::json!("1".repeat(79))),
            ("nonce", serde_json::json!("0x1234")),
            (
                "from",
                serde_json::json!("0x857b06519E91e3A54538791bDbb0E22373e36b6"),
            ),
            ("to", serde_json::json!(null)),
        ];
        for (field, bad) in cases {
            let mut v = good.clone();
            v["authorization"][field] = bad;
            assert!(
                serde_json::from_value::<ExactEvmPayload>(v).is_err(),
                "{field}"
            );
        }
        let mut v = good;
        v["authorization"].as_object_mut().unwrap().remove("nonce");
        assert!(serde_json::from_value::<ExactEvmPayload>(v).is_err());
    }

    #[test]
    fn claim_key_ignores_case() {
        let auth = spec_payload().authorization;
        let key = eip3009_claim_key("eip155:84532", &USDC_BASE_SEPOLIA, &auth);
        assert_eq!(
            key,
            "x402:eip155:84532:0x036cbd53842c5426634e7929541ec2318f3dcf7e:\
             0x857b06519e91e3a54538791bdbb0e22373e36b66:\
             0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
        );

        // The same payment with every hex value in another case.
        let mut v: serde_json::Value =
            serde_json::from_str(super::super::tests::EIP3009_JSON).unwrap();
        let upper = |s: &str| format!("0x{}", s[2..].to_uppercase());
        let lower = |s: &str| s.to_lowercase();
        for recase in [upper, lower] {
            for field in ["from", "nonce"] {
                let s = v["authorization"][field].as_str().unwrap().to_owned();
                v["authorization"][field] = serde_json::Value::String(recase(&s));
            }
            let recased: ExactEvmPayload = serde_json::from_value(v.clone()).unwrap();
            let asset: Address = recase("0x036CbD53842c5426634e7929541eC2318f3dCF7e")
                .parse()
                .unwrap();
            assert_eq!(
                eip3009_claim_key("eip155:84532", &asset, &recased.authorization),
                key
            );
        }

        // Another nonce, payer, token or network is another key.
        let mut other = auth.clone();
        other.nonce = B256::repeat_byte(1);
        assert_ne!(
            eip3009_claim_key("eip155:84532", &USDC_BASE_SEPOLIA, &other),
            key
        );
        let mut other = auth.clone();
        other.from = Address::repeat_byte(1);
        assert_ne!(
            eip3009_claim_key("eip155:84532", &USDC_BASE_SEPOLIA, &other),
            key
        );
        assert_ne!(
            eip3009_claim_key("eip155:84532", &Address::ZERO, &auth),
            key
        );
        assert_ne!(
            eip3009_claim_key("eip155:8453", &USDC_BASE_SEPOLIA, &auth),
            key
        );
    }

    #[test]
    fn claim_expiry_is_valid_before() {
        let mut auth = spec_payload().authorization;
        assert_eq!(eip3009_claim_expiry(&auth), Some(1_740_672_154));
        auth.valid_before = U256::from(u64::MAX);
        assert_eq!(eip3009_claim_expiry(&auth), Some(u64::MAX));
        auth.valid_before = U256::MAX;
        assert_eq!(eip3009_claim_expiry(&auth), None);
    }

    #[test]
    fn sign_then_recover_with_a_local_key() {
        let signer = TestSigner::from_seed(b"eip3009 payer");
        let token = address!("833589fCD6eDb6E08f4c7C32D4f71b54bdA02913");
        let domain = eip3009_domain("USD Coin", "2", 8453, token);
        let authorization = Eip3009Authorization {
            from: signer.address(),
            to: Address::repeat_byte(0x42),
            value: AtomicAmount::from(1_000u64),
            valid_after: U256::ZERO,
            valid_before: U256::from(4_000_000_000u64),
            nonce: keccak256(b"nonce"),
        };
        let payload = ExactEvmPayload {
            signature: signer.sign(authorization.signing_hash(&domain)),
            authorization,
        };
        assert_eq!(payload.recover_signer(&domain), Ok(signer.address()));
        let other_chain = eip3009_domain("USD Coin", "2", 1, token);
        assert_ne!(payload.recover_signer(&other_chain), Ok(signer.address()));
    }

    /// The written-out hashing answers as alloy's derivation from the
    /// `sol!` struct, and the remembered separators as freshly built ones.
    fn same_hashes_as_alloy(
        auth: &Eip3009Authorization,
        name: &str,
        version: &str,
        chain_id: u64,
        token: Address,
    ) {
        let domain = eip3009_domain(name, version, chain_id, token);
        assert_eq!(auth.struct_hash(), auth.to_sol().eip712_hash_struct());
        let expected = auth.to_sol().eip712_signing_hash(&domain);
        assert_eq!(auth.signing_hash(&domain), expected);
        assert_eq!(
            separators::compute(name, version, chain_id, token),
            domain.separator()
        );
        // Twice: built, then remembered.
        for _ in 0..2 {
            assert_eq!(
                auth.signing_hash_in(name, version, chain_id, token),
                expected
            );
        }
    }

    #[test]
    fn remembered_separators_stay_apart() {
        let auth = spec_payload().authorization;
        // More domains than a thread keeps, each asked for twice, in turn.
        let domains: Vec<(String, u64)> = (0..20u64)
            .map(|i| (format!("Token {i}"), 1 + i % 3))
            .collect();
        for round in 0..2 {
            for (name, chain_id) in &domains {
                let token = Address::with_last_byte(u8::try_from(*chain_id).unwrap_or(0));
                same_hashes_as_alloy(&auth, name, "2", *chain_id, token);
                if round == 1 {
                    same_hashes_as_alloy(&auth, name, "1", *chain_id, token);
                }
            }
        }
        // A name and version that only differ in where they split.
        let a = auth.signing_hash_in("USD", "C2", 8453, USDC_BASE_SEPOLIA);
        let b = auth.signing_hash_in("USDC", "2", 8453, USDC_BASE_SEPOLIA);
        assert_ne!(a, b);
    }

    proptest! {
        #[test]
        fn written_out_hashing_matches_alloy(
            from in any::<[u8; 20]>(),
            to in any::<[u8; 20]>(),
            value in any::<[u8; 32]>(),
            after in any::<u64>(),
            before in any::<[u8; 32]>(),
            nonce in any::<[u8; 32]>(),
            name in ".{0,40}",
            version in "[0-9.]{0,6}",
            chain_id in any::<u64>(),
            token in any::<[u8; 20]>(),
        ) {
            let auth = Eip3009Authorization {
                from: Address::from(from),
                to: Address::from(to),
                value: AtomicAmount::from(U256::from_be_bytes(value)),
                valid_after: U256::from(after),
                valid_before: U256::from_be_bytes(before),
                nonce: B256::from(nonce),
            };
            same_hashes_as_alloy(&auth, &name, &version, chain_id, Address::from(token));
        }
    }

    proptest! {
        // Each case runs the slow test signer; a few cases suffice.
        #![proptest_config(ProptestConfig::with_cases(16))]

        #[test]
        fn local_signatures_always_recover(
            seed in any::<[u8; 32]>(),
            value in any::<u64>(),
            nonce in any::<[u8; 32]>(),
        ) {
            let signer = TestSigner::from_seed(&seed);
            let domain = eip3009_domain("USDC", "2", 84532, USDC_BASE_SEPOLIA);
            let authorization = Eip3009Authorization {
                from: signer.address(),
                to: PAYER,
                value: AtomicAmount::from(value),
                valid_after: U256::ZERO,
                valid_before: U256::from(value),
                nonce: B256::from(nonce),
            };
            let signature = signer.sign(authorization.signing_hash(&domain));
            prop_assert_eq!(
                recover_signer(authorization.signing_hash(&domain), &signature),
                Ok(signer.address())
            );
        }
    }
}
