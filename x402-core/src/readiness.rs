//! Readiness: can this engine take payments now?
//!
//! Payments fail when the facilitator is down, when its `/supported` no
//! longer lists a (network, scheme) a route offers, or when the in-process
//! facilitator's settlement wallet runs out of gas. [`Engine::readiness`](crate::Engine::readiness)
//! looks before buyers find out:
//!
//! - every (network, scheme) the route table offers (per-call offers of
//!   statically priced routes and every session offer, of the table's routes
//!   and the [bound](crate::Engine::bind) ones) is looked up in the facilitator's
//!   `/supported`, asked now, past any cache, with a short deadline
//!   ([`Facilitator::health`](crate::Facilitator::health)). A kind counts as
//!   listed when the facilitator lists it for x402 version 2 (the version the
//!   engine's offers are written in), directly or through a wildcard such as
//!   `eip155:*`. Routes priced per request have no offers to look up before
//!   a request comes; they are named in
//!   [`unchecked_routes`](Readiness::unchecked_routes).
//! - when the facilitator last answered a payment call (`/verify`,
//!   `/settle`, or the engine's own `/supported`), and the kind of error of
//!   the last one if it failed. The probe itself is not counted, so a
//!   `/verify` that keeps failing stays visible while `/supported` answers.
//! - the gas wallets the facilitator reports (the in-process
//!   `LocalFacilitator` on a chain ledger): balance in wei, and whether it is
//!   under the facilitator's threshold.
//!
//! The engine is [ready](Readiness::ready) when the facilitator answered the
//! probe, lists every offered kind, and no wallet is low on gas or
//! unreadable. The last payment call's error is reported but does not make
//! the engine unready: an instance a load balancer drains gets no payments,
//! and its readiness must be able to come back without them.
//!
//! A probe never stores a failure in a cache that payments read: the
//! engine's resolved offers, and [`HttpFacilitator`](crate::facilitator::HttpFacilitator)'s
//! `/supported` cache, are left as they are.
//!
//! Over HTTP, the discovery endpoints serve it at `GET /.well-known/x402/health`
//! (200 when ready, 503 when not; see
//! [`DiscoveryEndpoints::health`](crate::discovery::DiscoveryEndpoints::health)).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use x402_core::{testing::{StandIn, PAY_TO}, Engine, Offer, Route};
//!
//! // The facilitator lists `exact` and `upto` on Base Sepolia only.
//! let engine = Engine::builder(StandIn::new().supporting("eip155:84532"))
//!     .route(Route::get("/report").offer(Offer::exact("eip155:84532", "$0.01", PAY_TO)))
//!     .route(Route::get("/metered").offer(Offer::upto("eip155:8453", "$0.10", PAY_TO)))
//!     .build()?;
//!
//! let readiness = engine.readiness().await;
//! assert!(!readiness.ready);
//! assert!(readiness.facilitator.reachable);
//! let unlisted: Vec<_> = readiness
//!     .offers
//!     .iter()
//!     .filter(|o| !o.listed)
//!     .map(|o| (o.network.as_str(), o.scheme.as_str()))
//!     .collect();
//! assert_eq!(unlisted, [("eip155:8453", "upto")]);
//!
//! let json = serde_json::to_value(&readiness)?;
//! assert_eq!(json["ready"], false);
//! assert_eq!(json["offers"][1]["routes"][0], "GET /report");
//! assert_eq!(json["facilitator"]["lastAnsweredAt"], serde_json::Value::Null);
//! # Ok(()) }
//! ```
//!
//! # The JSON
//!
//! ```text
//! {
//!   "ready": false,
//!   "facilitator": {
//!     "reachable": true,            // the probe's /supported answered in time
//!     "probeError": null,           // else its kind: "timeout", "transport", "status", "malformed", ...
//!     "lastAnsweredAt": 1740672100, // unix seconds of the last answered payment call; null: none yet
//!     "lastError": null             // the kind of error of the last payment call, if it failed
//!   },
//!   "offers": [                     // sorted by network, then scheme
//!     {"network": "eip155:8453", "scheme": "upto", "listed": false, "routes": ["GET /metered"]},
//!     {"network": "eip155:84532", "scheme": "exact", "listed": true, "routes": ["GET /report"]}
//!   ],
//!   "uncheckedRoutes": ["POST /quote"], // priced per request: no offers to look up
//!   "wallets": [
//!     {"network": "eip155:84532", "address": "0x…", "balanceWei": "52000000000000",
//!      "lowGasThresholdWei": "1000000000000000", "lowGas": true}  // balanceWei null: not readable
//!   ]
//! }
//! ```
//!
//! Error kinds and counts only: no facilitator text, URL or credential
//! appears in it.

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicU64, AtomicU8, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use alloy_primitives::U256;
use serde::{Serialize, Serializer};

