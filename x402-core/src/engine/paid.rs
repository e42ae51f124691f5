//! After the engine said "paid": the handler's response, settlement, the
//! receipt, and what happens when the client goes away.

use std::{
    fmt,
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use http_body::Body;
use tracing::Instrument;

use super::{
    body::PaidBody, charge::charge, log_hook_error, response, table::RouteRef, CompiledRoute,
    Engine, EngineResponse, Refusal, Resolved, ResolvedSession, VerifiedPayment,
};
use crate::unix::now as unix_now;
use crate::{
    facilitator::FacilitatorError,
    hooks::{
        BeforeSettle, CancelReason, HookSteps, PaymentContext, SessionOpenFailed, SessionOpened,
    },
    meter::{self, Meter},
    money::AtomicAmount,
    proto::{v2, JsonObject, PreparedRequest, SettleResponse},
    route::SettlementTiming,
    session::{
        remaining_header, SessionRecord, SessionToken, TokenHash, X_PAYMENT_SESSION,
        X_PAYMENT_SESSION_ERROR, X_PAYMENT_SESSION_REMAINING,
    },
};

/// A verified payment (or a redeemed session call) whose handler may run
/// now. Put [`payment`](Self::payment) in the request's extensions, run the
/// handler, and give its result to [`finish`](Self::finish), which decides
/// what the client gets: the handler's response with its receipt, or the
/// engine's answer instead (the settlement was refused, or its outcome is
/// unknown). Routes that settle before their handler have already settled
/// (see [`SettlementTiming`]).
///
/// Once a settlement starts it runs to completion on a task of its own,
/// with its hooks, webhook event, metrics and session opening, whether or
/// not the client is still there; [`Engine::drain`] waits for those in
/// flight at shutdown.
///
/// Dropping it unfinished means the client went away (or the handler
/// panicked): nothing is settled, hooks are told
/// ([`CancelReason::ClientGone`]), and by default the replay claim is kept
/// and a session call is not given back: the handler may have done its
/// work. [`EngineBuilder::release_claims_on_hang_up`](super::EngineBuilder::release_claims_on_hang_up)
/// releases them instead.
pub struct PaidRequest {
    pub(super) engine: Engine,
    pub(super) route: RouteRef,
    /// Shared with the settlement task, which outlives this request.
    pub(super) payment: Arc<VerifiedPayment>,
    pub(super) finished: bool,
    /// The payment id this request reserved ([`crate::payment_id`]).
    pub(super) identifier: Option<Box<crate::payment_id::flow::Held>>,
    pub(super) kind: Kind,
}

pub(super) enum Kind {
    /// A verified payment, not settled yet.
    Payment(Box<PaymentState>),
    /// A redeemed session call.
    Session { token: TokenHash, remaining: u64 },
    /// Settled before its handler: the receipt's headers, for the
    /// handler's response.
    Settled(SettledHeaders),
    /// A batch-settlement voucher or deposit, its channel held.
    Batch(Box<super::batch::BatchCall>),
    /// Handed to its settlement task; or nothing to settle (a request
    /// that passed by sign-in-with-x).
    Spent,
}

/// The headers a settlement adds to the handler's response: the receipt,
/// and a session's when the payment bought one. The receipt alone, the
/// common case, is held without a map of its own.
#[derive(Debug, Clone, Default)]
pub(crate) struct SettledHeaders {
    receipt: Option<(HeaderName, HeaderValue)>,
    /// A session's headers, or a batch receipt's; empty (and unallocated)
    /// otherwise.
    more: HeaderMap,
}

impl SettledHeaders {
    /// Puts them in `headers`, replacing any of the same names.
    pub(crate) fn add_to(self, headers: &mut HeaderMap) {
        if let Some((name, value)) = self.receipt {
            headers.insert(name, value);
        }
        if !self.more.is_empty() {
            headers.extend(self.more);
        }
    }
}

impl From<HeaderMap> for SettledHeaders {
    fn from(more: HeaderMap) -> Self {
        Self {
            receipt: None,
            more,
        }
    }
}

pub(super) struct PaymentState {
    pub(super) request: Box<PreparedRequest>,
    pub(super) network: crate::payment::SharedStr,
    pub(super) timing: SettlementTiming,
    pub(super) resource: Arc<v2::ResourceInfo>,
    pub(super) resolved: Arc<Resolved>,
    /// The route's extensions enriched for this request (bazaar routes).
    pub(super) extensions: Option<JsonObject>,
    pub(super) decimals: u8,
    pub(super) meter: Option<Meter>,
    pub(super) session: Option<usize>,
}

impl fmt::Debug for PaidRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PaidRequest")
            .field("payment", &self.payment)
            .field("timing", &self.timing())
            .finish_non_exhaustive()
    }
}

