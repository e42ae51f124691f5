//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature
//! `metrics`, off by default).
//!
//! With the feature on, the engine records the series below into whatever
//! recorder the application installed (`metrics-exporter-prometheus`,
//! StatsD, ...); with no recorder installed they cost a few atomic loads.
//! Enabling the feature changes no behaviour: no hook is added, no response
//! differs. Without it every recording function here compiles to nothing,
//! and the names are still exported so other crates can agree on them.
//!
//! | Name | Kind | Labels | Counts |
//! |---|---|---|---|
//! | `x402_challenges_total` | counter | `route`, `reason` | 402 challenges sent (`reason`: `payment_required`, `no_matching_requirements`, `payment_replayed`, a facilitator `invalidReason`, `session_exhausted`, a settlement `errorReason`, ...) |
//! | `x402_refusals_total` | counter | `route`, `reason` | other refusals of protected requests (`facilitator_unavailable`, `claim_unavailable`, `internal_error`, `settlement_unknown`, ...) |
//! | `x402_verifications_total` | counter | `outcome`, `reason` | verifications: `outcome` = `valid`, `invalid` (`reason` = the `invalidReason`), `error` (no verdict; `reason` = the refusal) |
//! | `x402_settlements_total` | counter | `outcome`, `reason` | settlement attempts: `success`, `failure` (`reason` = `errorReason`), `error` (outcome unknown) |
//! | `x402_replays_refused_total` | counter | | payments refused as replays (`payment_replayed`) |
//! | `x402_sessions_opened_total` | counter | | prepaid sessions opened |
//! | `x402_sessions_redeemed_total` | counter | | calls redeemed from a prepaid session |
//! | `x402_amount_settled_total` | counter | `network`, `asset` | atomic units settled successfully (see below) |
//! | `x402_facilitator_seconds` | histogram | `op` (`verify`, `settle`, `supported`) | facilitator call latency, answered or not |
//! | `x402_claim_store_seconds` | histogram | `op` (`claim`, `release`), `outcome` (`ok`, `error`) | claim store latency, through [`TimedClaimStore`] |
//! | `x402_facilitator_member_calls_total` | counter | `member`, `op` (`verify`, `settle`), `outcome` (`answered`, `failed`) | calls to the members of a [`FailoverFacilitator`](crate::facilitator::FailoverFacilitator) (`member`: the names it was given) |
//! | `x402_facilitator_breaker_transitions_total` | counter | `member`, `state` (`open`, `half_open`, `closed`) | circuit breaker changes of a `FailoverFacilitator`'s members |
//!
//! Reserved for the webhook sender (recorded there, not by the engine):
//! `x402_webhook_deliveries_total{outcome}` (`outcome`: `delivered`,
//! `failed` — one per attempt), `x402_webhook_dead_letters_total` (events
//! moved to dead letters) and `x402_webhook_delivery_seconds` (histogram, one
//! per attempt). Use the constants in [`names`].
//!
//! **`x402_amount_settled_total`** is a `u64` counter of atomic units. Atomic
//! amounts are 256-bit; the running total per `(network, asset)` is kept in
//! this process with saturating addition and exported with
//! `Counter::absolute`, so it stops at `u64::MAX` (1.8 × 10¹⁹: 18 whole
//! tokens of an 18-decimal asset, 1.8 × 10¹³ of a 6-decimal one) instead of
//! wrapping. Alert on it reaching `u64::MAX`; the receipts (webhooks) remain
//! the source of truth.
//!
//! Label values are bounded: routes are the route patterns, networks and
//! assets those of the offers; reasons longer
//! than 64 characters or with characters outside `[A-Za-z0-9_.:-]` (free text
//! from a facilitator) are recorded as `other`.

