//! The engine's own check of an EVM payment before any facilitator call
//! ([`EngineBuilder::local_precheck`]): a payload whose signature does not
//! recover its payer, whose window has closed, or whose amount or recipient
//! is not the requirement's is refused here, and costs the facilitator
//! nothing.
//!
//! A payer the facilitator accepted before has every check but the signer
//! recovery ([`super::known_payers`]).
//!
//! Only what the check can judge is refused: a payment it cannot evaluate
//! (a network that is not EVM, a smart-wallet signature, a payload or
//! requirement it does not read) goes to the facilitator as before.

use alloy_primitives::Address;

use crate::{
    evm::{
        check::{self, Checks, Permit2Kind, Refused, Signer, SmartWallets},
        reason, EvmPayload,
    },
    network,
    proto::{FacilitatorRequest, PreparedRequest},
};

use super::known_payers::{KnownPayers, Voucher};

/// How long before its end a payment is refused: the facilitators' margin
/// (the TypeScript facilitator's and the in-process one's default), so
/// that what passes here is not refused there for its time.
pub(crate) const MARGIN_SECS: u64 = 6;

/// What the pre-check knows of a payment it let through.
#[derive(Debug, Default)]
pub(super) struct Passed<'a> {
    /// The chain and payer, when the payer's signer was recovered here (an
    /// acceptance by the facilitator then makes it a known payer).
    pub(super) recovered: Option<(u64, Address)>,
    /// One of a known payer's unchecked payments: its signer is the
    /// facilitator's to judge.
    pub(super) voucher: Option<Voucher<'a>>,
}

/// `Err` when the payment is certainly invalid; `Ok` when it passed or the
/// check cannot tell. With `known`, a payer there has its signature left to
/// the facilitator (see [`super::known_payers`]).
pub(super) fn precheck<'a>(
    request: &PreparedRequest,
    now: u64,
    known: Option<&'a KnownPayers>,
) -> Result<Passed<'a>, Refused> {
    let requirements = &request.payment_requirements;
    let Some(chain_id) = network::evm_chain_id(requirements.network()) else {
        return Ok(Passed::default());
    };
    // Read once: the replay claim's key reads the same.
    let Some(payload) = request.evm_payload() else {
        return Ok(Passed::default());
    };
    let payer = payload.payer();
    let checks = |signer| Checks {
        now,
        margin: MARGIN_SECS,
        smart_wallets: SmartWallets::Defer,
        signer,
    };
    if let Some(known) = known.filter(|k| k.is_trusted(chain_id, &payer)) {
        check(request, payload, chain_id, checks(Signer::Defer))?;
        if let Some(voucher) = known.take(chain_id, payer, now) {
            return Ok(Passed {
                recovered: None,
                voucher: Some(voucher),
            });
        }
        // Its unchecked payments were taken meanwhile: this one is recovered.
    }
    check(request, payload, chain_id, checks(Signer::Recover))?;
    Ok(Passed {
        recovered: Some((chain_id, payer)),
        voucher: None,
    })
}

/// The checks of `payload`'s scheme; `Ok` for what they cannot judge.
fn check(
    request: &FacilitatorRequest,
    payload: &EvmPayload,
    chain_id: u64,
    checks: Checks,
) -> Result<(), Refused> {
    let requirements = &request.payment_requirements;
    let verdict = match (requirements.scheme(), payload) {
        ("exact", EvmPayload::Eip3009(p)) => {
            check::eip3009(requirements, Ok(p), chain_id, checks).map(drop)
        }
        ("exact", EvmPayload::Permit2(p)) => check::permit2(
            request,
            Permit2Kind::Exact,
            p,
            chain_id,
            checks,
            false,
            None,
        )
        .map(drop),
        ("upto", EvmPayload::Permit2(p)) => {
            // The facilitator the seller's requirement names, when it does.
            let facilitator = crate::proto::field(requirements.extra(), "facilitatorAddress")
                .and_then(|v| v.as_str())
                .and_then(|a| a.parse::<Address>().ok());
            check::permit2(
                request,
                Permit2Kind::Upto,
                p,
                chain_id,
                checks,
                false,
                facilitator,
            )
            .map(drop)
        }
        _ => Ok(()),
    };
    match verdict {
        // What the check cannot read is the facilitator's to judge.
        Err(r) if r.reason == reason::MISSING_EIP712_DOMAIN => Ok(()),
        Err(r) if r.reason == reason::INVALID_REQUIREMENTS => Ok(()),
        other => other,
    }
}
