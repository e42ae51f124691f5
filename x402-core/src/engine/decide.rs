//! Deciding a protected request: hooks, sessions, verification, claims.

use std::future::Future;

use super::*;
use crate::session::{SessionStoreError, TokenHash};

/// What a payment is offered for: the resource and the route's extensions
/// as enriched for this request. Boxed down the payment steps, whose
/// futures would otherwise each hold a copy (a parameter of an `async fn`
/// keeps its slot for the whole call).
pub(super) struct Offered {
    resource: Arc<v2::ResourceInfo>,
    enriched: Option<JsonObject>,
}

impl Engine {
    /// The waiting part of [`process`](Self::process), for a request to
    /// `compiled` that [`challenge_now`](Self::challenge_now) could not
    /// answer.
    pub(super) async fn process_route(
        &self,
        compiled: &Arc<CompiledRoute>,
        request: RequestView<'_>,
    ) -> BoxedDecision {
        let route = &compiled.route;

        let ctx = RequestContext {
            request,
            route: route.pattern(),
        };
        for hook in self.inner.hooks.at(HookSteps::PROTECTED_REQUEST) {
            match hook.on_protected_request(&ctx).await {
                Ok(ProtectedRequest::Continue) => {}
                Ok(ProtectedRequest::GrantAccess) => return Decision::Pass.into(),
                Ok(ProtectedRequest::Refuse { status, reason }) => {
                    return Decision::Respond(response::refusal_response(
                        &Refusal::Forbidden { status, reason },
                        None,
                        None,
                        None,
                    ))
                    .into()
                }
                Err(e) => return Decision::Respond(hook_error_response(&e)).into(),
            }
        }

        // The engine's future is allocated for every protected request: the
        // rarer, larger steps (first resolution, dynamic pricing, sign-in,
        // verification) are boxed so that it stays small. A session
        // redemption, about 100 bytes, is awaited in place.
        // A static price's offers are borrowed from the route, not
        // counted: every request on every core would write the count.
        let ready = match &route.pricing {
            Pricing::Static(_) => compiled.resolved.get(),
            Pricing::Dynamic(_) => None,
        };
        let priced;
        let resolved = match ready {
            Some(resolved) => resolved,
            None => match Box::pin(self.offers(compiled, &request)).await {
                Ok(Some(resolved)) => {
                    priced = resolved;
                    &priced
                }
                Ok(None) => return Decision::Pass.into(),
                Err(refusal) => {
                    crate::metrics::refusal(route.pattern(), &refusal);
                    return Decision::Respond(response::refusal_response(
                        &refusal, None, None, None,
                    ))
                    .into();
                }
            },
        };

        let sent = Sent::of(request.headers);
        let header = sent.payment();

        // A buyer that paid before signs in instead (sign-in-with-x); a
        // refused proof gets the challenge, unless a payment came with it.
        let mut sign_in_refusal = None;
        if let Some(proof) = route.sign_in_with_x.as_ref().and(sent.sign_in) {
            match Box::pin(self.sign_in(compiled, resolved, &request, proof)).await {
                Ok(paid) => return Decision::Paid(paid).into(),
                Err(refusal @ Refusal::Unavailable { .. }) => {
                    crate::metrics::refusal(route.pattern(), &refusal);
                    return Decision::Respond(response::refusal_response(
                        &refusal, None, None, None,
                    ))
                    .into();
                }
                Err(refusal) => sign_in_refusal = Some(refusal),
            }
        }

        // A prepaid session call needs no payment.
        let mut session_refusal = None;
        if let (Some(scope), Some(token)) = (resolved.scope(), sent.session) {
            match self.redeem(compiled, resolved, scope, token).await {
                Ok(paid) => return Decision::Paid(paid).into(),
                Err(Refusal::Unavailable {
                    reason,
                    retry_after,
                }) => {
                    let refusal = Refusal::Unavailable {
                        reason,
                        retry_after,
                    };
                    crate::metrics::refusal(route.pattern(), &refusal);
                    return Decision::Respond(response::refusal_response(
                        &refusal, None, None, None,
                    ))
                    .into();
                }
                // A buyer that also sent a payment pays instead.
                Err(refusal) => session_refusal = Some(refusal),
            }
        }

        // A bazaar declaration is enriched per request, so it skips the
        // pre-encoded challenge.
        let bazaar = resolved.extensions.contains_key(crate::bazaar::BAZAAR);
        if header.is_none() && session_refusal.is_none() {
            let url = RequestUrl::of(&self.inner.origin, &request);
            if let Some(response) = ready_challenge(compiled, resolved, &request, url) {
                return Decision::Respond(response).into();
            }
        }
        let resource = resolved.resource(route, RequestUrl::of(&self.inner.origin, &request));
        let mut enriched = bazaar.then(|| enrich_bazaar(route, &request, &resolved.extensions));
        if let Some(siwx) = &route.sign_in_with_x {
            let extensions = enriched.get_or_insert_with(|| resolved.extensions.clone());
            self.sign_in_challenge(compiled, siwx, &request, extensions);
        }
        let Some(header) = header else {
            let mut parts = self.parts(route, &resource, resolved);
            if let Some(extensions) = &enriched {
                parts.extensions = extensions;
            }
            if let Some(refusal) = session_refusal.or(sign_in_refusal) {
                crate::metrics::refusal(route.pattern(), &refusal);
                return Decision::Respond(response::refusal_response(
                    &refusal,
                    Some(&parts),
                    None,
                    None,
                ))
                .into();
            }
            compiled.series.payment_required();
            let encoded = if enriched.is_some() {
                // Enriched per request: nothing to reuse.
                parts.encode(Refusal::PaymentRequired.reason(), None)
            } else if let Some((_, encoded)) = &resolved.fixed {
                Some(encoded.clone())
            } else {
                resolved.payment_required(&parts, &resource)
            };
            let Some(encoded) = encoded else {
                return Decision::Respond(response::refusal_response(
                    &Refusal::Internal,
                    None,
                    None,
                    None,
                ))
                .into();
            };
            if response::is_browser(request.headers) {
                return Decision::Respond(response::paywall_response(
                    &parts,
                    &encoded,
                    &*self.inner.paywall,
                ))
                .into();
            }
            return Decision::Respond(response::challenge_response(&encoded)).into();
        };
        let offered = Box::new(Offered { resource, enriched });
        crate::boxed::boxed(|| self.pay(compiled, resolved, offered, header)).await
    }

