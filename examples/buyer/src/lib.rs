//! A careful x402 paying client: the buyer side of HTTP 402 payments.
//!
//! [`Buyer`] requests a URL; when the server answers `402 Payment Required`
//! it reads the challenge (the v2 `PAYMENT-REQUIRED` header first, else a v1
//! JSON body), picks the first `exact` EVM EIP-3009 offer that passes every
//! limit it was given, signs a `TransferWithAuthorization` and retries the
//! request with `PAYMENT-SIGNATURE` (v2) or `X-PAYMENT` (v1).
//!
//! It is built to be safe by default:
//!
//! * **Allow-lists start empty, and an empty allow-list allows nothing.** A
//!   buyer that was not told which networks, assets, recipients and origins
//!   it may pay refuses every challenge. The `dangerous_allow_any_*` setters
//!   lift one list at a time.
//! * A per-call cap ([`BuyerBuilder::max_per_call`]) is required, and an
//!   optional total budget ([`BuyerBuilder::max_total`]) is reserved *before*
//!   signing, so concurrent calls cannot overrun it; a reservation is released
//!   when the seller did not charge.
//! * Nothing is signed unless an offer passed every check: a refusal never
//!   moves [`Buyer::signatures_made`].
//! * Redirects are never followed, neither before nor after paying.
//! * The private key is never logged: `Debug` shows only the address.
//!
//! # Prepaid sessions
//!
//! A seller may also sell sessions (this workspace's own extension, in the v2
//! challenge's `extensions["session"]`): one payment buys `calls` requests
//! within `ttlSeconds`. Told how many calls it plans
//! ([`BuyerBuilder::planned_calls`], [`Buyer::get_planned`]), the buyer
//! compares the cheapest acceptable per-call offer × the planned calls (at
//! most the session's `calls`) with each session's price, and buys the
//! session only when it is strictly cheaper. A session's payment row passes
//! exactly the checks of a per-call payment — network, asset, recipient,
//! origin, **the per-call cap (which therefore caps the session price too)**,
//! and a budget reservation — so a session never buys what a single call
//! could not.
//!
//! Tokens bought are held in memory per (origin, scope), never logged (no
//! `Debug` output, including [`Purchase::headers`], shows them). Later calls
//! to that origin send `X-PAYMENT-SESSION` first: no signature, no budget. A
//! 402 answering a token with a `session_*` error drops the token (except
//! `session_out_of_scope`: the token is still good for its own scope) and the
//! call falls back to buying, which may buy a new session. The remaining
//! counts held are advisory: the seller is the authority, so a token is sent
//! until the seller refuses it.
//!
//! ```no_run
//! use x402_buyer::{Buyer, PrivateKeySigner};
//! use x402_core::money::AtomicAmount;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let signer: PrivateKeySigner = std::env::var("BUYER_PRIVATE_KEY")?.parse()?;
//! let buyer = Buyer::builder(signer)
//!     .allow_network("eip155:84532")
//!     .allow_asset("0x036CbD53842c5426634e7929541eC2318f3dCF7e".parse()?)
//!     .allow_recipient("0x209693Bc6afc0C5328bA36FaF03C514EF312287C".parse()?)
//!     .allow_origin("http://127.0.0.1:4021")
//!     .max_per_call(AtomicAmount::from(10_000u64)) // 0.01 USDC
//!     .max_total(AtomicAmount::from(100_000u64))
//!     .build()?;
//! let purchase = buyer.get("http://127.0.0.1:4021/weather").await?;
//! println!("{} paid {:?}", purchase.status, purchase.paid);
//! # Ok(()) }
//! ```

use std::{
    fmt,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use alloy_primitives::{B256, U256};
use alloy_signer::Signer as _;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use reqwest::Url;
use session::{OfferDecl, Ticket};
use x402_core::{
    codec,
    evm::{eip3009_domain, Eip3009Authorization, ExactEvmPayload},
    network,
    proto::{v1, v2, JsonObject, Version},
    session::X_PAYMENT_SESSION,
};

mod session;

pub use session::SessionUse;

pub use alloy_primitives::Address;
pub use alloy_signer_local::PrivateKeySigner;
pub use x402_core::{
    money::AtomicAmount,
    proto::{PaymentPayload, SettleResponse},
};

/// The most bytes read from a 402 body when looking for a v1 challenge.
pub const MAX_CHALLENGE_BODY_BYTES: usize = 256 * 1024;
/// The most bytes accepted in a `PAYMENT-REQUIRED` or receipt header.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// The longest validity window this buyer signs, in seconds, whatever the
/// seller's `maxTimeoutSeconds` says (a signed authorization can be settled by
/// anyone who holds it until `validBefore`).
pub const MAX_VALIDITY_SECONDS: u64 = 3600;
/// How far back `validAfter` is set, in seconds (clock skew allowance; the
/// TypeScript client's default).
pub const VALID_AFTER_SKEW_SECONDS: u64 = 600;
/// The request timeout of the default HTTP client.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
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
    inner: Arc<Inner>,
}

