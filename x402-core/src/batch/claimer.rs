//! Claiming vouchers on chain in batches, settling claimed funds to the
//! receiver, and refunding channels the seller closes.

use std::{sync::Arc, time::Duration};

use alloy_primitives::{Address, Bytes, B256, U256};
use serde_json::{json, Value};

use super::{
    eip712::{claim_batch_digest, refund_digest, ClaimRow},
    reason, update, BatchSettlement, Change, ChannelRecord, ChannelStoreError, ClaimMark,
    OnchainState, BATCH_SETTLEMENT,
};
use crate::{
    facilitator::{Facilitator, FacilitatorError},
    money::AtomicAmount,
    proto::{
        v2, FacilitatorRequest, JsonObject, PaymentPayload, PaymentRequirements, SettleResponse,
        Version,
    },
};

/// How long a claim may stay unanswered before another claimer (or this
/// one, restarted) checks the chain for it instead of waiting.
const CLAIM_LEASE_MS: u64 = 120_000;

/// Why claiming, settling or refunding failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    /// The channel store failed.
    #[error(transparent)]
    Store(#[from] ChannelStoreError),
    /// The facilitator could not be reached or answered garbage; the claim's
    /// outcome is unknown (its channels stay marked, and are checked on
    /// chain before they are claimed again).
    #[error("facilitator: {0}")]
    Facilitator(#[from] FacilitatorError),
    /// The facilitator refused.
    #[error("the facilitator refused: {reason}")]
    Refused {
        /// Its reason code.
        reason: String,
    },
    /// The receiver authorizer could not sign.
    #[error(transparent)]
    Signer(#[from] super::SignerError),
    /// The network is not EVM.
    #[error("network {0} is not an EVM network")]
    Network(String),
}

/// What one [`Claimer::claim`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimReport {
    /// Vouchers claimed.
    pub vouchers: usize,
    /// The amount the claims added to the channels' claimed totals.
    pub claimed: U256,
    /// The claim transactions.
    pub transactions: Vec<String>,
    /// The settle transaction, if [`Claimer::claim_and_settle`] settled.
    pub settled: Option<String>,
}

/// One refunded channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundReport {
    /// The channel.
    pub channel_id: B256,
    /// The refund transaction.
    pub transaction: String,
    /// The amount returned to the payer.
    pub amount: Option<AtomicAmount>,
}

/// Claims the latest vouchers of the seller's channels in batches
/// (`claimWithSignature` through the facilitator's `/settle`, `type:
/// "claim"`), then settles the claimed funds to the receiver (`type:
/// "settle"`).
///
/// A voucher is never claimed twice: a channel is marked in the store
/// before its claim is sent (so other claimers, on other instances, leave
/// it), and its claimed total is raised when the claim succeeds. A claimer
/// that died with a claim unanswered leaves the mark; after a lease (two
/// minutes) the next run reads the channel's claimed total from the
/// facilitator before claiming it again. With the
/// [Redis store](super::RedisChannelStore) all of it survives restarts.
#[derive(Clone)]
pub struct Claimer {
    facilitator: Arc<dyn Facilitator>,
    batch: BatchSettlement,
    network: String,
    receiver: Address,
    token: Address,
    max_per_batch: usize,
}

impl std::fmt::Debug for Claimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claimer")
            .field("network", &self.network)
            .field("receiver", &self.receiver)
            .field("token", &self.token)
            .field("max_per_batch", &self.max_per_batch)
            .finish_non_exhaustive()
    }
}

fn now_ms() -> u64 {
    crate::unix::now().saturating_mul(1000)
}

fn u128_of(v: U256) -> u128 {
    v.saturating_to::<u128>()
}

impl Claimer {
    /// A claimer of `batch`'s channels paying `receiver` in `token` on
    /// `network`, through `facilitator`.
    pub fn new(
        facilitator: Arc<dyn Facilitator>,
        batch: &BatchSettlement,
        network: impl Into<String>,
        receiver: Address,
        token: Address,
    ) -> Self {
        Self {
            facilitator,
            batch: batch.clone(),
            network: network.into(),
            receiver,
            token,
            max_per_batch: 100,
        }
    }

    /// At most this many vouchers per claim transaction (default 100).
    #[must_use]
    pub fn max_per_batch(mut self, n: usize) -> Self {
        self.max_per_batch = n.max(1);
        self
    }

