//! EIP-3009 transfers (`transferWithAuthorization`): the `exact` scheme's
//! default on EVM.
//!
//! The buyer signs a `TransferWithAuthorization` in the token's own EIP-712
//! domain (the requirement's `extra.name` and `extra.version`, the chain id,
//! the token address); the facilitator submits it, and the token moves
//! exactly `value` from `from` to `to`, once per `nonce`.

use alloy_primitives::Address;

use super::{
    ledger_error, reason, refuse, FacilitatorError, LocalFacilitator, Phase, Refusal, Transfer,
};
use crate::{
    evm::{check, EvmPayload, EvmPayloadError, ExactEvmPayload},
    proto::FacilitatorRequest,
};

/// An EIP-3009 payment that passed every check.
pub(super) struct CheckedEip3009 {
    pub(super) network: String,
    pub(super) chain_id: u64,
    pub(super) asset: Address,
    pub(super) payload: ExactEvmPayload,
}

impl CheckedEip3009 {
    pub(super) fn transfer(&self) -> Transfer<'_> {
        Transfer {
            network: &self.network,
            chain_id: self.chain_id,
            asset: self.asset,
            payload: &self.payload,
        }
    }
}

impl LocalFacilitator {
    /// The offline checks of an `exact` EIP-3009 payment on `network`
    /// (`(CAIP-2 id, chain id)`, already checked): the token's EIP-712
    /// domain, the signature, the recipient, the validity window, the value.
    pub(super) fn check_eip3009_offline(
        &self,
        request: &FacilitatorRequest,
        parsed: Result<EvmPayload, EvmPayloadError>,
        (network, chain_id): (String, u64),
    ) -> Result<CheckedEip3009, Refusal> {
        let payload = match parsed {
            Ok(EvmPayload::Eip3009(p)) => Ok(p),
            Ok(_) => Err(check::refused(
                reason::UNSUPPORTED_PAYLOAD_TYPE,
                "only EIP-3009 payloads are supported",
                None,
            )),
            Err(e) => Err(check::refused(reason::PAYLOAD, e.to_string(), None)),
        };
        let asset = check::eip3009(
            &request.payment_requirements,
            payload.as_ref().map_err(Clone::clone),
            chain_id,
            self.checks(),
        )?;
        // Parsed: the check above refuses a payload that is not.
        let payload = payload?;
        Ok(CheckedEip3009 {
            network,
            chain_id,
            asset,
            payload,
        })
    }

    /// The ledger's checks of an EIP-3009 payment: `Some` refusal, or `None`.
    pub(super) async fn check_eip3009_ledger(
        &self,
        checked: &CheckedEip3009,
        phase: Phase,
    ) -> Result<Option<Refusal>, FacilitatorError> {
        let state = self
            .ledger
            .state(&checked.transfer())
            .await
            .map_err(ledger_error)?;
        let payer = Some(checked.payload.authorization.from);
        if state.nonce_used {
            return Ok(Some(refuse(
                reason::NONCE_USED,
                "the token has already used this authorization's nonce",
                payer,
            )));
        }
        if state.balance < checked.payload.authorization.value.get() {
            return Ok(Some(refuse(
                reason::INSUFFICIENT_BALANCE,
                "the payer's balance is below the value",
                payer,
            )));
        }
        if phase == Phase::Verify {
            if let Some(message) = self
                .ledger
                .simulate(&checked.transfer())
                .await
                .map_err(ledger_error)?
            {
                return Ok(Some(refuse(reason::SIMULATION_FAILED, message, payer)));
            }
        }
        Ok(None)
    }
}
