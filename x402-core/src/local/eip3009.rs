//! EIP-3009 transfers (`transferWithAuthorization`): the `exact` scheme's
//! default on EVM.
//!
//! The buyer signs a `TransferWithAuthorization` in the token's own EIP-712
//! domain (the requirement's `extra.name` and `extra.version`, the chain id,
//! the token address); the facilitator submits it, and the token moves
//! exactly `value` from `from` to `to`, once per `nonce`.

use alloy_primitives::{Address, U256};

use super::{
    ledger_error, reason, refuse, requirement_addresses, FacilitatorError, LocalFacilitator, Phase,
    Refusal, Transfer,
};
use crate::{
    evm::{eip3009_domain, EvmPayload, EvmPayloadError, ExactEvmPayload, SignatureError},
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
        let requirements = &request.payment_requirements;
        let extra = requirements.extra();
        let (Some(name), Some(version)) = (
            extra.get("name").and_then(|v| v.as_str()),
            extra.get("version").and_then(|v| v.as_str()),
        ) else {
            return Err(refuse(
                reason::MISSING_EIP712_DOMAIN,
                "the requirement's extra has no EIP-712 name and version",
                None,
            ));
        };
        let (asset, pay_to) = requirement_addresses(requirements)?;

        let payload = match parsed {
            Ok(EvmPayload::Eip3009(p)) => p,
            Ok(_) => {
                return Err(refuse(
                    reason::UNSUPPORTED_PAYLOAD_TYPE,
                    "only EIP-3009 payloads are supported",
                    None,
                ))
            }
            Err(e) => return Err(refuse(reason::PAYLOAD, e.to_string(), None)),
        };
        let auth = &payload.authorization;
        let payer = Some(auth.from);

        let domain = eip3009_domain(name, version, chain_id, asset);
        let digest = auth.signing_hash(&domain);
        match self.recovered.recover(digest, &payload.signature) {
            Ok(signer) if signer == auth.from => {}
            Ok(_) => {
                return Err(refuse(
                    reason::SIGNATURE,
                    "the signature does not recover authorization.from",
                    payer,
                ))
            }
            Err(e @ SignatureError::UnsupportedLength { .. }) => {
                return Err(refuse(
                    reason::UNDEPLOYED_SMART_WALLET,
                    e.to_string(),
                    payer,
                ))
            }
            Err(e) => return Err(refuse(reason::SIGNATURE, e.to_string(), payer)),
        }
        if auth.to != pay_to {
            return Err(refuse(
                reason::RECIPIENT_MISMATCH,
                "authorization.to is not the requirement's payTo",
                payer,
            ));
        }
        let now = self.clock.now();
        if auth.valid_before < U256::from(now).saturating_add(U256::from(self.margin)) {
            return Err(refuse(
                reason::VALID_BEFORE,
                format!("the authorization expires before now + {} s", self.margin),
                payer,
            ));
        }
        if auth.valid_after > U256::from(now) {
            return Err(refuse(
                reason::VALID_AFTER,
                "the authorization is not valid yet",
                payer,
            ));
        }
        if auth.value != requirements.amount() {
            return Err(refuse(
                reason::VALUE,
                format!(
                    "authorization.value {} is not the required amount {}",
                    auth.value,
                    requirements.amount()
                ),
                payer,
            ));
        }
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
