#![doc = include_str!("failover/README.md")]

use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    task::Poll,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::Notify;

pub use self::breaker::BreakerState;
use self::breaker::{Admission, Breaker, Policy, Ticket, Transition};
use self::merge::{join_all, merge};
use self::sticky::{payment_id, PaymentId, Sticky};
use super::{Facilitator, FacilitatorError, FacilitatorErrorKind, FacilitatorHealth, GasWallet};
use crate::proto::{
    FacilitatorRequest, PreparedRequest, SettleResponse, SupportedResponse, VerifyResponse,
};

mod breaker;
mod builder;
mod merge;
mod sticky;

pub use self::builder::{FailoverConfigError, FailoverFacilitatorBuilder};

/// The default [`failure_threshold`](FailoverFacilitatorBuilder::failure_threshold).
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 5;
/// The default [`cool_down`](FailoverFacilitatorBuilder::cool_down).
pub const DEFAULT_COOL_DOWN: Duration = Duration::from_secs(30);
/// The default [`failure_rate`](FailoverFacilitatorBuilder::failure_rate):
/// percent of failures among the last calls.
pub const DEFAULT_FAILURE_RATE_PERCENT: u8 = 50;
/// The default [`failure_rate`](FailoverFacilitatorBuilder::failure_rate):
/// how many recent calls it looks at.
pub const DEFAULT_FAILURE_RATE_WINDOW: u16 = 20;
/// The longest [`failure_rate`](FailoverFacilitatorBuilder::failure_rate)
/// window.
pub const MAX_FAILURE_RATE_WINDOW: u16 = 1_000;

/// The `extra` keys that name the one facilitator able to complete a
/// payment.
const SIGNER_KEYS: [&str; 2] = ["feePayer", "facilitatorAddress"];

/// A member's `/supported` answer.
type SupportedAnswer = Result<SupportedResponse, FacilitatorError>;

/// One member's call, as [`FailoverFacilitator::run`] makes it.
type MemberCall<'m, T> = Pin<Box<dyn Future<Output = Result<T, FacilitatorError>> + Send + 'm>>;

/// The current time, for the breakers and the settlement preference.
type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// Several facilitators, tried in order behind circuit breakers (see the
/// [module docs](self)).
///
/// Cheap to clone: clones share the members, their breakers and the
/// memory of which member verified which payment.
#[derive(Clone)]
pub struct FailoverFacilitator {
    inner: Arc<Inner>,
}

struct Inner {
    members: Vec<Member>,
    clock: Clock,
    sticky: Mutex<Sticky>,
    /// Woken whenever a trial or probe call ends, for calls waiting for one.
    trial_ended: Notify,
}

struct Member {
    name: String,
    facilitator: Arc<dyn Facilitator>,
    breaker: Breaker,
}

impl fmt::Debug for FailoverFacilitator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailoverFacilitator")
            .field("members", &self.members())
            .finish_non_exhaustive()
    }
}

/// One member's breaker, as [`FailoverFacilitator::members`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct MemberStatus {
    /// The member's name, as given to [`FailoverFacilitatorBuilder::member`].
    pub name: String,
    /// Its breaker's state.
    pub state: BreakerState,
    /// Its consecutive failures (reset by an answer or a closing probe).
    pub consecutive_failures: u32,
    /// The kind of its latest failure, if any.
    pub last_error: Option<FacilitatorErrorKind>,
}

/// One member's health, as [`FailoverFacilitator::member_health`] reports
/// it.
#[derive(Debug)]
#[non_exhaustive]
pub struct MemberHealth {
    /// Its breaker.
    pub status: MemberStatus,
    /// Its own [`health`](Facilitator::health).
    pub health: FacilitatorHealth,
}