    /// The payment half of [`process`](Self::process), boxed there to keep
    /// the 402 path's future small: decode, match, verify, after-verify
    /// hooks (claims).
    pub(super) async fn pay(
        &self,
        compiled: &Arc<CompiledRoute>,
        resolved: &Arc<Resolved>,
        offered: Box<Offered>,
        header: &HeaderValue,
    ) -> BoxedDecision {
        // A payment id reserved and not handed to the paid request (it was
        // refused) is released before the answer goes out.
        let mut identifier = None;
        let decision = self
            .pay_with(compiled, resolved, offered, header, &mut identifier)
            .await;
        if let Some(held) = identifier {
            // Boxed: only refused payments that carried an id get here.
            Box::pin(held.release()).await;
        }
        decision
    }

    async fn pay_with(
        &self,
        compiled: &Arc<CompiledRoute>,
        resolved: &Arc<Resolved>,
        offered: Box<Offered>,
        header: &HeaderValue,
        identifier: &mut Option<Box<crate::payment_id::flow::Held>>,
    ) -> BoxedDecision {
        let route = &compiled.route;
        let mut parts = self.parts(route, &offered.resource, resolved);
        if let Some(extensions) = &offered.enriched {
            parts.extensions = extensions;
        }
        let refuse = |refusal: Refusal, version: Option<X402Version>, payer: Option<&str>| {
            crate::metrics::refusal(route.pattern(), &refusal);
            BoxedDecision::from(Decision::Respond(response::refusal_response(
                &refusal,
                Some(&parts),
                version,
                payer,
            )))
        };

        // Boxed, like the facilitator request below: this future is itself
        // boxed and moved, and the decoded payment is large.
        let payload = match codec::decode_payment(header.as_bytes(), self.inner.max_header_bytes) {
            Ok(p) => Box::new(p),
            Err(e) => {
                tracing::debug!(error = %e, "x402: unreadable payment header");
                return refuse(Refusal::InvalidHeader(e.reason()), None, None);
            }
        };
        let version = payload.version();

        // payment-identifier: looked up before verifying (a resend of a
        // settled payment no longer verifies). A refusal below leaves the
        // reservation to `pay`, which releases it. Boxed, and only awaited
        // on routes that declare the extension (most do not), for payments
        // that carry an id or must.
        if let Some(required) = compiled.payment_id.filter(|&required| {
            required || !matches!(crate::payment_id::payment_id(&payload), Ok(None))
        }) {
            *identifier = match Box::pin(crate::payment_id::flow::begin(
                &self.inner.payment_ids,
                route,
                required,
                &payload,
                header,
                self.inner.max_header_bytes,
            ))
            .await
            {
                Ok(held) => held,
                Err(response) => return Decision::Respond(response).into(),
            };
        }

        let Some(matched) = find_match(resolved, &payload) else {
            return refuse(Refusal::NoMatchingRequirements, Some(version), None);
        };
        let offer = matched.offer;
        if offer.requirements.scheme == crate::batch::BATCH_SETTLEMENT {
            let offer = offer.clone();
            return Box::pin(self.pay_batch(
                compiled,
                resolved.clone(),
                offered.resource.clone(),
                offered.enriched.clone(),
                *payload,
                offer,
            ))
            .await
            .into();
        }
        if !matching::transfer_method_matches(&offer.requirements, payload.payload()) {
            tracing::debug!("x402: payment's transfer method is not the one offered");
            return refuse(Refusal::NoMatchingRequirements, Some(version), None);
        }

        // The facilitator always gets the server's own requirement, and
        // the body is written once, for the verify and the settle calls.
        let request_body = match version {
            X402Version::V2 => PreparedRequest::with_written(payload, offer.wire()),
            X402Version::V1 => match crate::challenge::v1_row(
                &offer.requirements,
                &offered.resource,
                route.output_schema.as_ref(),
            ) {
                Some(row) => FacilitatorRequest::new(*payload, PaymentRequirements::V1(row))
                    .map(|request| Box::new(PreparedRequest::new(request))),
                None => return refuse(Refusal::NoMatchingRequirements, Some(version), None),
            },
        };
        let Some(request_body) = request_body else {
            return refuse(Refusal::NoMatchingRequirements, Some(version), None);
        };

        let names = offer.names();
        let network = names.network.clone();
        let pctx = PaymentContext::of_request(route.pattern(), &request_body, &network);

        let scheme = offer.requirements.scheme.as_str();
        let span = tracing::info_span!("x402.verify", network = %network, scheme, payer = tracing::field::Empty);
        let verdict = match crate::boxed::boxed(|| self.verify(&pctx, &request_body))
            .instrument(span.clone())
            .await
        {
            Ok(v) => v,
            Err(refusal) => {
                crate::metrics::verification(Err(&refusal));
                return refuse(refusal, Some(version), None);
            }
        };
        span.record("payer", verdict.payer.as_deref());
        if verdict.is_valid {
            self.inner.series.verified();
        } else {
            crate::metrics::verification(Ok(Some(
                verdict
                    .invalid_reason
                    .as_deref()
                    .unwrap_or("invalid_payment"),
            )));
        }
        if !verdict.is_valid {
            let reason = verdict
                .invalid_reason
                .clone()
                .unwrap_or_else(|| "invalid_payment".to_owned());
            return refuse(
                Refusal::Invalid(reason),
                Some(version),
                verdict.payer.as_deref(),
            );
        }

        let claim_span = tracing::info_span!("x402.claim", network = %network, scheme, payer = verdict.payer.as_deref());
        // Hooks that accepted the payment (a claim) are told if the client
        // goes away before the handler can start.
        let mut accepted = Accepted {
            engine: self,
            ctx: &pctx,
            count: 0,
        };
        for (i, hook) in self.inner.hooks.enumerate_at(HookSteps::AFTER_VERIFY) {
            let outcome = hook
                .after_verify(&pctx, &verdict)
                .instrument(claim_span.clone())
                .await;
            let refusal = match outcome {
                Ok(AfterVerify::Continue) => {
                    accepted.count = i + 1;
                    continue;
                }
                Ok(AfterVerify::Abort { reason }) => Refusal::Aborted(reason),
                Err(e) => {
                    log_hook_error(&e);
                    hook_error_refusal(&e)
                }
            };
            // Hooks that already accepted this payment (a claim, say) are told
            // it will not proceed.
            for earlier in self.inner.hooks.before_at(i, HookSteps::PAYMENT_CANCELED) {
                earlier
                    .on_payment_canceled(&pctx, CancelReason::Refused)
                    .await;
            }
            accepted.count = 0;
            return refuse(refusal, Some(version), verdict.payer.as_deref());
        }

        accepted.count = 0;
        drop(accepted);
        let upto = offer.requirements.scheme == UPTO;
        let meter = upto.then(|| Meter::new(offer.requirements.amount));
        let timing = if upto {
            SettlementTiming::AfterHandler
        } else {
            route.timing
        };
        let decimals = offer.decimals;
        let session = matched.session;
        if let Some(held) = identifier {
            held.set_lifetime(&request_body, &network);
        }
        let Offered { resource, enriched } = *offered;
        BoxedDecision::Paid(crate::boxed::boxed_value(|| PaidRequest {
            engine: self.clone(),
            route: RouteRef::of(compiled),
            // Written where it is built, into its `Arc` (it is 320 bytes).
            payment: Arc::new(VerifiedPayment {
                version,
                scheme: names.scheme.clone(),
                network: network.clone(),
                payer: verdict.payer.as_deref().map(SharedStr::from),
                amount: offer.requirements.amount,
                asset: names.asset.clone(),
                pay_to: names.pay_to.clone(),
                requirements: names.requirements.clone(),
                route: compiled.pattern.clone(),
                meter: meter.clone(),
                session: None,
                sign_in: None,
            }),
            finished: false,
            identifier: identifier.take(),
            kind: paid::Kind::Payment(crate::boxed::boxed_value(|| paid::PaymentState {
                request: request_body,
                network,
                timing,
                resource,
                resolved: resolved.clone(),
                extensions: enriched,
                decimals,
                meter,
                session,
            })),
        }))
    }

