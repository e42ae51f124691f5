//! Solana (SVM) payments: the `payload` of an `exact` payment on a `solana:*`
//! network and the key that replay protection claims for it; Solana
//! addresses, program derived addresses and associated token accounts; and
//! (feature `svm-rpc`) a start-up check that every Solana offer's `payTo`
//! can receive its payments.
//!
//! # Claim keys
//!
//! The client sends a base64 serialised versioned transaction that it has
//! signed as the token owner, with the fee payer's signature slot left for the
//! facilitator to fill. A transaction on the wire is
//!
//! ```text
//! compact-u16 n ‖ n × 64-byte signatures ‖ message
//! ```
//!
//! and the signatures cover the message only, so the claim key is a hash of
//! the message: adding the fee payer's signature does not change it, while any
//! change to what is paid does.
//!
//! ```
//! use base64::Engine as _;
//! use x402_core::svm::svm_claim_key;
//!
//! let mut tx = vec![2u8]; // two signature slots
//! tx.extend_from_slice(&[0u8; 128]); // both still empty
//! tx.extend_from_slice(b"message");
//! let unsigned = base64::engine::general_purpose::STANDARD.encode(&tx);
//! tx[1] = 0xff; // the fee payer signs
//! let signed = base64::engine::general_purpose::STANDARD.encode(&tx);
//! assert_eq!(
//!     svm_claim_key("solana:devnet", &unsigned)?,
//!     svm_claim_key("solana:devnet", &signed)?,
//! );
//! # Ok::<(), x402_core::svm::SvmError>(())
//! ```
//!
//! # Associated token accounts
//!
//! An `exact` payment is an SPL transfer into the associated token account
//! (ATA) of the offer's `payTo` for its mint: the [program derived
//! address](find_program_address) of `[payTo, token program, mint]` under
//! the associated token account program. [`associated_token_address`]
//! derives it, for the SPL Token program (USDC's) or Token-2022, without
//! any Solana dependency:
//!
//! ```
//! use x402_core::svm::{associated_token_address, Pubkey, TokenProgram};
//!
//! let wallet: Pubkey = "AAAGuCgkmxYDTiBvzx1QT5XEjqXPRtQaiEXQo4gatD2o".parse()?;
//! let usdc: Pubkey = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v".parse()?;
//! let ata = associated_token_address(&wallet, &usdc, TokenProgram::Token);
//! assert_eq!(ata.to_string(), "Cra8woRQhnHsGAmFWcCN1m7A9J44ykNfGpehi6dMBuKR");
//! assert!(!ata.is_on_curve() && wallet.is_on_curve());
//! # Ok::<(), x402_core::svm::AddressError>(())
//! ```
//!
//! # Receiving accounts
//!
//! A wallet that has never held the mint has no such account, and then
//! every payment to it fails at simulation with an error that looks like
//! the client's fault (upstream facilitators say
//! `invalid_exact_svm_payload_receiver_ata_not_found`). With the feature
//! `svm-rpc`, [`ReceivingAccounts`] checks, before the server takes
//! payments, each distinct `(network, payTo, mint)` of an engine's Solana
//! offers ([`Engine::static_offers`](crate::Engine::static_offers)) against
//! a JSON-RPC node: the node's genesis hash must be the offer's network's
//! (a devnet node cannot vouch for mainnet), the mint must exist and be
//! owned by a token program (which picks the derivation), and its ATA must
//! exist, be a token account of `payTo` for the mint, and not be frozen. A
//! `payTo` that is itself a token account (the classic mix-up of the ATA for
//! the wallet) is named as such. Each problem names the network, `payTo`,
//! mint, token program and the derived address; [`CheckMode::Refuse`] (the
//! default) returns them as an error for the caller to propagate,
//! [`CheckMode::Warn`] logs each and carries on. A check that cannot run
//! (the node down, slow past its deadline or answering nonsense) is its
//! own error, in either mode. The RPC URL often carries an API key: it is
//! never logged or shown beyond `scheme://host[:port]`.
//!
//! ```no_run
//! # #[cfg(feature = "svm-rpc")]
//! # async fn start(engine: x402_core::Engine) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use x402_core::svm::{CheckMode, ReceivingAccounts};
//!
//! // Refuse to start while a Solana offer's payTo cannot receive.
//! ReceivingAccounts::new(std::env::var("SOLANA_RPC_URL")?)
//!     .mode(CheckMode::Refuse)
//!     .timeout(Duration::from_secs(5))
//!     .check(&engine.static_offers())
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Routes priced per request have no offers to check before a request
//! comes; their sessions' offers are checked.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

mod address;
pub(crate) mod base58;
#[cfg(feature = "svm-rpc")]
mod receiving;