/// Why a [`FailoverFacilitator`] gave no answer of its own making; carried
/// in [`FacilitatorError::Other`]. Both variants prove that nothing was
/// sent ([`FacilitatorError::never_sent`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FailoverError {
    /// Every member that handles the request has an open breaker: no
    /// member was called.
    #[error("every facilitator for this payment has an open circuit breaker")]
    AllOpen,
    /// Every member that could take the settlement failed before it was
    /// sent to it; the source is the last failure.
    #[error("no facilitator took the settlement, none was sent to; last: {0}")]
    NotSent(#[source] FacilitatorError),
}

impl FacilitatorError {
    /// Whether this error proves that the request never reached the
    /// facilitator, so that sending it elsewhere cannot make a payment
    /// settle twice.
    ///
    /// True for [`Unrouted`](Self::Unrouted), for a [`FailoverError`] in
    /// [`Other`](Self::Other), and for [`Transport`](Self::Transport) whose
    /// source is a connection that could not be opened: an HTTP client error
    /// of the connect phase (refused, DNS, TLS handshake), which is what
    /// [`HttpFacilitator`](super::HttpFacilitator) reports when its one
    /// request never left, or an I/O error of kind `ConnectionRefused`.
    /// Everything else (timeouts, error statuses, malformed replies,
    /// connections dropped after writing) may come after the facilitator
    /// acted. A custom facilitator that makes several calls per settlement
    /// must not report a later call's connect error as `Transport`.
    pub fn never_sent(&self) -> bool {
        match self {
            Self::Unrouted { .. } => true,
            Self::Transport(source) => connect_failure(&**source),
            Self::Other(other) => other.0.downcast_ref::<FailoverError>().is_some(),
            Self::Timeout
            | Self::Status { .. }
            | Self::Malformed(_)
            | Self::SettlementPending { .. } => false,
        }
    }
}

/// Whether a transport error's source is a connection that was never
/// opened.
fn connect_failure(source: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    #[cfg(feature = "http-facilitator")]
    if let Some(error) = source.downcast_ref::<super::http::TransportError>() {
        // `HttpFacilitator`'s own transport knows whether it wrote anything.
        return error.never_sent;
    }
    #[cfg(feature = "http-facilitator")]
    if let Some(error) = source.downcast_ref::<reqwest::Error>() {
        // A connect timeout says `is_connect` too: the connection never
        // opened either.
        return error.is_connect();
    }
    source
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
}

impl FailoverFacilitator {
    /// A builder with no members and the default breaker settings.
    pub fn builder() -> FailoverFacilitatorBuilder {
        FailoverFacilitatorBuilder {
            members: Vec::new(),
            policy: Policy {
                threshold: DEFAULT_FAILURE_THRESHOLD,
                rate_percent: DEFAULT_FAILURE_RATE_PERCENT,
                rate_window: DEFAULT_FAILURE_RATE_WINDOW,
                cool_down: DEFAULT_COOL_DOWN,
            },
            clock: None,
        }
    }

    /// Each member's breaker, in member order.
    pub fn members(&self) -> Vec<MemberStatus> {
        let now = self.now();
        self.inner
            .members
            .iter()
            .map(|member| member.status(now))
            .collect()
    }

    /// Each member's [`health`](Facilitator::health), asked at once, with
    /// its breaker, in member order. The probes do not touch the breakers.
    pub async fn member_health(&self) -> Vec<MemberHealth> {
        let healths = join_all(
            self.inner
                .members
                .iter()
                .map(|member| member.facilitator.health())
                .collect(),
        )
        .await;
        let now = self.now();
        self.inner
            .members
            .iter()
            .zip(healths)
            .map(|(member, health)| MemberHealth {
                status: member.status(now),
                health,
            })
            .collect()
    }

    fn now(&self) -> Instant {
        (self.inner.clock)()
    }