/// The series names.
pub mod names {
    /// Counter: 402 challenges sent, by `route` and `reason`.
    pub const CHALLENGES_TOTAL: &str = "x402_challenges_total";
    /// Counter: other refusals of protected requests, by `route` and `reason`.
    pub const REFUSALS_TOTAL: &str = "x402_refusals_total";
    /// Counter: verifications, by `outcome` and `reason`.
    pub const VERIFICATIONS_TOTAL: &str = "x402_verifications_total";
    /// Counter: settlement attempts, by `outcome` and `reason`.
    pub const SETTLEMENTS_TOTAL: &str = "x402_settlements_total";
    /// Counter: payments refused as replays.
    pub const REPLAYS_REFUSED_TOTAL: &str = "x402_replays_refused_total";
    /// Counter: prepaid sessions opened.
    pub const SESSIONS_OPENED_TOTAL: &str = "x402_sessions_opened_total";
    /// Counter: calls redeemed from prepaid sessions.
    pub const SESSIONS_REDEEMED_TOTAL: &str = "x402_sessions_redeemed_total";
    /// Counter: atomic units settled, by `network` and `asset` (saturating).
    pub const AMOUNT_SETTLED_TOTAL: &str = "x402_amount_settled_total";
    /// Histogram: facilitator call latency in seconds, by `op`.
    pub const FACILITATOR_SECONDS: &str = "x402_facilitator_seconds";
    /// Histogram: claim store latency in seconds, by `op` and `outcome`.
    pub const CLAIM_STORE_SECONDS: &str = "x402_claim_store_seconds";
    /// Counter: calls to a failover facilitator's members, by `member`, `op`
    /// and `outcome`.
    pub const FACILITATOR_MEMBER_CALLS_TOTAL: &str = "x402_facilitator_member_calls_total";
    /// Counter: circuit breaker changes of a failover facilitator's members,
    /// by `member` and `state`.
    pub const FACILITATOR_BREAKER_TRANSITIONS_TOTAL: &str =
        "x402_facilitator_breaker_transitions_total";
    /// Counter (webhook sender): delivery attempts, by `outcome`.
    pub const WEBHOOK_DELIVERIES_TOTAL: &str = "x402_webhook_deliveries_total";
    /// Counter (webhook sender): events moved to dead letters.
    pub const WEBHOOK_DEAD_LETTERS_TOTAL: &str = "x402_webhook_dead_letters_total";
    /// Histogram (webhook sender): delivery attempt latency in seconds.
    pub const WEBHOOK_DELIVERY_SECONDS: &str = "x402_webhook_delivery_seconds";
}

#[cfg(feature = "metrics")]
pub use self::enabled::{describe, TimedClaimStore};

#[cfg(feature = "metrics")]
mod enabled {
    use std::{
        collections::HashMap,
        hash::{Hash, Hasher},
        sync::{
            atomic::{AtomicU64, Ordering},
            Arc, Mutex, OnceLock, PoisonError, RwLock,
        },
        time::{Instant, SystemTime},
    };

    use ::metrics::{counter, describe_counter, describe_histogram, Unit};
    use async_trait::async_trait;

    use super::names::*;
    use crate::{
        claim::{ClaimStore, ClaimStoreError, Claimed},
        money::AtomicAmount,
    };

