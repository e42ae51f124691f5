//! [`FacilitatorRouter`]: sends each request to the facilitator registered for
//! its network and scheme.

use std::{fmt, sync::Arc};

use async_trait::async_trait;

use super::{Facilitator, FacilitatorError, FacilitatorHealth, GasWallet};
use crate::network::{caip2, pattern_matches, v1_name};
use crate::proto::{
    FacilitatorRequest, PreparedRequest, SettleResponse, SupportedKind, SupportedResponse,
    VerifyResponse,
};

/// Routes requests to facilitators by network and scheme.
///
/// Routes are tried in registration order; the first whose patterns match the
/// requirement's network and scheme wins, then the [fallback](Self::fallback).
/// A pattern is exact (`eip155:8453`, `exact`), a prefix ending in `*`
/// (`eip155:*`), or `*` for everything. Networks match under either naming:
/// a version 1 requirement on `base-sepolia` matches a route for
/// `eip155:84532` or `eip155:*`, and a route written with a v1 name matches
/// the CAIP-2 id.
///
/// [`supported`](Facilitator::supported) merges what the facilitators report
/// (see the method's notes).
///
/// ```
/// use x402_core::facilitator::{FacilitatorRouter, HttpFacilitator};
///
/// let router = FacilitatorRouter::new()
///     .route("solana:*", "*", HttpFacilitator::new("https://svm.example")?)
///     .route("eip155:*", "exact", HttpFacilitator::new("https://evm.example")?)
///     .fallback(HttpFacilitator::new("https://x402.org/facilitator")?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Default)]
pub struct FacilitatorRouter {
    routes: Vec<Route>,
    fallback: Option<Arc<dyn Facilitator>>,
}

struct Route {
    network: String,
    scheme: String,
    facilitator: Arc<dyn Facilitator>,
}

impl Route {
    /// Whether requests on `network` with `scheme` go here (if no earlier
    /// route takes them).
    fn matches(&self, network: &str, scheme: &str) -> bool {
        pattern_matches(&self.scheme, scheme) && network_matches(&self.network, network)
    }

    /// Whether some requests covered by `kind` (whose network may itself be a
    /// pattern such as `eip155:*`) go here.
    fn overlaps(&self, kind: &SupportedKind) -> bool {
        patterns_overlap(&self.scheme, &kind.scheme)
            && std::iter::once(kind.network.as_str())
                .chain(caip2(&kind.network))
                .chain(v1_name(&kind.network))
                .any(|network| patterns_overlap(&self.network, network))
    }
}

impl fmt::Debug for FacilitatorRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Routes<'a>(&'a [Route]);
        impl fmt::Debug for Routes<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_list()
                    .entries(self.0.iter().map(|r| (&r.network, &r.scheme)))
                    .finish()
            }
        }
        f.debug_struct("FacilitatorRouter")
            .field("routes", &Routes(&self.routes))
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

/// Whether a network pattern covers a network named either way.
fn network_matches(pattern: &str, network: &str) -> bool {
    pattern_matches(pattern, network)
        || caip2(network).is_some_and(|id| pattern_matches(pattern, id))
        || v1_name(network).is_some_and(|name| pattern_matches(pattern, name))
}

/// Whether two patterns (exact or `*`-suffixed) cover a common value.
fn patterns_overlap(a: &str, b: &str) -> bool {
    match (a.strip_suffix('*'), b.strip_suffix('*')) {
        (Some(pa), Some(pb)) => pa.starts_with(pb) || pb.starts_with(pa),
        (Some(pa), None) => b.starts_with(pa),
        (None, Some(pb)) => a.starts_with(pb),
        (None, None) => a == b,
    }
}

impl FacilitatorRouter {
    /// A router with no routes and no fallback.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends requests whose network matches `network_pattern` and whose scheme
    /// matches `scheme_pattern` to `facilitator`, unless an earlier route
    /// matches them.
    #[must_use]
    pub fn route(
        mut self,
        network_pattern: &str,
        scheme_pattern: &str,
        facilitator: impl Facilitator,
    ) -> Self {
        self.routes.push(Route {
            network: network_pattern.to_owned(),
            scheme: scheme_pattern.to_owned(),
            facilitator: Arc::new(facilitator),
        });
        self
    }

    /// Sends requests that no route matches to `facilitator` (replacing any
    /// earlier fallback).
    #[must_use]
    pub fn fallback(mut self, facilitator: impl Facilitator) -> Self {
        self.fallback = Some(Arc::new(facilitator));
        self
    }

    /// The facilitator for a request, or [`FacilitatorError::Unrouted`].
    fn select(&self, request: &FacilitatorRequest) -> Result<&dyn Facilitator, FacilitatorError> {
        let network = request.payment_requirements.network();
        let scheme = request.payment_requirements.scheme();
        self.routes
            .iter()
            .find(|route| route.matches(network, scheme))
            .map(|route| &route.facilitator)
            .or(self.fallback.as_ref())
            .map(|facilitator| &**facilitator)
            .ok_or_else(|| FacilitatorError::Unrouted {
                scheme: scheme.to_owned(),
                network: network.to_owned(),
            })
    }