/// What to send after the handler ran, from [`PaidRequest::complete`].
#[derive(Debug)]
#[must_use]
pub enum Completion {
    /// Send the handler's response, with the headers as the engine left them
    /// (the receipt added).
    Deliver,
    /// Withhold the handler's response and send this instead.
    Replace(EngineResponse),
}

/// What to send for a paid request, from [`PaidRequest::finish`].
#[must_use]
pub enum Reply<B> {
    /// The handler's response, its headers as the engine left them (the
    /// receipt added, `Settlement-Overrides` removed), its body streamed or
    /// held in full until the payment settled.
    Handler(Response<PaidBody<B>>),
    /// The engine's response, sent instead of the handler's.
    Engine(EngineResponse),
}

impl<B> Reply<B> {
    /// Either as one response.
    pub fn into_response(self) -> Response<PaidBody<B>> {
        match self {
            Self::Handler(response) => response,
            Self::Engine(response) => response.map(PaidBody::full),
        }
    }
}

impl<B> fmt::Debug for Reply<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Handler(r) => f.debug_tuple("Handler").field(&r.status()).finish(),
            Self::Engine(r) => f.debug_tuple("Engine").field(&r.status()).finish(),
        }
    }
}

impl PaidRequest {
    fn compiled(&self) -> &Arc<CompiledRoute> {
        self.engine.route(&self.route)
    }

    /// The verified payment (put it in the request's extensions).
    pub fn payment(&self) -> &VerifiedPayment {
        &self.payment
    }

    /// When this request settles.
    pub fn timing(&self) -> SettlementTiming {
        match &self.kind {
            Kind::Payment(p) => p.timing,
            Kind::Settled(_) => SettlementTiming::BeforeHandler,
            Kind::Session { .. } | Kind::Batch(_) | Kind::Spent => SettlementTiming::AfterHandler,
        }
    }

    /// Finishes the request with what the handler produced: its response,
    /// or the error it failed with (handed back unchanged, the payment
    /// released unsettled).
    ///
    /// A response of status 400 or more is never charged: it is sent as it
    /// is and the payment is released (a session call given back). Any other
    /// is settled (for `upto`, for what the handler reported) while its body
    /// is held, so that a refused settlement does not leak it and a body
    /// that fails midway is not charged (the client then gets a 500). Bodies
    /// of routes that settled before their handler stream untouched.
    ///
    /// Its future is small enough (under 600 bytes for an axum body) to be
    /// awaited inline by an adapter's own boxed future, rather than boxed
    /// again: the settlement it may start is boxed inside.
    //
    // Not an `async fn`: one keeps its arguments twice while it waits (as
    // arguments, and moved into the body), and the response is 128 bytes.
    #[allow(clippy::manual_async_fn)] // see above
    pub fn finish<B, E>(
        self: Box<Self>,
        response: Result<Response<B>, E>,
    ) -> impl Future<Output = Result<Reply<B>, E>>
    where
        B: Body,
        B::Error: fmt::Display,
    {
        async move {
            let mut this = self;
            let (mut parts, body) = match response {
                Ok(response) => response.into_parts(),
                Err(error) => {
                    this.cancel(CancelReason::HandlerAborted).await;
                    return Err(error);
                }
            };
            let failed = parts.status.is_client_error() || parts.status.is_server_error();
            let holds = !failed
                && matches!(
                    this.kind,
                    Kind::Payment(_) | Kind::Session { .. } | Kind::Batch(_)
                );
            if !holds {
                return Ok(
                    match this.complete(parts.status, &mut parts.headers).await {
                        Completion::Deliver => {
                            Reply::Handler(Response::from_parts(parts, PaidBody::stream(body)))
                        }
                        Completion::Replace(response) => Reply::Engine(response),
                    },
                );
            }
            let data = match super::body::read_whole(body).await {
                Ok(data) => data,
                Err(e) => {
                    tracing::error!(error = %e, route = %this.payment.route, "x402: paid handler's body failed; not settling");
                    this.cancel(CancelReason::HandlerAborted).await;
                    return Ok(Reply::Engine(response::handler_failed_response()));
                }
            };
            if let Some(held) = &mut this.identifier {
                held.set_body(&data);
            }
            Ok(
                match this.complete(parts.status, &mut parts.headers).await {
                    Completion::Deliver => {
                        // The body's length is known now.
                        parts.headers.remove(http::header::TRANSFER_ENCODING);
                        Reply::Handler(Response::from_parts(parts, PaidBody::full(data)))
                    }
                    Completion::Replace(response) => Reply::Engine(response),
                },
            )
        }
    }

