//! The engine's side of [`batch-settlement`](crate::batch) payments: hold
//! the channel, check the voucher (in process, or through the
//! facilitator), let the handler run, then commit the charge and write the
//! receipt. Refund requests are settled here without the handler.

use std::time::Instant;

use alloy_primitives::{B256, U256};

use super::paid::{Kind, PaidRequest};
use super::*;
use crate::batch::{
    self, reason, verify, BatchPayload, Change, ChannelRecord, OnchainState, Pending,
};

/// A batch-settlement payment whose handler may run: the channel is held
/// for it until [`finish`] or [`release`].
pub(super) struct BatchCall {
    pub(super) request: FacilitatorRequest,
    pub(super) payload: BatchPayload,
    pub(super) channel_id: B256,
    /// This request's hold on the channel.
    pub(super) hold: u64,
    /// Whether this request made the channel's record (then releasing the
    /// hold deletes it).
    pub(super) created: bool,
    pub(super) resource: Arc<v2::ResourceInfo>,
    pub(super) resolved: Arc<Resolved>,
    pub(super) extensions: Option<JsonObject>,
    pub(super) decimals: u8,
    pub(super) meter: Meter,
}

/// What holding a channel found.
enum Held {
    /// Another live request holds it.
    Busy,
    /// The voucher's ceiling is not the count plus the price (the record,
    /// when there is one, for the corrective 402).
    Stale(Option<Box<ChannelRecord>>),
    /// A refund for a channel the seller has no state for.
    Missing,
    /// Held by this request.
    Taken(Box<ChannelRecord>, bool),
}

pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// How long a hold lasts: the requirement's timeout, within 5 s and 10 min.
fn hold_ms(max_timeout_seconds: u64) -> u64 {
    max_timeout_seconds
        .saturating_mul(1000)
        .clamp(5_000, 600_000)
}

fn hold(
    current: Option<&ChannelRecord>,
    payload: &BatchPayload,
    price: U256,
    pending: &Pending,
    now: u64,
) -> Change<Held> {
    if current.is_some_and(|c| c.is_held(now)) {
        return Change::Keep(Held::Busy);
    }
    let voucher = payload.voucher();
    let max = voucher.max_claimable_amount.get();
    let refund = payload.is_refund();
    let base = match current {
        Some(c) => c.charged_cumulative_amount,
        None if refund => return Change::Keep(Held::Missing),
        // No state (a new channel, or state lost): the voucher's own base;
        // the facilitator checks it against the chain's claimed total.
        None => max.saturating_sub(price),
    };
    let expected = if refund {
        base
    } else {
        base.saturating_add(price)
    };
    if max != expected {
        return Change::Keep(Held::Stale(current.cloned().map(Box::new)));
    }
    let mut record = match current {
        Some(c) => c.clone(),
        None => ChannelRecord {
            channel_id: voucher.channel_id,
            channel_config: payload.config().clone(),
            charged_cumulative_amount: base,
            signed_max_claimable: max,
            signature: voucher.signature.clone(),
            balance: U256::ZERO,
            total_claimed: U256::ZERO,
            withdraw_requested_at: 0,
            refund_nonce: U256::ZERO,
            onchain_synced_at: None,
            last_request_timestamp: now,
            pending: None,
            claim_in_flight: None,
            revision: 0,
        },
    };
    record.pending = Some(pending.clone());
    let created = current.is_none();
    Change::Write(record.clone(), Held::Taken(Box::new(record), created))
}

/// Gives up `hold` on channel `id`: the record as it was (deleted, if this
/// request made it).
pub(super) async fn release(engine: &Engine, id: &B256, hold: u64, created: bool) {
    let result = batch::update(&*engine.inner.batch.store, id, |current| match current {
        Some(c) if c.pending.as_ref().is_some_and(|p| p.id == hold) => {
            if created {
                Change::Delete(())
            } else {
                let mut next = c.clone();
                next.pending = None;
                Change::Write(next, ())
            }
        }
        _ => Change::Keep(()),
    })
    .await;
    if let Err(e) = result {
        tracing::error!(error = %e, channel = %id, "x402: could not release a batch-settlement channel; it frees itself when the hold lapses");
    }
}

