//! Driving a request through the engine: the first, synchronous look
//! ([`Processing`]), the wait for a verdict ([`Pending`]), and the tasks
//! that outlive a request (settlements, releases) with [`Engine::drain`].

use std::{
    fmt,
    future::{Future, IntoFuture},
    panic::AssertUnwindSafe,
    pin::Pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    task::Poll,
    time::Duration,
};

use http::StatusCode;
use tokio::sync::Notify;

use super::{response, table::RouteRef, CompiledRoute, Decision, Engine, EngineResponse, Refusal};
use crate::limit::Held;
use crate::route::{RequestView, SettlementTiming};

/// The engine's first look at a request, from [`Engine::process`] (or
/// [`BoundRoute::process`](super::BoundRoute::process),
/// [`Guard::process`](super::Guard::process)). The route is matched once,
/// here.
///
/// Await it for the [`Decision`]. An adapter on a hot path asks
/// [`now`](Self::now) instead: unprotected requests and ready-made 402s are
/// decided without a future, and only what must wait (a payment to verify,
/// a session to redeem, a hook to ask) is left [`Pending`].
///
/// ```
/// use x402_core::engine::{Decision, Now};
/// use x402_core::{route::RequestView, Engine, Offer, Route};
/// # use x402_core::testing::StandIn;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::builder(StandIn::new())
///     .route(Route::get("/report").offer(Offer::exact(
///         "eip155:84532",
///         "$0.01",
///         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
///     )))
///     .build()?;
///
/// let (parts, ()) = http::Request::get("/report").body(())?.into_parts();
/// let view = RequestView::from_parts(&parts);
/// let decision = match engine.process(view).now() {
///     Now::Decided(decision) => decision,
///     Now::Pending(pending) => pending.decide(view).await,
/// };
/// let Decision::Respond(challenge) = decision else { unreachable!() };
/// assert_eq!(challenge.status(), 402);
/// # Ok(()) }
/// ```
#[must_use = "a request is decided when this is awaited or asked `now`"]
pub struct Processing<'a> {
    state: State<'a>,
}

enum State<'a> {
    Decided(Decision),
    Pending(Pending, RequestView<'a>),
}

impl fmt::Debug for Processing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            State::Decided(decision) => f.debug_tuple("Decided").field(decision).finish(),
            State::Pending(pending, _) => f.debug_tuple("Pending").field(pending).finish(),
        }
    }
}

/// What [`Processing::now`] knows.
#[derive(Debug)]
#[must_use]
pub enum Now {
    /// Decided without waiting: pass, or answer (a 402, a 400).
    Decided(Decision),
    /// The route is matched; deciding needs the engine to wait.
    Pending(Pending),
}

/// A protected request whose decision needs the engine to wait: finish it
/// with [`decide`](Self::decide), given the same request.
pub struct Pending {
    engine: Engine,
    compiled: RouteRef,
    /// The unit of an abuse limit the request holds, given back once it is
    /// decided unless the answer is a 402.
    held: Option<Held>,
}

impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending")
            .field("route", &self.engine.route(&self.compiled).route.pattern())
            .finish_non_exhaustive()
    }
}

impl<'a> Processing<'a> {
    #[inline]
    pub(super) fn decided(decision: Decision) -> Self {
        Self {
            state: State::Decided(decision),
        }
    }

    pub(super) fn pending(
        engine: &Engine,
        compiled: &Arc<CompiledRoute>,
        request: RequestView<'a>,
        held: Option<Held>,
    ) -> Self {
        Self {
            state: State::Pending(
                Pending {
                    engine: engine.clone(),
                    compiled: RouteRef::of(compiled),
                    held,
                },
                request,
            ),
        }
    }

    /// The decision, if it needs no waiting; else the [`Pending`] rest,
    /// which owns no part of the request.
    #[inline]
    pub fn now(self) -> Now {
        match self.state {
            State::Decided(decision) => Now::Decided(decision),
            State::Pending(pending, _) => Now::Pending(pending),
        }
    }
}

