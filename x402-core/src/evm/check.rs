//! The checks of an EVM payment that need no chain state: the EIP-712
//! signature recovers the payer, the recipient and amount are the
//! requirement's, the validity window holds.
//!
//! The in-process facilitator runs them before it asks its ledger; the
//! engine runs them before any facilitator call (`EngineBuilder::local_precheck`),
//! so a payload with a bad signature costs a remote facilitator nothing.

use std::{
    collections::HashMap,
    sync::{Mutex, OnceLock, PoisonError},
};

use alloy_primitives::{Address, B256, U256};

use super::{
    reason, recover_signer, Eip3009Authorization, ExactEvmPayload, Permit2Payload, SignatureError,
    EXACT_PERMIT2_PROXY, UPTO_PERMIT2_PROXY,
};
use crate::proto::{FacilitatorRequest, PaymentPayload, PaymentRequirements};

/// A refusal: a reason code (see [`reason`]), a message and the payer when
/// known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    pub(crate) payer: Option<Address>,
}

pub(crate) fn refused(
    reason: &'static str,
    message: impl Into<String>,
    payer: Option<Address>,
) -> Refused {
    Refused {
        reason,
        message: message.into(),
        payer,
    }
}

/// What the checks compare against, and how they treat what they cannot
/// check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checks {
    /// Unix seconds.
    pub(crate) now: u64,
    /// How long before its end a payment is already refused, in seconds.
    pub(crate) margin: u64,
    /// Smart-wallet (longer than 65 bytes) signatures: refused, or left to
    /// whoever checks them on the chain.
    pub(crate) smart_wallets: SmartWallets,
    /// Whether the signer is recovered, or left to the facilitator (the
    /// engine's pre-check, for a payer the facilitator accepted before).
    pub(crate) signer: Signer,
}

/// What [`Checks`] does with the signature of a payer it can check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signer {
    /// Recover it; refuse the payment unless it is the payer's.
    Recover,
    /// Leave it to the facilitator.
    Defer,
}

/// What [`Checks`] does with a signature only the chain can check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SmartWallets {
    /// Refuse it (a facilitator that cannot check them).
    #[cfg_attr(not(feature = "local-facilitator"), allow(dead_code))]
    Refuse,
    /// Accept it unchecked (the facilitator checks it).
    Defer,
}

/// Which x402 proxy a Permit2 payment goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permit2Kind {
    Exact,
    Upto,
}

impl Permit2Kind {
    fn proxy(self) -> Address {
        match self {
            Self::Exact => EXACT_PERMIT2_PROXY,
            Self::Upto => UPTO_PERMIT2_PROXY,
        }
    }

    /// The reason code of a malformed payload.
    pub(crate) fn payload_reason(self) -> &'static str {
        match self {
            Self::Exact => reason::PAYLOAD,
            Self::Upto => reason::UPTO_PAYLOAD,
        }
    }
}

/// The requirement's asset and recipient as EVM addresses.
pub(crate) fn requirement_addresses(
    requirements: &PaymentRequirements,
) -> Result<(Address, Address), Refused> {
    match (
        requirements.asset().parse::<Address>(),
        requirements.pay_to().parse::<Address>(),
    ) {
        (Ok(asset), Ok(pay_to)) => Ok((asset, pay_to)),
        _ => Err(refused(
            reason::INVALID_REQUIREMENTS,
            "the requirement's asset and payTo must be EVM addresses",
            None,
        )),
    }
}