    /// Registers every series' description and unit with the installed
    /// recorder (optional: exporters show them as `# HELP` lines).
    pub fn describe() {
        describe_counter!(CHALLENGES_TOTAL, "402 challenges sent, by route and reason");
        describe_counter!(
            REFUSALS_TOTAL,
            "Non-402 refusals of protected requests, by route and reason"
        );
        describe_counter!(
            VERIFICATIONS_TOTAL,
            "Payment verifications, by outcome and reason"
        );
        describe_counter!(
            SETTLEMENTS_TOTAL,
            "Settlement attempts, by outcome and reason"
        );
        describe_counter!(REPLAYS_REFUSED_TOTAL, "Payments refused as replays");
        describe_counter!(SESSIONS_OPENED_TOTAL, "Prepaid sessions opened");
        describe_counter!(
            SESSIONS_REDEEMED_TOTAL,
            "Calls redeemed from prepaid sessions"
        );
        describe_counter!(
            AMOUNT_SETTLED_TOTAL,
            "Atomic units settled, by network and asset (saturates at u64::MAX)"
        );
        describe_histogram!(
            FACILITATOR_SECONDS,
            Unit::Seconds,
            "Facilitator call latency, by op"
        );
        describe_histogram!(
            CLAIM_STORE_SECONDS,
            Unit::Seconds,
            "Claim store latency, by op and outcome"
        );
        describe_counter!(
            FACILITATOR_MEMBER_CALLS_TOTAL,
            "Calls to a failover facilitator's members, by member, op and outcome"
        );
        describe_counter!(
            FACILITATOR_BREAKER_TRANSITIONS_TOTAL,
            "Circuit breaker changes of a failover facilitator's members, by member and state"
        );
        describe_counter!(
            WEBHOOK_DELIVERIES_TOTAL,
            "Webhook delivery attempts, by outcome"
        );
        describe_counter!(
            WEBHOOK_DEAD_LETTERS_TOTAL,
            "Webhook events moved to dead letters"
        );
        describe_histogram!(
            WEBHOOK_DELIVERY_SECONDS,
            Unit::Seconds,
            "Webhook delivery attempt latency"
        );
    }

    pub(super) fn label(value: &str) -> String {
        label_str(value).to_owned()
    }

    /// The label value written for `value`: itself when short and tame,
    /// else `other`.
    fn label_str(value: &str) -> &str {
        let ok = value.len() <= 64
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
        if ok {
            value
        } else {
            "other"
        }
    }

    /// At most this many distinct series keep a cached key; past it, keys
    /// are built per call (correct, only slower).
    const MAX_CACHED_KEYS: usize = 4096;