impl<'a> IntoFuture for Processing<'a> {
    type Output = Decision;
    type IntoFuture = Pin<Box<dyn Future<Output = Decision> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        match self.state {
            State::Decided(decision) => Box::pin(std::future::ready(decision)),
            State::Pending(pending, request) => crate::boxed::boxed(|| pending.decide(request)),
        }
    }
}

impl Pending {
    /// Decides: asks the hooks, redeems a session or verifies the payment,
    /// and on routes that settle before their handler, settles. `request`
    /// must be the request [`Engine::process`] was given.
    //
    // Not an `async fn`: one keeps its arguments twice while it waits (as
    // arguments, and moved into the body), 40 bytes here, and the tower
    // layer's future that awaits this one has to stay within 1 032 bytes
    // (see `BoxedDecision`). The block below uses `self` where it was
    // captured.
    #[allow(clippy::manual_async_fn)] // see above
    pub fn decide<'a>(
        self,
        request: RequestView<'a>,
    ) -> impl Future<Output = Decision> + Send + 'a {
        async move {
            // Boxed response (`BoxedDecision`): this future keeps 16 bytes for
            // the answer while it waits, not 144.
            let compiled = self.engine.route(&self.compiled);
            let decided = self.engine.process_route(compiled, request).await;
            let decision = Decision::from(decided);
            if let (Some(held), Some(limits)) = (self.held, &self.engine.inner.limits) {
                let challenged = match &decision {
                    Decision::Respond(response) => {
                        response.status() == StatusCode::PAYMENT_REQUIRED
                    }
                    Decision::Pass | Decision::Paid(_) => false,
                };
                limits.settle(held, challenged);
            }
            // The decision is taken apart before the await below, so that
            // this future does not keep room for it as well.
            let mut paid = match decision {
                Decision::Paid(paid) if paid.timing() == SettlementTiming::BeforeHandler => paid,
                decision => return decision,
            };
            // Boxed: most routes settle after their handler.
            match Box::pin(paid.settle_first()).await {
                Ok(()) => Decision::Paid(paid),
                Err(response) => Decision::Respond(response),
            }
        }
    }
}

/// The engine's tasks still running (settlements, claim releases).
///
/// Every paid request counts itself in and out, from every worker thread:
/// the count keeps a cache line (two, for the adjacent-line prefetcher) of
/// its own, so that its writes do not evict the engine's read-only fields
/// from the other cores' caches.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

impl InFlight {
    fn enter(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    fn leave(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }
}

/// Counts one task of [`InFlight`] while it lives.
struct Tracked(Engine);

/// Work started in a caller's task, counted in [`InFlight`] until it ends:
/// if the caller is dropped first, the rest of it is spawned on the runtime
/// it started on, and its place in the count moves to that task. It
/// borrows the engine, which is cloned only then: every paid request runs
/// one, and each clone writes the engine's reference count, which every
/// core's requests write too.
struct HandOff<'a, F: Future + Send + 'static> {
    work: Option<Pin<Box<F>>>,
    engine: &'a Engine,
    runtime: tokio::runtime::Handle,
}

impl<F: Future + Send + 'static> Drop for HandOff<'_, F> {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            self.engine.inner.in_flight.leave();
            return;
        };
        // Counted already: the task's `Tracked` leaves for it.
        let tracked = Tracked(self.engine.clone());
        self.runtime.spawn(async move {
            let _tracked = tracked;
            // Nobody is left to take the outcome.
            let _ = work.await;
        });
    }
}

impl Tracked {
    fn new(engine: &Engine) -> Self {
        engine.inner.in_flight.enter();
        Self(engine.clone())
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.inner.in_flight.leave();
    }
}