    fn sticky(&self) -> MutexGuard<'_, Sticky> {
        self.inner
            .sticky
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Member {
    fn status(&self, now: Instant) -> MemberStatus {
        let snapshot = self.breaker.snapshot(now);
        MemberStatus {
            name: self.name.clone(),
            state: snapshot.state,
            consecutive_failures: snapshot.consecutive,
            last_error: snapshot.last_error,
        }
    }

    /// Whether the member lists the request's kind (and any signer the
    /// requirement names).
    async fn lists(&self, request: &FacilitatorRequest) -> Result<bool, FacilitatorError> {
        let supported = self.facilitator.supported().await?;
        Ok(lists(&supported, request))
    }
}

/// Whether `supported` lists the request's kind and any signer its
/// requirement names.
fn lists(supported: &SupportedResponse, request: &FacilitatorRequest) -> bool {
    let requirements = &request.payment_requirements;
    let Some(kind) = supported.kind(
        request.version(),
        requirements.scheme(),
        requirements.network(),
    ) else {
        return false;
    };
    SIGNER_KEYS.iter().all(|key| {
        let Some(wanted) = requirements.extra().get(*key) else {
            return true;
        };
        let Some(wanted) = wanted.as_str() else {
            return false;
        };
        let in_kind = kind
            .extra
            .as_ref()
            .and_then(|extra| extra.get(*key))
            .and_then(Value::as_str)
            .is_some_and(|own| same_address(own, wanted));
        in_kind
            || supported
                .signers
                .values()
                .flatten()
                .any(|signer| same_address(signer, wanted))
    })
}

fn same_address(a: &str, b: &str) -> bool {
    if a.starts_with("0x") && b.starts_with("0x") {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

/// Which call a member is serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Verify,
    Settle,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Self::Verify => "verify",
            Self::Settle => "settle",
        }
    }
}

/// An admitted call's hold on its member's breaker: the outcome is
/// recorded through it, and a call dropped before its outcome (the caller
/// went away) gives back its trial.
struct Permit<'a> {
    failover: &'a FailoverFacilitator,
    member: &'a Member,
    ticket: Ticket,
    done: bool,
}

impl Permit<'_> {
    fn succeeded(mut self, op: Op) {
        self.done = true;
        let transition = self.member.breaker.succeeded(self.ticket);
        self.end(transition);
        tracing::debug!(member = %self.member.name, op = op.name(), "x402: facilitator member answered");
        record_call(&self.member.name, op, "answered");
    }

    fn failed(mut self, op: Op, error: &FacilitatorError) {
        self.done = true;
        let now = self.failover.now();
        let transition = self.member.breaker.failed(self.ticket, error.kind(), now);
        self.end(transition);
        record_call(&self.member.name, op, "failed");
    }

    /// The call said nothing about the member's health.
    fn release(mut self) {
        self.done = true;
        self.member.breaker.released(self.ticket);
        self.end(None);
    }

    fn end(&self, transition: Option<Transition>) {
        if let Some(transition) = transition {
            self.failover.log_transition(self.member, transition);
        }
        if self.ticket != Ticket::Plain {
            self.failover.inner.trial_ended.notify_waiters();
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.member.breaker.released(self.ticket);
            self.end(None);
        }
    }
}

#[cfg(feature = "metrics")]
fn record_call(member: &str, op: Op, outcome: &'static str) {
    ::metrics::counter!(
        crate::metrics::names::FACILITATOR_MEMBER_CALLS_TOTAL,
        "member" => member.to_owned(),
        "op" => op.name(),
        "outcome" => outcome,
    )
    .increment(1);
}