    fn requirements(&self) -> v2::PaymentRequirements {
        v2::PaymentRequirements {
            scheme: BATCH_SETTLEMENT.to_owned(),
            network: self.network.clone(),
            amount: AtomicAmount::ZERO,
            asset: self.token.to_checksum(None),
            pay_to: self.receiver.to_checksum(None),
            max_timeout_seconds: 0,
            extra: JsonObject::new(),
            other: JsonObject::new(),
        }
    }

    fn request(&self, payload: Value) -> FacilitatorRequest {
        let requirements = self.requirements();
        FacilitatorRequest {
            payment_payload: PaymentPayload::V2(v2::PaymentPayload {
                x402_version: Version,
                resource: None,
                accepted: requirements.clone(),
                payload,
                extensions: None,
                other: JsonObject::new(),
            }),
            payment_requirements: Arc::new(PaymentRequirements::V2(requirements)),
        }
    }

    fn ours(&self, r: &ChannelRecord) -> bool {
        r.channel_config.receiver == self.receiver && r.channel_config.token == self.token
    }

    /// What is charged and not claimed yet, over all channels.
    pub async fn unclaimed(&self) -> Result<U256, ClaimError> {
        let records = self.batch.store.list().await?;
        Ok(records
            .iter()
            .filter(|r| self.ours(r))
            .fold(U256::ZERO, |sum, r| sum.saturating_add(r.unclaimed())))
    }

    /// Whether a channel with unclaimed charges has a timed withdrawal
    /// pending (its vouchers must be claimed before the delay ends).
    pub async fn withdrawing(&self) -> Result<bool, ClaimError> {
        let records = self.batch.store.list().await?;
        Ok(records
            .iter()
            .any(|r| self.ours(r) && r.withdraw_requested_at > 0 && !r.unclaimed().is_zero()))
    }

