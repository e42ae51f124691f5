//! Recovering the signer of an EIP-712 digest from a 65-byte ECDSA signature.

use alloy_primitives::{uint, Address, B256, U256};

/// The order `n` of the secp256k1 group.
const SECP256K1_N: U256 =
    uint!(0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141_U256);

/// `n / 2`: a signature with `s` above it is the malleable twin of one below.
const SECP256K1_HALF_N: U256 =
    uint!(0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0_U256);

/// The length of an externally owned account's `r || s || v` signature.
const EOA_SIGNATURE_LEN: usize = 65;

/// Recovers the address that signed `digest` (an EIP-712 signing hash) with the
/// 65-byte `r || s || v` `signature`, where `v` is 27/28 or 0/1.
///
/// Only externally owned accounts sign this way: a longer signature is a smart
/// wallet's (ERC-1271, or ERC-6492 before deployment), which only the chain
/// can check, and gives [`SignatureError::UnsupportedLength`]. Signatures with
/// a high `s` (the malleable twin of a valid signature, which EIP-2 and the
/// token contracts refuse) give [`SignatureError::HighS`].
///
/// The recovered address is only the signer: compare it with the payer the
/// authorization names.
pub fn recover_signer(digest: B256, signature: &[u8]) -> Result<Address, SignatureError> {
    let bytes: &[u8; EOA_SIGNATURE_LEN] = match signature.len() {
        EOA_SIGNATURE_LEN => signature
            .try_into()
            .map_err(|_| SignatureError::InvalidLength {
                len: signature.len(),
            })?,
        len if len > EOA_SIGNATURE_LEN => return Err(SignatureError::UnsupportedLength { len }),
        len => return Err(SignatureError::InvalidLength { len }),
    };
    let r = U256::from_be_slice(&bytes[..32]);
    let s = U256::from_be_slice(&bytes[32..64]);
    let y_parity = match bytes[64] {
        0 | 27 => false,
        1 | 28 => true,
        v => return Err(SignatureError::InvalidRecoveryId { v }),
    };
    if r.is_zero() || s.is_zero() || r >= SECP256K1_N || s >= SECP256K1_N {
        return Err(SignatureError::OutOfRange);
    }
    if s > SECP256K1_HALF_N {
        return Err(SignatureError::HighS);
    }
    recover_prehash(digest, bytes, r, s, y_parity)
}

/// The recovery itself, by libsecp256k1 (feature `libsecp256k1`, on by
/// default; several times faster than the pure-Rust `k256`, and this is most
/// of a paid request's CPU when payments are checked in process).
#[cfg(feature = "libsecp256k1")]
fn recover_prehash(
    digest: B256,
    bytes: &[u8; EOA_SIGNATURE_LEN],
    _r: U256,
    _s: U256,
    y_parity: bool,
) -> Result<Address, SignatureError> {
    use secp256k1::{
        ecdsa::{RecoverableSignature, RecoveryId},
        Message, Secp256k1, VerifyOnly,
    };
    use std::sync::OnceLock;

    static CONTEXT: OnceLock<Secp256k1<VerifyOnly>> = OnceLock::new();
    let context = CONTEXT.get_or_init(Secp256k1::verification_only);
    let id = if y_parity {
        RecoveryId::One
    } else {
        RecoveryId::Zero
    };
    let signature = RecoverableSignature::from_compact(&bytes[..64], id)
        .map_err(|_| SignatureError::Unrecoverable)?;
    let key = context
        .recover_ecdsa(Message::from_digest(digest.0), &signature)
        .map_err(|_| SignatureError::Unrecoverable)?;
    let uncompressed = key.serialize_uncompressed();
    Ok(Address::from_raw_public_key(&uncompressed[1..]))
}