    /// Finishes a payment after its handler answered with `status`; `headers`
    /// are the handler's response headers, to which the receipt is added.
    /// For integrators that hold the handler's body themselves: hold it
    /// until this returns, and send it only on [`Completion::Deliver`].
    /// [`finish`](Self::finish) does all of that.
    ///
    /// A status of 400 or more is never charged: the handler's response is
    /// delivered unchanged and the payment is released (a session call is
    /// given back). Otherwise the payment is settled (for `upto`, for what the
    /// handler reported); if settlement is refused or its outcome is unknown,
    /// the handler's response is replaced. `Settlement-Overrides` is always
    /// removed from `headers`.
    ///
    /// A response delivered as paid for (a status under 400, or any status
    /// on a route that settled before its handler) is made one no shared
    /// cache may keep: `Cache-Control: private` is added, or merged into
    /// the handler's own (`public, max-age=60` becomes `max-age=60,
    /// private`; `no-store` or `private` is left as it is).
    ///
    /// Takes the request boxed, as [`Decision::Paid`](super::Decision::Paid)
    /// hands it over: the settlement's future then holds a pointer, not the
    /// request.
    pub async fn complete(
        mut self: Box<Self>,
        status: StatusCode,
        headers: &mut HeaderMap,
    ) -> Completion {
        let overrides = headers.remove(meter::SETTLEMENT_OVERRIDES);
        let failed = status.is_client_error() || status.is_server_error();
        match &mut self.kind {
            Kind::Settled(receipt) => {
                self.finished = true;
                headers.reserve(PAID_HEADERS);
                response::expose(headers);
                response::keep_private(headers);
                std::mem::take(receipt).add_to(headers);
                if let Some(held) = self.identifier.take() {
                    Box::pin(held.record(status, headers.clone())).await;
                }
                return Completion::Deliver;
            }
            Kind::Spent => {
                self.finished = true;
                if !failed {
                    response::keep_private(headers);
                }
                return Completion::Deliver;
            }
            Kind::Payment(_) | Kind::Session { .. } | Kind::Batch(_) => {}
        }
        if failed {
            self.cancel(CancelReason::HandlerFailed(status)).await;
            return Completion::Deliver;
        }
        // Paid for: delivered to its buyer only, never from a shared cache
        // to the next caller (replaced if settlement fails).
        headers.reserve(PAID_HEADERS);
        response::keep_private(headers);
        if let Kind::Batch(call) = &self.kind {
            let charge = match charge(
                &self.payment,
                call.decimals,
                &call.meter,
                overrides.as_ref(),
            ) {
                Ok(charge) => charge,
                Err(()) => {
                    self.cancel(CancelReason::HandlerAborted).await;
                    return Completion::Replace(response::invalid_override_response());
                }
            };
            return match self.settle_batch(charge).await {
                Ok(receipt_headers) => {
                    response::expose(headers);
                    receipt_headers.add_to(headers);
                    Completion::Deliver
                }
                Err(response) => Completion::Replace(response),
            };
        }
        let state = match &self.kind {
            Kind::Session { remaining, .. } => {
                self.finished = true;
                response::expose(headers);
                headers.insert(X_PAYMENT_SESSION_REMAINING, remaining_header(*remaining));
                return Completion::Deliver;
            }
            Kind::Payment(state) => state,
            Kind::Settled(_) | Kind::Batch(_) | Kind::Spent => return Completion::Deliver,
        };
        let charge = match &state.meter {
            None => {
                if overrides.is_some() {
                    tracing::warn!("x402: Settlement-Overrides on an exact route is ignored");
                }
                None
            }
            Some(meter) => match charge(&self.payment, state.decimals, meter, overrides.as_ref()) {
                Ok(charge) => Some(charge),
                Err(()) => {
                    self.cancel(CancelReason::HandlerAborted).await;
                    return Completion::Replace(response::invalid_override_response());
                }
            },
        };
        if let Some(held) = &mut self.identifier {
            held.set_head(status, headers);
        }
        match self.settle(charge).await {
            Ok(receipt_headers) => {
                response::expose(headers);
                receipt_headers.add_to(headers);
                Completion::Deliver
            }
            Err(response) => Completion::Replace(response),
        }
    }