pub use self::address::{
    associated_token_address, create_program_address, find_program_address, AddressError, PdaError,
    Pubkey, TokenProgram, ASSOCIATED_TOKEN_PROGRAM_ID, MAX_SEEDS, MAX_SEED_LEN,
    TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID,
};
#[cfg(feature = "svm-rpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "svm-rpc")))]
pub use self::receiving::{
    check_receiving_accounts, CheckMode, ReceivingAccountError, ReceivingAccountProblem,
    ReceivingAccounts, DEFAULT_RPC_TIMEOUT,
};

/// The largest decoded transaction accepted, in bytes. Solana's own limit is
/// 1232 bytes (a network packet), so this leaves headroom without letting a
/// payload grow unbounded.
pub const MAX_TRANSACTION_BYTES: usize = 2048;

/// The length of an ed25519 signature slot.
const SIGNATURE_LEN: usize = 64;

/// The `payload` of an `exact` payment on Solana.
///
/// On the wire: `{"transaction": "<base64>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SvmPayload {
    /// The serialised, partially signed versioned transaction, in standard
    /// base64.
    pub transaction: String,
}

impl SvmPayload {
    /// The transaction's message bytes; see [`svm_message_bytes`].
    pub fn message_bytes(&self) -> Result<Vec<u8>, SvmError> {
        svm_message_bytes(&self.transaction)
    }

    /// The replay-protection key of this payment; see [`svm_claim_key`].
    pub fn claim_key(&self, network: &str) -> Result<String, SvmError> {
        svm_claim_key(network, &self.transaction)
    }
}

/// Decodes a base64 (standard alphabet, padded) serialised transaction and
/// returns its message: the bytes after the compact-u16 signature count and
/// the signatures.
///
/// Fails on invalid base64, on a transaction larger than
/// [`MAX_TRANSACTION_BYTES`], on a non-canonical or zero signature count, and
/// when the signatures or the message are missing. The message itself is not
/// parsed: the facilitator checks the transaction.
pub fn svm_message_bytes(tx_base64: &str) -> Result<Vec<u8>, SvmError> {
    // Reject oversized input before decoding it (4 characters per 3 bytes).
    if tx_base64.len() > MAX_TRANSACTION_BYTES.div_ceil(3) * 4 {
        return Err(SvmError::TooLarge {
            max: MAX_TRANSACTION_BYTES,
        });
    }
    let mut tx = base64::engine::general_purpose::STANDARD
        .decode(tx_base64)
        .map_err(SvmError::Base64)?;
    if tx.len() > MAX_TRANSACTION_BYTES {
        return Err(SvmError::TooLarge {
            max: MAX_TRANSACTION_BYTES,
        });
    }
    let (count, prefix_len) = read_compact_u16(&tx)?;
    if count == 0 {
        return Err(SvmError::NoSignatures);
    }
    let message_start = usize::from(count)
        .checked_mul(SIGNATURE_LEN)
        .and_then(|len| len.checked_add(prefix_len))
        .ok_or(SvmError::Truncated)?;
    if message_start > tx.len() {
        return Err(SvmError::Truncated);
    }
    if message_start == tx.len() {
        return Err(SvmError::EmptyMessage);
    }
    Ok(tx.split_off(message_start))
}

/// The replay-protection key of a Solana payment:
/// `x402:{network}:{sha256 of the message, lowercase hex}`.
///
/// The message carries the recent blockhash and every instruction, so one
/// signed transfer has one key; the signatures are not part of it, so the key
/// is the same before and after the fee payer signs.
pub fn svm_claim_key(network: &str, tx_base64: &str) -> Result<String, SvmError> {
    let message = svm_message_bytes(tx_base64)?;
    let digest = Sha256::digest(&message);
    Ok(format!(
        "x402:{network}:{}",
        alloy_primitives::hex::encode(digest)
    ))
}

/// Reads a Solana compact-u16 ("shortvec"): 1 to 3 bytes, 7 bits each, low
/// first, high bit set on all but the last. Returns the value and its length.
fn read_compact_u16(bytes: &[u8]) -> Result<(u16, usize), SvmError> {
    let mut value: u32 = 0;
    for (i, &byte) in bytes.iter().take(3).enumerate() {
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            // A trailing zero byte is a non-canonical (longer) encoding.
            if i > 0 && byte == 0 {
                return Err(SvmError::MalformedSignatureCount);
            }
            let value = u16::try_from(value).map_err(|_| SvmError::MalformedSignatureCount)?;
            return Ok((value, i + 1));
        }
    }
    if bytes.len() < 3 {
        Err(SvmError::Truncated)
    } else {
        Err(SvmError::MalformedSignatureCount)
    }
}