/// An `exact` EIP-3009 payment on `chain_id`, in the order of the
/// TypeScript facilitator: the token's EIP-712 domain, the requirement's
/// addresses, the payload (`payload`: parsed, or why not), the signature,
/// the recipient, the validity window, the value. Returns the asset.
pub(crate) fn eip3009(
    requirements: &PaymentRequirements,
    payload: Result<&ExactEvmPayload, Refused>,
    chain_id: u64,
    checks: Checks,
) -> Result<Address, Refused> {
    let extra = requirements.extra();
    let (Some(name), Some(version)) = (
        crate::proto::field(extra, "name").and_then(|v| v.as_str()),
        crate::proto::field(extra, "version").and_then(|v| v.as_str()),
    ) else {
        return Err(refused(
            reason::MISSING_EIP712_DOMAIN,
            "the requirement's extra has no EIP-712 name and version",
            None,
        ));
    };
    let (asset, pay_to) = requirement_addresses(requirements)?;
    let payload = payload?;
    let auth = &payload.authorization;
    let payer = Some(auth.from);

    if checks.signer == Signer::Recover {
        eip3009_signer(
            auth,
            &payload.signature,
            name,
            version,
            chain_id,
            asset,
            checks,
        )?;
    }
    if auth.to != pay_to {
        return Err(refused(
            reason::RECIPIENT_MISMATCH,
            "authorization.to is not the requirement's payTo",
            payer,
        ));
    }
    let now = U256::from(checks.now);
    if auth.valid_before < now.saturating_add(U256::from(checks.margin)) {
        return Err(refused(
            reason::VALID_BEFORE,
            format!("the authorization expires before now + {} s", checks.margin),
            payer,
        ));
    }
    if auth.valid_after > now {
        return Err(refused(
            reason::VALID_AFTER,
            "the authorization is not valid yet",
            payer,
        ));
    }
    if auth.value != requirements.amount() {
        return Err(refused(
            reason::VALUE,
            format!(
                "authorization.value {} is not the required amount {}",
                auth.value,
                requirements.amount()
            ),
            payer,
        ));
    }
    Ok(asset)
}

/// Whether `signature` over the EIP-3009 `auth` recovers `auth.from`.
fn eip3009_signer(
    auth: &Eip3009Authorization,
    signature: &[u8],
    name: &str,
    version: &str,
    chain_id: u64,
    asset: Address,
    checks: Checks,
) -> Result<(), Refused> {
    let payer = Some(auth.from);
    let digest = auth.signing_hash_in(name, version, chain_id, asset);
    match recover_cached(digest, signature) {
        Ok(signer) if signer == auth.from => {}
        Ok(_) => {
            return Err(refused(
                reason::SIGNATURE,
                "the signature does not recover authorization.from",
                payer,
            ))
        }
        Err(SignatureError::UnsupportedLength { .. })
            if checks.smart_wallets == SmartWallets::Defer => {}
        Err(e @ SignatureError::UnsupportedLength { .. }) => {
            return Err(refused(
                reason::UNDEPLOYED_SMART_WALLET,
                e.to_string(),
                payer,
            ))
        }
        Err(e) => return Err(refused(reason::SIGNATURE, e.to_string(), payer)),
    }
    Ok(())
}