    /// The handler failed without a response. Nothing is settled and hooks
    /// are told ([`CancelReason::HandlerAborted`]): the claim is released.
    pub async fn abort(mut self) {
        self.cancel(CancelReason::HandlerAborted).await;
    }

    /// Settles a route that settles before its handler. On `Err`, send that
    /// response and do not run the handler.
    pub(super) async fn settle_first(&mut self) -> Result<(), EngineResponse> {
        // The payment id is recorded once the handler answered.
        let identifier = self.identifier.take();
        let headers = match self.settle(None).await {
            Ok(headers) => headers,
            Err(response) => {
                if let Some(held) = identifier {
                    held.release().await;
                }
                return Err(response);
            }
        };
        self.identifier = identifier;
        self.kind = Kind::Settled(headers);
        Ok(())
    }

    /// Releases what the request held and tells the hooks; boxed, so that
    /// the futures of the paths that seldom cancel stay small.
    async fn cancel(&mut self, reason: CancelReason) {
        Box::pin(self.cancel_now(reason)).await;
    }

    async fn cancel_now(&mut self, reason: CancelReason) {
        self.finished = true;
        if let Some(held) = self.identifier.take() {
            held.release().await;
        }
        match &self.kind {
            Kind::Session { token, .. } => {
                if !reason.releases_claim() {
                    return;
                }
                if let Err(e) = self.engine.inner.sessions.give_back(token).await {
                    tracing::error!(error = %e, "x402: could not give a failed session call back");
                }
            }
            Kind::Payment(state) => {
                let ctx = PaymentContext::of_request(
                    self.compiled().route.pattern(),
                    &state.request,
                    &state.network,
                );
                for hook in self.engine.inner.hooks.at(HookSteps::PAYMENT_CANCELED) {
                    hook.on_payment_canceled(&ctx, reason).await;
                }
            }
            Kind::Batch(call) => {
                super::batch::release(&self.engine, &call.channel_id, call.hold, call.created)
                    .await;
            }
            Kind::Settled(_) | Kind::Spent => {}
        }
    }

    /// Commits a batch-settlement call on a task of its own, which runs to
    /// completion even if this request is dropped meanwhile.
    async fn settle_batch(
        &mut self,
        charge: AtomicAmount,
    ) -> Result<SettledHeaders, EngineResponse> {
        self.finished = true;
        let Kind::Batch(call) = std::mem::replace(&mut self.kind, Kind::Spent) else {
            return Ok(SettledHeaders::default());
        };
        let work = super::batch::finish(self.engine.clone(), self.compiled().clone(), call, charge);
        match self.engine.run_to_completion(Box::pin(work)).await {
            Some(result) => result.map(SettledHeaders::from),
            None => Err(response::refusal_response(
                &Refusal::SettlementUnknown,
                None,
                Some(self.payment.version),
                self.payment.payer.as_deref(),
            )),
        }
    }

    /// Settles on a task of its own, which runs to completion (hooks,
    /// metrics, session opening) even if this request is dropped meanwhile.
    async fn settle(
        &mut self,
        charge: Option<AtomicAmount>,
    ) -> Result<SettledHeaders, EngineResponse> {
        // From here on the payment is never released: a settlement attempt
        // may have moved money.
        self.finished = true;
        let Kind::Payment(state) = std::mem::replace(&mut self.kind, Kind::Spent) else {
            return Ok(SettledHeaders::default());
        };
        let settlement = Settlement {
            engine: self.engine.clone(),
            route: self.route.clone(),
            payment: self.payment.clone(),
            state,
            charge,
        };
        // The payment id is recorded (or released) by the settlement's task,
        // whatever the client's connection does meanwhile.
        let identifier = self.identifier.take();
        // The result is returned as it comes, not held here: this future
        // stays within 1 032 bytes (see `BoxedDecision`).
        // Boxed where it is built: its state is large, and session calls
        // never get here.
        let work = crate::boxed::boxed(move || async move {
            match identifier {
                None => settlement.run().await,
                // Boxed: few routes declare payment ids.
                Some(held) => {
                    Box::pin(async move {
                        let result = settlement.run().await;
                        held.settled(&result).await;
                        result
                    })
                    .await
                }
            }
        });
        match self.engine.run_to_completion(work).await {
            Some(result) => result,
            None => {
                tracing::error!(
                    route = %self.payment.route,
                    payer = ?self.payment.payer,
                    "x402: a settlement task failed (a hook panicked?); its outcome is unknown"
                );
                Err(response::refusal_response(
                    &Refusal::SettlementUnknown,
                    None,
                    Some(self.payment.version),
                    self.payment.payer.as_deref(),
                ))
            }
        }
    }
}