    /// Whether a kind reported by entry `index` (routes, then the fallback at
    /// `routes.len()`) describes requests that entry would actually receive.
    fn owns(&self, index: usize, kind: &SupportedKind) -> bool {
        let (earlier, own) = match self.routes.get(index) {
            Some(route) => (&self.routes[..index], route.overlaps(kind)),
            None => (&self.routes[..], true),
        };
        own && !earlier
            .iter()
            .any(|route| route.matches(&kind.network, &kind.scheme))
    }
}

#[async_trait]
impl Facilitator for FacilitatorRouter {
    async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        self.select(request)?.verify(request).await
    }

    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        self.select(request)?.settle(request).await
    }

    async fn verify_prepared(
        &self,
        request: &PreparedRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        self.select(request)?.verify_prepared(request).await
    }

    async fn settle_prepared(
        &self,
        request: &PreparedRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        self.select(request)?.settle_prepared(request).await
    }

    /// Everything the routed facilitators report, asked one after the other
    /// (routes in order, then the fallback).
    ///
    /// - Kinds: earlier facilitators first; a kind is kept only if requests
    ///   of that kind would be routed to the facilitator that reported it (so
    ///   a seller never copies one facilitator's `feePayer` into a requirement
    ///   another one settles), and a later duplicate of the same
    ///   `(version, scheme, network)` is skipped.
    /// - Extensions: the union, without duplicates.
    /// - Signers: the lists of each family merged, without duplicates.
    ///
    /// A facilitator that fails is logged and left out; if all fail, the
    /// first error is returned. With no facilitators, the answer is empty.
    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        let mut answers = Vec::with_capacity(self.routes.len() + 1);
        for facilitator in self.entries() {
            answers.push(facilitator.supported().await);
        }
        self.merge(answers)
    }

    /// Each routed facilitator's health, asked one after the other (routes
    /// in order, then the fallback): their `/supported` answers merged as
    /// [`supported`](Facilitator::supported) merges them, and all their gas
    /// wallets (each network and address once).
    async fn health(&self) -> FacilitatorHealth {
        let mut answers = Vec::with_capacity(self.routes.len() + 1);
        let mut wallets: Vec<GasWallet> = Vec::new();
        for facilitator in self.entries() {
            let health = facilitator.health().await;
            answers.push(health.supported);
            for wallet in health.wallets {
                let known = wallets
                    .iter()
                    .any(|w| w.network == wallet.network && w.address == wallet.address);
                if !known {
                    wallets.push(wallet);
                }
            }
        }
        FacilitatorHealth {
            supported: self.merge(answers),
            wallets,
        }
    }
}

impl FacilitatorRouter {
    /// The routed facilitators: routes in order, then the fallback.
    fn entries(&self) -> impl Iterator<Item = &Arc<dyn Facilitator>> {
        self.routes
            .iter()
            .map(|route| &route.facilitator)
            .chain(self.fallback.as_ref())
    }

    /// The `/supported` answers of the [entries](Self::entries), in their
    /// order, merged (see [`supported`](Facilitator::supported)).
    fn merge(
        &self,
        answers: Vec<Result<SupportedResponse, FacilitatorError>>,
    ) -> Result<SupportedResponse, FacilitatorError> {
        let mut merged = SupportedResponse::default();
        let mut first_error = None;
        let mut answered = false;
        for (index, answer) in answers.into_iter().enumerate() {
            let answer = match answer {
                Ok(answer) => answer,
                Err(error) => {
                    tracing::warn!(facilitator = index, %error, "a routed facilitator's /supported failed");
                    first_error.get_or_insert(error);
                    continue;
                }
            };
            answered = true;
            merged.absorb(answer, |kind| self.owns(index, kind));
        }
        match first_error {
            Some(error) if !answered => Err(error),
            _ => Ok(merged),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_patterns() {
        assert!(patterns_overlap("eip155:*", "eip155:1"));
        assert!(patterns_overlap("eip155:1", "eip155:*"));
        assert!(patterns_overlap("*", "solana:x"));
        assert!(patterns_overlap("eip155:*", "*"));
        assert!(!patterns_overlap("eip155:*", "solana:*"));
        assert!(!patterns_overlap("eip155:1", "eip155:10"));
    }

    #[test]
    fn networks_match_under_either_name() {
        assert!(network_matches("eip155:*", "base-sepolia"));
        assert!(network_matches("eip155:84532", "base-sepolia"));
        assert!(network_matches("base-sepolia", "eip155:84532"));
        assert!(!network_matches("solana:*", "base-sepolia"));
        assert!(!network_matches("eip155:*", "unknown-net"));
    }
}