impl Engine {
    /// Takes a unit of the abuse limit `request` draws on, if any (see
    /// [`crate::limit`]); how long until there is one when its client has
    /// none left ([`rate_limited`]). Nothing is hashed or locked when no
    /// limit is configured.
    #[inline]
    pub(super) fn admit(&self, request: &RequestView<'_>) -> Result<Option<Held>, Duration> {
        match &self.inner.limits {
            None => Ok(None),
            Some(limits) => limits.admit(request),
        }
    }

    /// Runs `work` to completion, counted by [`drain`](Self::drain): here,
    /// in the caller's task, and if the caller is dropped before it is done
    /// (the client hung up), the rest of it on a task of its own, so that
    /// dropping the caller never stops it. Running here costs no task
    /// switch on the common path, where nobody hangs up. `None` if it
    /// panicked. Without a Tokio runtime it runs here and is stopped with
    /// its caller.
    ///
    /// `work` comes boxed: an `async fn` keeps room for its arguments for
    /// its whole run, so a future passed by value would make this one as
    /// large, and boxing it here as well would box it twice.
    pub(super) async fn run_to_completion<F>(&self, work: Pin<Box<F>>) -> Option<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Some(work.await);
        };
        self.inner.in_flight.enter();
        let mut handoff = HandOff {
            work: Some(work),
            engine: self,
            runtime,
        };
        std::future::poll_fn(|cx| {
            let Some(work) = handoff.work.as_mut() else {
                return Poll::Ready(None);
            };
            match std::panic::catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(cx))) {
                Ok(Poll::Pending) => Poll::Pending,
                Ok(Poll::Ready(output)) => {
                    handoff.work = None;
                    Poll::Ready(Some(output))
                }
                Err(_panic) => {
                    // A panicked future is never polled again.
                    handoff.work = None;
                    Poll::Ready(None)
                }
            }
        })
        .await
    }

    /// Runs `work` on a task of its own, counted by [`drain`](Self::drain),
    /// without waiting for it.
    pub(super) fn spawn_tracked(&self, work: impl Future<Output = ()> + Send + 'static) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("x402: no Tokio runtime to finish a paid request on; hooks not told");
            return;
        };
        let tracked = Tracked::new(self);
        runtime.spawn(async move {
            let _tracked = tracked;
            work.await;
        });
    }

    /// How many settlements (and the releases of requests whose client went
    /// away) are still running.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.count.load(Ordering::SeqCst)
    }

    /// Waits until no settlement is in flight, at most `deadline`: call it
    /// at shutdown, after the server stopped taking requests, so that a
    /// settlement whose client hung up still records its outcome (hooks,
    /// webhook event, session). `true` if none is left.
    ///
    /// Settlements run on the Tokio runtime that served their request: keep
    /// it running until this returns.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # async fn run(engine: x402_core::Engine) {
    /// // axum::serve(listener, app).with_graceful_shutdown(signal).await?;
    /// if !engine.drain(Duration::from_secs(30)).await {
    ///     tracing::warn!(left = engine.in_flight(), "settlements still running at exit");
    /// }
    /// # }
    /// ```
    pub async fn drain(&self, deadline: Duration) -> bool {
        let until = tokio::time::Instant::now() + deadline;
        let in_flight = &self.inner.in_flight;
        loop {
            let idle = in_flight.idle.notified();
            let mut idle = std::pin::pin!(idle);
            idle.as_mut().enable();
            if in_flight.count.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(until, idle).await.is_err() {
                return in_flight.count.load(Ordering::SeqCst) == 0;
            }
        }
    }
}

/// The 429 for a client over its abuse limit on `compiled`.
pub(super) fn rate_limited(compiled: &CompiledRoute, retry_after: Duration) -> EngineResponse {
    let refusal = Refusal::RateLimited { retry_after };
    tracing::debug!(
        route = compiled.route.pattern(),
        ?retry_after,
        "x402: client over its abuse limit; refused"
    );
    crate::metrics::refusal(compiled.route.pattern(), &refusal);
    response::refusal_response(&refusal, None, None, None)
}