impl Drop for PaidRequest {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        // Dropped before the handler's response was finished: the client
        // went away (or the handler panicked). Nothing is settled.
        let keep_claim = !self.engine.inner.release_on_hang_up;
        tracing::debug!(
            route = %self.payment.route,
            keep_claim,
            "x402: the client went away before its paid response was ready; not settling"
        );
        let needs_telling = match &self.kind {
            Kind::Session { .. } => !keep_claim,
            Kind::Payment(_) => self.engine.inner.hooks.any_at(HookSteps::PAYMENT_CANCELED),
            // The channel is released: a client that went away is not charged.
            Kind::Batch(_) => true,
            Kind::Settled(_) | Kind::Spent => false,
        };
        if !needs_telling {
            return;
        }
        // Drop cannot wait: hooks are told on a task. Marked finished, so
        // that this copy does not come back here if the runtime drops the
        // task unpolled (it is shutting down).
        let mut rest = PaidRequest {
            engine: self.engine.clone(),
            route: self.route.clone(),
            payment: self.payment.clone(),
            finished: true,
            identifier: None,
            kind: std::mem::replace(&mut self.kind, Kind::Spent),
        };
        self.engine.spawn_tracked(async move {
            rest.cancel(CancelReason::ClientGone { keep_claim }).await;
        });
    }
}

/// The headers the engine adds to a paid response: `Cache-Control`, the
/// expose list, and the receipt or the session calls left. Room for them is
/// made at once: a handler's map sized for its own headers (axum's `Json`
/// makes room for two) would otherwise grow twice.
const PAID_HEADERS: usize = 3;

/// A settlement, owned by the task that runs it.
struct Settlement {
    engine: Engine,
    route: RouteRef,
    payment: Arc<VerifiedPayment>,
    state: Box<PaymentState>,
    charge: Option<AtomicAmount>,
}

impl Settlement {
    fn compiled(&self) -> &Arc<CompiledRoute> {
        self.engine.route(&self.route)
    }

    /// The facilitator's settlement of `request` (retried while pending);
    /// when it gives no outcome, the first settle-failure hook that vouches
    /// for one supplies it.
    async fn settle_call(
        &self,
        request: &PreparedRequest,
        ctx: &PaymentContext<'_>,
    ) -> Result<SettleResponse, FacilitatorError> {
        let span = tracing::info_span!(
            "x402.settle",
            network = %self.state.network,
            scheme = %request.payment_requirements.scheme(),
            payer = self.payment.payer.as_deref(),
        );
        let error = match self
            .engine
            .settle_with_pending_retry(request)
            .instrument(span)
            .await
        {
            Ok(receipt) => return Ok(receipt),
            Err(error) => error,
        };
        // Boxed: seldom reached.
        Box::pin(async {
            for hook in self.engine.inner.hooks.at(HookSteps::SETTLE_FAILURE) {
                if let Some(receipt) = hook.on_settle_failure(ctx, &error).await {
                    return Ok(receipt);
                }
            }
            Err(error)
        })
        .await
    }

    /// How long one write to the session store may take while settling: the
    /// engine's session deadline, at least 250 ms (the buyer already paid).
    fn session_write_deadline(&self) -> Duration {
        self.engine
            .inner
            .session_deadline
            .max(Duration::from_millis(250))
    }