    /// The key of series `name{labels}`, built once and then shared: a
    /// per-request metric allocates nothing once its series exists. Keys,
    /// not handles, are cached, so that whichever recorder is current is
    /// the one written to.
    fn cached_key(name: &'static str, labels: &[(&'static str, &str)]) -> Arc<::metrics::Key> {
        type Keys = Mutex<HashMap<u64, Vec<Arc<::metrics::Key>>>>;
        static KEYS: OnceLock<Keys> = OnceLock::new();
        let hash = {
            let mut h = std::hash::DefaultHasher::new();
            name.hash(&mut h);
            for (k, v) in labels {
                k.hash(&mut h);
                v.hash(&mut h);
            }
            h.finish()
        };
        let same = |key: &::metrics::Key| {
            key.name() == name
                && key.labels().len() == labels.len()
                && key
                    .labels()
                    .zip(labels)
                    .all(|(l, (k, v))| l.key() == *k && l.value() == *v)
        };
        let keys = KEYS.get_or_init(Keys::default);
        let mut keys = keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(key) = keys.get(&hash).and_then(|b| b.iter().find(|k| same(k))) {
            return Arc::clone(key);
        }
        let key = Arc::new(::metrics::Key::from_parts(
            name,
            labels
                .iter()
                .map(|(k, v)| ::metrics::Label::new(*k, (*v).to_owned()))
                .collect::<Vec<_>>(),
        ));
        if keys.len() < MAX_CACHED_KEYS {
            keys.entry(hash).or_default().push(Arc::clone(&key));
        }
        key
    }

    pub(super) fn inc(name: &'static str, labels: &[(&'static str, &str)]) {
        // Reasons may be a facilitator's free text; routes are patterns.
        let mut bounded: [(&'static str, &str); 4] = [("", ""); 4];
        let n = labels.len().min(bounded.len());
        for (slot, (k, v)) in bounded.iter_mut().zip(labels) {
            *slot = (k, if *k == "reason" { label_str(v) } else { v });
        }
        if labels.len() > bounded.len() {
            let labels: Vec<::metrics::Label> = labels
                .iter()
                .map(|(k, v)| ::metrics::Label::new(*k, label(v)))
                .collect();
            counter!(name, labels).increment(1);
            return;
        }
        inc_key(&cached_key(name, &bounded[..n]));
    }

    /// The retained key of `x402_challenges_total{route, reason="payment_required"}`:
    /// the series [`inc`] names for a route's challenges, with its labels
    /// and hash computed once.
    pub(super) fn challenge_key(route: &str) -> ::metrics::Key {
        ::metrics::Key::from_parts(
            CHALLENGES_TOTAL,
            vec![
                ::metrics::Label::new("route", route.to_owned()),
                ::metrics::Label::new("reason", "payment_required"),
            ],
        )
        .to_retained()
    }

    /// Adds one to the counter `key`, with whichever recorder is current
    /// (as `counter!` does).
    pub(super) fn inc_key(key: &::metrics::Key) {
        static METADATA: ::metrics::Metadata<'static> =
            ::metrics::Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));
        ::metrics::with_recorder(|r| r.register_counter(key, &METADATA)).increment(1);
    }

    pub(super) fn seconds(
        name: &'static str,
        labels: &[(&'static str, &'static str)],
        since: Instant,
    ) {
        static METADATA: ::metrics::Metadata<'static> =
            ::metrics::Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));
        let key = cached_key(name, labels);
        ::metrics::with_recorder(|r| r.register_histogram(&key, &METADATA))
            .record(since.elapsed().as_secs_f64());
    }

    /// Where [`with_recorder`](::metrics::with_recorder) records now.
    fn current_recorder() -> usize {
        ::metrics::with_recorder(|r| (r as *const dyn ::metrics::Recorder).cast::<()>() as usize)
    }

    /// The handles of [`super::HotSeries`], registered with one recorder.
    pub(super) struct Hot {
        recorder: usize,
        pub(super) verified: ::metrics::Counter,
        pub(super) settled: ::metrics::Counter,
        pub(super) redeemed: ::metrics::Counter,
        pub(super) verify_seconds: ::metrics::Histogram,
        pub(super) settle_seconds: ::metrics::Histogram,
        /// The `x402_amount_settled_total` handle of the first total this
        /// engine recorded, with that total's place (see [`amount`]).
        amount: OnceLock<(usize, ::metrics::Counter)>,
    }

    impl Hot {
        fn register(recorder: usize) -> Self {
            static METADATA: ::metrics::Metadata<'static> = ::metrics::Metadata::new(
                module_path!(),
                ::metrics::Level::INFO,
                Some(module_path!()),
            );
            let counter = |name, labels: &[(&'static str, &str)]| {
                let key = cached_key(name, labels);
                ::metrics::with_recorder(|r| r.register_counter(&key, &METADATA))
            };
            let histogram = |op| {
                let key = cached_key(FACILITATOR_SECONDS, &[("op", op)]);
                ::metrics::with_recorder(|r| r.register_histogram(&key, &METADATA))
            };
            Self {
                recorder,
                verified: counter(VERIFICATIONS_TOTAL, &[("outcome", "valid"), ("reason", "")]),
                settled: counter(SETTLEMENTS_TOTAL, &[("outcome", "success"), ("reason", "")]),
                redeemed: counter(SESSIONS_REDEEMED_TOTAL, &[]),
                verify_seconds: histogram("verify"),
                settle_seconds: histogram("settle"),
                amount: OnceLock::new(),
            }
        }

        /// The handles, if registered with the recorder current now.
        pub(super) fn get(cell: &OnceLock<Self>) -> Option<&Self> {
            let recorder = current_recorder();
            let hot = cell.get_or_init(|| Self::register(recorder));
            (hot.recorder == recorder).then_some(hot)
        }
    }

    /// The running total of one `(network, asset)` (asset lowercase), and
    /// its series' key.
    struct Total {
        network: String,
        asset: String,
        units: AtomicU64,
        key: ::metrics::Key,
    }

    /// The totals: a handful, read without a write lock once they exist.
    type Totals = RwLock<Vec<Total>>;

    /// `f` of the total of `(network, asset)`, made if it is the first.
    fn with_total<T>(network: &str, asset: &str, f: impl FnOnce(usize, &Total) -> T) -> T {
        static TOTALS: OnceLock<Totals> = OnceLock::new();
        let totals = TOTALS.get_or_init(Totals::default);
        let find = |totals: &[Total]| {
            totals
                .iter()
                .position(|t| t.network == network && t.asset.eq_ignore_ascii_case(asset))
        };
        {
            let totals = totals.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(at) = find(&totals) {
                return f(at, &totals[at]);
            }
        }
        let mut totals = totals.write().unwrap_or_else(PoisonError::into_inner);
        let at = find(&totals).unwrap_or_else(|| {
            let asset = asset.to_ascii_lowercase();
            totals.push(Total {
                key: ::metrics::Key::from_parts(
                    AMOUNT_SETTLED_TOTAL,
                    vec![
                        ::metrics::Label::new("network", network.to_owned()),
                        ::metrics::Label::new("asset", asset.clone()),
                    ],
                ),
                network: network.to_owned(),
                asset,
                units: AtomicU64::new(0),
            });
            totals.len() - 1
        });
        f(at, &totals[at])
    }

    /// Adds `amount` to the running total of `(network, asset)`. With
    /// `hot`, an engine's handles (registered with the current recorder),
    /// the series' handle is kept there for the first total it records:
    /// registering per settlement hashed the key and, with the Prometheus
    /// exporter, allocated a handle each time.
    pub(super) fn amount(network: &str, asset: &str, amount: AtomicAmount, hot: Option<&Hot>) {
        static METADATA: ::metrics::Metadata<'static> =
            ::metrics::Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));
        let add = u64::try_from(amount.get()).unwrap_or(u64::MAX);
        with_total(network, asset, |at, total| {
            let before = total
                .units
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |units| {
                    Some(units.saturating_add(add))
                })
                .unwrap_or_else(|units| units);
            // Exported as an absolute value; `metrics`' atomic counters keep
            // the highest one they are given, so racing settlements cannot
            // lower it.
            let value = before.saturating_add(add);
            let register =
                || ::metrics::with_recorder(|r| r.register_counter(&total.key, &METADATA));
            match hot.map(|hot| hot.amount.get_or_init(|| (at, register()))) {
                Some((kept, counter)) if *kept == at => counter.absolute(value),
                _ => register().absolute(value),
            }
        });
    }

    /// A [`ClaimStore`] that records `x402_claim_store_seconds{op, outcome}`
    /// around another:
    /// `ReplayGuard::new(TimedClaimStore::new(RedisClaimStore::...))`.
    #[derive(Debug, Clone)]
    pub struct TimedClaimStore<S>(S);

    impl<S> TimedClaimStore<S> {
        /// Times `store`.
        pub fn new(store: S) -> Self {
            Self(store)
        }

        /// The timed store.
        pub fn into_inner(self) -> S {
            self.0
        }
    }

    fn outcome<T, E>(r: &Result<T, E>) -> &'static str {
        if r.is_ok() {
            "ok"
        } else {
            "error"
        }
    }

    #[async_trait]
    impl<S: ClaimStore> ClaimStore for TimedClaimStore<S> {
        async fn claim(
            &self,
            key: &str,
            expires_at: SystemTime,
        ) -> Result<Claimed, ClaimStoreError> {
            let start = Instant::now();
            let r = self.0.claim(key, expires_at).await;
            seconds(
                CLAIM_STORE_SECONDS,
                &[("op", "claim"), ("outcome", outcome(&r))],
                start,
            );
            r
        }

        async fn release(&self, key: &str) -> Result<(), ClaimStoreError> {
            let start = Instant::now();
            let r = self.0.release(key).await;
            seconds(
                CLAIM_STORE_SECONDS,
                &[("op", "release"), ("outcome", outcome(&r))],
                start,
            );
            r
        }

        fn claim_now(
            &self,
            key: &str,
            expires_at: SystemTime,
        ) -> Option<Result<Claimed, ClaimStoreError>> {
            let start = Instant::now();
            let r = self.0.claim_now(key, expires_at)?;
            seconds(
                CLAIM_STORE_SECONDS,
                &[("op", "claim"), ("outcome", outcome(&r))],
                start,
            );
            Some(r)
        }
    }
}

