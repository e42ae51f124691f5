//! The replay guard: the after-verify hook that claims each payment.

use std::{
    fmt,
    sync::Arc,
    time::{Duration, SystemTime},
};

use async_trait::async_trait;

use super::{key, ClaimKey, ClaimKeyError, ClaimStore, ClaimStoreError, Claimed, MemoryClaimStore};
use crate::{
    hooks::{AfterVerify, CancelReason, HookError, HookSteps, PaymentContext, PaymentHooks},
    late::{self, Late, LATE_ANSWER_WAIT},
    proto::VerifyResponse,
};

/// The default [deadline](ReplayGuard::deadline) of a store call.
const DEFAULT_DEADLINE: Duration = Duration::from_millis(250);

/// The default `Retry-After` of a `503 claim_unavailable`.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The reason of a refused replay.
const REPLAYED: &str = "payment_replayed";

/// The reason of a `503` when the store is down or slow.
const UNAVAILABLE: &str = "claim_unavailable";

/// At most this many characters of a key are logged.
const KEY_LOG_LEN: usize = 48;

/// The replay guard: claims every verified payment once, before the
/// handler runs. Register it with `EngineBuilder::hooks`; see the
/// [module docs](super) for the outcomes.
///
/// ```
/// use std::time::Duration;
/// use x402_core::claim::{MemoryClaimStore, ReplayGuard};
///
/// let guard = ReplayGuard::new(MemoryClaimStore::new())
///     .deadline(Duration::from_millis(100))
///     .allow_unclaimable_route("/free-trial/*");
/// # let _ = guard;
/// ```
///
/// # How the defaults were chosen
///
/// - **Fail closed.** When the store errors or misses its deadline, the
///   payment is refused with `503 claim_unavailable` and a `Retry-After`
///   (1 s): serving unclaimed would let one signed payment buy many
///   responses while the store is down. [`dangerous_fail_open`] trades that
///   for availability.
/// - **A 250 ms deadline** per store call ([`deadline`]), so a slow or
///   unreachable store costs a buyer a quarter of a second, never a hung
///   request. A call that misses the deadline is not dropped: it keeps
///   running in the background (up to 60 s), and if its claim lands after
///   all, it is released, since its request was refused. The same holds
///   for a claim whose client hung up while it was being written. An honest
///   retry then succeeds.
/// - **Every network is claimed.** Payments whose replay primitive this
///   crate does not read are claimed by the digest of their payload (see
///   [the module docs](super#every-network) for what that catches);
///   [`digest_fallback`] turns that off. Payments nothing names are refused
///   (`402 claim_unsupported`): they could be replayed freely. Opt out with
///   [`allow_unclaimable`] or per route with [`allow_unclaimable_route`].
/// - **Release on failure, never after settlement.** When the handler fails
///   (≥ 400 or an error), or a later hook refuses, the claim is released so
///   the buyer can retry with the same authorization. Once a settlement has
///   been attempted the claim is kept until it expires: money may have
///   moved.
/// - **A client that hangs up keeps its claim** once the handler started
///   (see [`CancelReason::releases_claim`]): the handler may have done its
///   work, and a released claim would let one funded authorization start it
///   again and again by disconnecting each time. The engine's
///   `release_claims_on_hang_up` changes that. A request abandoned before
///   its handler started releases its claim, including one that lands after
///   the client went away.
///
/// [`dangerous_fail_open`]: Self::dangerous_fail_open
/// [`deadline`]: Self::deadline
/// [`allow_unclaimable`]: Self::allow_unclaimable
/// [`digest_fallback`]: Self::digest_fallback
/// [`allow_unclaimable_route`]: Self::allow_unclaimable_route
#[derive(Clone)]
pub struct ReplayGuard {
    store: Arc<dyn ClaimStore>,
    deadline: Duration,
    retry_after: Duration,
    fail_open: bool,
    digest_fallback: bool,
    allow_unclaimable: bool,
    unclaimable_routes: Vec<String>,
}