    /// Redeems a session call: the token hashed, one call taken from the
    /// store within the engine's deadline.
    ///
    /// Awaited inline by `process_route` (a box per session call saved):
    /// not an `async fn`, which would keep its arguments twice, and a store
    /// that does not keep the deadline itself is waited on boxed apart.
    #[allow(clippy::manual_async_fn)] // see above
    pub(super) fn redeem<'a>(
        &'a self,
        compiled: &'a Arc<CompiledRoute>,
        resolved: &'a Arc<Resolved>,
        scope: &'a SharedStr,
        token: &'a HeaderValue,
    ) -> impl Future<Output = Result<Box<PaidRequest>, Refusal>> + Send + 'a {
        async move {
            let Some(hash) = token.to_str().ok().and_then(SessionToken::hash_sent) else {
                return Err(Refusal::Invalid("session_invalid".into()));
            };
            let now = unix_now();
            let answer = match self.inner.sessions.redeem_within(
                &hash,
                scope,
                now,
                self.inner.session_deadline,
            ) {
                // The store keeps the deadline, and undoes what lands late.
                Some(bounded) => Some(bounded.await),
                None => Box::pin(self.redeem_late(hash, scope, now)).await,
            };
            self.redeemed(compiled, resolved, scope, hash, answer)
        }
    }

    /// A session call, from the store's answer.
    fn redeemed(
        &self,
        compiled: &Arc<CompiledRoute>,
        resolved: &Resolved,
        scope: &SharedStr,
        hash: TokenHash,
        answer: Option<Result<Redemption, SessionStoreError>>,
    ) -> Result<Box<PaidRequest>, Refusal> {
        let remaining = match answer {
            Some(Ok(Redemption::Redeemed { remaining })) => {
                self.inner.series.redeemed();
                remaining
            }
            Some(Ok(Redemption::Unknown)) => {
                return Err(Refusal::Invalid("session_unknown".into()))
            }
            Some(Ok(Redemption::Expired)) => {
                return Err(Refusal::Invalid("session_expired".into()))
            }
            Some(Ok(Redemption::Exhausted)) => {
                return Err(Refusal::Invalid("session_exhausted".into()))
            }
            Some(Ok(Redemption::OutOfScope)) => {
                return Err(Refusal::Invalid("session_out_of_scope".into()))
            }
            None | Some(Err(SessionStoreError::Timeout)) => {
                tracing::error!("x402: session store missed its deadline");
                return Err(session_unavailable());
            }
            Some(Err(e)) => {
                tracing::error!(error = %e, "x402: session store failed");
                return Err(session_unavailable());
            }
        };
        let first = resolved
            .sessions
            .first()
            .and_then(|s| s.accepts.first())
            .ok_or(Refusal::Internal)?;
        let names = first.names();
        let payment = VerifiedPayment {
            version: X402Version::V2,
            scheme: names.scheme.clone(),
            network: names.network.clone(),
            payer: None,
            amount: AtomicAmount::ZERO,
            asset: names.asset.clone(),
            pay_to: names.pay_to.clone(),
            requirements: names.requirements.clone(),
            route: compiled.pattern.clone(),
            meter: None,
            session: Some(SessionCall {
                remaining,
                scope: scope.clone(),
            }),
            sign_in: None,
        };
        Ok(crate::boxed::boxed_value(|| PaidRequest {
            engine: self.clone(),
            route: RouteRef::of(compiled),
            payment: Arc::new(payment),
            finished: false,
            identifier: None,
            kind: paid::Kind::Session {
                token: hash,
                remaining,
            },
        }))
    }

    /// A redemption from a store that does not keep its deadline
    /// ([`SessionStore::redeem_within`]): `None` if it missed the engine's.
    ///
    /// A redemption is a write: if this request stops waiting for it (the
    /// deadline passed, or the client hung up), one that lands late is
    /// given back, since its request was refused.
    async fn redeem_late(
        &self,
        hash: TokenHash,
        scope: &SharedStr,
        now: u64,
    ) -> Option<Result<Redemption, SessionStoreError>> {
        let give_back = move |(answer, engine): (Result<Redemption, _>, Engine)| async move {
            if let Ok(Redemption::Redeemed { .. }) = answer {
                if let Err(e) = engine.inner.sessions.give_back(&hash).await {
                    tracing::error!(error = %e, "x402: could not give back a late session redemption");
                }
            }
        };
        let (engine, scope) = (self.clone(), scope.clone());
        let mut call = Late::new(
            "session redemption",
            async move {
                let answer = engine.inner.sessions.redeem(&hash, &scope, now).await;
                (answer, engine)
            },
            give_back,
        );
        call.answer(self.inner.session_deadline)
            .await
            .map(|(answer, _)| answer)
    }

    pub(super) fn parts<'a>(
        &self,
        route: &'a Route,
        resource: &'a v2::ResourceInfo,
        resolved: &'a Resolved,
    ) -> ChallengeParts<'a> {
        ChallengeParts {
            resource,
            accepts: &resolved.rows,
            extensions: &resolved.extensions,
            output_schema: route.output_schema.as_ref(),
        }
    }

    pub(super) async fn verify(
        &self,
        ctx: &PaymentContext<'_>,
        request: &PreparedRequest,
    ) -> Result<VerifyResponse, Refusal> {
        for hook in self.inner.hooks.at(HookSteps::BEFORE_VERIFY) {
            match hook.before_verify(ctx).await {
                Ok(BeforeVerify::Continue) => {}
                Ok(BeforeVerify::Abort { reason }) => return Err(Refusal::Invalid(reason)),
                Ok(BeforeVerify::Skip(verdict)) => return Ok(verdict),
                Err(e) => {
                    log_hook_error(&e);
                    return Err(hook_error_refusal(&e));
                }
            }
        }
        let mut passed = precheck::Passed::default();
        if self.inner.precheck {
            let now = crate::unix::now();
            match precheck::precheck(request, now, self.inner.known_payers.as_ref()) {
                Ok(seen) => passed = seen,
                Err(refused) => {
                    tracing::debug!(
                        reason = refused.reason,
                        message = %refused.message,
                        "x402: payment refused before the facilitator"
                    );
                    let mut verdict = VerifyResponse::invalid(
                        refused.reason,
                        refused.payer.map(|p| p.to_checksum(None)),
                    );
                    verdict.invalid_message = Some(refused.message);
                    return Ok(verdict);
                }
            }
        }
        let timer = crate::metrics::FacilitatorTimer::start();
        let answer = self.inner.facilitator.verify_prepared(request).await;
        self.inner
            .series
            .facilitator_call(timer, crate::metrics::FacilitatorOp::Verify);
        self.inner.observed.record(&answer);
        if matches!(&answer, Ok(v) if v.is_valid) {
            // A voucher not accepted (refused, failed, or dropped with this
            // future) distrusts its payer.
            if let Some(voucher) = passed.voucher {
                voucher.accepted();
            } else if let (Some((chain_id, payer)), Some(known)) =
                (passed.recovered, &self.inner.known_payers)
            {
                known.accepted(chain_id, payer, crate::unix::now());
            }
        }
        match answer {
            Ok(v) => Ok(v),
            Err(error) => {
                for hook in self.inner.hooks.at(HookSteps::VERIFY_FAILURE) {
                    if let Some(v) = hook.on_verify_failure(ctx, &error).await {
                        return Ok(v);
                    }
                }
                tracing::error!(error = %error, network = ctx.network, "x402: facilitator /verify failed");
                Err(Refusal::FacilitatorUnavailable)
            }
        }
    }
}