struct Inner {
    signer: PrivateKeySigner,
    client: reqwest::Client,
    limits: Limits,
    prefer_v1: bool,
    planned_calls: u64,
    ledger: Mutex<Ledger>,
    signatures: AtomicU64,
    sessions: session::Wallet,
}

#[derive(Debug)]
struct Limits {
    networks: Option<Vec<String>>,
    assets: Option<Vec<Address>>,
    recipients: Option<Vec<Address>>,
    origins: Option<Vec<String>>,
    max_per_call: AtomicAmount,
    max_total: Option<AtomicAmount>,
}

#[derive(Debug, Default)]
struct Ledger {
    spent: U256,
    reserved: U256,
}

impl fmt::Debug for Buyer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The signer is shown by address only: never the key.
        f.debug_struct("Buyer")
            .field("address", &self.address())
            .field("limits", &self.inner.limits)
            .field("prefer_v1", &self.inner.prefer_v1)
            .field("planned_calls", &self.inner.planned_calls)
            .field("spent", &self.spent())
            .field("signatures_made", &self.signatures_made())
            // Scopes and counts only: never a session token.
            .field("sessions", &self.inner.sessions)
            .finish_non_exhaustive()
    }
}

/// Configures a [`Buyer`]. Every setter consumes and returns the builder.
///
/// Allow-lists start empty and **an empty allow-list allows nothing**: a
/// buyer must be told at least one network, asset, recipient and origin
/// before it pays anything. [`max_per_call`](Self::max_per_call) is required.
///
/// ```
/// use x402_buyer::{Buyer, PrivateKeySigner};
/// use x402_core::money::AtomicAmount;
///
/// let buyer = Buyer::builder(PrivateKeySigner::random())
///     .allow_network("eip155:84532")
///     .allow_asset("0x036CbD53842c5426634e7929541eC2318f3dCF7e".parse()?)
///     .allow_recipient("0x209693Bc6afc0C5328bA36FaF03C514EF312287C".parse()?)
///     .allow_origin("http://127.0.0.1:4021")
///     .max_per_call(AtomicAmount::from(10_000u64))
///     .build()?;
/// assert_eq!(buyer.signatures_made(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub struct BuyerBuilder {
    signer: PrivateKeySigner,
    networks: Vec<String>,
    any_network: bool,
    assets: Vec<Address>,
    any_asset: bool,
    recipients: Vec<Address>,
    any_recipient: bool,
    origins: Vec<String>,
    any_origin: bool,
    max_per_call: Option<AtomicAmount>,
    max_total: Option<AtomicAmount>,
    prefer_v1: bool,
    planned_calls: u64,
    client: Option<reqwest::Client>,
}

impl fmt::Debug for BuyerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuyerBuilder")
            .field("address", &self.signer.address())
            .field("networks", &self.networks)
            .field("any_network", &self.any_network)
            .field("assets", &self.assets)
            .field("any_asset", &self.any_asset)
            .field("recipients", &self.recipients)
            .field("any_recipient", &self.any_recipient)
            .field("origins", &self.origins)
            .field("any_origin", &self.any_origin)
            .field("max_per_call", &self.max_per_call)
            .field("max_total", &self.max_total)
            .field("prefer_v1", &self.prefer_v1)
            .field("planned_calls", &self.planned_calls)
            .finish_non_exhaustive()
    }
}

impl BuyerBuilder {
    /// Allows paying on a network: a CAIP-2 id (`eip155:84532`) or a v1 name
    /// (`base-sepolia`), which [`build`](Self::build) maps to its CAIP-2 id.
    /// v1 challenges are matched through the same mapping.
    pub fn allow_network(mut self, network: impl Into<String>) -> Self {
        self.networks.push(network.into());
        self
    }

    /// Allows paying in a token (the requirement's `asset`); compared
    /// case-insensitively.
    pub fn allow_asset(mut self, asset: Address) -> Self {
        self.assets.push(asset);
        self
    }

    /// Allows paying a recipient (the requirement's `payTo`); compared
    /// case-insensitively.
    pub fn allow_recipient(mut self, recipient: Address) -> Self {
        self.recipients.push(recipient);
        self
    }