impl fmt::Debug for ReplayGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayGuard")
            .field("store", &format_args!("dyn ClaimStore"))
            .field("deadline", &self.deadline)
            .field("retry_after", &self.retry_after)
            .field("fail_open", &self.fail_open)
            .field("digest_fallback", &self.digest_fallback)
            .field("allow_unclaimable", &self.allow_unclaimable)
            .field("unclaimable_routes", &self.unclaimable_routes)
            .finish()
    }
}

impl Default for ReplayGuard {
    fn default() -> Self {
        Self::memory()
    }
}

impl ReplayGuard {
    /// A guard over `store`, with the safe defaults described above.
    pub fn new(store: impl ClaimStore) -> Self {
        Self {
            store: Arc::new(store),
            deadline: DEFAULT_DEADLINE,
            retry_after: DEFAULT_RETRY_AFTER,
            fail_open: false,
            digest_fallback: true,
            allow_unclaimable: false,
            unclaimable_routes: Vec::new(),
        }
    }

    /// A guard over a new [`MemoryClaimStore`] (one process only).
    pub fn memory() -> Self {
        Self::new(MemoryClaimStore::new())
    }

    /// How long each store call may take before the payment is refused with
    /// `503 claim_unavailable` (default 250 ms). A store that answers
    /// without waiting (the memory store) is never cut off, even with
    /// [`Duration::ZERO`].
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The `Retry-After` of a `503 claim_unavailable` (default 1 s).
    #[must_use]
    pub fn retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// Lets payments through **unclaimed** when the store errors or misses
    /// its deadline, instead of answering `503` (default `false`).
    ///
    /// # Security
    ///
    /// While the store is down, one signed payment can then be replayed to
    /// run the handler many times; only one copy will settle. Every payment
    /// let through this way is logged at `warn`. A claim that lands late is
    /// kept (its payment went ahead), and replays it then detects are
    /// logged.
    #[must_use]
    pub fn dangerous_fail_open(mut self, fail_open: bool) -> Self {
        self.fail_open = fail_open;
        self
    }

    /// Whether payments whose replay primitive this crate does not read
    /// (another network family, an EVM payload of an unknown shape) are
    /// claimed by the digest of their payload (default `true`; see
    /// [the module docs](super#every-network) for its limit). Turned off,
    /// they have no key: `402 claim_unsupported`, unless
    /// [allowed](Self::allow_unclaimable).
    #[must_use]
    pub fn digest_fallback(mut self, enabled: bool) -> Self {
        self.digest_fallback = enabled;
        self
    }

    /// Lets through payments that cannot be claimed
    /// ([`ClaimKeyError::Unsupported`]: a payload that names nothing, or,
    /// with the [digest fallback](Self::digest_fallback) off, one that
    /// would need it) on every route, instead of refusing them with
    /// `402 claim_unsupported` (default `false`). Such payments are not
    /// protected against replay.
    ///
    /// Malformed payloads and over-long authorizations are refused anyway.
    #[must_use]
    pub fn allow_unclaimable(mut self, allow: bool) -> Self {
        self.allow_unclaimable = allow;
        self
    }

    /// Like [`allow_unclaimable`](Self::allow_unclaimable), for the route
    /// whose pattern is exactly `route_pattern` (as it was registered).
    #[must_use]
    pub fn allow_unclaimable_route(mut self, route_pattern: impl Into<String>) -> Self {
        self.unclaimable_routes.push(route_pattern.into());
        self
    }

    fn allows_unclaimable(&self, route: &str) -> bool {
        self.allow_unclaimable || self.unclaimable_routes.iter().any(|r| r == route)
    }

    /// The claim of a payment, as of now, under this guard's fallback.
    fn key(&self, ctx: &PaymentContext<'_>) -> Result<ClaimKey, ClaimKeyError> {
        key::derive(
            ctx.payload,
            ctx.requirements,
            ctx.network,
            std::time::SystemTime::now(),
            self.digest_fallback,
            ctx.evm_payload(),
        )
    }

