//! A model of the escrow contract behind a facilitator, for the engine's
//! batch-settlement tests.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex,
    },
};

use alloy_primitives::{B256, U256};
use async_trait::async_trait;
use serde_json::{json, Value};

use super::{domain, eip712, reason, BatchPayload, ChannelConfig};
use crate::{
    facilitator::{Facilitator, FacilitatorError},
    money::AtomicAmount,
    proto::{FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse},
};

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Chan {
    pub(super) balance: U256,
    pub(super) claimed: U256,
    pub(super) nonce: U256,
}

/// A facilitator over a model of the escrow: deposits, claims (refusing a
/// claim that does not raise the claimed total: a voucher claimed twice),
/// settles and refunds move numbers in memory.
#[derive(Debug, Default)]
pub(super) struct SimChain {
    pub(super) channels: Mutex<HashMap<B256, Chan>>,
    /// Claimed, not yet settled, for the receiver.
    pub(super) unsettled: Mutex<U256>,
    /// What `settle` paid the receiver.
    pub(super) receiver_balance: Mutex<U256>,
    pub(super) verify_calls: AtomicUsize,
    pub(super) settle_calls: AtomicUsize,
    pub(super) claim_calls: AtomicUsize,
    pub(super) double_claims: AtomicUsize,
}

fn snapshot(id: B256, c: Chan) -> Value {
    json!({
        "channelId": id,
        "balance": c.balance.to_string(),
        "totalClaimed": c.claimed.to_string(),
        "withdrawRequestedAt": 0,
        "refundNonce": c.nonce.to_string(),
    })
}

impl SimChain {
    pub(super) fn chan(&self, id: &B256) -> Chan {
        self.channels
            .lock()
            .unwrap()
            .get(id)
            .copied()
            .unwrap_or_default()
    }

    fn check(&self, request: &FacilitatorRequest) -> Result<(BatchPayload, Chan), String> {
        let crate::proto::PaymentRequirements::V2(req) = &*request.payment_requirements else {
            return Err("v1".into());
        };
        let payload =
            BatchPayload::parse(request.payment_payload.payload()).map_err(str::to_owned)?;
        crate::batch::verify::check_config(payload.config(), payload.voucher(), req, &domain())
            .map_err(str::to_owned)?;
        crate::batch::verify::check_signature(payload.config(), payload.voucher(), &domain())
            .map_err(str::to_owned)?;
        let chan = self.chan(&payload.voucher().channel_id);
        let max = payload.voucher().max_claimable_amount.get();
        let effective = match &payload {
            BatchPayload::Deposit { amount, .. } => chan.balance + amount.get(),
            _ => chan.balance,
        };
        if effective.is_zero() {
            return Err("invalid_batch_settlement_evm_channel_not_found".into());
        }
        if max > effective {
            return Err(reason::CUMULATIVE_EXCEEDS_BALANCE.into());
        }
        let below = if payload.is_refund() {
            max < chan.claimed
        } else {
            max <= chan.claimed
        };
        if below {
            return Err(reason::CUMULATIVE_BELOW_CLAIMED.into());
        }
        Ok((payload, chan))
    }

    fn claim_rows(&self, claims: &[Value]) -> Result<U256, String> {
        let mut channels = self.channels.lock().unwrap();
        let mut added = U256::ZERO;
        for claim in claims {
            let config: ChannelConfig =
                serde_json::from_value(claim["voucher"]["channel"].clone()).unwrap();
            let id = eip712::channel_id(&config, &domain());
            let total: U256 = claim["totalClaimed"].as_str().unwrap().parse().unwrap();
            let max: U256 = claim["voucher"]["maxClaimableAmount"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            let chan = channels.entry(id).or_default();
            if total <= chan.claimed {
                self.double_claims.fetch_add(1, Ordering::SeqCst);
                return Err("claim does not raise the claimed total".into());
            }
            if total > max || total > chan.balance {
                return Err("claim above voucher or balance".into());
            }
            added += total - chan.claimed;
            chan.claimed = total;
        }
        *self.unsettled.lock().unwrap() += added;
        Ok(added)
    }
}

fn settled(network: &str, tx: &str, amount: Option<U256>, extra: Option<Value>) -> SettleResponse {
    SettleResponse {
        success: true,
        transaction: tx.to_owned(),
        network: network.to_owned(),
        amount: amount.map(AtomicAmount::new),
        extra: extra.and_then(|e| e.as_object().cloned()),
        ..SettleResponse::default()
    }
}

#[async_trait]
impl Facilitator for SimChain {
    async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        self.verify_calls.fetch_add(1, Ordering::SeqCst);
        match self.check(request) {
            Ok((payload, chan)) => Ok(VerifyResponse {
                is_valid: true,
                payer: Some(payload.config().payer.to_checksum(None)),
                extra: snapshot(payload.voucher().channel_id, chan)
                    .as_object()
                    .cloned(),
                ..VerifyResponse::default()
            }),
            Err(reason) => Ok(VerifyResponse::invalid(reason, None)),
        }
    }

    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        self.settle_calls.fetch_add(1, Ordering::SeqCst);
        let payload = request.payment_payload.payload();
        let network = request.payment_requirements.network().to_owned();
        let fail = |r: String| SettleResponse::failure(network.clone(), r);
        match payload["type"].as_str() {
            Some("deposit") => match self.check(request) {
                Ok((
                    BatchPayload::Deposit {
                        amount, voucher, ..
                    },
                    _,
                )) => {
                    let mut channels = self.channels.lock().unwrap();
                    let chan = channels.entry(voucher.channel_id).or_default();
                    chan.balance += amount.get();
                    let extra = json!({ "channelState": snapshot(voucher.channel_id, *chan) });
                    Ok(settled(
                        &network,
                        "0xdeposit",
                        Some(amount.get()),
                        Some(extra),
                    ))
                }
                Ok(_) => Ok(fail("not a deposit".into())),
                Err(r) => Ok(fail(r)),
            },
            Some("claim") => {
                self.claim_calls.fetch_add(1, Ordering::SeqCst);
                match self.claim_rows(payload["claims"].as_array().unwrap()) {
                    Ok(_) => Ok(settled(&network, "0xclaim", None, None)),
                    Err(r) => Ok(fail(r)),
                }
            }
            Some("settle") => {
                let amount = std::mem::take(&mut *self.unsettled.lock().unwrap());
                if amount.is_zero() {
                    return Ok(fail(
                        "invalid_batch_settlement_evm_nothing_to_settle".into(),
                    ));
                }
                *self.receiver_balance.lock().unwrap() += amount;
                Ok(settled(&network, "0xsettle", Some(amount), None))
            }
            Some("refund") => {
                if let Err(r) = self.claim_rows(payload["claims"].as_array().unwrap()) {
                    return Ok(fail(r));
                }
                let id: B256 = payload["voucher"]["channelId"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                let amount: U256 = payload["amount"].as_str().unwrap().parse().unwrap();
                let mut channels = self.channels.lock().unwrap();
                let chan = channels.entry(id).or_default();
                let refunded = amount.min(chan.balance - chan.claimed);
                chan.balance -= refunded;
                chan.nonce += U256::from(1);
                let extra = json!({ "channelState": snapshot(id, *chan) });
                Ok(settled(&network, "0xrefund", Some(refunded), Some(extra)))
            }
            _ => Ok(fail(reason::PAYLOAD_TYPE.into())),
        }
    }

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        Ok(SupportedResponse::default())
    }
}