use crate::{
    facilitator::{FacilitatorError, FacilitatorErrorKind, GasWallet},
    proto::{SupportedResponse, X402Version},
    route::{Offer, Pricing, Route},
};

/// The deadline of [`Engine::readiness`](crate::Engine::readiness)'s probe.
pub const DEFAULT_PROBE_DEADLINE: Duration = Duration::from_secs(2);

/// Whether the engine can take payments now, and why not: see the
/// [module docs](self) for what is checked and the JSON it serialises to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Readiness {
    /// The facilitator answered the probe, lists every offered kind, and no
    /// gas wallet is low or unreadable.
    pub ready: bool,
    /// What the facilitator answered.
    pub facilitator: FacilitatorReadiness,
    /// Every (network, scheme) the routes offer, sorted by network, then
    /// scheme.
    pub offers: Vec<OfferReadiness>,
    /// The routes priced per request (`METHOD pattern`), whose per-call
    /// offers cannot be looked up before a request (their session offers
    /// are in [`offers`](Self::offers)).
    pub unchecked_routes: Vec<String>,
    /// The wallets that pay settlement gas, as the facilitator reports them.
    pub wallets: Vec<WalletReadiness>,
}

/// The facilitator's side of [`Readiness`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct FacilitatorReadiness {
    /// Whether the probe's `/supported` answered within the deadline.
    pub reachable: bool,
    /// Why the probe got no answer.
    pub probe_error: Option<FacilitatorErrorKind>,
    /// When a payment call (`/verify`, `/settle`, the engine's
    /// `/supported`) last got an answer, in unix seconds; `None` before
    /// the first.
    pub last_answered_at: Option<u64>,
    /// The kind of error of the last payment call, when it failed.
    pub last_error: Option<FacilitatorErrorKind>,
}

/// One (network, scheme) the routes offer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct OfferReadiness {
    /// The network, as written in the offer (CAIP-2).
    pub network: String,
    /// The scheme.
    pub scheme: String,
    /// Whether the facilitator's `/supported` lists it (x402 version 2). Never
    /// `true` when the probe got no answer.
    pub listed: bool,
    /// The routes that offer it (`METHOD pattern`; `*` for any method).
    pub routes: Vec<String>,
}

/// A wallet that pays settlement gas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WalletReadiness {
    /// The network, as a CAIP-2 id.
    pub network: String,
    /// The wallet's address.
    pub address: String,
    /// Its native balance in wei (a decimal string in JSON); `None` when it
    /// could not be read.
    #[serde(serialize_with = "decimal_or_null")]
    pub balance_wei: Option<U256>,
    /// Below this balance it is low on gas (a decimal string in JSON).
    #[serde(serialize_with = "decimal")]
    pub low_gas_threshold_wei: U256,
    /// Whether the balance is known and under the threshold.
    pub low_gas: bool,
}

impl WalletReadiness {
    fn from_wallet(wallet: GasWallet) -> Self {
        Self {
            low_gas: wallet.low_gas(),
            network: wallet.network,
            address: wallet.address,
            balance_wei: wallet.balance,
            low_gas_threshold_wei: wallet.low_gas_threshold,
        }
    }

    /// Whether this wallet lets the engine be ready: its balance is known
    /// and not low.
    fn fine(&self) -> bool {
        self.balance_wei.is_some() && !self.low_gas
    }
}

fn decimal<S: Serializer>(value: &U256, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

fn decimal_or_null<S: Serializer>(value: &Option<U256>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => serializer.collect_str(value),
        None => serializer.serialize_none(),
    }
}