    fn refusal(&self, refusal: &Refusal) -> EngineResponse {
        let state = &self.state;
        crate::metrics::refusal(self.compiled().route.pattern(), refusal);
        let mut parts = self
            .engine
            .parts(&self.compiled().route, &state.resource, &state.resolved);
        if let Some(extensions) = &state.extensions {
            parts.extensions = extensions;
        }
        response::refusal_response(
            refusal,
            Some(&parts),
            Some(self.payment.version),
            self.payment.payer.as_deref(),
        )
    }

    async fn run(&self) -> Result<SettledHeaders, EngineResponse> {
        let state = &self.state;
        let charge = self.charge;
        // The verified request as it is, or with the `upto` charge.
        // Boxed when charged: this future is boxed itself.
        let charged = charge.map(|charge| {
            let mut request = state.request.request().clone();
            request.payment_requirements =
                Arc::new(request.payment_requirements.with_amount(charge));
            Box::new(PreparedRequest::new(request))
        });
        let settle_request: &PreparedRequest = charged.as_deref().unwrap_or(&state.request);
        let ctx = PaymentContext::of_request(
            self.compiled().route.pattern(),
            settle_request,
            &state.network,
        );
        let hooks = &self.engine.inner.hooks;
        let failure = |reason: String| SettleResponse {
            payer: self.payment.payer.as_deref().map(str::to_owned),
            ..SettleResponse::failure(settle_request.payment_requirements.network(), reason)
        };
        for hook in hooks.at(HookSteps::BEFORE_SETTLE) {
            match hook.before_settle(&ctx).await {
                Ok(BeforeSettle::Continue) => {}
                Ok(BeforeSettle::Abort { reason }) => {
                    return Err(self.refusal(&Refusal::SettlementFailed(Box::new(failure(reason)))));
                }
                Err(e) => {
                    log_hook_error(&e);
                    return Err(self.refusal(&Refusal::SettlementFailed(Box::new(failure(
                        "before_settle_hook_error".into(),
                    )))));
                }
            }
        }
        // Bound in a block of its own: a `result` bound beside `receipt`
        // kept its 320 bytes in this future through the hooks' awaits
        // below, and took the settlement's box (see `PaidRequest::settle`)
        // over 1 032 bytes.
        let mut receipt = {
            let outcome = if charge.is_some_and(AtomicAmount::is_zero) {
                // Nothing to charge: no facilitator call, no transaction.
                Ok(SettleResponse {
                    success: true,
                    transaction: String::new(),
                    network: settle_request.payment_requirements.network().to_owned(),
                    amount: Some(AtomicAmount::ZERO),
                    ..SettleResponse::default()
                })
            } else {
                // Boxed apart: inline, it made this future (boxed itself, to
                // outlive a hang-up) over 2 KiB (see `BoxedDecision`).
                crate::boxed::boxed(|| self.settle_call(settle_request, &ctx)).await
            };
            match outcome {
                Ok(r) => r,
                Err(error) => {
                    crate::metrics::settlement(
                        None,
                        &state.network,
                        &self.payment.asset,
                        AtomicAmount::ZERO,
                    );
                    tracing::error!(
                        error = %error,
                        network = %state.network,
                        payer = ?self.payment.payer,
                        "x402: settlement outcome unknown; the response is withheld and the payment stays claimed"
                    );
                    return Err(self.refusal(&Refusal::SettlementUnknown));
                }
            }
        };
        if receipt.payer.is_none() {
            receipt.payer = self.payment.payer.as_deref().map(str::to_owned);
        }
        if receipt.network.is_empty() {
            receipt.network = settle_request.payment_requirements.network().to_owned();
        }
        if receipt.success && receipt.amount.is_none() && charge.is_some() {
            receipt.amount = charge;
        }
        self.engine.inner.series.settlement(
            Some(&receipt),
            &state.network,
            &self.payment.asset,
            settle_request.payment_requirements.amount(),
        );
        for hook in hooks.at(HookSteps::AFTER_SETTLE) {
            hook.after_settle(&ctx, &receipt).await;
        }
        if !receipt.success {
            if receipt.error_reason.is_none() {
                receipt.error_reason = Some("settlement_failed".to_owned());
            }
            tracing::warn!(reason = ?receipt.error_reason, network = %state.network, "x402: settlement refused");
            return Err(self.refusal(&Refusal::SettlementFailed(Box::new(receipt))));
        }
        if self.compiled().route.sign_in_with_x.is_some() {
            let payer = receipt.payer.as_deref();
            Box::pin(self.engine.record_sign_in(self.compiled(), payer)).await;
        }
        let mut headers = SettledHeaders {
            receipt: response::receipt_header(&receipt, self.payment.version),
            more: HeaderMap::new(),
        };
        if let Some(offer) = state.session.and_then(|i| state.resolved.sessions.get(i)) {
            Box::pin(self.open_session(&ctx, offer, &receipt, &mut headers.more)).await;
        }
        Ok(headers)
    }