/// A Permit2 payment of `kind` on `chain_id`, in the order of the
/// TypeScript facilitator: the witness's shape, the spender, the recipient,
/// the facilitator named in an `upto` witness (when `facilitator` is
/// known), the window, the amount (at `settle`, an `upto` requirement's
/// amount is the charge), the token, the signature. Returns the amount to
/// move.
pub(crate) fn permit2(
    request: &FacilitatorRequest,
    kind: Permit2Kind,
    payload: &Permit2Payload,
    chain_id: u64,
    checks: Checks,
    settle: bool,
    facilitator: Option<Address>,
) -> Result<U256, Refused> {
    let requirements = &request.payment_requirements;
    let (asset, pay_to) = requirement_addresses(requirements)?;
    let auth = &payload.permit2_authorization;
    let payer = Some(auth.from);
    match (kind, auth.witness.facilitator) {
        (Permit2Kind::Exact, None) | (Permit2Kind::Upto, Some(_)) => {}
        (Permit2Kind::Exact, Some(_)) => {
            return Err(refused(
                kind.payload_reason(),
                "an exact Permit2 witness names no facilitator",
                payer,
            ))
        }
        (Permit2Kind::Upto, None) => {
            return Err(refused(
                kind.payload_reason(),
                "an upto Permit2 witness must name the facilitator",
                payer,
            ))
        }
    }
    if auth.spender != kind.proxy() {
        return Err(refused(
            reason::PERMIT2_SPENDER,
            format!(
                "the spender must be the x402 proxy {}",
                kind.proxy().to_checksum(None)
            ),
            payer,
        ));
    }
    if auth.witness.to != pay_to {
        return Err(refused(
            reason::PERMIT2_RECIPIENT_MISMATCH,
            "witness.to is not the requirement's payTo",
            payer,
        ));
    }
    if let (Some(named), Some(expected)) = (auth.witness.facilitator, facilitator) {
        if named != expected {
            return Err(refused(
                reason::UPTO_FACILITATOR_MISMATCH,
                format!(
                    "witness.facilitator is not this facilitator ({})",
                    expected.to_checksum(None)
                ),
                payer,
            ));
        }
    }
    let now = U256::from(checks.now);
    if auth.deadline < now.saturating_add(U256::from(checks.margin)) {
        return Err(refused(
            reason::PERMIT2_DEADLINE_EXPIRED,
            format!("the permit's deadline is before now + {} s", checks.margin),
            payer,
        ));
    }
    if auth.witness.valid_after > now {
        return Err(refused(
            reason::PERMIT2_NOT_YET_VALID,
            "the permit is not valid yet (witness.validAfter)",
            payer,
        ));
    }
    let permitted = auth.permitted.amount.get();
    let required = requirements.amount().get();
    match (kind, settle) {
        // At settle time an `upto` requirement's amount is the charge; the
        // ceiling is the one the payment accepted.
        (Permit2Kind::Upto, true) => {
            if required > permitted {
                return Err(refused(
                    reason::UPTO_SETTLEMENT_EXCEEDS_AMOUNT,
                    format!("the charge {required} is above permitted.amount {permitted}"),
                    payer,
                ));
            }
            let ceiling = match &request.payment_payload {
                PaymentPayload::V2(p) => p.accepted.amount.get(),
                PaymentPayload::V1(_) => permitted,
            };
            if permitted != ceiling {
                return Err(refused(
                    reason::PERMIT2_AMOUNT_MISMATCH,
                    format!("permitted.amount {permitted} is not the accepted ceiling {ceiling}"),
                    payer,
                ));
            }
        }
        // Otherwise it is the price or the ceiling, signed exactly.
        _ => {
            if required != permitted {
                return Err(refused(
                    reason::PERMIT2_AMOUNT_MISMATCH,
                    format!("permitted.amount {permitted} is not the required amount {required}"),
                    payer,
                ));
            }
        }
    }
    if auth.permitted.token != asset {
        return Err(refused(
            reason::PERMIT2_TOKEN_MISMATCH,
            "permitted.token is not the requirement's asset",
            payer,
        ));
    }
    if checks.signer == Signer::Defer {
        return Ok(required);
    }
    let digest = auth.signing_hash(chain_id);
    match recover_cached(digest, &payload.signature) {
        Ok(signer) if signer == auth.from => {}
        Ok(_) => {
            return Err(refused(
                reason::PERMIT2_SIGNATURE,
                "the signature does not recover permit2Authorization.from",
                payer,
            ))
        }
        Err(SignatureError::UnsupportedLength { .. })
            if checks.smart_wallets == SmartWallets::Defer => {}
        Err(e @ SignatureError::UnsupportedLength { .. }) => {
            return Err(refused(
                reason::PERMIT2_SIGNATURE,
                format!("{e} (smart-wallet signatures are not supported)"),
                payer,
            ))
        }
        Err(e) => return Err(refused(reason::PERMIT2_SIGNATURE, e.to_string(), payer)),
    }
    Ok(required)
}

/// [`recover_signer`], remembering recent answers: the engine's pre-check,
/// then an in-process facilitator's verify and settle, recover each
/// payment's signer once. Recovery is a pure function of the digest and the
/// signature, so a remembered answer is always the right one.
pub(crate) fn recover_cached(digest: B256, signature: &[u8]) -> Result<Address, SignatureError> {
    /// Bound on remembered signers; past it the memory starts over. A
    /// signer is asked for again within one request (pre-check, then an
    /// in-process facilitator's verify and settle), so this only has to
    /// cover the payments in flight at once; about 100 KB.
    const CAPACITY: usize = 1024;
    static RECOVERED: OnceLock<Mutex<HashMap<B256, Address>>> = OnceLock::new();

    let key = {
        let mut hasher = alloy_primitives::Keccak256::new();
        hasher.update(digest);
        hasher.update(signature);
        hasher.finalize()
    };
    // The map holds plain values: a panic elsewhere cannot leave an entry
    // half-written, so a poisoned lock is still sound to use.
    let lock = || {
        RECOVERED
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    };
    if let Some(signer) = lock().get(&key) {
        return Ok(*signer);
    }
    let signer = recover_signer(digest, signature)?;
    let mut map = lock();
    if map.len() >= CAPACITY {
        map.clear();
    }
    map.insert(key, signer);
    Ok(signer)
}