// What the engine calls. Every function is empty without the feature.

use crate::{money::AtomicAmount, proto::SettleResponse, refusal::Refusal};

/// The series of one route that its hot path counts, built once.
#[derive(Debug)]
pub(crate) struct RouteSeries {
    #[cfg(feature = "metrics")]
    challenge: ::metrics::Key,
}

impl RouteSeries {
    /// The series of the route whose pattern is `route`.
    pub(crate) fn new(route: &str) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = route;
        Self {
            #[cfg(feature = "metrics")]
            challenge: enabled::challenge_key(route),
        }
    }

    /// A `payment_required` challenge on this route: the series that
    /// [`refusal`] counts it in, without building its key.
    #[inline]
    pub(crate) fn payment_required(&self) {
        #[cfg(feature = "metrics")]
        enabled::inc_key(&self.challenge);
    }
}

/// The series that every paid request records, registered once per engine
/// (with the recorder current at the first paid request) and then written
/// through their handles: a registration allocates with some recorders
/// (`metrics-exporter-prometheus` does), a handle never does. Should the
/// current recorder change later (a test's local recorder), the series are
/// registered per call again, as with [`refusal`].
#[derive(Default)]
pub(crate) struct HotSeries {
    #[cfg(feature = "metrics")]
    cell: std::sync::OnceLock<enabled::Hot>,
}