    /// Allows paying for URLs of an origin, `scheme://host[:port]`
    /// (`http://127.0.0.1:4021`). Default ports may be written or left out.
    /// Only the origin of the URL that was requested counts, not the
    /// `resource` the seller describes.
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.origins.push(origin.into());
        self
    }

    /// The most one call may pay, in the asset's atomic units. Required.
    pub fn max_per_call(mut self, cap: AtomicAmount) -> Self {
        self.max_per_call = Some(cap);
        self
    }

    /// The most this buyer (and its clones) may pay in total. Each payment is
    /// reserved against it before signing and released when the seller did
    /// not charge, so concurrent calls cannot overrun it. Unset: no total
    /// limit beyond [`max_per_call`](Self::max_per_call) per call.
    ///
    /// The budget counts atomic units whatever the asset, so it is meaningful
    /// when the allowed assets share a unit (e.g. USDC on several chains).
    pub fn max_total(mut self, budget: AtomicAmount) -> Self {
        self.max_total = Some(budget);
        self
    }

    /// Pays with protocol v1 (`X-PAYMENT`) when the 402 offers both a v2
    /// header and a valid v1 body. Default `false`: v2 whenever a
    /// `PAYMENT-REQUIRED` header is present, v1 only when only a v1 body is
    /// offered.
    pub fn prefer_v1(mut self, prefer: bool) -> Self {
        self.prefer_v1 = prefer;
        self
    }

    /// How many calls [`Buyer::get`] and [`Buyer::request`] plan to make to a
    /// route, for deciding whether a prepaid session is cheaper than paying
    /// per call (see the [crate docs](crate#prepaid-sessions)). Default 1
    /// (a session is bought only if it costs less than one call); 0 counts
    /// as 1. [`Buyer::get_planned`] overrides it per call.
    pub fn planned_calls(mut self, calls: u64) -> Self {
        self.planned_calls = calls.max(1);
        self
    }

    /// The HTTP client to use. It **must not follow redirects**
    /// (`reqwest::redirect::Policy::none()`): a buyer refuses a response that
    /// came from another URL than the one requested, but by then a following
    /// client has already requested the redirect target. Default: a client
    /// with `Policy::none()` and a 30 s timeout.
    pub fn client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// **Dangerous:** pays on any network the buyer can sign for.
    pub fn dangerous_allow_any_network(mut self) -> Self {
        self.any_network = true;
        self
    }

    /// **Dangerous:** pays in any token a seller names. A seller could name a
    /// token worth far more per atomic unit than the one you meant.
    pub fn dangerous_allow_any_asset(mut self) -> Self {
        self.any_asset = true;
        self
    }

    /// **Dangerous:** pays any recipient a seller names.
    pub fn dangerous_allow_any_recipient(mut self) -> Self {
        self.any_recipient = true;
        self
    }

    /// **Dangerous:** pays for URLs of any origin.
    pub fn dangerous_allow_any_origin(mut self) -> Self {
        self.any_origin = true;
        self
    }

    /// Checks the configuration and builds the buyer.
    ///
    /// Fails with [`BuyerError::Config`] when `max_per_call` is unset, a
    /// network is neither CAIP-2 nor a known v1 name, or an origin is not an
    /// `http(s)://host[:port]` origin; with [`BuyerError::Http`] when the
    /// default client cannot be built.
    pub fn build(self) -> Result<Buyer, BuyerError> {
        let max_per_call = self
            .max_per_call
            .ok_or_else(|| BuyerError::Config("max_per_call is required".into()))?;
        let networks = self
            .networks
            .iter()
            .map(|n| normalize_network(n))
            .collect::<Result<Vec<_>, _>>()?;
        let origins = self
            .origins
            .iter()
            .map(|o| normalize_origin(o))
            .collect::<Result<Vec<_>, _>>()?;
        let client = match self.client {
            Some(client) => client,
            None => reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(DEFAULT_TIMEOUT)
                .build()?,
        };
        Ok(Buyer {
            inner: Arc::new(Inner {
                signer: self.signer,
                client,
                limits: Limits {
                    networks: (!self.any_network).then_some(networks),
                    assets: (!self.any_asset).then_some(self.assets),
                    recipients: (!self.any_recipient).then_some(self.recipients),
                    origins: (!self.any_origin).then_some(origins),
                    max_per_call,
                    max_total: self.max_total,
                },
                prefer_v1: self.prefer_v1,
                planned_calls: self.planned_calls,
                ledger: Mutex::new(Ledger::default()),
                signatures: AtomicU64::new(0),
                sessions: session::Wallet::default(),
            }),
        })
    }
}

fn normalize_network(network: &str) -> Result<String, BuyerError> {
    if network.contains(':') {
        Ok(network.to_owned())
    } else {
        network::caip2(network)
            .map(str::to_owned)
            .ok_or_else(|| BuyerError::Config(format!("unknown network name `{network}`")))
    }
}

fn normalize_origin(origin: &str) -> Result<String, BuyerError> {
    let bad = || BuyerError::Config(format!("`{origin}` is not an http(s)://host[:port] origin"));
    let url = Url::parse(origin).map_err(|_| bad())?;
    let plain = matches!(url.scheme(), "http" | "https")
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none();
    if !plain {
        return Err(bad());
    }
    Ok(url_origin(&url))
}

/// `scheme://host[:port]`, default ports left out.
fn url_origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}