    /// A payment without a claim key: let through or refuse.
    fn unkeyable(
        &self,
        ctx: &PaymentContext<'_>,
        payer: &str,
        error: &ClaimKeyError,
    ) -> AfterVerify {
        if matches!(error, ClaimKeyError::Unsupported { .. }) && self.allows_unclaimable(ctx.route)
        {
            tracing::debug!(
                route = ctx.route,
                network = ctx.network,
                payer,
                "x402: payment has no replay claim key; allowed unclaimed"
            );
            return AfterVerify::Continue;
        }
        tracing::warn!(
            error = %error,
            route = ctx.route,
            network = ctx.network,
            payer,
            "x402: payment refused: no replay claim"
        );
        AfterVerify::Abort {
            reason: error.reason().to_owned(),
        }
    }

    /// The claim of a store that must be awaited: within the guard's
    /// deadline, a claim that lands after it released (or, failing open,
    /// kept).
    async fn claim_late(
        &self,
        key: &str,
        expires_at: SystemTime,
    ) -> Result<Claimed, ClaimStoreError> {
        let mut call = {
            let store = Arc::clone(&self.store);
            let (key, release_key) = (key.to_owned(), key.to_owned());
            let release_store = Arc::clone(&self.store);
            Late::new(
                "replay claim",
                async move { store.claim(&key, expires_at).await },
                late::boxed(move |answer| release_late_claim(release_store, release_key, answer)),
            )
        };
        let answer = match call.answer(self.deadline).await {
            Some(answer) => answer,
            None => {
                if self.fail_open {
                    // The payment goes ahead unclaimed: a claim that lands
                    // late is kept, and a replay it detects is logged.
                    call.on_late(late::boxed(keep_late_claim(key.to_owned())));
                }
                Err(ClaimStoreError::TimedOut(self.deadline))
            }
        };
        drop(call);
        answer
    }
}

#[async_trait]
impl PaymentHooks for ReplayGuard {
    fn inspects_requests(&self) -> bool {
        false
    }

    fn steps(&self) -> HookSteps {
        HookSteps::AFTER_VERIFY | HookSteps::PAYMENT_CANCELED
    }

    async fn after_verify(
        &self,
        ctx: &PaymentContext<'_>,
        verdict: &VerifyResponse,
    ) -> Result<AfterVerify, HookError> {
        let payer = verdict.payer.as_deref().unwrap_or_default();
        let ClaimKey { key, expires_at } = match self.key(ctx) {
            Ok(claim) => claim,
            Err(e) => return Ok(self.unkeyable(ctx, payer, &e)),
        };

        // The claim is a write: if this request stops waiting for it (the
        // deadline passed, or the client hung up mid-call), it may land all
        // the same, and is then released, since its request was refused.
        let answer = match self.store.claim_now(&key, expires_at) {
            Some(answer) => answer,
            None => self.claim_late(&key, expires_at).await,
        };

        let key_log = KeyForLog(&key);
        match answer {
            Ok(Claimed::Claimed) => {
                tracing::debug!(network = ctx.network, payer, key = %key_log, "x402: payment claimed");
                Ok(AfterVerify::Continue)
            }
            Ok(Claimed::AlreadyClaimed) => {
                tracing::warn!(
                    network = ctx.network,
                    payer,
                    key = %key_log,
                    "x402: payment refused: already claimed (replay)"
                );
                Ok(AfterVerify::Abort {
                    reason: REPLAYED.to_owned(),
                })
            }
            Err(error) if self.fail_open => {
                tracing::warn!(
                    error = %error,
                    network = ctx.network,
                    payer,
                    key = %key_log,
                    "x402: claim store unavailable; dangerous_fail_open lets the payment through UNCLAIMED"
                );
                Ok(AfterVerify::Continue)
            }
            Err(error) => {
                tracing::warn!(
                    error = %error,
                    network = ctx.network,
                    payer,
                    key = %key_log,
                    "x402: claim store unavailable; payment refused (503)"
                );
                Err(HookError::Unavailable {
                    reason: UNAVAILABLE,
                    retry_after: self.retry_after,
                    source: Some(Box::new(error)),
                })
            }
        }
    }