impl std::fmt::Debug for HotSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotSeries").finish_non_exhaustive()
    }
}

impl HotSeries {
    /// A valid verification ([`verification`] with `Ok(None)`).
    #[inline]
    pub(crate) fn verified(&self) {
        #[cfg(feature = "metrics")]
        match enabled::Hot::get(&self.cell) {
            Some(hot) => hot.verified.increment(1),
            None => verification(Ok(None)),
        }
    }

    /// A call redeemed from a prepaid session.
    #[inline]
    pub(crate) fn redeemed(&self) {
        #[cfg(feature = "metrics")]
        match enabled::Hot::get(&self.cell) {
            Some(hot) => hot.redeemed.increment(1),
            None => ::metrics::counter!(names::SESSIONS_REDEEMED_TOTAL).increment(1),
        }
    }

    /// [`settlement`], through the handle of a successful one.
    #[inline]
    pub(crate) fn settlement(
        &self,
        receipt: Option<&SettleResponse>,
        network: &str,
        asset: &str,
        amount: AtomicAmount,
    ) {
        #[cfg(feature = "metrics")]
        if let Some(r) = receipt.filter(|r| r.success) {
            if let Some(hot) = enabled::Hot::get(&self.cell) {
                hot.settled.increment(1);
                enabled::amount(network, asset, r.amount.unwrap_or(amount), Some(hot));
                return;
            }
        }
        settlement(receipt, network, asset, amount);
    }