#[cfg(not(feature = "metrics"))]
fn record_call(_member: &str, _op: Op, _outcome: &'static str) {}

#[cfg(feature = "metrics")]
fn record_transition(member: &str, state: &'static str) {
    ::metrics::counter!(
        crate::metrics::names::FACILITATOR_BREAKER_TRANSITIONS_TOTAL,
        "member" => member.to_owned(),
        "state" => state,
    )
    .increment(1);
}

#[cfg(not(feature = "metrics"))]
fn record_transition(_member: &str, _state: &'static str) {}

/// What one pass over the members ended with.
enum Pass<T> {
    /// An answer, or an error that ends the call (an unknown settlement).
    Done(Result<T, FacilitatorError>),
    /// No member answered; `waiting`: some are on a trial worth waiting for.
    Continue { waiting: bool },
}

/// How a call is going, across passes.
struct Progress {
    /// Members already called (or found not to list the kind) by this call.
    tried: Vec<bool>,
    last_error: Option<FacilitatorError>,
    /// Whether a member with an open breaker was passed over.
    skipped_open: bool,
}

impl FailoverFacilitator {
    fn log_transition(&self, member: &Member, transition: Transition) {
        match transition {
            Transition::Opened { consecutive } => {
                tracing::warn!(
                    member = %member.name,
                    consecutive_failures = consecutive,
                    "x402: facilitator member's circuit breaker opened"
                );
                record_transition(&member.name, "open");
            }
            Transition::Reopened => {
                tracing::warn!(member = %member.name, "x402: facilitator member's probe failed; its circuit breaker opened again");
                record_transition(&member.name, "open");
            }
            Transition::HalfOpened => {
                tracing::info!(member = %member.name, "x402: facilitator member's circuit breaker half-opened; probing");
                record_transition(&member.name, "half_open");
            }
            Transition::Closed => {
                tracing::info!(member = %member.name, "x402: facilitator member answered its probe; its circuit breaker closed");
                record_transition(&member.name, "closed");
            }
        }
    }

    /// Admits a call to `member`, or says why not.
    fn admit<'a>(&'a self, member: &'a Member, busy_ok: bool) -> Result<Permit<'a>, Admission> {
        match member.breaker.admit(self.now(), busy_ok) {
            Admission::Admitted(ticket, transition) => {
                if let Some(transition) = transition {
                    self.log_transition(member, transition);
                }
                Ok(Permit {
                    failover: self,
                    member,
                    ticket,
                    done: false,
                })
            }
            other => Err(other),
        }
    }

    /// Runs `op` over the members in `order` until one answers, an error
    /// ends the call, or none is left; waits for trials when every member
    /// left is on one.
    async fn run<T, F, R>(
        &self,
        op: Op,
        request: &R,
        order: &[usize],
        sticky: Option<usize>,
        call: F,
    ) -> Result<T, FacilitatorError>
    where
        F: for<'m> Fn(&'m dyn Facilitator, &'m R) -> MemberCall<'m, T> + Sync,
        T: Answer,
        R: AsRef<FacilitatorRequest> + Sync,
    {
        let mut progress = Progress {
            tried: vec![false; self.inner.members.len()],
            last_error: None,
            skipped_open: false,
        };
        loop {
            // Registered before the pass, so that a trial ending during it
            // is not missed.
            let trial_ended = self.inner.trial_ended.notified();
            let mut trial_ended = std::pin::pin!(trial_ended);
            trial_ended.as_mut().enable();
            match self
                .pass(op, request, order, sticky, &call, &mut progress)
                .await
            {
                Pass::Done(result) => return result,
                Pass::Continue { waiting: true } => trial_ended.await,
                Pass::Continue { waiting: false } => break,
            }
        }
        Err(self.exhausted(op, request.as_ref(), progress))
    }

    async fn pass<T, F, R>(
        &self,
        op: Op,
        request: &R,
        order: &[usize],
        sticky: Option<usize>,
        call: &F,
        progress: &mut Progress,
    ) -> Pass<T>
    where
        F: for<'m> Fn(&'m dyn Facilitator, &'m R) -> MemberCall<'m, T> + Sync,
        T: Answer,
        R: AsRef<FacilitatorRequest> + Sync,
    {
        let mut waiting = false;
        for &index in order {
            if progress.tried[index] {
                continue;
            }
            let member = &self.inner.members[index];
            let permit = match self.admit(member, sticky == Some(index)) {
                Ok(permit) => permit,
                Err(Admission::Busy) => {
                    waiting = true;
                    continue;
                }
                Err(_refused) => {
                    progress.tried[index] = true;
                    progress.skipped_open = true;
                    continue;
                }
            };
            progress.tried[index] = true;
            match member.lists(request.as_ref()).await {
                Ok(true) => {}
                Ok(false) => {
                    permit.release();
                    continue;
                }
                Err(error) => {
                    // Nothing was sent: the next member may take it.
                    tracing::warn!(
                        member = %member.name,
                        op = op.name(),
                        %error,
                        "x402: facilitator member's /supported failed; trying the next member"
                    );
                    permit.failed(op, &error);
                    progress.last_error = Some(error);
                    continue;
                }
            }
            match call(&*member.facilitator, request).await {
                Ok(answer) => {
                    permit.succeeded(op);
                    answer.served(self, index, request.as_ref());
                    return Pass::Done(Ok(answer));
                }
                Err(error) if matches!(error, FacilitatorError::Unrouted { .. }) => {
                    permit.release();
                    progress.last_error = Some(error);
                }
                Err(error) if op == Op::Settle && !error.never_sent() => {
                    tracing::error!(
                        member = %member.name,
                        %error,
                        "x402: facilitator member's settlement outcome is unknown; \
                         it is not sent to another member"
                    );
                    permit.failed(op, &error);
                    return Pass::Done(Err(error));
                }
                Err(error) => {
                    tracing::warn!(
                        member = %member.name,
                        op = op.name(),
                        %error,
                        "x402: facilitator member failed; trying the next member"
                    );
                    permit.failed(op, &error);
                    progress.last_error = Some(error);
                }
            }
        }
        Pass::Continue { waiting }
    }

    /// The error of a call no member answered.
    fn exhausted(
        &self,
        op: Op,
        request: &FacilitatorRequest,
        progress: Progress,
    ) -> FacilitatorError {
        let unrouted = || FacilitatorError::Unrouted {
            scheme: request.payment_requirements.scheme().to_owned(),
            network: request.payment_requirements.network().to_owned(),
        };
        let error = match progress.last_error {
            // Only members that do not handle it were asked.
            Some(FacilitatorError::Unrouted { .. }) | None if progress.skipped_open => {
                other(FailoverError::AllOpen)
            }
            Some(error @ FacilitatorError::Unrouted { .. }) => error,
            None => unrouted(),
            Some(error) => match op {
                Op::Verify => error,
                Op::Settle => other(FailoverError::NotSent(error)),
            },
        };
        tracing::warn!(op = op.name(), %error, "x402: no facilitator member answered");
        error
    }
}

fn other(error: FailoverError) -> FacilitatorError {
    FacilitatorError::Other(super::OtherError(Arc::new(error)))
}

/// What a member answered, and what to remember of it.
trait Answer: Send {
    fn served(&self, failover: &FailoverFacilitator, member: usize, request: &FacilitatorRequest);
}

impl Answer for VerifyResponse {
    fn served(&self, failover: &FailoverFacilitator, member: usize, request: &FacilitatorRequest) {
        if self.is_valid {
            let now = failover.now();
            failover.sticky().remember(payment_id(request), member, now);
        }
    }
}

impl Answer for SettleResponse {
    fn served(&self, _: &FailoverFacilitator, _: usize, _: &FacilitatorRequest) {}
}

impl FailoverFacilitator {
    /// Verifies with the first member that answers.
    async fn verify_with<R, F>(
        &self,
        request: &R,
        call: F,
    ) -> Result<VerifyResponse, FacilitatorError>
    where
        F: for<'m> Fn(&'m dyn Facilitator, &'m R) -> MemberCall<'m, VerifyResponse> + Sync,
        R: AsRef<FacilitatorRequest> + Sync,
    {
        let order: Vec<usize> = (0..self.inner.members.len()).collect();
        self.run(Op::Verify, request, &order, None, call).await
    }

    /// Settles with the member that verified, then the others.
    async fn settle_with<R, F>(
        &self,
        request: &R,
        call: F,
    ) -> Result<SettleResponse, FacilitatorError>
    where
        F: for<'m> Fn(&'m dyn Facilitator, &'m R) -> MemberCall<'m, SettleResponse> + Sync,
        R: AsRef<FacilitatorRequest> + Sync,
    {
        let id: PaymentId = payment_id(request.as_ref());
        let now = self.now();
        let sticky = self.sticky().member(&id, now);
        let mut order: Vec<usize> = Vec::with_capacity(self.inner.members.len());
        order.extend(sticky);
        order.extend((0..self.inner.members.len()).filter(|i| Some(*i) != sticky));
        let result = self.run(Op::Settle, request, &order, sticky, call).await;
        self.sticky().forget(&id);
        result
    }
}

#[async_trait]
impl Facilitator for FailoverFacilitator {
    /// Tries the members in order; any error moves on to the next member,
    /// any answer is final (see the [module docs](self)).
    async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        self.verify_with(request, |facilitator, request| facilitator.verify(request))
            .await
    }

    /// Tries the member that verified the payment, then the others in
    /// order; moves on only after an error that proves nothing was sent
    /// ([`FacilitatorError::never_sent`]).
    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        self.settle_with(request, |facilitator, request| facilitator.settle(request))
            .await
    }

    /// As [`verify`](Facilitator::verify), each member given the prepared
    /// request.
    async fn verify_prepared(
        &self,
        request: &PreparedRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        self.verify_with(request, |facilitator, request| {
            facilitator.verify_prepared(request)
        })
        .await
    }

    /// As [`settle`](Facilitator::settle), each member given the prepared
    /// request.
    async fn settle_prepared(
        &self,
        request: &PreparedRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        self.settle_with(request, |facilitator, request| {
            facilitator.settle_prepared(request)
        })
        .await
    }

    /// The `/supported` answers of the members whose breaker is not open,
    /// asked at once and merged in member order.
    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        let now = self.now();
        let open: Vec<bool> = self
            .inner
            .members
            .iter()
            .map(|member| member.breaker.is_open(now))
            .collect();
        let answers = join_all(
            self.inner
                .members
                .iter()
                .zip(&open)
                .filter(|(_, open)| !**open)
                .map(|(member, _)| {
                    Box::pin(async move { (member, member.facilitator.supported().await) })
                        as Pin<Box<dyn Future<Output = (&Member, SupportedAnswer)> + Send + '_>>
                })
                .collect(),
        )
        .await;
        merge(
            answers
                .into_iter()
                .map(|(member, answer)| (&member.name, answer)),
        )
    }

    /// Every member's health, asked at once past caches, merged as
    /// [`supported`](Self::supported) merges (members with an open breaker
    /// left out), with every member's gas wallets.
    async fn health(&self) -> FacilitatorHealth {
        let reports = self.member_health().await;
        let mut wallets: Vec<GasWallet> = Vec::new();
        let mut answers = Vec::with_capacity(reports.len());
        for report in reports {
            tracing::debug!(
                member = %report.status.name,
                state = ?report.status.state,
                answered = report.health.supported.is_ok(),
                "x402: facilitator member health"
            );
            for wallet in report.health.wallets {
                if !wallets
                    .iter()
                    .any(|w| w.network == wallet.network && w.address == wallet.address)
                {
                    wallets.push(wallet);
                }
            }
            if report.status.state != BreakerState::Open {
                answers.push((report.status.name, report.health.supported));
            }
        }
        FacilitatorHealth {
            supported: merge(answers),
            wallets,
        }
    }
}

#[cfg(test)]
mod tests;
