//! NEAR `exact` payments: the claim key of a NEP-366 `SignedDelegateAction`.
//!
//! The upstream `exact` scheme on NEAR (`scheme_exact_near.md`) carries the
//! payment as `{"signedDelegateAction": "<base64 Borsh>"}`: a delegate action
//! signed by the payer, which the facilitator's relayer wraps in its own
//! transaction. NEAR's replay primitive is the access key's nonce: one
//! `(sender_id, public_key, nonce)` executes at most once on chain, whatever
//! else the action says. That triple is the claim key, so two different
//! encodings of one authorization (say, another `max_block_height` signed
//! with the same nonce) are one claim.
//!
//! Borsh layout read here (nearcore's `DelegateAction`):
//!
//! ```text
//! SignedDelegateAction = DelegateAction ‖ Signature
//! DelegateAction       = sender_id: string ‖ receiver_id: string
//!                        ‖ actions: u32 count ‖ Action…
//!                        ‖ nonce: u64 ‖ max_block_height: u64 ‖ public_key: PublicKey
//! string               = u32 length ‖ UTF-8 bytes      (integers little-endian)
//! PublicKey            = 0u8 ‖ 32 bytes (ed25519) | 1u8 ‖ 64 bytes (secp256k1)
//! Signature            = 0u8 ‖ 64 bytes (ed25519) | 1u8 ‖ 65 bytes (secp256k1)
//! ```
//!
//! The actions are skipped, not judged: checking that the only one is an
//! `ft_transfer` of the right amount is the facilitator's job. Every action
//! kind a delegate may carry (all but `Delegate` itself, and the global
//! contract kinds added after NEP-366) can be skipped; another is
//! [`NearPayloadError::UnknownAction`]. The signature is not verified here
//! either (the facilitator did, before the claim is made).

use base64::Engine as _;
use serde_json::Value;

use crate::svm::base58;

/// The largest `signedDelegateAction` read, decoded. A one-`ft_transfer`
/// delegate is about 300 bytes; the bound keeps a hostile payload cheap.
pub(crate) const MAX_SIGNED_DELEGATE_BYTES: usize = 16 * 1024;

/// Why a NEAR payment's `payload` cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NearPayloadError {
    /// The payload has no string `signedDelegateAction`.
    #[error("NEAR payload has no signedDelegateAction string")]
    MissingSignedDelegate,
    /// `signedDelegateAction` is not base64, or decodes to more than
    /// 16 KiB.
    #[error("signedDelegateAction is not base64 of at most 16 KiB")]
    Base64,
    /// The bytes end before the structure does.
    #[error("signedDelegateAction ends early")]
    Truncated,
    /// Bytes follow the signature.
    #[error("signedDelegateAction has {0} bytes after its signature")]
    TrailingBytes(usize),
    /// An action kind this reader cannot skip.
    #[error("signedDelegateAction carries an action of unknown kind {0}")]
    UnknownAction(u8),
    /// A key or signature type other than ed25519 (0) and secp256k1 (1).
    #[error("signedDelegateAction has a key or signature of unknown type {0}")]
    UnknownKeyType(u8),
    /// The sender is not a NEAR account id (2 to 64 characters of
    /// `a-z 0-9 - _ .`).
    #[error("signedDelegateAction's sender is not a NEAR account id")]
    InvalidAccountId,
    /// A string that is not UTF-8.
    #[error("signedDelegateAction has a string that is not UTF-8")]
    InvalidUtf8,
}

/// What the claim key of a NEAR payment is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DelegateKey {
    /// The payer's account (`delegate_action.sender_id`).
    pub(crate) sender_id: String,
    /// The signing key, as NEAR writes it: `ed25519:<base58>`.
    pub(crate) public_key: String,
    /// The access key nonce the action consumes.
    pub(crate) nonce: u64,
    /// The last block at which the action may execute.
    pub(crate) max_block_height: u64,
}

impl DelegateKey {
    /// The claim key: `x402:{network}:{sender_id}:{public key}:{nonce}`,
    /// the public key written `ed25519:<base58>` (or `secp256k1:`), the
    /// nonce in decimal. Account ids hold no `:`, so the parts never run
    /// into each other.
    pub(crate) fn claim_key(&self, network: &str) -> String {
        format!(
            "x402:{network}:{}:{}:{}",
            self.sender_id, self.public_key, self.nonce
        )
    }
}

/// Reads the delegate action of a NEAR `exact` payload
/// (`{"signedDelegateAction": "<base64>"}`).
pub(crate) fn delegate_key(payload: &Value) -> Result<DelegateKey, NearPayloadError> {
    let text = payload
        .get("signedDelegateAction")
        .and_then(Value::as_str)
        .ok_or(NearPayloadError::MissingSignedDelegate)?;
    // Reject oversized input before decoding it (4 characters per 3 bytes).
    if text.len() > MAX_SIGNED_DELEGATE_BYTES.div_ceil(3) * 4 {
        return Err(NearPayloadError::Base64);
    }
    let bytes = crate::codec::BASE64
        .decode(text.trim())
        .map_err(|_| NearPayloadError::Base64)?;
    if bytes.len() > MAX_SIGNED_DELEGATE_BYTES {
        return Err(NearPayloadError::Base64);
    }
    read_signed_delegate(&bytes)
}