    async fn on_payment_canceled(&self, ctx: &PaymentContext<'_>, reason: CancelReason) {
        // The key is a function of the payment: recompute it. A payment
        // without a key was let through unclaimed; nothing to release.
        let Ok(ClaimKey { key, .. }) = self.key(ctx) else {
            return;
        };
        let key_log = KeyForLog(&key);
        if !reason.releases_claim() {
            tracing::debug!(network = ctx.network, key = %key_log, ?reason, "x402: claim kept");
            return;
        }
        let mut call = {
            let store = Arc::clone(&self.store);
            let (key, late_key) = (key.clone(), key.clone());
            Late::new(
                "claim release",
                async move { store.release(&key).await },
                move |answer| late_release(late_key, answer),
            )
        };
        match call.answer(self.deadline).await {
            Some(Ok(())) => {
                tracing::debug!(network = ctx.network, key = %key_log, ?reason, "x402: claim released");
            }
            Some(Err(error)) => {
                tracing::warn!(
                    error = %error,
                    network = ctx.network,
                    key = %key_log,
                    ?reason,
                    "x402: could not release a claim; it is kept until it expires"
                );
            }
            None => {
                tracing::debug!(network = ctx.network, key = %key_log, "x402: claim release is slow; finishing it in the background");
            }
        }
    }
}

/// What a claim nobody waited for answered: if it landed, its request was
/// refused or abandoned, so it is released.
async fn release_late_claim(
    store: Arc<dyn ClaimStore>,
    key: String,
    answer: Result<Claimed, ClaimStoreError>,
) {
    let key_log = KeyForLog(&key);
    match answer {
        Ok(Claimed::Claimed) => {
            tracing::info!(key = %key_log, "x402: a claim landed after its request was refused or abandoned; releasing it");
            let released = tokio::time::timeout(LATE_ANSWER_WAIT, store.release(&key)).await;
            late_release(
                key,
                released.unwrap_or(Err(ClaimStoreError::TimedOut(LATE_ANSWER_WAIT))),
            )
            .await;
        }
        Ok(Claimed::AlreadyClaimed) => {}
        Err(error) => {
            tracing::debug!(error = %error, key = %key_log, "x402: a late claim failed; nothing to release");
        }
    }
}

/// For a payment let through unclaimed by `dangerous_fail_open`: a claim
/// that lands late is kept; a replay it detects is logged.
fn keep_late_claim(
    key: String,
) -> impl FnOnce(Result<Claimed, ClaimStoreError>) -> std::future::Ready<()> + Send + 'static {
    move |answer| {
        let key_log = KeyForLog(&key);
        match answer {
            Ok(Claimed::Claimed) => {
                tracing::info!(key = %key_log, "x402: a late claim landed; the payment let through is now claimed");
            }
            Ok(Claimed::AlreadyClaimed) => tracing::warn!(
                key = %key_log,
                "x402: a payment let through by dangerous_fail_open was a replay"
            ),
            Err(error) => {
                tracing::debug!(error = %error, key = %key_log, "x402: a late claim failed");
            }
        }
        std::future::ready(())
    }
}

/// What a release nobody waited for answered.
async fn late_release(key: String, answer: Result<(), ClaimStoreError>) {
    let key_log = KeyForLog(&key);
    match answer {
        Ok(()) => tracing::debug!(key = %key_log, "x402: claim released (late)"),
        Err(error) => tracing::warn!(
            error = %error,
            key = %key_log,
            "x402: could not release a claim; it is kept until it expires"
        ),
    }
}

/// A claim key shortened for logs.
struct KeyForLog<'a>(&'a str);

impl fmt::Display for KeyForLog<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(KEY_LOG_LEN) {
            Some((end, _)) => write!(f, "{}…", self.0.get(..end).unwrap_or_default()),
            None => f.write_str(self.0),
        }
    }
}