/// The 402 challenge a purchase answered.
// One per purchase; boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Challenge {
    /// A v1 challenge, from the JSON body.
    V1(v1::PaymentRequirementsResponse),
    /// A v2 challenge, from the `PAYMENT-REQUIRED` header.
    V2(v2::PaymentRequired),
}

/// The outcome of [`Buyer::get`] or [`Buyer::request`].
///
/// A free resource has `challenge: None`. A paid one has the challenge, the
/// payment that was sent, and — when the seller settled — the receipt and
/// the amount: `paid` is `Some` only for a 2xx response with a successful
/// receipt. Check `status` and `paid` before trusting `body`.
#[derive(Debug, Clone)]
pub struct Purchase {
    /// The final HTTP status.
    pub status: u16,
    /// The final response headers.
    pub headers: HeaderMap,
    /// The final response body.
    pub body: bytes::Bytes,
    /// The 402 challenge, if there was one (a call redeemed from a session
    /// has none).
    pub challenge: Option<Challenge>,
    /// The payment sent on the retry, if one was sent.
    pub payment: Option<PaymentPayload>,
    /// The decoded `PAYMENT-RESPONSE` (or `X-PAYMENT-RESPONSE`) receipt.
    pub receipt: Option<SettleResponse>,
    /// What was charged to the budget: the signed amount, when the response
    /// was a success with a successful receipt.
    pub paid: Option<AtomicAmount>,
    /// How the call used a prepaid session: `Opened` when this payment
    /// bought one, `Redeemed` when a held session paid for it.
    pub session: Option<SessionUse>,
}

/// Why a buyer declined to pay (or to go on). Nothing was signed for any
/// refusal except a [`Refusal::Redirect`] of the paid request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// No offer passed every check; one reason per offer.
    #[error("no acceptable offer: {}", reasons.join("; "))]
    NoAcceptableOffer {
        /// Why each offer was declined, in challenge order.
        reasons: Vec<String>,
    },
    /// The offer is not an `exact` EVM EIP-3009 payment with an EIP-712
    /// domain (`extra.name` and `extra.version`), which is all this buyer
    /// signs.
    #[error("unsupported offer: {0}")]
    Unsupported(String),
    /// The offer costs more than the per-call cap.
    #[error("offer of {amount} exceeds the per-call cap of {cap}")]
    OverPerCallCap {
        /// The offer's amount.
        amount: AtomicAmount,
        /// The per-call cap.
        cap: AtomicAmount,
    },
    /// The offer costs more than what is left of the total budget (counting
    /// payments in flight).
    #[error("offer of {amount} exceeds the remaining budget of {remaining}")]
    OverBudget {
        /// The offer's amount.
        amount: AtomicAmount,
        /// What was left of the budget.
        remaining: AtomicAmount,
    },
    /// The offer's network is not allowed.
    #[error("network `{0}` is not allowed")]
    NetworkNotAllowed(String),
    /// The offer's asset is not allowed.
    #[error("asset `{0}` is not allowed")]
    AssetNotAllowed(String),
    /// The offer's recipient is not allowed.
    #[error("recipient `{0}` is not allowed")]
    RecipientNotAllowed(String),
    /// The requested URL's origin is not allowed.
    #[error("origin `{0}` is not allowed")]
    OriginNotAllowed(String),
    /// The server answered with a redirect, which is never followed.
    #[error("refusing to follow a redirect to `{location}`")]
    Redirect {
        /// The `Location` header (or the URL a custom client was redirected
        /// to).
        location: String,
    },
}

/// What can go wrong in a purchase.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuyerError {
    /// The buyer declined to pay.
    #[error("refused: {0}")]
    Refused(#[from] Refusal),
    /// The HTTP request failed.
    #[error("HTTP error: {0}")]
    Http(#[from] reqwest::Error),
    /// The server spoke x402 wrongly (an unreadable challenge, a 402 without
    /// one, ...).
    #[error("x402 protocol error: {0}")]
    Protocol(String),
    /// The builder was misconfigured.
    #[error("configuration error: {0}")]
    Config(String),
    /// The request's body cannot be cloned (a stream), so it cannot be
    /// retried with a payment.
    #[error("the request body cannot be cloned for the paid retry")]
    BodyNotCloneable,
    /// Signing failed.
    #[error("signing failed: {0}")]
    Signing(#[from] alloy_signer::Error),
}

/// An offer that passed the static checks.
struct Offer {
    index: usize,
    chain_id: u64,
    asset: Address,
    pay_to: Address,
    amount: AtomicAmount,
    max_timeout_seconds: u64,
    name: String,
    version: String,
}

/// A row of either version, borrowed.
struct Row<'a> {
    scheme: &'a str,
    network: &'a str,
    amount: AtomicAmount,
    asset: &'a str,
    pay_to: &'a str,
    max_timeout_seconds: u64,
    extra: Option<&'a JsonObject>,
}

impl Challenge {
    /// The challenge's `error`: why the request was not served
    /// (`payment_required`, `session_exhausted`, ...), if it says.
    pub fn error(&self) -> Option<&str> {
        match self {
            Self::V1(c) => (!c.error.is_empty()).then_some(c.error.as_str()),
            Self::V2(c) => c.error.as_deref(),
        }
    }

    /// The session offers of a v2 challenge.
    fn session_offers(&self) -> Vec<OfferDecl> {
        match self {
            Self::V1(_) => Vec::new(),
            Self::V2(c) => session::offers(c),
        }
    }

    fn rows(&self) -> Vec<Row<'_>> {
        match self {
            Self::V1(c) => c
                .accepts
                .iter()
                .map(|r| Row {
                    scheme: &r.scheme,
                    network: &r.network,
                    amount: r.max_amount_required,
                    asset: &r.asset,
                    pay_to: &r.pay_to,
                    max_timeout_seconds: r.max_timeout_seconds,
                    extra: r.extra.as_ref(),
                })
                .collect(),
            Self::V2(c) => c.accepts.iter().map(Row::v2).collect(),
        }
    }
}