/// The after-verify hooks that accepted a payment (the first `count`), told
/// [`CancelReason::ClientGone`] if the request is dropped before its
/// handler could start: a claim made for a client that went away is
/// released.
pub(super) struct Accepted<'a> {
    pub(super) engine: &'a Engine,
    pub(super) ctx: &'a PaymentContext<'a>,
    pub(super) count: usize,
}

impl Drop for Accepted<'_> {
    fn drop(&mut self) {
        let hooks = self
            .engine
            .inner
            .hooks
            .before_at(self.count, HookSteps::PAYMENT_CANCELED);
        if hooks.is_empty() {
            return;
        }
        let (route, payload, requirements, network) = (
            self.ctx.route.to_owned(),
            self.ctx.payload.clone(),
            self.ctx.requirements.clone(),
            self.ctx.network.to_owned(),
        );
        self.engine.spawn_tracked(async move {
            let ctx = PaymentContext::new(&route, &payload, &requirements, &network);
            for hook in hooks {
                hook.on_payment_canceled(&ctx, CancelReason::ClientGone { keep_claim: false })
                    .await;
            }
        });
    }
}

pub(super) fn session_unavailable() -> Refusal {
    Refusal::Unavailable {
        reason: "session_unavailable",
        retry_after: Duration::from_secs(1),
    }
}

pub(super) fn log_hook_error(e: &HookError) {
    tracing::error!(error = %e, source = ?std::error::Error::source(e), "x402: hook failed");
}

pub(super) fn hook_error_refusal(e: &HookError) -> Refusal {
    match e {
        HookError::Unavailable {
            reason,
            retry_after,
            ..
        } => Refusal::Unavailable {
            reason,
            retry_after: *retry_after,
        },
        HookError::Other(_) => Refusal::Internal,
    }
}

pub(super) fn hook_error_response(e: &HookError) -> EngineResponse {
    log_hook_error(e);
    response::refusal_response(&hook_error_refusal(e), None, None, None)
}
