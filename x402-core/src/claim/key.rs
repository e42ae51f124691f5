//! Which key a payment claims, and until when.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy_primitives::Address;
use serde::Deserialize as _;

use super::{digest, near};
use crate::{
    evm::{self, EvmPayload, EvmPayloadError},
    network::{self, Family},
    proto::{PaymentPayload, PaymentRequirements},
    svm::{SvmError, SvmPayload},
};

/// How long a claim outlives its authorization's expiry, to cover clock skew
/// between this server, the store and the chain.
pub const CLAIM_GRACE: Duration = Duration::from_secs(60);

/// The shortest a claim is kept, whatever the authorization says.
pub const MIN_CLAIM_LIFETIME: Duration = Duration::from_secs(900);

/// The longest an authorization may stay valid, from now. A longer-lived one
/// is refused rather than remembered for less than it can be replayed.
pub const MAX_AUTHORIZATION_LIFETIME: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// How many times the route's `maxTimeoutSeconds` a NEAR delegate action is
/// taken to stay executable: the facilitator refuses one whose
/// `max_block_height` is more than `maxTimeoutSeconds` blocks ahead, and
/// NEAR makes about one block a second (faster on mainnet); this covers
/// blocks coming at half that pace.
const NEAR_BLOCK_TIME_SLACK: u64 = 2;

/// What a payment claims: a key naming the authorization, and when the
/// claim may be forgotten.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimKey {
    /// The key, e.g. `x402:eip155:8453:{asset}:{from}:{nonce}`.
    pub key: String,
    /// When the claim may be forgotten: the authorization's expiry plus
    /// [`CLAIM_GRACE`], and at least [`MIN_CLAIM_LIFETIME`] from now.
    pub expires_at: SystemTime,
}