/// `accepts` with the batch row of `network` carrying the channel's state:
/// the corrective 402's rows.
fn corrective_rows(
    rows: &[v2::PaymentRequirements],
    network: &str,
    record: &ChannelRecord,
) -> Vec<v2::PaymentRequirements> {
    let mut rows = rows.to_vec();
    if let Some(row) = rows
        .iter_mut()
        .find(|r| r.scheme == batch::BATCH_SETTLEMENT && r.network == network)
    {
        row.extra
            .insert("channelState".into(), record.channel_state());
        row.extra
            .insert("voucherState".into(), record.voucher_state());
    }
    rows
}

/// The `PAYMENT-RESPONSE` header for a receipt written as JSON (batch
/// receipts carry `amount: ""`, which [`SettleResponse`] cannot).
fn receipt_headers(receipt: &Value) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Some(value) = codec::encode(receipt)
        .ok()
        .and_then(|v| HeaderValue::try_from(v).ok())
    {
        headers.insert(codec::PAYMENT_RESPONSE, value);
    }
    headers
}

impl Engine {
    /// Answers a refusal of a batch payment, with `accepts` (the route's
    /// rows, unless a corrective 402 replaces them).
    #[allow(clippy::too_many_arguments)]
    fn refuse_batch(
        &self,
        compiled: &CompiledRoute,
        resource: &v2::ResourceInfo,
        resolved: &Resolved,
        extensions: Option<&JsonObject>,
        accepts: Option<&[v2::PaymentRequirements]>,
        refusal: &Refusal,
        payer: Option<&str>,
    ) -> EngineResponse {
        crate::metrics::refusal(compiled.route.pattern(), refusal);
        let mut parts = self.parts(&compiled.route, resource, resolved);
        if let Some(extensions) = extensions {
            parts.extensions = extensions;
        }
        if let Some(accepts) = accepts {
            parts.accepts = accepts;
        }
        response::refusal_response(refusal, Some(&parts), Some(X402Version::V2), payer)
    }