    /// [`FacilitatorTimer::done`] for a `verify` or `settle` call.
    #[inline]
    pub(crate) fn facilitator_call(&self, timer: FacilitatorTimer, op: FacilitatorOp) {
        #[cfg(feature = "metrics")]
        {
            let name = match op {
                FacilitatorOp::Verify => "verify",
                FacilitatorOp::Settle => "settle",
            };
            match enabled::Hot::get(&self.cell) {
                Some(hot) => {
                    let seconds = timer.start.elapsed().as_secs_f64();
                    match op {
                        FacilitatorOp::Verify => hot.verify_seconds.record(seconds),
                        FacilitatorOp::Settle => hot.settle_seconds.record(seconds),
                    }
                }
                None => timer.done(name),
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (timer, op);
    }
}

/// The facilitator calls of every paid request, for [`HotSeries`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum FacilitatorOp {
    /// `POST /verify`.
    Verify,
    /// `POST /settle`.
    Settle,
}

/// A refusal of a request on `route`: a challenge (402) or another refusal.
#[inline]
pub(crate) fn refusal(route: &str, refusal: &Refusal) {
    #[cfg(feature = "metrics")]
    {
        let name = if refusal.is_challenge() {
            names::CHALLENGES_TOTAL
        } else {
            names::REFUSALS_TOTAL
        };
        enabled::inc(name, &[("route", route), ("reason", refusal.reason())]);
        if let Refusal::Aborted(r) = refusal {
            if r == "payment_replayed" {
                ::metrics::counter!(names::REPLAYS_REFUSED_TOTAL).increment(1);
            }
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (route, refusal);
}

/// A verification: `Ok(None)` valid, `Ok(Some(reason))` invalid, `Err(refusal)`
/// no verdict.
#[inline]
pub(crate) fn verification(result: Result<Option<&str>, &Refusal>) {
    #[cfg(feature = "metrics")]
    {
        let (outcome, reason) = match result {
            Ok(None) => ("valid", ""),
            Ok(Some(reason)) => ("invalid", reason),
            Err(refusal) => ("error", refusal.reason()),
        };
        enabled::inc(
            names::VERIFICATIONS_TOTAL,
            &[("outcome", outcome), ("reason", reason)],
        );
    }
    #[cfg(not(feature = "metrics"))]
    let _ = result;
}

/// A settlement's answer (`None`: outcome unknown).
#[inline]
pub(crate) fn settlement(
    receipt: Option<&SettleResponse>,
    network: &str,
    asset: &str,
    amount: AtomicAmount,
) {
    #[cfg(feature = "metrics")]
    match receipt {
        Some(r) if r.success => {
            enabled::inc(
                names::SETTLEMENTS_TOTAL,
                &[("outcome", "success"), ("reason", "")],
            );
            enabled::amount(network, asset, r.amount.unwrap_or(amount), None);
        }
        Some(r) => {
            let reason = r.error_reason.as_deref().unwrap_or("settlement_failed");
            enabled::inc(
                names::SETTLEMENTS_TOTAL,
                &[("outcome", "failure"), ("reason", reason)],
            );
        }
        None => enabled::inc(
            names::SETTLEMENTS_TOTAL,
            &[("outcome", "error"), ("reason", "settlement_unknown")],
        ),
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (receipt, network, asset, amount);
}

/// A prepaid session was opened.
#[inline]
pub(crate) fn session_opened() {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(names::SESSIONS_OPENED_TOTAL).increment(1);
}

/// Times a facilitator call; records on [`done`](Self::done).
#[derive(Debug)]
pub(crate) struct FacilitatorTimer {
    #[cfg(feature = "metrics")]
    start: std::time::Instant,
}

impl FacilitatorTimer {
    #[inline]
    pub(crate) fn start() -> Self {
        Self {
            #[cfg(feature = "metrics")]
            start: std::time::Instant::now(),
        }
    }

    /// Records the call's latency under `op`.
    #[inline]
    pub(crate) fn done(self, op: &'static str) {
        #[cfg(feature = "metrics")]
        enabled::seconds(names::FACILITATOR_SECONDS, &[("op", op)], self.start);
        #[cfg(not(feature = "metrics"))]
        let _ = op;
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    #[test]
    fn labels_are_bounded() {
        assert_eq!(
            super::enabled::label("payment_replayed"),
            "payment_replayed"
        );
        assert_eq!(super::enabled::label("eip155:84532"), "eip155:84532");
        assert_eq!(
            super::enabled::label("free text from a facilitator"),
            "other"
        );
        assert_eq!(super::enabled::label(&"a".repeat(65)), "other");
    }
}
