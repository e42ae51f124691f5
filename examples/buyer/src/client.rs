//! The request loop: send, read a 402, redeem a session or choose and sign
//! an offer, retry with the payment, read the receipt.

use std::{
    fmt,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use alloy_primitives::Address;
use alloy_signer_local::PrivateKeySigner;
use http::StatusCode;
use reqwest::Url;
use x402_core::{money::AtomicAmount, session::X_PAYMENT_SESSION};

use crate::{
    budget::{Budget, Reservation},
    challenge::{self, Challenge},
    error::{BuyerError, Refusal},
    purchase::Purchase,
    receipt,
    select::{url_origin, Limits, Offer, Plan},
    session::{self, SessionUse, Ticket},
    sign,
};

/// How many requests one call may send before paying: a held session token
/// may be refused, and a session bought meanwhile by a concurrent call is
/// tried before buying another.
const MAX_ROUNDS: usize = 3;

/// A paying HTTP client. Cheap to clone: clones share the signer, the budget
/// and the signature counter.
///
/// Build one with [`Buyer::builder`]; see the [crate docs](crate) for an
/// example.
#[derive(Clone)]
pub struct Buyer {
    pub(crate) inner: Arc<Inner>,
}

/// What clones of a buyer share.
pub(crate) struct Inner {
    pub(crate) signer: PrivateKeySigner,
    pub(crate) client: reqwest::Client,
    pub(crate) limits: Limits,
    pub(crate) budget: Budget,
    pub(crate) prefer_v1: bool,
    pub(crate) planned_calls: u64,
    pub(crate) signatures: AtomicU64,
    pub(crate) sessions: session::Wallet,
}

impl fmt::Debug for Buyer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The signer is shown by address only: never the key.
        f.debug_struct("Buyer")
            .field("address", &self.address())
            .field("limits", &self.inner.limits)
            .field("budget", &self.inner.budget)
            .field("prefer_v1", &self.inner.prefer_v1)
            .field("planned_calls", &self.inner.planned_calls)
            .field("spent", &self.spent())
            .field("signatures_made", &self.signatures_made())
            // Scopes and counts only: never a session token.
            .field("sessions", &self.inner.sessions)
            .finish_non_exhaustive()
    }
}

impl Buyer {
    /// The paying address.
    pub fn address(&self) -> Address {
        self.inner.signer.address()
    }

    /// What this buyer (and its clones) has paid: the sum of the payments
    /// answered with a 2xx and a successful receipt.
    pub fn spent(&self) -> AtomicAmount {
        self.inner.budget.spent()
    }

    /// How many payment authorizations this buyer (and its clones) has signed.
    pub fn signatures_made(&self) -> u64 {
        self.inner.signatures.load(Ordering::SeqCst)
    }

    /// How many prepaid sessions this buyer (and its clones) holds, across
    /// origins and scopes. Expired ones may be counted until the next call
    /// drops them.
    pub fn sessions_held(&self) -> usize {
        self.inner.sessions.len()
    }