impl<'a> Row<'a> {
    fn v2(r: &'a v2::PaymentRequirements) -> Self {
        Row {
            scheme: &r.scheme,
            network: &r.network,
            amount: r.amount,
            asset: &r.asset,
            pay_to: &r.pay_to,
            max_timeout_seconds: r.max_timeout_seconds,
            extra: Some(&r.extra),
        }
    }
}

/// Whether to pay per call or buy a session.
enum Plan {
    PerCall,
    Session(Box<SessionChoice>),
}

/// A session offer whose cheapest acceptable row passed every static check.
struct SessionChoice {
    decl: OfferDecl,
    row: v2::PaymentRequirements,
    offer: Offer,
}

/// A budget reservation. Dropped while armed (before the payment left this
/// process), it is released; once disarmed, only an explicit
/// [`release`](Self::release) or [`commit`](Self::commit) resolves it, so a
/// payment whose fate is unknown stays counted against the budget.
struct Reservation<'a> {
    buyer: &'a Inner,
    amount: U256,
    armed: bool,
}

impl Reservation<'_> {
    fn disarm(&mut self) {
        self.armed = false;
    }

    fn release(mut self) {
        self.buyer.release(self.amount);
        self.armed = false;
    }

    fn commit(mut self) {
        self.buyer.commit(self.amount);
        self.armed = false;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.buyer.release(self.amount);
        }
    }
}