    /// The batch-settlement half of [`pay`](Self::pay): `offer` is the
    /// route's batch requirement the payment matched.
    pub(super) async fn pay_batch(
        &self,
        compiled: &Arc<CompiledRoute>,
        resolved: Arc<Resolved>,
        resource: Arc<v2::ResourceInfo>,
        enriched: Option<JsonObject>,
        payment_payload: PaymentPayload,
        offer: ResolvedOffer,
    ) -> Decision {
        let requirement = offer.requirements.clone();
        let refuse = |refusal: Refusal, payer: Option<&str>| {
            Decision::Respond(self.refuse_batch(
                compiled,
                &resource,
                &resolved,
                enriched.as_ref(),
                None,
                &refusal,
                payer,
            ))
        };
        if payment_payload.version() != X402Version::V2 {
            return refuse(Refusal::NoMatchingRequirements, None);
        }
        let payload = match BatchPayload::parse(payment_payload.payload()) {
            Ok(p) => p,
            Err(reason) => return refuse(Refusal::Invalid(reason.into()), None),
        };
        let payer = payload.config().payer.to_checksum(None);
        let batch = &self.inner.batch;
        let Some(domain) = batch.domain(&requirement.network) else {
            return refuse(Refusal::NoMatchingRequirements, None);
        };
        if let Err(reason) =
            verify::check_config(payload.config(), payload.voucher(), &requirement, &domain)
        {
            return refuse(Refusal::Invalid(reason.into()), Some(&payer));
        }
        let id = payload.voucher().channel_id;
        let price = requirement.amount.get();

        // Hold the channel, waiting for a request that holds it now.
        let pending = Pending {
            id: rand::random(),
            expires_at: 0,
        };
        let started = Instant::now();
        let held = loop {
            let now = now_ms();
            let pending = Pending {
                expires_at: now + hold_ms(requirement.max_timeout_seconds),
                ..pending.clone()
            };
            let outcome = batch::update(&*batch.store, &id, |c| {
                hold(c, &payload, price, &pending, now)
            })
            .await;
            match outcome {
                Ok(Held::Busy) if started.elapsed() < batch.busy_wait => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                other => break other,
            }
        };
        let (record, created) = match held {
            Ok(Held::Taken(record, created)) => (record, created),
            Ok(Held::Busy) => {
                return refuse(Refusal::Invalid(reason::CHANNEL_BUSY.into()), Some(&payer))
            }
            Ok(Held::Missing) => {
                return refuse(
                    Refusal::Invalid(reason::MISSING_CHANNEL.into()),
                    Some(&payer),
                )
            }
            Ok(Held::Stale(record)) => {
                let refusal = Refusal::Invalid(reason::CUMULATIVE_AMOUNT_MISMATCH.into());
                let rows = record
                    .as_deref()
                    .map(|r| corrective_rows(&resolved.rows, &requirement.network, r));
                return Decision::Respond(self.refuse_batch(
                    compiled,
                    &resource,
                    &resolved,
                    enriched.as_ref(),
                    rows.as_deref(),
                    &refusal,
                    Some(&payer),
                ));
            }
            Err(e) => {
                tracing::error!(error = %e, "x402: batch-settlement channel store failed");
                return refuse(
                    Refusal::Unavailable {
                        reason: reason::STATE_UNAVAILABLE,
                        retry_after: Duration::from_secs(1),
                    },
                    None,
                );
            }
        };
        let hold_id = pending.id;

        // Verify: in process for a plain EOA voucher on fresh mirrored
        // state, else through the facilitator.
        let Some(request) = FacilitatorRequest::new(
            payment_payload,
            PaymentRequirements::V2((*requirement).clone()),
        )
        .map(PreparedRequest::new) else {
            release(self, &id, hold_id, created).await;
            return refuse(Refusal::NoMatchingRequirements, None);
        };
        let now = now_ms();
        let ttl = u64::try_from(batch.onchain_ttl.as_millis()).unwrap_or(u64::MAX);
        let fresh = record
            .onchain_synced_at
            .is_some_and(|t| now.saturating_sub(t) <= ttl);
        let local = matches!(payload, BatchPayload::Voucher { .. })
            && !created
            && fresh
            && verify::locally_verifiable(payload.config());
        let mut record = record;
        if local {
            if let Err(reason) =
                verify::verify_voucher(&record, payload.config(), payload.voucher(), &domain)
            {
                release(self, &id, hold_id, created).await;
                return refuse(Refusal::Invalid(reason.into()), Some(&payer));
            }
        } else {
            let network = requirement.network.clone();
            let pctx = PaymentContext::of_request(compiled.route.pattern(), &request, &network);
            let verdict = match Box::pin(self.verify(&pctx, &request)).await {
                Ok(v) => v,
                Err(refusal) => {
                    release(self, &id, hold_id, created).await;
                    return refuse(refusal, Some(&payer));
                }
            };
            if !verdict.is_valid {
                release(self, &id, hold_id, created).await;
                let reason = verdict
                    .invalid_reason
                    .unwrap_or_else(|| "invalid_payment".to_owned());
                return refuse(Refusal::Invalid(reason), Some(&payer));
            }
            let Some(state) = verdict.extra.as_ref().and_then(OnchainState::from_extra) else {
                release(self, &id, hold_id, created).await;
                tracing::warn!(
                    "x402: the facilitator's batch-settlement verdict has no channel snapshot"
                );
                return refuse(
                    Refusal::Invalid(reason::CHANNEL_STATE_READ_FAILED.into()),
                    Some(&payer),
                );
            };
            // No state of our own (a new channel, or state lost): the
            // chain's claimed total is the count, as the spec says; charges
            // made and not claimed are forfeited.
            if created {
                let expected = state.total_claimed.saturating_add(price);
                if payload.voucher().max_claimable_amount.get() != expected {
                    release(self, &id, hold_id, created).await;
                    let mut baseline = (*record).clone();
                    state.mirror_into(&mut baseline, now);
                    baseline.charged_cumulative_amount = state.total_claimed;
                    let refusal = Refusal::Invalid(reason::CUMULATIVE_AMOUNT_MISMATCH.into());
                    let mut rows = corrective_rows(&resolved.rows, &requirement.network, &baseline);
                    // No voucher of ours to show: the buyer recovers from
                    // the chain.
                    for row in &mut rows {
                        row.extra.remove("voucherState");
                    }
                    return Decision::Respond(self.refuse_batch(
                        compiled,
                        &resource,
                        &resolved,
                        enriched.as_ref(),
                        Some(&rows),
                        &refusal,
                        Some(&payer),
                    ));
                }
            }
            let mirrored = batch::update(&*batch.store, &id, |current| match current {
                Some(c) if c.pending.as_ref().is_some_and(|p| p.id == hold_id) => {
                    let mut next = c.clone();
                    state.mirror_into(&mut next, now);
                    if created {
                        next.charged_cumulative_amount = state.total_claimed;
                    }
                    Change::Write(next.clone(), Some(next))
                }
                _ => Change::Keep(None),
            })
            .await;
            match mirrored {
                Ok(Some(next)) => *record = next,
                Ok(None) => {
                    return refuse(Refusal::Invalid(reason::CHANNEL_BUSY.into()), Some(&payer))
                }
                Err(e) => {
                    tracing::error!(error = %e, "x402: batch-settlement channel store failed");
                    release(self, &id, hold_id, created).await;
                    return refuse(
                        Refusal::Unavailable {
                            reason: reason::STATE_UNAVAILABLE,
                            retry_after: Duration::from_secs(1),
                        },
                        None,
                    );
                }
            }
        }

        if let BatchPayload::Refund { amount, .. } = &payload {
            let amount = *amount;
            let response = self
                .refund_now(
                    compiled,
                    &resource,
                    &resolved,
                    enriched.as_ref(),
                    request.into_request(),
                    &payload,
                    &record,
                    amount,
                    hold_id,
                    &domain,
                )
                .await;
            return Decision::Respond(response);
        }

        let meter = Meter::new(requirement.amount);
        let names = offer.names();
        let payment = VerifiedPayment {
            version: X402Version::V2,
            scheme: names.scheme.clone(),
            network: names.network.clone(),
            payer: Some(payer.into()),
            amount: requirement.amount,
            asset: names.asset.clone(),
            pay_to: names.pay_to.clone(),
            requirements: names.requirements.clone(),
            route: compiled.pattern.clone(),
            meter: Some(meter.clone()),
            session: None,
            sign_in: None,
        };
        Decision::Paid(Box::new(PaidRequest {
            engine: self.clone(),
            route: RouteRef::of(compiled),
            payment: Arc::new(payment),
            finished: false,
            // Vouchers are cumulative: a resent one is refused as replayed,
            // and payment-identifier does not apply to them.
            identifier: None,
            kind: Kind::Batch(Box::new(BatchCall {
                request: request.into_request(),
                payload,
                channel_id: id,
                hold: hold_id,
                created,
                resource,
                resolved,
                extensions: enriched,
                decimals: offer.decimals,
                meter,
            })),
        }))
    }