    /// Opens the session a settled payment bought, adding its token and count
    /// to the response; the opening call counts as the first. A store that
    /// fails is retried (with the same token, so a write that lands late is
    /// the same session) until the engine's session-open deadline; if it
    /// still fails, the buyer's response says so
    /// (`X-PAYMENT-SESSION-ERROR: session_open_failed`) and hooks are told,
    /// so the seller can make it good.
    async fn open_session(
        &self,
        ctx: &PaymentContext<'_>,
        offer: &ResolvedSession,
        receipt: &SettleResponse,
        headers: &mut HeaderMap,
    ) {
        let inner = &self.engine.inner;
        let token = SessionToken::generate();
        let hash = token.hash();
        let remaining = offer.calls.saturating_sub(1);
        let expires_at = unix_now().saturating_add(offer.ttl.as_secs());
        let record = SessionRecord {
            scope: offer.scope.to_string(),
            remaining,
            expires_at,
        };
        let deadline = Instant::now() + inner.session_open_deadline;
        let per_attempt = self.session_write_deadline();
        let mut backoff = Duration::from_millis(50);
        let mut attempts = 0u32;
        let error = loop {
            attempts += 1;
            let left = deadline.saturating_duration_since(Instant::now());
            let error = match tokio::time::timeout(
                per_attempt.min(left),
                inner.sessions.open(&hash, record.clone()),
            )
            .await
            {
                Ok(Ok(())) => break None,
                Ok(Err(e)) => e.to_string(),
                Err(_) => "the session store timed out".to_owned(),
            };
            tracing::warn!(attempt = attempts, %error, "x402: storing a paid session failed");
            if Instant::now() + backoff >= deadline {
                break Some(error);
            }
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2);
        };
        if let Some(error) = error {
            self.session_open_failed(ctx, offer, receipt, &hash, attempts, error, headers)
                .await;
            return;
        }
        crate::metrics::session_opened();
        if let Ok(t) = HeaderValue::try_from(token.expose()) {
            headers.insert(X_PAYMENT_SESSION, t);
            headers.insert(X_PAYMENT_SESSION_REMAINING, remaining_header(remaining));
        }
        let info = SessionOpened {
            offer_id: offer.id.clone(),
            calls: offer.calls,
            remaining,
            expires_at,
            scope: offer.scope.to_string(),
        };
        for hook in inner.hooks.at(HookSteps::SESSION_OPENED) {
            hook.on_session_opened(ctx, receipt, &info).await;
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn session_open_failed(
        &self,
        ctx: &PaymentContext<'_>,
        offer: &ResolvedSession,
        receipt: &SettleResponse,
        hash: &TokenHash,
        attempts: u32,
        error: String,
        headers: &mut HeaderMap,
    ) {
        let inner = &self.engine.inner;
        tracing::error!(
            attempts,
            %error,
            payer = ?self.payment.payer,
            transaction = %receipt.transaction,
            offer = %offer.id,
            "x402: a paid session could not be stored; the buyer got this call only"
        );
        headers.insert(
            X_PAYMENT_SESSION_ERROR,
            HeaderValue::from_static("session_open_failed"),
        );
        // A write that timed out may land yet: nobody holds its token.
        if let Ok(Err(e)) | Err(e) =
            tokio::time::timeout(self.session_write_deadline(), inner.sessions.close(hash))
                .await
                .map_err(|_| crate::session::SessionStoreError::Timeout)
        {
            tracing::debug!(error = %e, "x402: could not delete a session that failed to open; it goes at its expiry");
        }
        let failure = SessionOpenFailed {
            offer_id: offer.id.clone(),
            calls: offer.calls,
            scope: offer.scope.to_string(),
            attempts,
            error,
        };
        for hook in inner.hooks.at(HookSteps::SESSION_OPEN_FAILED) {
            hook.on_session_open_failed(ctx, receipt, &failure).await;
        }
    }
}