impl Inner {
    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // The ledger holds two integers updated in one step each; a panic
        // elsewhere cannot leave it half-written.
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reserve(&self, amount: AtomicAmount) -> Result<Reservation<'_>, Refusal> {
        let mut ledger = self.ledger();
        if let Some(total) = self.limits.max_total {
            let committed = ledger.spent.saturating_add(ledger.reserved);
            let remaining = total.get().saturating_sub(committed);
            if amount.get() > remaining {
                return Err(Refusal::OverBudget {
                    amount,
                    remaining: AtomicAmount::new(remaining),
                });
            }
        }
        ledger.reserved = ledger.reserved.saturating_add(amount.get());
        Ok(Reservation {
            buyer: self,
            amount: amount.get(),
            armed: true,
        })
    }

    fn release(&self, amount: U256) {
        let mut ledger = self.ledger();
        ledger.reserved = ledger.reserved.saturating_sub(amount);
    }

    fn commit(&self, amount: U256) {
        let mut ledger = self.ledger();
        ledger.reserved = ledger.reserved.saturating_sub(amount);
        ledger.spent = ledger.spent.saturating_add(amount);
    }

    /// The static checks of one offer, in a fixed order.
    fn check(&self, index: usize, row: &Row<'_>) -> Result<Offer, Refusal> {
        if row.scheme != "exact" {
            return Err(Refusal::Unsupported(format!(
                "scheme `{}` is not `exact`",
                row.scheme
            )));
        }
        let caip2 = if row.network.contains(':') {
            row.network
        } else {
            network::caip2(row.network).unwrap_or(row.network)
        };
        let chain_id = network::evm_chain_id(caip2).ok_or_else(|| {
            Refusal::Unsupported(format!("network `{}` is not an EVM chain", row.network))
        })?;
        let extra_str = |key: &str| {
            row.extra
                .and_then(|e| e.get(key))
                .and_then(serde_json::Value::as_str)
        };
        match row.extra.and_then(|e| e.get("assetTransferMethod")) {
            None => {}
            Some(m) if m.as_str() == Some("eip3009") => {}
            Some(m) => {
                return Err(Refusal::Unsupported(format!(
                    "assetTransferMethod {m} is not eip3009"
                )))
            }
        }
        if let Some(allowed) = &self.limits.networks {
            if !allowed.iter().any(|n| n == caip2) {
                return Err(Refusal::NetworkNotAllowed(row.network.to_owned()));
            }
        }
        let asset: Address = row.asset.parse().map_err(|_| {
            Refusal::Unsupported(format!("asset `{}` is not an address", row.asset))
        })?;
        if let Some(allowed) = &self.limits.assets {
            if !allowed.contains(&asset) {
                return Err(Refusal::AssetNotAllowed(row.asset.to_owned()));
            }
        }
        let pay_to: Address = row.pay_to.parse().map_err(|_| {
            Refusal::Unsupported(format!("payTo `{}` is not an address", row.pay_to))
        })?;
        if let Some(allowed) = &self.limits.recipients {
            if !allowed.contains(&pay_to) {
                return Err(Refusal::RecipientNotAllowed(row.pay_to.to_owned()));
            }
        }
        let (Some(name), Some(version)) = (extra_str("name"), extra_str("version")) else {
            return Err(Refusal::Unsupported(
                "extra.name and extra.version (the EIP-712 domain) are missing".into(),
            ));
        };
        if row.amount > self.limits.max_per_call {
            return Err(Refusal::OverPerCallCap {
                amount: row.amount,
                cap: self.limits.max_per_call,
            });
        }
        Ok(Offer {
            index,
            chain_id,
            asset,
            pay_to,
            amount: row.amount,
            max_timeout_seconds: row.max_timeout_seconds,
            name: name.to_owned(),
            version: version.to_owned(),
        })
    }

    fn check_origin(&self, url: &Url) -> Result<(), Refusal> {
        if let Some(allowed) = &self.limits.origins {
            let origin = url_origin(url);
            if !allowed.contains(&origin) {
                return Err(Refusal::OriginNotAllowed(origin));
            }
        }
        Ok(())
    }

    /// Decides between paying per call and buying one of `offers` for
    /// `planned` calls. Only the static checks run here; nothing is reserved.
    ///
    /// A session is bought when its cheapest acceptable row costs strictly
    /// less than the cheapest acceptable per-call row × `min(planned,
    /// calls)` (ties pay per call); of several, the one saving most (the
    /// first on a tie). When no per-call row is acceptable, the cheapest
    /// acceptable session is the only way to pay, and is chosen.
    fn plan(
        &self,
        challenge: &Challenge,
        url: &Url,
        offers: Vec<OfferDecl>,
        planned: u64,
    ) -> Result<Plan, Refusal> {
        self.check_origin(url)?;
        if offers.is_empty() {
            return Ok(Plan::PerCall);
        }
        let per_call = challenge
            .rows()
            .iter()
            .enumerate()
            .filter_map(|(i, row)| self.check(i, row).ok())
            .map(|offer| offer.amount.get())
            .min();
        let mut best: Option<(U256, SessionChoice)> = None;
        for decl in offers {
            let cheapest = decl
                .accepts
                .iter()
                .enumerate()
                .filter_map(|(i, row)| self.check(i, &Row::v2(row)).ok().map(|o| (o, row)))
                .min_by_key(|(offer, _)| offer.amount.get());
            let Some((offer, row)) = cheapest else {
                continue;
            };
            let price = offer.amount.get();
            let score = match per_call {
                Some(unit) => {
                    let covered = unit.saturating_mul(U256::from(planned.max(1).min(decl.calls)));
                    if price >= covered {
                        continue;
                    }
                    covered - price
                }
                None => U256::MAX - price,
            };
            if best.as_ref().is_none_or(|(s, _)| score > *s) {
                let row = row.clone();
                best = Some((score, SessionChoice { decl, row, offer }));
            }
        }
        Ok(best.map_or(Plan::PerCall, |(_, c)| Plan::Session(Box::new(c))))
    }

    /// Picks the first offer that passes every check and reserves its amount.
    fn choose(
        &self,
        challenge: &Challenge,
        url: &Url,
    ) -> Result<(Offer, Reservation<'_>), Refusal> {
        self.check_origin(url)?;
        let mut refusals = Vec::new();
        for (index, row) in challenge.rows().iter().enumerate() {
            let checked = self
                .check(index, row)
                .and_then(|offer| self.reserve(offer.amount).map(|r| (offer, r)));
            match checked {
                Ok(chosen) => return Ok(chosen),
                Err(refusal) => refusals.push(refusal),
            }
        }
        Err(summarize(refusals))
    }
}

