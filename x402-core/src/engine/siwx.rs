//! The engine's side of [sign-in-with-x](crate::siwx): the challenge's
//! per-request `info`, checking a proof, and recording who paid.

use super::*;
use crate::siwx::{self, SignInWithX, SignedIn, Site};

/// The reason a store failure or a missed deadline answers with (503).
const SIWX_UNAVAILABLE: &str = "siwx_unavailable";

fn unavailable() -> Refusal {
    Refusal::Unavailable {
        reason: SIWX_UNAVAILABLE,
        retry_after: Duration::from_secs(1),
    }
}

/// One yes-or-no step of checking a proof, given `deadline`: `Ok` on yes,
/// `Invalid(no)` on no, and [`unavailable`] (logged as `what`) when it
/// fails or misses the deadline.
async fn yes_within<E: std::fmt::Display>(
    deadline: Duration,
    what: &str,
    no: &str,
    check: impl std::future::Future<Output = Result<bool, E>>,
) -> Result<(), Refusal> {
    match tokio::time::timeout(deadline, check).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(Refusal::Invalid(no.into())),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "x402: {what} failed");
            Err(unavailable())
        }
        Err(_) => {
            tracing::error!("x402: {what} missed its deadline");
            Err(unavailable())
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Engine {
    /// The public origin and domain for `request` (the configured origin,
    /// or the proxy's headers when trusted; never a bare `Host`).
    fn sign_in_site(&self, request: &RequestView<'_>) -> (String, String) {
        let (scheme, authority) = self.inner.origin.parts(request.headers);
        siwx::origin_and_domain(scheme, authority)
    }

    /// Fills this request's `info` into the route's declaration in
    /// `extensions`: domain, uri, a fresh nonce, the time window.
    pub(super) fn sign_in_challenge(
        &self,
        compiled: &CompiledRoute,
        config: &SignInWithX,
        request: &RequestView<'_>,
        extensions: &mut JsonObject,
    ) {
        let Some(declaration) = extensions.get_mut(siwx::SIGN_IN_WITH_X) else {
            return;
        };
        let (origin, domain) = self.sign_in_site(request);
        let site = Site {
            origin: &origin,
            domain: &domain,
            route: compiled.route.pattern(),
        };
        let path = request.uri.path_and_query().map_or("/", |p| p.as_str());
        *declaration = siwx::challenge(
            declaration,
            config,
            &self.inner.sign_in.key,
            site,
            path,
            now_ms(),
        );
    }

    /// Checks a `SIGN-IN-WITH-X` proof; the request to run its handler for
    /// when it holds. `Err(Refusal::Invalid)` names the failed check;
    /// `Err(Refusal::Unavailable)` is a store that failed or was late.
    pub(super) async fn sign_in(
        &self,
        compiled: &Arc<CompiledRoute>,
        resolved: &Arc<Resolved>,
        request: &RequestView<'_>,
        proof: &HeaderValue,
    ) -> Result<Box<PaidRequest>, Refusal> {
        let route = &compiled.route;
        let Some(config) = &route.sign_in_with_x else {
            return Err(Refusal::Invalid("invalid_siwx_header".into()));
        };
        let payload: siwx::SiwxPayload =
            codec::decode(proof.as_bytes(), self.inner.max_header_bytes).map_err(|e| {
                tracing::debug!(error = %e, "x402: unreadable SIGN-IN-WITH-X header");
                Refusal::Invalid("invalid_siwx_header".into())
            })?;
        let (origin, domain) = self.sign_in_site(request);
        let site = Site {
            origin: &origin,
            domain: &domain,
            route: route.pattern(),
        };
        let chains = siwx::listed_chains(resolved.extensions.get(siwx::SIGN_IN_WITH_X));
        let checked = siwx::check(
            &payload,
            &self.inner.sign_in.key,
            site,
            &chains,
            config.challenge_ttl,
            now_ms(),
        )
        .map_err(|reason| {
            tracing::debug!(
                reason,
                route = route.pattern(),
                "x402: sign-in-with-x proof refused"
            );
            Refusal::Invalid(reason.into())
        })?;

        let deadline = self.inner.sign_in.deadline;
        if let Some((hash, signature)) = &checked.smart_wallet {
            // Not the address's own ECDSA signature: its wallet contract
            // may say it is (EIP-1271), if smart wallets are checked. Asked
            // before the store, so that a forged proof never learns whether
            // its address paid.
            let Some(wallets) = &self.inner.sign_in.smart_wallets else {
                return Err(Refusal::Invalid("invalid_siwx_signature".into()));
            };
            yes_within(
                deadline,
                "smart-wallet signature check",
                "invalid_siwx_signature",
                wallets.is_valid_signature(&checked.chain_id, checked.address, *hash, signature),
            )
            .await?;
        }
        let store = &self.inner.sign_in.store;
        let key = siwx::address_key(&checked.address.to_string());
        yes_within(
            deadline,
            "sign-in store",
            "invalid_siwx_not_paid",
            store.has_access(route.pattern(), &key, crate::unix::now()),
        )
        .await?;
        // Last: a nonce is spent only by a proof that passes.
        yes_within(
            deadline,
            "sign-in store",
            "invalid_siwx_nonce",
            store.use_nonce(&checked.nonce, checked.nonce_expires_at),
        )
        .await?;

        let first = resolved.accepts.first().ok_or(Refusal::Internal)?;
        let names = first.names();
        let address = checked.address.to_checksum(None);
        tracing::debug!(route = route.pattern(), payer = %address, "x402: signed in with sign-in-with-x");
        let payment = VerifiedPayment {
            version: X402Version::V2,
            scheme: names.scheme.clone(),
            network: checked.chain_id.as_str().into(),
            payer: Some(address.as_str().into()),
            amount: AtomicAmount::ZERO,
            asset: names.asset.clone(),
            pay_to: names.pay_to.clone(),
            requirements: names.requirements.clone(),
            route: compiled.pattern.clone(),
            meter: None,
            session: None,
            sign_in: Some(SignedIn {
                address,
                chain_id: checked.chain_id,
            }),
        };
        Ok(Box::new(PaidRequest {
            engine: self.clone(),
            route: RouteRef::of(compiled),
            payment: Arc::new(payment),
            finished: false,
            // A sign-in carries no payment, so no payment identifier.
            identifier: None,
            // Nothing to settle, release or give back.
            kind: paid::Kind::Spent,
        }))
    }

    /// Records that `payer` paid for `compiled` (a sign-in-with-x route),
    /// for the route's access lifetime. Logged, never failing the paid
    /// request: the buyer has paid, and pays again if it cannot sign in.
    pub(super) async fn record_sign_in(&self, compiled: &CompiledRoute, payer: Option<&str>) {
        let (Some(config), Some(payer)) = (&compiled.route.sign_in_with_x, payer) else {
            return;
        };
        let expires_at = crate::unix::now().saturating_add(config.access_ttl.as_secs());
        let store = &self.inner.sign_in.store;
        let key = siwx::address_key(payer);
        let deadline = self.inner.sign_in.deadline.max(Duration::from_millis(250));
        match tokio::time::timeout(
            deadline,
            store.record_access(compiled.route.pattern(), &key, expires_at),
        )
        .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, route = compiled.route.pattern(), "x402: could not record a paid access for sign-in-with-x");
            }
            Err(_) => {
                tracing::error!(
                    route = compiled.route.pattern(),
                    "x402: recording a paid access for sign-in-with-x missed its deadline"
                );
            }
        }
    }
}