    /// Claims every channel's latest voucher that has charges not claimed
    /// yet, in batches; nothing to claim is an empty report.
    pub async fn claim(&self) -> Result<ClaimReport, ClaimError> {
        let domain = self
            .batch
            .domain(&self.network)
            .ok_or_else(|| ClaimError::Network(self.network.clone()))?;
        let store = &*self.batch.store;
        let now = now_ms();
        let records = store.list().await?;
        for stale in records.iter().filter(|r| {
            self.ours(r)
                && r.claim_in_flight
                    .as_ref()
                    .is_some_and(|m| m.started_at + CLAIM_LEASE_MS <= now)
        }) {
            self.reconcile(stale).await?;
        }
        // Mark each channel to claim; only those this claimer marked are its.
        let mut marked: Vec<(ChannelRecord, ClaimMark)> = Vec::new();
        for record in store.list().await?.iter().filter(|r| self.ours(r)) {
            if record.unclaimed().is_zero() || record.claim_in_flight.is_some() {
                continue;
            }
            let id = record.channel_id;
            let got = update(store, &id, |current| {
                let Some(current) = current else {
                    return Change::Keep(None);
                };
                if current.claim_in_flight.is_some() || current.unclaimed().is_zero() {
                    return Change::Keep(None);
                }
                let mark = ClaimMark {
                    total_claimed: current.charged_cumulative_amount,
                    max_claimable: current.signed_max_claimable,
                    signature: current.signature.clone(),
                    started_at: now,
                };
                let mut next = current.clone();
                next.claim_in_flight = Some(mark.clone());
                Change::Write(next.clone(), Some((next, mark)))
            })
            .await?;
            marked.extend(got);
        }
        let mut report = ClaimReport::default();
        for chunk in marked.chunks(self.max_per_batch) {
            let rows: Vec<ClaimRow> = chunk
                .iter()
                .map(|(r, m)| ClaimRow {
                    channel_id: r.channel_id,
                    max_claimable: u128_of(m.max_claimable),
                    total_claimed: u128_of(m.total_claimed),
                })
                .collect();
            let claims: Vec<Value> = chunk
                .iter()
                .map(|(r, m)| claim_entry(r, m.max_claimable, &m.signature, m.total_claimed))
                .collect();
            let mut payload = json!({ "type": "claim", "claims": claims });
            if let Some(signer) = &self.batch.signer {
                let signature = signer
                    .sign_digest(claim_batch_digest(&rows, &domain))
                    .await?;
                payload["claimAuthorizerSignature"] = json!(signature);
            }
            let answer = self.facilitator.settle(&self.request(payload)).await;
            let receipt = match answer {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, vouchers = chunk.len(), "x402: batch claim outcome unknown; its channels are checked on chain before they are claimed again");
                    return Err(e.into());
                }
            };
            if !receipt.success {
                for (r, _) in chunk {
                    self.unmark(&r.channel_id, None).await?;
                }
                return Err(ClaimError::Refused {
                    reason: receipt
                        .error_reason
                        .unwrap_or_else(|| "claim_failed".to_owned()),
                });
            }
            for (r, m) in chunk {
                let added = m.total_claimed.saturating_sub(r.total_claimed);
                report.claimed = report.claimed.saturating_add(added);
                self.unmark(&r.channel_id, Some(m.total_claimed)).await?;
            }
            report.vouchers += chunk.len();
            report.transactions.push(receipt.transaction);
        }
        Ok(report)
    }

    /// Clears this claimer's mark on channel `id`, raising its claimed total
    /// to `claimed` when the claim landed.
    async fn unmark(&self, id: &B256, claimed: Option<U256>) -> Result<(), ClaimError> {
        update(&*self.batch.store, id, |current| {
            let Some(current) = current else {
                return Change::Keep(());
            };
            let mut next = current.clone();
            next.claim_in_flight = None;
            if let Some(claimed) = claimed {
                next.total_claimed = next.total_claimed.max(claimed);
            }
            Change::Write(next, ())
        })
        .await?;
        Ok(())
    }

    /// A channel whose claim was never answered: asks the facilitator for
    /// its claimed total (a `/verify` of its latest voucher), then clears
    /// the mark.
    async fn reconcile(&self, record: &ChannelRecord) -> Result<(), ClaimError> {
        let Some(mark) = &record.claim_in_flight else {
            return Ok(());
        };
        let payload = json!({
            "type": "voucher",
            "channelConfig": record.channel_config,
            "voucher": {
                "channelId": record.channel_id,
                "maxClaimableAmount": mark.max_claimable.to_string(),
                "signature": mark.signature,
            },
        });
        let mut request = self.request(payload);
        if let PaymentRequirements::V2(r) = Arc::make_mut(&mut request.payment_requirements) {
            r.extra.insert(
                "receiverAuthorizer".into(),
                json!(record.channel_config.receiver_authorizer),
            );
            r.extra.insert(
                "withdrawDelay".into(),
                json!(record.channel_config.withdraw_delay),
            );
        }
        let verdict = self.facilitator.verify(&request).await?;
        let claimed = if verdict.is_valid {
            verdict
                .extra
                .as_ref()
                .and_then(OnchainState::from_extra)
                .map(|s| s.total_claimed)
        } else if verdict.invalid_reason.as_deref() == Some(reason::CUMULATIVE_BELOW_CLAIMED) {
            // Claimed at least the voucher's ceiling: the claim landed.
            Some(mark.total_claimed)
        } else {
            None
        };
        tracing::info!(channel = %record.channel_id, claimed = ?claimed, "x402: reconciled an unanswered claim");
        self.unmark(&record.channel_id, claimed).await
    }

    /// Transfers the receiver's claimed, unsettled funds (`settle`). `None`
    /// when there was nothing to settle.
    pub async fn settle(&self) -> Result<Option<SettleResponse>, ClaimError> {
        let payload = json!({
            "type": "settle",
            "receiver": self.receiver.to_checksum(None),
            "token": self.token.to_checksum(None),
        });
        let receipt = self.facilitator.settle(&self.request(payload)).await?;
        if receipt.success {
            return Ok(Some(receipt));
        }
        match receipt.error_reason.as_deref() {
            Some("invalid_batch_settlement_evm_nothing_to_settle") => Ok(None),
            other => Err(ClaimError::Refused {
                reason: other.unwrap_or("settle_failed").to_owned(),
            }),
        }
    }

    /// [`claim`](Self::claim), then [`settle`](Self::settle) when anything
    /// was claimed.
    pub async fn claim_and_settle(&self) -> Result<ClaimReport, ClaimError> {
        let mut report = self.claim().await?;
        if report.vouchers > 0 {
            report.settled = self.settle().await?.map(|r| r.transaction);
        }
        Ok(report)
    }

    /// Runs [`claim_and_settle`](Self::claim_and_settle) every `interval`,
    /// and sooner (checked every second) once the unclaimed total reaches
    /// `threshold` or a payer has started a timed withdrawal, until the task
    /// is aborted. Failures are logged and
    /// retried at the next tick.
    pub fn spawn(self, interval: Duration, threshold: Option<U256>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut last = tokio::time::Instant::now();
            let mut tick = tokio::time::interval(Duration::from_secs(1).min(interval));
            loop {
                tick.tick().await;
                let due = last.elapsed() >= interval;
                let over = match threshold {
                    Some(t) => self.unclaimed().await.is_ok_and(|u| u >= t && !u.is_zero()),
                    None => false,
                };
                // A payer started a timed withdrawal: claim before it ends.
                let withdrawing = self.withdrawing().await.unwrap_or(false);
                let over = over || withdrawing;
                if !due && !over {
                    continue;
                }
                last = tokio::time::Instant::now();
                match self.claim_and_settle().await {
                    Ok(r) if r.vouchers > 0 => {
                        tracing::info!(vouchers = r.vouchers, claimed = %r.claimed, "x402: claimed vouchers");
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "x402: claiming failed; retrying later"),
                }
            }
        })
    }

    /// Refunds what is left (balance minus charges) of each of `channels`
    /// to its payer (the seller closes them): the latest voucher is claimed
    /// in the same transaction. Channels held by a request are skipped.
    pub async fn refund(&self, channels: &[B256]) -> Result<Vec<RefundReport>, ClaimError> {
        let domain = self
            .batch
            .domain(&self.network)
            .ok_or_else(|| ClaimError::Network(self.network.clone()))?;
        let mut out = Vec::new();
        for id in channels {
            let Some(record) = self.batch.store.load(id).await? else {
                continue;
            };
            if record.is_held(now_ms()) || !self.ours(&record) {
                continue;
            }
            let amount = record
                .balance
                .saturating_sub(record.charged_cumulative_amount);
            if amount.is_zero() {
                continue;
            }
            let payload = refund_payload(
                &self.batch,
                &domain,
                &record,
                record.signed_max_claimable,
                &record.signature,
                amount,
            )
            .await?;
            let receipt = self.facilitator.settle(&self.request(payload)).await?;
            if !receipt.success {
                return Err(ClaimError::Refused {
                    reason: receipt
                        .error_reason
                        .unwrap_or_else(|| "refund_failed".to_owned()),
                });
            }
            update(&*self.batch.store, id, |current| match current {
                Some(c) if c.revision == record.revision => Change::Delete(()),
                _ => Change::Keep(()),
            })
            .await?;
            out.push(RefundReport {
                channel_id: *id,
                transaction: receipt.transaction,
                amount: receipt.amount,
            });
        }
        Ok(out)
    }
}