    /// A refund request: settled now, without the handler; 200 with the
    /// receipt, or the refusal.
    #[allow(clippy::too_many_arguments)]
    async fn refund_now(
        &self,
        compiled: &CompiledRoute,
        resource: &v2::ResourceInfo,
        resolved: &Resolved,
        extensions: Option<&JsonObject>,
        mut request: FacilitatorRequest,
        payload: &BatchPayload,
        record: &ChannelRecord,
        amount: Option<crate::money::AtomicAmount>,
        hold_id: u64,
        domain: &alloy_sol_types::Eip712Domain,
    ) -> EngineResponse {
        let id = record.channel_id;
        let payer = record.channel_config.payer.to_checksum(None);
        let refuse = |refusal: Refusal| {
            self.refuse_batch(
                compiled,
                resource,
                resolved,
                extensions,
                None,
                &refusal,
                Some(&payer),
            )
        };
        let remainder = record
            .balance
            .saturating_sub(record.charged_cumulative_amount);
        if remainder.is_zero() {
            release(self, &id, hold_id, false).await;
            return refuse(Refusal::Invalid(reason::REFUND_NO_BALANCE.into()));
        }
        let amount = match amount {
            Some(a) if a.is_zero() => {
                release(self, &id, hold_id, false).await;
                return refuse(Refusal::Invalid(reason::REFUND_AMOUNT_INVALID.into()));
            }
            Some(a) => a.get().min(remainder),
            None => remainder,
        };
        let voucher = payload.voucher();
        let settle_payload = match batch::refund_payload(
            &self.inner.batch,
            domain,
            record,
            voucher.max_claimable_amount.get(),
            &voucher.signature,
            amount,
        )
        .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "x402: could not sign a refund");
                release(self, &id, hold_id, false).await;
                return refuse(Refusal::Internal);
            }
        };
        if let PaymentPayload::V2(p) = &mut request.payment_payload {
            p.payload = settle_payload;
        }
        let answer = self.inner.facilitator.settle(&request).await;
        self.inner.observed.record(&answer);
        let receipt = match answer {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "x402: refund outcome unknown");
                release(self, &id, hold_id, false).await;
                return refuse(Refusal::SettlementUnknown);
            }
        };
        if !receipt.success {
            release(self, &id, hold_id, false).await;
            return refuse(Refusal::SettlementFailed(Box::new(receipt)));
        }
        let snapshot = receipt
            .extra
            .as_ref()
            .and_then(|e| e.get("channelState"))
            .and_then(Value::as_object)
            .and_then(OnchainState::from_extra);
        let now = now_ms();
        let after = batch::update(&*self.inner.batch.store, &id, |current| match current {
            Some(c) if c.pending.as_ref().is_some_and(|p| p.id == hold_id) => {
                let mut next = c.clone();
                next.pending = None;
                match snapshot {
                    Some(s) if s.balance > next.charged_cumulative_amount => {
                        s.mirror_into(&mut next, now);
                        next.total_claimed = next.total_claimed.max(next.charged_cumulative_amount);
                        Change::Write(next.clone(), next)
                    }
                    // All that was left went back: the channel is closed.
                    _ => {
                        next.balance = next.charged_cumulative_amount;
                        next.total_claimed = next.charged_cumulative_amount;
                        Change::Delete(next)
                    }
                }
            }
            _ => Change::Keep(c_or(current, record)),
        })
        .await
        .unwrap_or_else(|e| {
            tracing::error!(error = %e, "x402: could not record a refund; the chain has it");
            record.clone()
        });
        let mut json = serde_json::to_value(&receipt).unwrap_or_else(|_| json!({}));
        if json.get("payer").is_none() {
            json["payer"] = json!(payer);
        }
        let state = after.channel_state();
        json["extra"]["channelState"] = state;
        let mut response = http::Response::new(bytes::Bytes::from(
            json!({ "message": "Refund acknowledged", "channelId": id }).to_string(),
        ));
        let headers = response.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response::expose(headers);
        headers.insert(http::header::CACHE_CONTROL, response::NO_STORE);
        headers.extend(receipt_headers(&json));
        response
    }
}