/// What the engine saw of the facilitator on payments' paths, and its last
/// probe (shared by every caller of the cached probe).
///
/// Every paid request records its facilitator calls here, from every worker
/// thread: a record reads two atomics and writes only what changed (the
/// second of the last answer, at most once a second, and the last error),
/// so that requests do not pass one cache line (or a lock) between cores.
#[derive(Debug, Default)]
pub(crate) struct Observed {
    /// Unix seconds of the last answer; 0 for none.
    answered_at: AtomicU64,
    /// The last call's error ([`error_code`]); 0 once a call answered.
    error: AtomicU8,
    /// The last probe, for [`Engine::readiness_at_most_every`](crate::Engine).
    pub(crate) probe: tokio::sync::Mutex<Option<(Instant, Arc<Readiness>)>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct LastCall {
    answered_at: Option<u64>,
    error: Option<FacilitatorErrorKind>,
}

/// Every error kind, read back from its code by [`error_code`].
const ERROR_KINDS: [FacilitatorErrorKind; 7] = [
    FacilitatorErrorKind::Transport,
    FacilitatorErrorKind::Timeout,
    FacilitatorErrorKind::Status,
    FacilitatorErrorKind::Malformed,
    FacilitatorErrorKind::Unrouted,
    FacilitatorErrorKind::SettlementPending,
    FacilitatorErrorKind::Other,
];

/// An error kind as a non-zero byte.
fn error_code(kind: FacilitatorErrorKind) -> u8 {
    match kind {
        FacilitatorErrorKind::Transport => 1,
        FacilitatorErrorKind::Timeout => 2,
        FacilitatorErrorKind::Status => 3,
        FacilitatorErrorKind::Malformed => 4,
        FacilitatorErrorKind::Unrouted => 5,
        FacilitatorErrorKind::SettlementPending => 6,
        FacilitatorErrorKind::Other => 7,
    }
}

impl Observed {
    /// Records the outcome of a facilitator call made for payments.
    pub(crate) fn record<T>(&self, answer: &Result<T, FacilitatorError>) {
        match answer {
            Ok(_) => {
                let now = crate::unix::now();
                if self.answered_at.load(Ordering::Relaxed) < now {
                    self.answered_at.fetch_max(now, Ordering::Relaxed);
                }
                if self.error.load(Ordering::Relaxed) != 0 {
                    self.error.store(0, Ordering::Relaxed);
                }
            }
            Err(error) => self
                .error
                .store(error_code(error.kind()), Ordering::Relaxed),
        }
    }