/// Reads a Borsh `SignedDelegateAction`.
pub(crate) fn read_signed_delegate(bytes: &[u8]) -> Result<DelegateKey, NearPayloadError> {
    let mut r = Reader(bytes);
    let sender_id = r.string()?;
    if !is_account_id(&sender_id) {
        return Err(NearPayloadError::InvalidAccountId);
    }
    let _receiver_id = r.string()?;
    let actions = r.u32()?;
    for _ in 0..actions {
        r.skip_action()?;
    }
    let nonce = r.u64()?;
    let max_block_height = r.u64()?;
    let public_key = r.public_key()?;
    r.signature()?;
    if !r.0.is_empty() {
        return Err(NearPayloadError::TrailingBytes(r.0.len()));
    }
    Ok(DelegateKey {
        sender_id,
        public_key,
        nonce,
        max_block_height,
    })
}

/// A NEAR account id: 2 to 64 characters of `a-z`, `0-9`, `-`, `_`, `.`
/// (the full rule also forbids separators at the ends and side by side;
/// what matters here is that no `:` can reach the claim key).
fn is_account_id(id: &str) -> bool {
    (2..=64).contains(&id.len())
        && id.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        })
}

/// A Borsh reader over the rest of the input.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], NearPayloadError> {
        if n > self.0.len() {
            return Err(NearPayloadError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, NearPayloadError> {
        Ok(self.take(1)?.first().copied().unwrap_or_default())
    }

    fn u32(&mut self) -> Result<u32, NearPayloadError> {
        let mut b = [0; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, NearPayloadError> {
        let mut b = [0; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    /// A `u32`-prefixed byte string, skipped.
    fn skip_bytes(&mut self) -> Result<(), NearPayloadError> {
        let len = self.u32()?;
        let len = usize::try_from(len).map_err(|_| NearPayloadError::Truncated)?;
        self.take(len).map(|_| ())
    }

    fn string(&mut self) -> Result<String, NearPayloadError> {
        let len = self.u32()?;
        let len = usize::try_from(len).map_err(|_| NearPayloadError::Truncated)?;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| NearPayloadError::InvalidUtf8)
    }

    /// A public key, as NEAR writes it (`ed25519:<base58>`).
    fn public_key(&mut self) -> Result<String, NearPayloadError> {
        let (curve, len) = match self.u8()? {
            0 => ("ed25519", 32),
            1 => ("secp256k1", 64),
            other => return Err(NearPayloadError::UnknownKeyType(other)),
        };
        Ok(format!("{curve}:{}", base58::encode(self.take(len)?)))
    }

    fn signature(&mut self) -> Result<(), NearPayloadError> {
        let len = match self.u8()? {
            0 => 64,
            1 => 65,
            other => return Err(NearPayloadError::UnknownKeyType(other)),
        };
        self.take(len).map(|_| ())
    }

    /// Skips one `NonDelegateAction`, by its Borsh tag.
    fn skip_action(&mut self) -> Result<(), NearPayloadError> {
        match self.u8()? {
            // CreateAccount {}
            0 => Ok(()),
            // DeployContract { code: Vec<u8> }
            1 => self.skip_bytes(),
            // FunctionCall { method_name: String, args: Vec<u8>, gas: u64, deposit: u128 }
            2 => {
                self.skip_bytes()?;
                self.skip_bytes()?;
                self.take(8 + 16).map(|_| ())
            }
            // Transfer { deposit: u128 }
            3 => self.take(16).map(|_| ()),
            // Stake { stake: u128, public_key }
            4 => {
                self.take(16)?;
                self.public_key().map(|_| ())
            }
            // AddKey { public_key, access_key: { nonce: u64, permission } }
            5 => {
                self.public_key()?;
                self.take(8)?;
                match self.u8()? {
                    // FunctionCall { allowance: Option<u128>, receiver_id: String, method_names: Vec<String> }
                    0 => {
                        match self.u8()? {
                            0 => {}
                            1 => {
                                self.take(16)?;
                            }
                            other => return Err(NearPayloadError::UnknownAction(other)),
                        }
                        self.skip_bytes()?;
                        let names = self.u32()?;
                        for _ in 0..names {
                            self.skip_bytes()?;
                        }
                        Ok(())
                    }
                    // FullAccess
                    1 => Ok(()),
                    other => Err(NearPayloadError::UnknownAction(other)),
                }
            }
            // DeleteKey { public_key }
            6 => self.public_key().map(|_| ()),
            // DeleteAccount { beneficiary_id: String }
            7 => self.skip_bytes(),
            other => Err(NearPayloadError::UnknownAction(other)),
        }
    }
}
