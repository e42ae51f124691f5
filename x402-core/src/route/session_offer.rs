//! A prepaid session a route sells (see [`session`](crate::session)).

use std::time::Duration;

use super::Offer;

/// A session a route sells: `calls` requests within `ttl`, for a price.
#[derive(Debug, Clone)]
pub struct SessionOffer {
    pub(crate) id: String,
    pub(crate) calls: u64,
    pub(crate) ttl: Duration,
    pub(crate) scope: String,
    pub(crate) offers: Vec<Offer>,
}

impl SessionOffer {
    /// A session of `calls` calls within `ttl`, identified by `id` (unique per
    /// route), redeemable on routes that declare the same `scope`.
    pub fn new(id: impl Into<String>, calls: u64, ttl: Duration, scope: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            calls: calls.max(1),
            ttl,
            scope: scope.into(),
            offers: Vec::new(),
        }
    }

    /// Adds a way to pay for the session (an `exact` offer, typically).
    #[must_use]
    pub fn offer(mut self, offer: Offer) -> Self {
        self.offers.push(offer);
        self
    }

    /// The offer's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Calls sold.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// How long the session lasts.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The scope.
    pub fn scope(&self) -> &str {
        &self.scope
    }
}
