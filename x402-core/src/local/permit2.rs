//! Permit2 witness transfers: the `upto` scheme, and `exact` with
//! `assetTransferMethod: "permit2"`.
//!
//! Both sign a Permit2 `PermitWitnessTransferFrom` in Permit2's EIP-712
//! domain (see [`permit2_domain`](crate::evm::permit2_domain)) whose spender
//! is an x402 proxy:
//!
//! | Scheme | Spender | Witness | Amount moved |
//! |---|---|---|---|
//! | `exact` | [`EXACT_PERMIT2_PROXY`] | `Witness(address to,uint256 validAfter)` | `permitted.amount`, which must be the price |
//! | `upto` | [`UPTO_PERMIT2_PROXY`] | `Witness(address to,address facilitator,uint256 validAfter)` | the charge, at most `permitted.amount` (the ceiling) |

use alloy_primitives::{Address, U256};

use super::{reason, refuse, short, FacilitatorError, LocalFacilitator, Phase, Refusal};
pub(super) use crate::evm::check::Permit2Kind;
use crate::{
    evm::{check, EvmPayload, Permit2Payload},
    proto::{FacilitatorRequest, X402Version},
};

/// The `upto` scheme's name.
pub(super) const UPTO: &str = "upto";

/// One Permit2 witness transfer, as a [`Ledger`](super::Ledger) sees it.
/// Every check that needs no ledger state has passed.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Permit2Transfer<'a> {
    /// The network as a CAIP-2 id (`eip155:84532`).
    pub network: &'a str,
    /// The EVM chain id of `network`.
    pub chain_id: u64,
    /// The signed permit.
    pub payload: &'a Permit2Payload,
    /// The amount to move, in atomic units: `permitted.amount` for `exact`,
    /// the charge (never above `permitted.amount`) for `upto`. At `verify`
    /// time it is the amount the requirement names.
    pub amount: U256,
}

impl Permit2Transfer<'_> {
    /// The payer (the permit's owner).
    pub fn from(&self) -> Address {
        self.payload.permit2_authorization.from
    }

    /// The recipient (`witness.to`).
    pub fn to(&self) -> Address {
        self.payload.permit2_authorization.witness.to
    }

    /// The token (`permitted.token`).
    pub fn token(&self) -> Address {
        self.payload.permit2_authorization.permitted.token
    }

    /// The most the permit lets move (`permitted.amount`).
    pub fn permitted(&self) -> U256 {
        self.payload.permit2_authorization.permitted.amount.get()
    }

    /// Permit2's unordered nonce, spent once per owner across all tokens.
    pub fn nonce(&self) -> U256 {
        self.payload.permit2_authorization.nonce
    }

    /// The facilitator named in an `upto` witness; `None` for `exact`.
    pub fn facilitator(&self) -> Option<Address> {
        self.payload.permit2_authorization.witness.facilitator
    }

    /// Whether this is an `upto` transfer (through
    /// [`UPTO_PERMIT2_PROXY`](crate::evm::UPTO_PERMIT2_PROXY)).
    pub fn is_upto(&self) -> bool {
        self.facilitator().is_some()
    }
}

/// A Permit2 payment that passed every offline check.
pub(super) struct CheckedPermit2 {
    pub(super) network: String,
    pub(super) chain_id: u64,
    pub(super) payload: Permit2Payload,
    /// What to move (see [`Permit2Transfer::amount`]).
    pub(super) amount: U256,
}

impl CheckedPermit2 {
    pub(super) fn transfer(&self) -> Permit2Transfer<'_> {
        Permit2Transfer {
            network: &self.network,
            chain_id: self.chain_id,
            payload: &self.payload,
            amount: self.amount,
        }
    }
}

impl LocalFacilitator {
    /// The offline checks of an `upto` payment (the requirement's scheme is
    /// `upto`).
    pub(super) fn check_upto_offline(
        &self,
        request: &FacilitatorRequest,
        phase: Phase,
    ) -> Result<CheckedPermit2, Refusal> {
        let payment = &request.payment_payload;
        if payment.scheme() != UPTO || request.version() != X402Version::V2 {
            return Err(refuse(
                reason::UPTO_SCHEME,
                format!(
                    "upto needs an upto payment of protocol v2 (payment {:?}, v{})",
                    short(payment.scheme()),
                    request.version().number()
                ),
                None,
            ));
        }
        let network = self.served_network(request, reason::UPTO_NETWORK_MISMATCH)?;
        let payload = match EvmPayload::from_value(payment.payload()) {
            Ok(EvmPayload::Permit2(p)) => p,
            Ok(_) => {
                return Err(refuse(
                    reason::UPTO_PAYLOAD,
                    "upto payments are Permit2 payloads (EIP-3009 signs an exact value)",
                    None,
                ))
            }
            Err(e) => return Err(refuse(reason::UPTO_PAYLOAD, e.to_string(), None)),
        };
        self.check_permit2_offline(request, Permit2Kind::Upto, payload, network, phase)
    }

    /// The offline checks of a Permit2 payload of `kind` on `network`
    /// (`(CAIP-2 id, chain id)`, already checked), in the order of the
    /// TypeScript facilitator.
    pub(super) fn check_permit2_offline(
        &self,
        request: &FacilitatorRequest,
        kind: Permit2Kind,
        payload: Permit2Payload,
        (network, chain_id): (String, u64),
        phase: Phase,
    ) -> Result<CheckedPermit2, Refusal> {
        if request.version() != X402Version::V2 || !self.ledger.supports_permit2() {
            return Err(refuse(
                reason::UNSUPPORTED_PAYLOAD_TYPE,
                "Permit2 payloads are accepted with protocol v2 on a ledger that settles them",
                None,
            ));
        }
        let amount = check::permit2(
            request,
            kind,
            &payload,
            chain_id,
            self.checks(),
            phase == Phase::Settle,
            Some(self.ledger.signer()),
        )?;
        Ok(CheckedPermit2 {
            network,
            chain_id,
            payload,
            amount,
        })
    }

    /// The ledger's checks of a Permit2 payment: `Some` refusal, or `None`.
    pub(super) async fn check_permit2_ledger(
        &self,
        checked: &CheckedPermit2,
        phase: Phase,
    ) -> Result<Option<Refusal>, FacilitatorError> {
        let transfer = checked.transfer();
        let state = self
            .ledger
            .permit2_state(&transfer)
            .await
            .map_err(super::ledger_error)?;
        let payer = Some(transfer.from());
        if state.nonce_used {
            return Ok(Some(refuse(
                reason::PERMIT2_INVALID_NONCE,
                "the owner has already used this Permit2 nonce",
                payer,
            )));
        }
        if state.balance < checked.amount {
            return Ok(Some(refuse(
                reason::PERMIT2_INSUFFICIENT_BALANCE,
                "the payer's balance is below the amount",
                payer,
            )));
        }
        if state
            .permit2_allowance
            .is_some_and(|allowance| allowance < checked.amount)
        {
            return Ok(Some(refuse(
                reason::PERMIT2_ALLOWANCE_REQUIRED,
                "the payer has not approved Permit2 for the amount on the token",
                payer,
            )));
        }
        if phase == Phase::Verify {
            if let Some(message) = self
                .ledger
                .permit2_simulate(&transfer)
                .await
                .map_err(super::ledger_error)?
            {
                return Ok(Some(refuse(
                    reason::PERMIT2_SIMULATION_FAILED,
                    message,
                    payer,
                )));
            }
        }
        Ok(None)
    }
}