/// The recovery itself, by the pure-Rust `k256` (without the
/// `libsecp256k1` feature).
#[cfg(not(feature = "libsecp256k1"))]
fn recover_prehash(
    digest: B256,
    _bytes: &[u8; EOA_SIGNATURE_LEN],
    r: U256,
    s: U256,
    y_parity: bool,
) -> Result<Address, SignatureError> {
    recover_k256(digest, r, s, y_parity)
}

/// Recovery by `k256` (also the reference the libsecp256k1 path is tested
/// against).
#[cfg(any(test, not(feature = "libsecp256k1")))]
fn recover_k256(digest: B256, r: U256, s: U256, y_parity: bool) -> Result<Address, SignatureError> {
    alloy_primitives::Signature::new(r, s, y_parity)
        .recover_address_from_prehash(&digest)
        .map_err(|_| SignatureError::Unrecoverable)
}

/// Why no signer could be recovered from a signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// Shorter than the 65 bytes of an `r || s || v` signature.
    #[error("signature is {len} bytes, not the 65 of an r || s || v signature")]
    InvalidLength {
        /// The signature's length in bytes.
        len: usize,
    },
    /// Longer than 65 bytes: a smart-wallet (ERC-1271 or ERC-6492) signature,
    /// which cannot be checked off-chain.
    #[error(
        "signature is {len} bytes: smart-wallet (ERC-1271/ERC-6492) signatures are not supported"
    )]
    UnsupportedLength {
        /// The signature's length in bytes.
        len: usize,
    },
    /// The last byte is not a recovery id (27, 28, 0 or 1).
    #[error("signature recovery id v = {v} is not 27, 28, 0 or 1")]
    InvalidRecoveryId {
        /// The byte found.
        v: u8,
    },
    /// `r` or `s` is zero or not below the secp256k1 group order.
    #[error("signature r or s is out of range")]
    OutOfRange,
    /// `s` is in the upper half of the group order: a malleable signature.
    #[error("signature s is in the upper half of the curve order (malleable)")]
    HighS,
    /// No public key matches the signature and digest.
    #[error("no signer can be recovered from the signature")]
    Unrecoverable,
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{b256, hex, Signature};
    use proptest::prelude::*;

    use super::*;

    const DIGEST: B256 = b256!("f256992871671abcb27ff92885a7afa46218724e5fc0bac35d050115aa1d22e6");
    const SIGNATURE: [u8; 65] = hex!("2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c");
    const SIGNER: Address = alloy_primitives::address!("857b06519E91e3A54538791bDbb0E22373e36b66");

    #[test]
    fn recovers_the_spec_signer() {
        assert_eq!(recover_signer(DIGEST, &SIGNATURE), Ok(SIGNER));
    }

    #[test]
    fn accepts_v_as_parity() {
        let mut sig = SIGNATURE;
        sig[64] -= 27;
        assert_eq!(recover_signer(DIGEST, &sig), Ok(SIGNER));
    }

    #[test]
    fn other_digest_recovers_someone_else() {
        let mut digest = DIGEST;
        digest[0] ^= 1;
        assert_ne!(recover_signer(digest, &SIGNATURE), Ok(SIGNER));
    }

    #[test]
    fn refuses_the_malleable_twin() {
        // (r, n - s, !v) is a valid ECDSA signature by the same key.
        let s = U256::from_be_slice(&SIGNATURE[32..64]);
        let mut sig = SIGNATURE;
        sig[32..64].copy_from_slice(&(SECP256K1_N - s).to_be_bytes::<32>());
        sig[64] = if SIGNATURE[64] == 27 { 28 } else { 27 };
        assert_eq!(recover_signer(DIGEST, &sig), Err(SignatureError::HighS));
        // ... which alloy alone would accept.
        let twin = Signature::new(
            U256::from_be_slice(&sig[..32]),
            U256::from_be_slice(&sig[32..64]),
            sig[64] == 28,
        );
        assert_eq!(
            twin.recover_address_from_prehash(&DIGEST).ok(),
            Some(SIGNER)
        );
    }

    #[test]
    fn refuses_bad_lengths_with_distinct_errors() {
        assert_eq!(
            recover_signer(DIGEST, &SIGNATURE[..64]),
            Err(SignatureError::InvalidLength { len: 64 })
        );
        assert_eq!(
            recover_signer(DIGEST, &[]),
            Err(SignatureError::InvalidLength { len: 0 })
        );
        let mut long = SIGNATURE.to_vec();
        long.extend_from_slice(&[0x64, 0x92].repeat(16));
        assert_eq!(
            recover_signer(DIGEST, &long),
            Err(SignatureError::UnsupportedLength { len: 97 })
        );
    }

    #[test]
    fn refuses_bad_v_and_out_of_range_scalars() {
        for v in [2u8, 26, 29, 35, 255] {
            let mut sig = SIGNATURE;
            sig[64] = v;
            assert_eq!(
                recover_signer(DIGEST, &sig),
                Err(SignatureError::InvalidRecoveryId { v })
            );
        }
        let mut zero_r = SIGNATURE;
        zero_r[..32].fill(0);
        assert_eq!(
            recover_signer(DIGEST, &zero_r),
            Err(SignatureError::OutOfRange)
        );
        let mut zero_s = SIGNATURE;
        zero_s[32..64].fill(0);
        assert_eq!(
            recover_signer(DIGEST, &zero_s),
            Err(SignatureError::OutOfRange)
        );
        let mut big_r = SIGNATURE;
        big_r[..32].fill(0xff);
        assert_eq!(
            recover_signer(DIGEST, &big_r),
            Err(SignatureError::OutOfRange)
        );
        let mut big_s = SIGNATURE;
        big_s[32..64].copy_from_slice(&SECP256K1_N.to_be_bytes::<32>());
        assert_eq!(
            recover_signer(DIGEST, &big_s),
            Err(SignatureError::OutOfRange)
        );
    }

    #[test]
    fn half_order_is_half_the_order() {
        assert_eq!(SECP256K1_HALF_N, SECP256K1_N >> 1);
    }

    proptest! {
        #[test]
        fn never_panics(
            digest in any::<[u8; 32]>(),
            sig in prop::collection::vec(any::<u8>(), 0..100),
        ) {
            let _ = recover_signer(B256::from(digest), &sig);
        }

        /// Both backends recover the same signer from any signature by a
        /// key, and refuse (or accept) the same random bytes.
        #[test]
        fn backends_agree(
            key in any::<[u8; 32]>(),
            digest in any::<[u8; 32]>(),
            noise in prop::collection::vec(any::<u8>(), 65..=65),
        ) {
            use alloy_signer::SignerSync as _;
            let digest = B256::from(digest);
            if let Ok(signer) = alloy_signer_local::PrivateKeySigner::from_bytes(&key.into()) {
                let signature = signer.sign_hash_sync(&digest).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let bytes = signature.as_bytes();
                prop_assert_eq!(recover_signer(digest, &bytes), Ok(signer.address()));
            }
            let mut bytes = [0u8; 65];
            bytes.copy_from_slice(&noise);
            bytes[64] = 27 + (bytes[64] & 1);
            let via_k256 = {
                let (r, s) = (U256::from_be_slice(&bytes[..32]), U256::from_be_slice(&bytes[32..64]));
                if r.is_zero() || s.is_zero() || r >= SECP256K1_N || s > SECP256K1_HALF_N {
                    None
                } else {
                    Some(recover_k256(digest, r, s, bytes[64] == 28))
                }
            };
            if let Some(expected) = via_k256 {
                prop_assert_eq!(recover_signer(digest, &bytes), expected);
            }
        }

        #[test]
        fn never_panics_on_65_bytes(
            digest in any::<[u8; 32]>(),
            rs in prop::collection::vec(any::<u8>(), 64..=64),
            v in prop_oneof![0u8..=1, 27u8..=28],
        ) {
            let mut sig = rs;
            sig.push(v);
            let _ = recover_signer(B256::from(digest), &sig);
        }
    }
}