    fn last(&self) -> LastCall {
        let answered_at = self.answered_at.load(Ordering::Relaxed);
        let error = self.error.load(Ordering::Relaxed);
        LastCall {
            answered_at: (answered_at != 0).then_some(answered_at),
            error: ERROR_KINDS
                .into_iter()
                .find(|kind| error_code(*kind) == error),
        }
    }
}

/// `METHOD pattern` of a route (`*` for any method).
fn label(route: &Route) -> String {
    let method = route.method().map_or("*", http::Method::as_str);
    format!("{method} {}", route.pattern())
}

/// The report of a probe: the facilitator's answer (`/supported` and its
/// wallets), what payments' calls saw (`observed`), and the protected
/// `routes` whose offers are looked up.
pub(crate) fn report(
    supported: &Result<SupportedResponse, FacilitatorError>,
    wallets: Vec<GasWallet>,
    observed: &Observed,
    routes: &[Route],
) -> Readiness {
    if let Err(error) = supported {
        tracing::warn!(%error, "x402: readiness probe: the facilitator's /supported failed");
    }
    let last = observed.last();
    let facilitator = FacilitatorReadiness {
        reachable: supported.is_ok(),
        probe_error: supported.as_ref().err().map(FacilitatorError::kind),
        last_answered_at: last.answered_at,
        last_error: last.error,
    };
    let (offers, unchecked_routes) = offered(routes, supported.as_ref().ok());
    let wallets: Vec<WalletReadiness> = wallets
        .into_iter()
        .map(WalletReadiness::from_wallet)
        .collect();
    let ready = facilitator.reachable
        && offers.iter().all(|o| o.listed)
        && wallets.iter().all(WalletReadiness::fine);
    Readiness {
        ready,
        facilitator,
        offers,
        unchecked_routes,
        wallets,
    }
}

/// The offered (network, scheme) pairs of `routes`, each looked up in
/// `supported` (nothing is listed without an answer), and the routes priced
/// per request.
fn offered(
    routes: &[Route],
    supported: Option<&SupportedResponse>,
) -> (Vec<OfferReadiness>, Vec<String>) {
    let mut pairs: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    let mut unchecked = Vec::new();
    for route in routes {
        let name = label(route);
        let per_call: &[Offer] = match &route.pricing {
            Pricing::Static(offers) => offers,
            Pricing::Dynamic(_) => {
                unchecked.push(name.clone());
                &[]
            }
        };
        let sessions = route.sessions.iter().flat_map(|s| &s.offers);
        for offer in per_call.iter().chain(sessions) {
            let names = pairs
                .entry((offer.network.as_str(), offer.scheme.as_str()))
                .or_default();
            if !names.contains(&name) {
                names.push(name.clone());
            }
        }
    }
    let offers = pairs
        .into_iter()
        .map(|((network, scheme), routes)| OfferReadiness {
            listed: supported.is_some_and(|s| s.kind(X402Version::V2, scheme, network).is_some()),
            network: network.to_owned(),
            scheme: scheme.to_owned(),
            routes,
        })
        .collect();
    (offers, unchecked)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// What payments' calls saw reads back as recorded: the last answer's
    /// second, and the last error until a call answers again, for every
    /// kind of error.
    #[test]
    fn observed_calls_read_back_as_recorded() {
        let observed = Observed::default();
        assert!(observed.last().answered_at.is_none());
        assert!(observed.last().error.is_none());

        let before = crate::unix::now();
        observed.record(&Ok::<(), FacilitatorError>(()));
        let answered = observed.last().answered_at.unwrap();
        assert!(answered >= before && answered <= crate::unix::now());

        // Every kind reads back as itself: its code is its own, and never
        // the "no error" 0.
        for kind in ERROR_KINDS {
            assert_ne!(error_code(kind), 0);
            observed.error.store(error_code(kind), Ordering::Relaxed);
            assert_eq!(observed.last().error, Some(kind));
        }
        for error in [
            FacilitatorError::Timeout,
            FacilitatorError::Malformed("not json".into()),
        ] {
            let kind = error.kind();
            observed.record(&Err::<(), _>(error));
            let last = observed.last();
            assert_eq!(last.error, Some(kind));
            assert_eq!(last.answered_at, Some(answered));
        }
        observed.record(&Ok::<(), FacilitatorError>(()));
        assert!(observed.last().error.is_none());
    }

    #[test]
    fn serialises_in_camel_case_with_decimal_wei() {
        let readiness = Readiness {
            ready: false,
            facilitator: FacilitatorReadiness {
                reachable: false,
                probe_error: Some(FacilitatorErrorKind::Timeout),
                last_answered_at: Some(1_740_672_100),
                last_error: Some(FacilitatorErrorKind::Status),
            },
            offers: Vec::new(),
            unchecked_routes: vec!["POST /quote".into()],
            wallets: vec![WalletReadiness::from_wallet(GasWallet::new(
                "eip155:84532",
                "0xabc",
                Some(U256::from(52_000_000_000_000u64)),
                U256::from(1_000_000_000_000_000u64),
            ))],
        };
        assert_eq!(
            serde_json::to_value(&readiness).unwrap(),
            serde_json::json!({
                "ready": false,
                "facilitator": {
                    "reachable": false,
                    "probeError": "timeout",
                    "lastAnsweredAt": 1_740_672_100,
                    "lastError": "status",
                },
                "offers": [],
                "uncheckedRoutes": ["POST /quote"],
                "wallets": [{
                    "network": "eip155:84532",
                    "address": "0xabc",
                    "balanceWei": "52000000000000",
                    "lowGasThresholdWei": "1000000000000000",
                    "lowGas": true,
                }],
            })
        );
    }

    #[test]
    fn an_unreadable_balance_is_not_fine_nor_low() {
        let wallet = WalletReadiness::from_wallet(GasWallet::new("n", "a", None, U256::from(1u8)));
        assert!(!wallet.low_gas);
        assert!(!wallet.fine());
        assert_eq!(
            serde_json::to_value(&wallet).unwrap()["balanceWei"],
            serde_json::Value::Null
        );
    }

    #[test]
    fn records_answers_and_the_last_error() {
        let observed = Observed::default();
        assert!(observed.last().answered_at.is_none());
        observed.record::<()>(&Err(FacilitatorError::Timeout));
        assert_eq!(observed.last().error, Some(FacilitatorErrorKind::Timeout));
        assert!(observed.last().answered_at.is_none());
        observed.record(&Ok(()));
        let last = observed.last();
        assert!(last.answered_at.is_some() && last.error.is_none());
    }
}