/// Why a Solana transaction could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SvmError {
    /// The transaction is larger than allowed.
    #[error("transaction is larger than {max} bytes")]
    TooLarge {
        /// The limit, in decoded bytes.
        max: usize,
    },
    /// The transaction is not valid standard base64.
    #[error("transaction is not valid base64")]
    Base64(#[source] base64::DecodeError),
    /// The signature count is not a canonical compact-u16.
    #[error("transaction signature count is not a canonical compact-u16")]
    MalformedSignatureCount,
    /// The transaction has no signatures (it needs at least the fee payer's).
    #[error("transaction has no signature slots")]
    NoSignatures,
    /// The transaction ends before its signatures do.
    #[error("transaction is truncated")]
    Truncated,
    /// The transaction has signatures but no message.
    #[error("transaction has no message")]
    EmptyMessage,
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD;
    use proptest::prelude::*;

    use super::*;

    /// A synthetic transaction: `slots` signature slots filled with `fill`,
    /// then `message`.
    fn tx(slots: u8, fill: u8, message: &[u8]) -> Vec<u8> {
        let mut tx = vec![slots];
        tx.extend(std::iter::repeat_n(
            fill,
            usize::from(slots) * SIGNATURE_LEN,
        ));
        tx.extend_from_slice(message);
        tx
    }

    /// A legacy-looking message: header (2 signers), then some bytes.
    const MESSAGE: &[u8] = &[2, 0, 1, 3, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x11, 0x22];

    #[test]
    fn returns_the_message() {
        let encoded = STANDARD.encode(tx(2, 0, MESSAGE));
        assert_eq!(svm_message_bytes(&encoded).unwrap(), MESSAGE);
        let payload = SvmPayload {
            transaction: encoded,
        };
        assert_eq!(payload.message_bytes().unwrap(), MESSAGE);
    }

    #[test]
    fn signing_a_slot_keeps_the_key() {
        let unsigned = tx(2, 0, MESSAGE);
        let key = svm_claim_key("solana:devnet", &STANDARD.encode(&unsigned)).unwrap();
        assert_eq!(
            key,
            format!(
                "x402:solana:devnet:{}",
                alloy_primitives::hex::encode(Sha256::digest(MESSAGE))
            )
        );

        // The fee payer fills slot 0; the client's slot 1 changes too.
        let mut signed = unsigned.clone();
        signed[1..65].fill(0x5a);
        signed[65..129].fill(0xa5);
        assert_eq!(
            svm_claim_key("solana:devnet", &STANDARD.encode(&signed)).unwrap(),
            key
        );
        let payload = SvmPayload {
            transaction: STANDARD.encode(&signed),
        };
        assert_eq!(payload.claim_key("solana:devnet").unwrap(), key);

        // Any message byte changes it.
        for i in 129..unsigned.len() {
            let mut changed = unsigned.clone();
            changed[i] ^= 1;
            assert_ne!(
                svm_claim_key("solana:devnet", &STANDARD.encode(&changed)).unwrap(),
                key
            );
        }
        // So does the network.
        assert_ne!(
            svm_claim_key("solana:mainnet", &STANDARD.encode(&unsigned)).unwrap(),
            key
        );
    }

    #[test]
    fn reads_multi_byte_signature_counts() {
        assert_eq!(read_compact_u16(&[0x00]), Ok((0, 1)));
        assert_eq!(read_compact_u16(&[0x7f]), Ok((0x7f, 1)));
        assert_eq!(read_compact_u16(&[0x80, 0x01]), Ok((0x80, 2)));
        assert_eq!(read_compact_u16(&[0xff, 0x7f]), Ok((0x3fff, 2)));
        assert_eq!(read_compact_u16(&[0x80, 0x80, 0x01]), Ok((0x4000, 3)));
        assert_eq!(read_compact_u16(&[0xff, 0xff, 0x03]), Ok((0xffff, 3)));
        // Out of range, too long, non-canonical, truncated.
        assert_eq!(
            read_compact_u16(&[0xff, 0xff, 0x04]),
            Err(SvmError::MalformedSignatureCount)
        );
        assert_eq!(
            read_compact_u16(&[0x80, 0x80, 0x80]),
            Err(SvmError::MalformedSignatureCount)
        );
        assert_eq!(
            read_compact_u16(&[0x81, 0x00]),
            Err(SvmError::MalformedSignatureCount)
        );
        assert_eq!(
            read_compact_u16(&[0x80, 0x80, 0x00]),
            Err(SvmError::MalformedSignatureCount)
        );
        assert_eq!(read_compact_u16(&[]), Err(SvmError::Truncated));
        assert_eq!(read_compact_u16(&[0x80]), Err(SvmError::Truncated));
        assert_eq!(read_compact_u16(&[0x80, 0x80]), Err(SvmError::Truncated));

        // A two-byte count that would need 128 signatures: more than fit.
        let mut big = vec![0x80, 0x01];
        big.extend_from_slice(&[0; 100]);
        assert_eq!(
            svm_message_bytes(&STANDARD.encode(big)),
            Err(SvmError::Truncated)
        );
    }

    #[test]
    fn malformed_transactions_are_errors() {
        let cases: [(&str, SvmError); 3] = [
            ("", SvmError::Truncated),
            ("AA==", SvmError::NoSignatures),
            ("AQ==", SvmError::Truncated),
        ];
        for (input, expected) in cases {
            assert_eq!(svm_message_bytes(input), Err(expected), "{input:?}");
        }
        // Signatures but no message.
        assert_eq!(
            svm_message_bytes(&STANDARD.encode(tx(1, 7, &[]))),
            Err(SvmError::EmptyMessage)
        );
        // One byte short of the second signature.
        let mut short = tx(2, 7, &[]);
        short.pop();
        assert_eq!(
            svm_message_bytes(&STANDARD.encode(short)),
            Err(SvmError::Truncated)
        );
        // Not base64, URL-safe alphabet, missing padding, whitespace.
        let good = STANDARD.encode(tx(1, 0xfb, &[0xff; 11]));
        assert!(good.ends_with('=') && good.contains('+'));
        for bad in [
            "not base64!",
            &good.replace('+', "-"),
            good.trim_end_matches('='),
            &format!(" {good}"),
        ] {
            assert!(
                matches!(svm_message_bytes(bad), Err(SvmError::Base64(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            svm_claim_key("solana:devnet", "%%%"),
            Err(SvmError::Base64(_))
        ));
    }

    #[test]
    fn oversized_transactions_are_refused() {
        let at_limit = tx(1, 0, &vec![1; MAX_TRANSACTION_BYTES - 1 - SIGNATURE_LEN]);
        assert_eq!(at_limit.len(), MAX_TRANSACTION_BYTES);
        assert!(svm_message_bytes(&STANDARD.encode(&at_limit)).is_ok());
        let over = tx(1, 0, &vec![1; MAX_TRANSACTION_BYTES - SIGNATURE_LEN]);
        assert_eq!(
            svm_message_bytes(&STANDARD.encode(over)),
            Err(SvmError::TooLarge {
                max: MAX_TRANSACTION_BYTES
            })
        );
        let huge = "A".repeat(1 << 20);
        assert_eq!(
            svm_message_bytes(&huge),
            Err(SvmError::TooLarge {
                max: MAX_TRANSACTION_BYTES
            })
        );
    }

    #[test]
    fn payload_serde_round_trips() {
        let json = r#"{"transaction":"AQAAAA=="}"#;
        let payload: SvmPayload = serde_json::from_str(json).unwrap();
        assert_eq!(payload.transaction, "AQAAAA==");
        assert_eq!(serde_json::to_string(&payload).unwrap(), json);
        let with_extra: SvmPayload =
            serde_json::from_str(r#"{"transaction":"AQAAAA==","other":1}"#).unwrap();
        assert_eq!(with_extra, payload);
        assert!(serde_json::from_str::<SvmPayload>(r#"{"transaction":1}"#).is_err());
        assert!(serde_json::from_str::<SvmPayload>("{}").is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_strings_never_panic(s in ".{0,200}") {
            let _ = svm_claim_key("solana:devnet", &s);
        }

        #[test]
        fn arbitrary_transactions_never_panic(
            bytes in prop::collection::vec(any::<u8>(), 0..2200),
        ) {
            let encoded = STANDARD.encode(&bytes);
            if let Ok(message) = svm_message_bytes(&encoded) {
                prop_assert!(!message.is_empty());
                prop_assert!(bytes.ends_with(&message));
                prop_assert!(bytes.len() <= MAX_TRANSACTION_BYTES);
            }
        }

        #[test]
        fn signatures_never_change_the_key(
            slots in 1u8..4,
            sigs in prop::collection::vec(any::<u8>(), 256),
            message in prop::collection::vec(any::<u8>(), 1..300),
        ) {
            let unsigned = tx(slots, 0, &message);
            let mut signed = unsigned.clone();
            let sig_len = usize::from(slots) * SIGNATURE_LEN;
            signed[1..=sig_len].copy_from_slice(&sigs[..sig_len]);
            prop_assert_eq!(
                svm_claim_key("solana:devnet", &STANDARD.encode(&unsigned))?,
                svm_claim_key("solana:devnet", &STANDARD.encode(&signed))?
            );
        }
    }
}