    /// `GET`s a URL, paying if the server asks and the offer passes every
    /// limit.
    ///
    /// ```no_run
    /// # async fn run(buyer: x402_buyer::Buyer) -> Result<(), x402_buyer::BuyerError> {
    /// let purchase = buyer.get("http://127.0.0.1:4021/weather").await?;
    /// if let Some(receipt) = &purchase.receipt {
    ///     println!("settled in {}", receipt.transaction);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get(&self, url: &str) -> Result<Purchase, BuyerError> {
        self.get_planned(url, self.inner.planned_calls).await
    }

    /// `GET`s a URL like [`get`](Self::get), planning `planned_calls` calls
    /// to its route: a prepaid session the seller offers is bought when it is
    /// cheaper than that many calls paid one by one (see the
    /// [crate docs](crate#prepaid-sessions)). Overrides
    /// [`BuyerBuilder::planned_calls`](crate::BuyerBuilder::planned_calls) for this call.
    ///
    /// ```no_run
    /// # async fn run(buyer: x402_buyer::Buyer) -> Result<(), x402_buyer::BuyerError> {
    /// let url = "http://127.0.0.1:4021/weather";
    /// let first = buyer.get_planned(url, 10).await?; // may buy a session
    /// for _ in 1..10 {
    ///     let next = buyer.get(url).await?; // redeems it, if one was bought
    ///     println!("{:?}", next.session);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get_planned(&self, url: &str, planned_calls: u64) -> Result<Purchase, BuyerError> {
        let request = self.inner.client.get(url).build()?;
        self.request_planned(request, planned_calls).await
    }

    /// Sends any request, paying if the server asks. The request is sent
    /// again with the payment, so its body must be cloneable (not a stream).
    ///
    /// ```no_run
    /// # async fn run(buyer: x402_buyer::Buyer) -> Result<(), x402_buyer::BuyerError> {
    /// let request = reqwest::Client::new()
    ///     .post("http://127.0.0.1:4021/summarize")
    ///     .body(r#"{"text":"..."}"#)
    ///     .build()?;
    /// let purchase = buyer.request(request).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// * [`BuyerError::Refused`] when the buyer declines (nothing is
    ///   signed, except for a redirect answered to the paid request);
    /// * [`BuyerError::ChallengeMissing`] or
    ///   [`BuyerError::MalformedChallenge`] for a 402 without a readable
    ///   challenge (nothing is signed);
    /// * [`BuyerError::PaymentRefused`] when the seller answers the payment
    ///   with a 402 or a failed receipt (nothing is charged to the budget);
    /// * [`BuyerError::BadReceipt`] when the receipt does not decode;
    /// * [`BuyerError::Http`] on transport errors;
    /// * [`BuyerError::BodyNotCloneable`] for a streaming body.
    ///
    /// A transport error on the paid request keeps the amount reserved against
    /// [`max_total`](crate::BuyerBuilder::max_total) (the seller may have settled),
    /// unless the connection was never made.
    pub async fn request(&self, request: reqwest::Request) -> Result<Purchase, BuyerError> {
        self.request_planned(request, self.inner.planned_calls)
            .await
    }

    /// Sends any request like [`request`](Self::request), planning
    /// `planned_calls` calls to its route (see [`get_planned`](Self::get_planned)).
    ///
    /// When a session is held for the URL's origin, the request is first
    /// sent with its token (`X-PAYMENT-SESSION`): nothing is signed and
    /// nothing is charged. A 402 answer with a `session_*` error drops the
    /// token and the call pays as usual. While one call buys a session for a
    /// scope, concurrent calls that also chose to buy it wait, then redeem
    /// the session bought instead of buying another.
    ///
    /// # Errors
    ///
    /// As [`request`](Self::request).
    pub async fn request_planned(
        &self,
        request: reqwest::Request,
        planned_calls: u64,
    ) -> Result<Purchase, BuyerError> {
        let inner = &*self.inner;
        let template = request;
        let url = template.url().clone();
        let origin = url_origin(&url);
        let mut round = 0;
        loop {
            round += 1;
            let mut attempt = template.try_clone().ok_or(BuyerError::BodyNotCloneable)?;
            let ticket = inner.sessions.pick(&origin, url.path());
            if let Some(ticket) = &ticket {
                attempt
                    .headers_mut()
                    .insert(X_PAYMENT_SESSION, ticket.token.clone());
            }

            let response = inner.client.execute(attempt).await?;
            if let Some(refusal) = redirect_of(&response, &url) {
                return Err(refusal.into());
            }
            if response.status() != StatusCode::PAYMENT_REQUIRED {
                let session = ticket.and_then(|ticket| {
                    let remaining = session::remaining_of(response.headers())?;
                    inner.sessions.update(&ticket, remaining);
                    Some(SessionUse::Redeemed {
                        scope: ticket.key.1,
                        remaining,
                    })
                });
                return Ok(Purchase::unpaid(&response, session)
                    .with_body(response)
                    .await?);
            }

            let challenge = challenge::read(response, inner.prefer_v1).await?;
            let offers = challenge.session_offers();
            let scope = offers.first().map(|o| o.scope.clone());
            inner.sessions.learn(&origin, url.path(), scope);
            if let Some(ticket) = &ticket {
                self.refused_ticket(ticket, challenge.error());
            }
            // A token held for this route's scope that was not just tried.
            if round < MAX_ROUNDS && self.fresh_ticket(&origin, &url, ticket.as_ref()) {
                continue;
            }

            let plan = inner.limits.plan(&challenge, &url, offers, planned_calls)?;
            if let Plan::Session(choice) = plan {
                let key = (origin.clone(), choice.decl.scope.clone());
                let lock = inner.sessions.lock(&key);
                let _buying = lock.lock().await;
                if round < MAX_ROUNDS && inner.sessions.holds(&key) {
                    // A concurrent call bought one while this one waited.
                    continue;
                }
                // Over budget, the session is skipped: one call may still fit.
                if let Ok(reservation) = inner.budget.reserve(choice.offer.amount) {
                    let mut purchase = self
                        .pay(&template, &url, challenge, &choice.offer, reservation)
                        .await?;
                    if purchase.paid.is_some() {
                        if let Some(token) = session::token_of(&purchase.headers) {
                            let remaining = session::remaining_of(&purchase.headers)
                                .unwrap_or(choice.decl.calls.saturating_sub(1));
                            inner.sessions.keep(key, token, remaining, choice.decl.ttl);
                            purchase.session = Some(SessionUse::Opened {
                                offer: choice.decl.id,
                                scope: choice.decl.scope,
                                remaining,
                                ttl: choice.decl.ttl,
                            });
                        }
                    }
                    return Ok(purchase);
                }
            }
            let (offer, reservation) = inner.limits.choose(&inner.budget, &challenge, &url)?;
            return self
                .pay(&template, &url, challenge, &offer, reservation)
                .await;
        }
    }

    /// Drops a token the seller refused with a `session_*` error, except for
    /// `session_out_of_scope` (it is still good for its own scope).
    fn refused_ticket(&self, ticket: &Ticket, error: Option<&str>) {
        match error {
            Some("session_out_of_scope") => {}
            Some(e) if e.starts_with("session_") => self.inner.sessions.forget(ticket),
            _ => {}
        }
    }

    /// Whether a token other than `tried` is now held for the URL's route.
    fn fresh_ticket(&self, origin: &str, url: &Url, tried: Option<&Ticket>) -> bool {
        self.inner
            .sessions
            .pick(origin, url.path())
            .is_some_and(|next| tried.is_none_or(|t| t.token != next.token))
    }

    /// Signs `offer`, sends the request again with the payment and resolves
    /// the reservation.
    async fn pay(
        &self,
        template: &reqwest::Request,
        url: &Url,
        challenge: Challenge,
        offer: &Offer,
        mut reservation: Reservation<'_>,
    ) -> Result<Purchase, BuyerError> {
        let inner = &*self.inner;
        let mut retry = template.try_clone().ok_or(BuyerError::BodyNotCloneable)?;
        let payload = sign::authorize(&inner.signer, offer).await?;
        inner.signatures.fetch_add(1, Ordering::SeqCst);
        let (payment, name, value) = sign::payment(&offer.terms, &payload)?;
        retry.headers_mut().insert(name, value);

        // From here the authorization may reach the seller.
        reservation.disarm();
        let response = match inner.client.execute(retry).await {
            Ok(response) => response,
            Err(e) => {
                if e.is_connect() {
                    reservation.release();
                }
                return Err(e.into());
            }
        };
        // Unreadable, the receipt may still record a settlement: the amount
        // stays reserved.
        let receipt = receipt::decode(response.headers()).map_err(BuyerError::BadReceipt)?;
        let settled = receipt.as_ref().is_some_and(|r| r.success);
        if let Some(refusal) = redirect_of(&response, url) {
            if settled {
                reservation.commit();
            } else {
                reservation.release();
            }
            return Err(refusal.into());
        }
        let status = response.status();
        if receipt::refused(status, receipt.as_ref()) {
            reservation.release();
            let reason = receipt::refusal_reason(receipt.as_ref(), response).await;
            return Err(BuyerError::PaymentRefused {
                status: status.as_u16(),
                reason,
                receipt: receipt.map(Box::new),
            });
        }
        let paid = if status.is_success() && settled {
            reservation.commit();
            Some(offer.amount)
        } else {
            reservation.release();
            None
        };
        Ok(Purchase {
            challenge: Some(challenge),
            payment: Some(payment),
            receipt,
            paid,
            ..Purchase::unpaid(&response, None)
        }
        .with_body(response)
        .await?)
    }
}

/// A 3xx, or a response from another URL than the one requested (a custom
/// client that follows redirects).
fn redirect_of(response: &reqwest::Response, requested: &Url) -> Option<Refusal> {
    if response.status().is_redirection() {
        let location = response
            .headers()
            .get(http::header::LOCATION)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        return Some(Refusal::Redirect { location });
    }
    (response.url() != requested).then(|| Refusal::Redirect {
        location: response.url().to_string(),
    })
}