/// Why a payment has no [`ClaimKey`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimKeyError {
    /// Nothing names this payment: its scheme payload is not a non-empty
    /// JSON object, or it is of a kind keyed only by the
    /// [digest fallback](super#every-network) and the guard turned that
    /// off ([`ReplayGuard::digest_fallback`](super::ReplayGuard::digest_fallback)).
    #[error("no replay claim key for payments of scheme {scheme:?} on {network:?}")]
    Unsupported {
        /// The scheme paid with.
        scheme: String,
        /// The network (CAIP-2).
        network: String,
    },
    /// An EVM payment whose `payload` cannot be read.
    #[error("EVM payment payload cannot be read")]
    InvalidEvmPayload(#[source] EvmPayloadError),
    /// A Solana payment whose `payload` is not `{"transaction": "<base64>"}`.
    #[error("Solana payment payload is not a transaction object")]
    InvalidSvmPayload(#[source] serde_json::Error),
    /// A Solana payment whose transaction cannot be read.
    #[error("Solana payment transaction cannot be read")]
    InvalidSvmTransaction(#[source] SvmError),
    /// A NEAR payment whose `signedDelegateAction` cannot be read.
    #[error("NEAR payment payload cannot be read")]
    InvalidNearPayload(#[source] near::NearPayloadError),
    /// The requirement's `asset` is not an EVM address.
    #[error("requirement asset {0:?} is not an EVM address")]
    InvalidAsset(String),
    /// The authorization stays valid for more than
    /// [`MAX_AUTHORIZATION_LIFETIME`].
    #[error("authorization stays valid for more than 366 days")]
    LifetimeTooLong,
}

impl ClaimKeyError {
    /// The reason code the [`ReplayGuard`](super::ReplayGuard) refuses the
    /// payment with (in the 402's `error`).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unsupported { .. } => "claim_unsupported",
            Self::LifetimeTooLong => "authorization_lifetime_too_long",
            Self::InvalidEvmPayload(_)
            | Self::InvalidSvmPayload(_)
            | Self::InvalidSvmTransaction(_)
            | Self::InvalidNearPayload(_)
            | Self::InvalidAsset(_) => "invalid_payload",
        }
    }
}

/// The replay claim of a payment, as of now. See [`claim_key_at`].
pub fn claim_key(
    payload: &PaymentPayload,
    requirements: &PaymentRequirements,
    network_caip2: &str,
) -> Result<ClaimKey, ClaimKeyError> {
    claim_key_at(payload, requirements, network_caip2, SystemTime::now())
}

/// The replay claim of a payment, as of `now`.
///
/// `network_caip2` is the payment's network as a CAIP-2 id whatever the
/// protocol version (the engine's `PaymentContext::network`), so a version 1
/// and a version 2 copy of one authorization name the same key. Keys, by
/// payload:
///
/// | Payment | Key | Valid until |
/// |---|---|---|
/// | EIP-3009 (`authorization`) | `x402:{network}:{asset}:{from}:{nonce}`, lowercase hex | `validBefore` |
/// | Permit2 (`permit2Authorization`) | `x402:{network}:permit2:{from}:{nonce in decimal}` | `deadline` |
/// | Solana (`transaction`) | `x402:{network}:{sha256 of the message, hex}` | now + `maxTimeoutSeconds` |
/// | NEAR (`signedDelegateAction`, NEP-366) | `x402:{network}:{sender_id}:{public key}:{nonce}` | now + 2 × `maxTimeoutSeconds` |
/// | anything else (`near:*` excepted) | `x402:{network}:digest:{sha256 of the canonical payload}` | now + `maxTimeoutSeconds` |
///
/// The Solana key hashes the transaction's message only, so the fee payer's
/// signature slot does not change it. A Solana transfer lapses with its
/// recent blockhash (about 150 slots, a minute or two), far within
/// [`MIN_CLAIM_LIFETIME`]; the seller's `maxTimeoutSeconds` is honoured when
/// it is longer.
///
/// The NEAR key is the access key nonce the delegate action consumes (its
/// public key written `ed25519:<base58>`): one nonce executes once on chain,
/// so every encoding of it is one claim. The facilitator refuses an action
/// whose `max_block_height` is more than `maxTimeoutSeconds` blocks ahead;
/// at one block a second or faster it is dead within that, and twice that
/// covers blocks at half speed.
///
/// Every other payment (another network family, or an EVM payload of a
/// shape this crate does not read) is keyed by the digest of its payload;
/// see [the module docs](super#every-network) for what that catches and
/// what it does not.
///
/// The claim is kept until [`CLAIM_GRACE`] after that, and for at least
/// [`MIN_CLAIM_LIFETIME`]. An authorization valid for more than
/// [`MAX_AUTHORIZATION_LIFETIME`] from `now` is refused with
/// [`ClaimKeyError::LifetimeTooLong`]. A payload that is not a non-empty
/// JSON object is [`ClaimKeyError::Unsupported`].
pub fn claim_key_at(
    payload: &PaymentPayload,
    requirements: &PaymentRequirements,
    network_caip2: &str,
    now: SystemTime,
) -> Result<ClaimKey, ClaimKeyError> {
    derive(payload, requirements, network_caip2, now, true, None)
}

/// [`claim_key_at`], with the digest fallback on or off: off, the payments
/// it would key are [`ClaimKeyError::Unsupported`]. `read` is `payload`'s
/// `payload` as an EVM payment when it was read already (`Some(None)`: it
/// is not one).
pub(crate) fn derive(
    payload: &PaymentPayload,
    requirements: &PaymentRequirements,
    network_caip2: &str,
    now: SystemTime,
    digest_fallback: bool,
    read: Option<Option<&EvmPayload>>,
) -> Result<ClaimKey, ClaimKeyError> {
    let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let timeout = requirements.max_timeout_seconds();
    let unsupported = || ClaimKeyError::Unsupported {
        scheme: payload.scheme().to_owned(),
        network: network_caip2.to_owned(),
    };
    let digest = || {
        if !digest_fallback {
            return Err(unsupported());
        }
        let key = digest::digest_key(network_caip2, payload.scheme(), payload.payload())
            .ok_or_else(unsupported)?;
        Ok((key, now_secs.checked_add(timeout)))
    };
    // `None`: valid "forever" (beyond u64 seconds).
    let (key, valid_until): (String, Option<u64>) = match network::family(network_caip2) {
        Family::Evm => {
            let parsed;
            let evm = match read {
                Some(Some(evm)) => evm,
                // Not read yet, or not an EVM payment: read here, for why.
                Some(None) | None => match EvmPayload::from_value(payload.payload()) {
                    Ok(evm) => {
                        parsed = evm;
                        &parsed
                    }
                    // A shape this crate does not know (a new transfer method).
                    Err(EvmPayloadError::MissingAuthorization) => {
                        return finish(digest()?, now_secs)
                    }
                    Err(e) => return Err(ClaimKeyError::InvalidEvmPayload(e)),
                },
            };
            match evm {
                EvmPayload::Eip3009(p) => {
                    let asset: Address = requirements.asset().parse().map_err(|_| {
                        ClaimKeyError::InvalidAsset(requirements.asset().to_owned())
                    })?;
                    (
                        evm::eip3009_claim_key(network_caip2, &asset, &p.authorization),
                        evm::eip3009_claim_expiry(&p.authorization),
                    )
                }
                EvmPayload::Permit2(p) => (
                    evm::permit2_claim_key(network_caip2, &p.permit2_authorization),
                    evm::permit2_claim_expiry(&p.permit2_authorization),
                ),
            }
        }
        Family::Svm => {
            let svm = SvmPayload::deserialize(payload.payload())
                .map_err(ClaimKeyError::InvalidSvmPayload)?;
            let key = svm
                .claim_key(network_caip2)
                .map_err(ClaimKeyError::InvalidSvmTransaction)?;
            (key, now_secs.checked_add(timeout))
        }
        _ if network_caip2.starts_with("near:") => {
            let delegate =
                near::delegate_key(payload.payload()).map_err(ClaimKeyError::InvalidNearPayload)?;
            (
                delegate.claim_key(network_caip2),
                timeout
                    .checked_mul(NEAR_BLOCK_TIME_SLACK)
                    .and_then(|t| now_secs.checked_add(t)),
            )
        }
        _ => digest()?,
    };
    finish((key, valid_until), now_secs)
}

/// The claim of `key`, authorization valid until `valid_until` (`None`:
/// beyond u64 seconds), as of `now_secs`.
fn finish(
    (key, valid_until): (String, Option<u64>),
    now_secs: u64,
) -> Result<ClaimKey, ClaimKeyError> {
    let valid_until = valid_until
        .filter(|&t| t <= now_secs.saturating_add(MAX_AUTHORIZATION_LIFETIME.as_secs()))
        .ok_or(ClaimKeyError::LifetimeTooLong)?;
    // Both terms are at most now + 366 days + 60 s: no overflow.
    let expires_at = valid_until
        .saturating_add(CLAIM_GRACE.as_secs())
        .max(now_secs.saturating_add(MIN_CLAIM_LIFETIME.as_secs()));
    let expires_at = UNIX_EPOCH
        .checked_add(Duration::from_secs(expires_at))
        .ok_or(ClaimKeyError::LifetimeTooLong)?;
    Ok(ClaimKey { key, expires_at })
}