/// One refusal when every offer was declined for the same kind of reason,
/// else the list.
fn summarize(mut refusals: Vec<Refusal>) -> Refusal {
    if refusals.is_empty() {
        return Refusal::NoAcceptableOffer {
            reasons: vec!["the challenge offers no way to pay".into()],
        };
    }
    let first = std::mem::discriminant(&refusals[0]);
    if refusals.iter().all(|r| std::mem::discriminant(r) == first) {
        return refusals.swap_remove(0);
    }
    Refusal::NoAcceptableOffer {
        reasons: refusals
            .iter()
            .enumerate()
            .map(|(i, r)| format!("offer {i}: {r}"))
            .collect(),
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

/// Reads at most `limit` bytes of a body; `None` when it is longer.
async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Option<Vec<u8>>, BuyerError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// The v1 challenge in a 402 body: `Ok(None)` when the body is not a v1
/// challenge at all, `Err` when it claims `x402Version: 1` but is malformed.
fn parse_v1_body(body: &[u8]) -> Result<Option<v1::PaymentRequirementsResponse>, String> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Ok(None);
    };
    if value.get("x402Version").and_then(serde_json::Value::as_u64) != Some(1) {
        return Ok(None);
    }
    serde_json::from_value(value)
        .map(Some)
        .map_err(|e| format!("invalid v1 challenge body: {e}"))
}

fn decode_receipt(headers: &HeaderMap) -> Option<SettleResponse> {
    [codec::PAYMENT_RESPONSE, codec::X_PAYMENT_RESPONSE]
        .iter()
        .find_map(|name| headers.get(name))
        .and_then(|value| codec::decode(value.as_bytes(), MAX_HEADER_BYTES).ok())
}

fn unix_now() -> Result<u64, BuyerError> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .map_err(|_| BuyerError::Config("the system clock is before 1970".into()))
}

impl Buyer {
    /// Starts configuring a buyer that signs with `signer`.
    ///
    /// See [`BuyerBuilder`] for the limits; every allow-list starts empty,
    /// which allows nothing.
    pub fn builder(signer: PrivateKeySigner) -> BuyerBuilder {
        BuyerBuilder {
            signer,
            networks: Vec::new(),
            any_network: false,
            assets: Vec::new(),
            any_asset: false,
            recipients: Vec::new(),
            any_recipient: false,
            origins: Vec::new(),
            any_origin: false,
            max_per_call: None,
            max_total: None,
            prefer_v1: false,
            planned_calls: 1,
            client: None,
        }
    }

    /// The paying address.
    pub fn address(&self) -> Address {
        self.inner.signer.address()
    }

    /// What this buyer (and its clones) has paid: the sum of the payments
    /// answered with a 2xx and a successful receipt.
    pub fn spent(&self) -> AtomicAmount {
        AtomicAmount::new(self.inner.ledger().spent)
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
    /// [`BuyerBuilder::planned_calls`] for this call.
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
    /// [`BuyerError::Refused`] when the buyer declines (nothing is signed,
    /// except for a redirect answered to the paid request),
    /// [`BuyerError::Http`] on transport errors, [`BuyerError::Protocol`] for
    /// a 402 without a readable challenge.
    ///
    /// A transport error on the paid request keeps the amount reserved against
    /// [`max_total`](BuyerBuilder::max_total) (the seller may have settled),
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
                return Purchase::unpaid(&response, session)
                    .with_body(response)
                    .await;
            }

            let challenge = self.read_challenge(response).await?;
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