fn c_or(current: Option<&ChannelRecord>, record: &ChannelRecord) -> ChannelRecord {
    current.cloned().unwrap_or_else(|| record.clone())
}

/// Commits a batch call whose handler succeeded, charging `charge` (at
/// most the ceiling): the receipt's headers, or the response to send
/// instead. Runs to completion on its own task.
pub(super) async fn finish(
    engine: Engine,
    route: Arc<CompiledRoute>,
    call: Box<BatchCall>,
    charge: crate::money::AtomicAmount,
) -> Result<HeaderMap, EngineResponse> {
    let id = call.channel_id;
    let hold_id = call.hold;
    let payer = call.payload.config().payer.to_checksum(None);
    let network = call.request.payment_requirements.network().to_owned();
    let refuse = |refusal: Refusal| {
        engine.refuse_batch(
            &route,
            &call.resource,
            &call.resolved,
            call.extensions.as_ref(),
            None,
            &refusal,
            Some(&payer),
        )
    };
    // A deposit moves money first: settle it through the facilitator.
    let mut deposit_receipt = None;
    if let BatchPayload::Deposit { .. } = call.payload {
        let timer = crate::metrics::FacilitatorTimer::start();
        let answer = engine.inner.facilitator.settle(&call.request).await;
        timer.done("settle");
        engine.inner.observed.record(&answer);
        match answer {
            Ok(r) if r.success => deposit_receipt = Some(r),
            Ok(mut r) => {
                release(&engine, &id, hold_id, call.created).await;
                if r.error_reason.is_none() {
                    r.error_reason = Some("settlement_failed".into());
                }
                tracing::warn!(reason = ?r.error_reason, "x402: batch-settlement deposit refused");
                return Err(refuse(Refusal::SettlementFailed(Box::new(r))));
            }
            Err(e) => {
                tracing::error!(error = %e, "x402: batch-settlement deposit outcome unknown; the response is withheld");
                release(&engine, &id, hold_id, call.created).await;
                return Err(refuse(Refusal::SettlementUnknown));
            }
        }
    }
    let snapshot = deposit_receipt
        .as_ref()
        .and_then(|r| r.extra.as_ref())
        .and_then(|e| e.get("channelState"))
        .and_then(Value::as_object)
        .and_then(OnchainState::from_extra);
    let voucher = call.payload.voucher();
    let max = voucher.max_claimable_amount.get();
    let now = now_ms();
    let committed = batch::update(&*engine.inner.batch.store, &id, |current| {
        let Some(c) = current else {
            return Change::Keep(Err(reason::MISSING_CHANNEL));
        };
        if c.pending.as_ref().map(|p| p.id) != Some(hold_id) {
            return Change::Keep(Err(reason::CHANNEL_BUSY));
        }
        let mut next = c.clone();
        next.pending = None;
        if let Some(s) = snapshot {
            s.mirror_into(&mut next, now);
        }
        let charged = c.charged_cumulative_amount.saturating_add(charge.get());
        if charged > max {
            return Change::Write(next, Err(reason::CHARGE_EXCEEDS_SIGNED_CUMULATIVE));
        }
        next.charged_cumulative_amount = charged;
        next.signed_max_claimable = max;
        next.signature = voucher.signature.clone();
        next.last_request_timestamp = now;
        Change::Write(next.clone(), Ok(next))
    })
    .await;
    let record = match committed {
        Ok(Ok(record)) => record,
        Ok(Err(reason)) => {
            tracing::warn!(reason, channel = %id, "x402: batch-settlement charge not committed");
            return Err(refuse(Refusal::Invalid(reason.into())));
        }
        Err(e) => {
            tracing::error!(error = %e, channel = %id, "x402: batch-settlement charge could not be recorded; the response is withheld");
            return Err(refuse(Refusal::Unavailable {
                reason: reason::STATE_UNAVAILABLE,
                retry_after: Duration::from_secs(1),
            }));
        }
    };
    let mut receipt = match deposit_receipt {
        Some(r) => serde_json::to_value(&r).unwrap_or_else(|_| json!({})),
        None => json!({
            "success": true,
            "transaction": "",
            "network": network,
            "amount": "",
        }),
    };
    if receipt.get("payer").is_none() {
        receipt["payer"] = json!(payer);
    }
    if !receipt.get("extra").is_some_and(Value::is_object) {
        receipt["extra"] = json!({});
    }
    receipt["extra"]["chargedAmount"] = json!(charge.to_string());
    receipt["extra"]["channelState"] = record.channel_state();
    Ok(receipt_headers(&receipt))
}
