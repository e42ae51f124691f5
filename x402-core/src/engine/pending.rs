//! `settlement_pending`: a facilitator that broadcast the transaction but
//! has not seen it land yet.
//!
//! Upstream (`@x402/core` 2.27 `x402ResourceServer.settleWithPendingRetry`,
//! mirroring Go's `settleWithPendingRetry`) represents it as a settlement
//! answer `{"success": false, "errorReason": "settlement_pending",
//! "transaction": "<hash>"}`, in a 2xx body or a non-2xx one, and retries
//! the identical settle request exactly once, at once: the facilitator keeps
//! the broadcast transaction in its pending store and the second call waits
//! for that transaction instead of sending another. Only an answer carrying
//! a transaction hash is retried.
//!
//! This engine does the same by default ([`PendingRetry::default`]: one
//! retry, no wait) and lets the seller wait and retry more
//! ([`EngineBuilder::settlement_pending_retry`](super::EngineBuilder::settlement_pending_retry)),
//! within a total budget. Where upstream then hands the still-pending
//! answer on as a failed settlement (a 402), this engine answers what it
//! is: the outcome is unknown, since the transaction is on its way. The
//! buyer gets `502 settlement_unknown` with the handler's body withheld, the
//! payment stays claimed (a resend is `payment_replayed`), and the hooks'
//! `on_settle_failure` is told with [`FacilitatorError::SettlementPending`]
//! (the webhook hooks record `payment.settlement_unknown` with the
//! transaction). A `settlement_pending` without a transaction hash is not
//! retried and ends the same way.

use std::time::{Duration, Instant};

use super::Engine;
use crate::{
    facilitator::FacilitatorError,
    proto::{PreparedRequest, SettleResponse},
};

/// The facilitator's reason for a broadcast settlement not yet final.
pub const SETTLEMENT_PENDING: &str = "settlement_pending";

/// How a `settlement_pending` answer is retried: how many times, how long
/// to wait before each retry, and the most the retries may take in all.
///
/// The default is upstream's: one retry, at once, within 30 s.
///
/// ```
/// use std::time::Duration;
/// use x402_core::engine::PendingRetry;
///
/// // Up to 4 retries, 250 ms, 500 ms, 1 s, 2 s apart, never past 10 s.
/// let retry = PendingRetry::new(4)
///     .delay(Duration::from_millis(250))
///     .budget(Duration::from_secs(10));
/// # let _ = retry;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingRetry {
    retries: u32,
    delay: Duration,
    budget: Duration,
}

impl Default for PendingRetry {
    fn default() -> Self {
        Self {
            retries: 1,
            delay: Duration::ZERO,
            budget: Duration::from_secs(30),
        }
    }
}

impl PendingRetry {
    /// Up to `retries` retries after the first answer, at once, within 30 s.
    /// `PendingRetry::new(0)` never retries.
    pub fn new(retries: u32) -> Self {
        Self {
            retries,
            ..Self::default()
        }
    }

    /// The wait before the first retry, doubled before each next one
    /// (default none).
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The most time, from the first answer, within which a retry (its
    /// wait included) may start (default 30 s). Each call is bounded by
    /// the facilitator client's own timeout besides.
    #[must_use]
    pub fn budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }
}

/// Whether an answer is a `settlement_pending` worth asking again about.
fn is_pending(answer: &SettleResponse) -> bool {
    !answer.success && answer.error_reason.as_deref() == Some(SETTLEMENT_PENDING)
}

impl Engine {
    /// Settles `request` with the facilitator, retrying `settlement_pending`
    /// answers as the engine's [`PendingRetry`] says; a settlement still
    /// pending in the end is [`FacilitatorError::SettlementPending`].
    pub(super) async fn settle_with_pending_retry(
        &self,
        request: &PreparedRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        let inner = &self.inner;
        let policy = inner.pending_retry;
        let mut attempts = 0u32;
        let mut started: Option<Instant> = None;
        let mut delay = policy.delay;
        loop {
            attempts += 1;
            let timer = crate::metrics::FacilitatorTimer::start();
            let answer = inner.facilitator.settle_prepared(request).await;
            inner
                .series
                .facilitator_call(timer, crate::metrics::FacilitatorOp::Settle);
            inner.observed.record(&answer);
            let pending = match answer {
                Ok(answer) if is_pending(&answer) => answer,
                other => return other,
            };
            let started = *started.get_or_insert_with(Instant::now);
            let retry = !pending.transaction.is_empty()
                && attempts <= policy.retries
                && started.elapsed().saturating_add(delay) <= policy.budget;
            tracing::warn!(
                attempt = attempts,
                transaction = %pending.transaction,
                retry,
                "x402: the facilitator answered settlement_pending"
            );
            if !retry {
                return Err(FacilitatorError::SettlementPending {
                    transaction: pending.transaction,
                    attempts,
                });
            }
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            delay = delay.saturating_mul(2);
        }
    }
}
