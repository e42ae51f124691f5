//! Which key a payment claims, and until when.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy_primitives::Address;
use serde::Deserialize as _;

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
    /// This crate does not know how to name this kind of payment (a network
    /// family or payload shape it does not handle).
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
///
/// The Solana key hashes the transaction's message only, so the fee payer's
/// signature slot does not change it. A Solana transfer lapses with its
/// recent blockhash (about 150 slots, a minute or two), far within
/// [`MIN_CLAIM_LIFETIME`]; the seller's `maxTimeoutSeconds` is honoured when
/// it is longer.
///
/// The claim is kept until [`CLAIM_GRACE`] after that, and for at least
/// [`MIN_CLAIM_LIFETIME`]. An authorization valid for more than
/// [`MAX_AUTHORIZATION_LIFETIME`] from `now` is refused with
/// [`ClaimKeyError::LifetimeTooLong`]. Payments on other networks, or EVM
/// payloads of another shape, are [`ClaimKeyError::Unsupported`].
pub fn claim_key_at(
    payload: &PaymentPayload,
    requirements: &PaymentRequirements,
    network_caip2: &str,
    now: SystemTime,
) -> Result<ClaimKey, ClaimKeyError> {
    let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let unsupported = || ClaimKeyError::Unsupported {
        scheme: payload.scheme().to_owned(),
        network: network_caip2.to_owned(),
    };
    // `None`: valid "forever" (beyond u64 seconds).
    let (key, valid_until): (String, Option<u64>) = match network::family(network_caip2) {
        Family::Evm => {
            let evm = match EvmPayload::from_value(payload.payload()) {
                Ok(evm) => evm,
                // A shape this crate does not know (a new transfer method).
                Err(EvmPayloadError::MissingAuthorization) => return Err(unsupported()),
                Err(e) => return Err(ClaimKeyError::InvalidEvmPayload(e)),
            };
            match &evm {
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
            (
                key,
                now_secs.checked_add(requirements.max_timeout_seconds()),
            )
        }
        _ => return Err(unsupported()),
    };

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