            if let Plan::Session(choice) = inner.plan(&challenge, &url, offers, planned_calls)? {
                let key = (origin.clone(), choice.decl.scope.clone());
                let lock = inner.sessions.lock(&key);
                let _buying = lock.lock().await;
                if round < MAX_ROUNDS && inner.sessions.holds(&key) {
                    // A concurrent call bought one while this one waited.
                    continue;
                }
                // Over budget, the session is skipped: one call may still fit.
                if let Ok(reservation) = inner.reserve(choice.offer.amount) {
                    let mut purchase = self
                        .pay(
                            &template,
                            &url,
                            challenge,
                            &choice.offer,
                            Some(&choice.row),
                            reservation,
                        )
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
            let (offer, reservation) = inner.choose(&challenge, &url)?;
            return self
                .pay(&template, &url, challenge, &offer, None, reservation)
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

    /// Signs `offer` (for a session, its `session_row`), sends the request
    /// again with the payment and resolves the reservation.
    async fn pay(
        &self,
        template: &reqwest::Request,
        url: &Url,
        challenge: Challenge,
        offer: &Offer,
        session_row: Option<&v2::PaymentRequirements>,
        mut reservation: Reservation<'_>,
    ) -> Result<Purchase, BuyerError> {
        let inner = &*self.inner;
        let mut retry = template.try_clone().ok_or(BuyerError::BodyNotCloneable)?;
        let (payment, header) = self.sign(&challenge, offer, session_row).await?;
        let value = codec::encode(&payment)
            .map_err(|e| BuyerError::Protocol(format!("could not encode the payment: {e}")))?;
        let value = HeaderValue::from_str(&value)
            .map_err(|e| BuyerError::Protocol(format!("invalid payment header: {e}")))?;
        retry.headers_mut().insert(header, value);

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
        let receipt = decode_receipt(response.headers());
        let settled = receipt.as_ref().is_some_and(|r| r.success);
        if let Some(refusal) = redirect_of(&response, url) {
            if settled {
                reservation.commit();
            } else {
                reservation.release();
            }
            return Err(refusal.into());
        }
        let paid = if response.status().is_success() && settled {
            reservation.commit();
            Some(offer.amount)
        } else {
            reservation.release();
            None
        };
        Purchase {
            challenge: Some(challenge),
            payment: Some(payment),
            receipt,
            paid,
            ..Purchase::unpaid(&response, None)
        }
        .with_body(response)
        .await
    }

    async fn read_challenge(&self, response: reqwest::Response) -> Result<Challenge, BuyerError> {
        let header = response
            .headers()
            .get(codec::PAYMENT_REQUIRED)
            .map(|v| v.as_bytes().to_vec());
        let body = read_limited(response, MAX_CHALLENGE_BODY_BYTES).await?;
        let v1 = match &body {
            Some(body) => parse_v1_body(body),
            None => Ok(None),
        };
        match header {
            Some(header) => {
                if self.inner.prefer_v1 {
                    if let Ok(Some(v1)) = v1 {
                        return Ok(Challenge::V1(v1));
                    }
                }
                codec::decode::<v2::PaymentRequired>(&header, MAX_HEADER_BYTES)
                    .map(Challenge::V2)
                    .map_err(|e| BuyerError::Protocol(format!("invalid PAYMENT-REQUIRED: {e}")))
            }
            None => match v1 {
                Ok(Some(v1)) => Ok(Challenge::V1(v1)),
                Ok(None) => Err(BuyerError::Protocol(
                    "402 without a PAYMENT-REQUIRED header or a v1 JSON body".into(),
                )),
                Err(e) => Err(BuyerError::Protocol(e)),
            },
        }
    }

    /// Signs the chosen offer's EIP-3009 authorization and wraps it in the
    /// challenge's protocol version.
    async fn sign(
        &self,
        challenge: &Challenge,
        offer: &Offer,
        session_row: Option<&v2::PaymentRequirements>,
    ) -> Result<(PaymentPayload, HeaderName), BuyerError> {
        let now = unix_now()?;
        let validity = offer.max_timeout_seconds.min(MAX_VALIDITY_SECONDS);
        let authorization = Eip3009Authorization {
            from: self.address(),
            to: offer.pay_to,
            value: offer.amount,
            valid_after: U256::from(now.saturating_sub(VALID_AFTER_SKEW_SECONDS)),
            valid_before: U256::from(now.saturating_add(validity)),
            nonce: B256::from(rand::random::<[u8; 32]>()),
        };
        let domain = eip3009_domain(&offer.name, &offer.version, offer.chain_id, offer.asset);
        let hash = authorization.signing_hash(&domain);
        let signature = self.inner.signer.sign_hash(&hash).await?;
        self.inner.signatures.fetch_add(1, Ordering::SeqCst);
        let payload = serde_json::to_value(ExactEvmPayload {
            signature: signature.as_bytes().to_vec().into(),
            authorization,
        })
        .map_err(|e| BuyerError::Protocol(format!("could not encode the payload: {e}")))?;

        let missing = || BuyerError::Protocol("the chosen offer vanished".into());
        Ok(match challenge {
            Challenge::V2(c) => {
                let accepted = match session_row {
                    Some(row) => row.clone(),
                    None => c.accepts.get(offer.index).ok_or_else(missing)?.clone(),
                };
                let payment = v2::PaymentPayload {
                    x402_version: Version,
                    resource: Some(c.resource.clone()),
                    accepted,
                    payload,
                    extensions: (!c.extensions.is_empty()).then(|| c.extensions.clone()),
                    other: JsonObject::new(),
                };
                (PaymentPayload::V2(payment), codec::PAYMENT_SIGNATURE)
            }
            Challenge::V1(_) if session_row.is_some() => {
                return Err(BuyerError::Protocol(
                    "sessions are sold with v2 payments only".into(),
                ))
            }
            Challenge::V1(c) => {
                let row = c.accepts.get(offer.index).ok_or_else(missing)?;
                let payment = v1::PaymentPayload {
                    x402_version: Version,
                    scheme: row.scheme.clone(),
                    network: row.network.clone(),
                    payload,
                    other: JsonObject::new(),
                };
                (PaymentPayload::V1(payment), codec::X_PAYMENT)
            }
        })
    }
}

impl Purchase {
    /// A purchase of nothing yet: the response's status and headers (the
    /// session token, if any, marked sensitive), no body.
    fn unpaid(response: &reqwest::Response, session: Option<SessionUse>) -> Self {
        Purchase {
            status: response.status().as_u16(),
            headers: session::scrub(response.headers()),
            body: Default::default(),
            challenge: None,
            payment: None,
            receipt: None,
            paid: None,
            session,
        }
    }

    async fn with_body(mut self, response: reqwest::Response) -> Result<Self, BuyerError> {
        self.body = response.bytes().await?;
        Ok(self)
    }
}