/// One `claims[]` entry: the channel's config, a voucher and the claimed
/// total it sets.
pub(crate) fn claim_entry(
    record: &ChannelRecord,
    max_claimable: U256,
    signature: &Bytes,
    total_claimed: U256,
) -> Value {
    json!({
        "voucher": {
            "channel": record.channel_config,
            "maxClaimableAmount": max_claimable.to_string(),
        },
        "signature": signature,
        "totalClaimed": total_claimed.to_string(),
    })
}

/// The settle payload of a refund of `amount` from `record`'s channel,
/// claiming the voucher (`max_claimable`, `signature`) for the channel's
/// charges first; signed by the receiver authorizer when the seller holds
/// that key (otherwise the facilitator signs).
pub(crate) async fn refund_payload(
    batch: &BatchSettlement,
    domain: &alloy_sol_types::Eip712Domain,
    record: &ChannelRecord,
    max_claimable: U256,
    signature: &Bytes,
    amount: U256,
) -> Result<Value, super::SignerError> {
    let charged = record.charged_cumulative_amount;
    let claims = if charged > record.total_claimed {
        vec![claim_entry(record, max_claimable, signature, charged)]
    } else {
        Vec::new()
    };
    let mut payload = json!({
        "type": "refund",
        "channelConfig": record.channel_config,
        "voucher": {
            "channelId": record.channel_id,
            "maxClaimableAmount": max_claimable.to_string(),
            "signature": signature,
        },
        "amount": amount.to_string(),
        "refundNonce": record.refund_nonce.to_string(),
        "claims": claims,
    });
    if let Some(signer) = &batch.signer {
        let refund = signer
            .sign_digest(refund_digest(
                record.channel_id,
                record.refund_nonce,
                u128_of(amount),
                domain,
            ))
            .await?;
        payload["refundAuthorizerSignature"] = json!(refund);
        if charged > record.total_claimed {
            let rows = [ClaimRow {
                channel_id: record.channel_id,
                max_claimable: u128_of(max_claimable),
                total_claimed: u128_of(charged),
            }];
            let claim = signer
                .sign_digest(claim_batch_digest(&rows, domain))
                .await?;
            payload["claimAuthorizerSignature"] = json!(claim);
        }
    }
    Ok(payload)
}
