//! `sign-in-with-x` (upstream x402 extension, seller side): pay once, then
//! come back signed in, with no payment and no money moved.
//!
//! A route offers it with [`Route::sign_in_with_x`](crate::Route::sign_in_with_x)
//! and a [`SignInWithX`] that says how long a payment grants access. Its 402
//! challenge then carries `extensions["sign-in-with-x"]`:
//!
//! ```json
//! {
//!   "info": {
//!     "domain": "api.example.com",
//!     "uri": "https://api.example.com/report",
//!     "version": "1",
//!     "nonce": "<32 hex digits, fresh per 402>",
//!     "issuedAt": "2026-01-31T12:00:00.000Z",
//!     "resources": ["https://api.example.com/report"],
//!     "expirationTime": "2026-01-31T12:05:00.000Z"
//!   },
//!   "supportedChains": [{ "chainId": "eip155:8453", "type": "eip191" }],
//!   "schema": { "...": "the payload's JSON Schema" }
//! }
//! ```
//!
//! `domain` and `uri` come from the engine's
//! [public origin](crate::EngineBuilder::public_origin), never from the
//! request's `Host`. On every successful settlement on such a route the
//! engine records that the payer paid for it (route pattern, payer address
//! lowercased) for the route's access lifetime.
//!
//! A later request with a `SIGN-IN-WITH-X` header (base64 JSON of the
//! signed fields and the signature, as the official `@x402/extensions`
//! client builds it) passes without payment when all of these hold:
//!
//! - `domain` is the public origin's host (and port), and `uri`'s origin is
//!   the public origin;
//! - the chain is one the challenge listed (EVM `eip155:*`, `eip191`);
//! - `issuedAt` is not in the future nor older than the route's challenge
//!   lifetime, `expirationTime` (if any) has not passed, `notBefore` (if
//!   any) has;
//! - the nonce is one this engine issued for this route, at that `issuedAt`;
//! - the EIP-4361 (SIWE) message rebuilt from the fields, signed with
//!   EIP-191 (`personal_sign`), recovers `address` (or, with
//!   [`SignInConfig::smart_wallets`], `address` is an EIP-1271 wallet that
//!   accepts the signature);
//! - `address` has paid for this route within its access lifetime;
//! - the nonce was not used before (it is then marked used, atomically).
//!
//! The handler then runs as for a payment: the adapters' `Payment`
//! extractors hand it a [`VerifiedPayment`](crate::VerifiedPayment) with
//! `amount` 0 and [`sign_in`](crate::VerifiedPayment::sign_in) set; nothing
//! is settled and no receipt is added. A proof that fails any check gets the
//! route's 402 challenge (with a fresh nonce), its `error` naming the check
//! (`invalid_siwx_nonce`, `invalid_siwx_domain_mismatch`,
//! `invalid_siwx_not_paid`, ...), as upstream's server answers a failed
//! sign-in with its payment challenge; a request that also carries a payment
//! pays instead. A store that fails or misses its deadline answers `503
//! siwx_unavailable` (fail closed). The handler never runs for a refused
//! proof.
//!
//! # Nonces: no write per 402
//!
//! The 402 path is hot, so issuing a nonce writes nothing: a nonce is 64
//! random bits and a 64-bit HMAC, under the engine's [`NonceKey`] (see
//! [`SignInConfig::nonce_key`]), of those bits, the route and the
//! challenge's `issuedAt`. That is all it takes to tell that this engine
//! issued it, for this route, at that time (so its age comes from a time
//! the server wrote). Only nonces that were used are stored
//! ([`SignInStore::use_nonce`]), until they are too old to be used anyway.
//! Instances that share a [`RedisSignInStore`] must share the key too.
//!
//! # Not supported
//!
//! Solana (`ed25519`, SIWS) proofs are refused
//! (`invalid_siwx_unsupported_chain`); challenges list EVM chains only.
//! EIP-6492 signatures (wallets not deployed yet) are refused
//! (`invalid_siwx_signature`). EIP-1271 smart-wallet signatures are checked
//! only with [`SignInConfig::smart_wallets`] (an [`RpcSmartWallets`] asks
//! the wallet contract over JSON-RPC); without it they are refused.

use std::{sync::Arc, time::Duration};

use alloy_primitives::{Address, B256};
use http::HeaderName;
use serde_json::{json, Value};

mod message;
mod nonce;
#[cfg(feature = "redis")]
mod redis;
mod smart_wallet;
mod store;
mod time;

#[cfg(test)]
mod tests;

pub use self::message::SiwxPayload;
pub use self::nonce::NonceKey;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::RedisSignInStore;
#[cfg(feature = "http-facilitator")]
#[cfg_attr(docsrs, doc(cfg(feature = "http-facilitator")))]
pub use self::smart_wallet::RpcSmartWallets;
pub use self::smart_wallet::SmartWallets;
pub use self::store::{MemorySignInStore, SignInStore, SignInStoreError};

/// The extension key, `sign-in-with-x`.
pub const SIGN_IN_WITH_X: &str = "sign-in-with-x";

/// `SIGN-IN-WITH-X`: the request header carrying the signed proof.
pub const SIGN_IN_WITH_X_HEADER: HeaderName = HeaderName::from_static("sign-in-with-x");

/// The default challenge lifetime: 5 minutes, as upstream's `maxAge`.
pub const DEFAULT_CHALLENGE_TTL: Duration = Duration::from_secs(300);

/// The last 32 bytes of an EIP-6492 signature.
const EIP6492_SUFFIX: [u8; 32] = [
    0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92,
    0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92,
];

/// How far in the future an `issuedAt` may be, for clocks of instances
/// that differ a little.
const CLOCK_SKEW_MS: u64 = 5_000;

/// A route's sign-in-with-x offer: a payment on the route grants access for
/// `access_ttl`, during which the payer signs in instead of paying.
///
/// ```
/// use std::time::Duration;
/// use x402_core::{siwx::SignInWithX, Offer, Route};
///
/// let route = Route::get("/report")
///     .offer(Offer::exact("eip155:84532", "$0.001", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"))
///     .sign_in_with_x(SignInWithX::new(Duration::from_secs(3600)).statement("Sign in to the report"));
/// # let _ = route;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignInWithX {
    pub(crate) access_ttl: Duration,
    pub(crate) challenge_ttl: Duration,
    pub(crate) statement: Option<String>,
    pub(crate) networks: Vec<String>,
}

impl SignInWithX {
    /// Access for `access_ttl` after each payment.
    pub fn new(access_ttl: Duration) -> Self {
        Self {
            access_ttl,
            challenge_ttl: DEFAULT_CHALLENGE_TTL,
            statement: None,
            networks: Vec::new(),
        }
    }

    /// A statement shown to the signer (one line).
    #[must_use]
    pub fn statement(mut self, statement: impl Into<String>) -> Self {
        self.statement = Some(statement.into());
        self
    }

    /// How long a challenge's nonce can be signed and used (default 5
    /// minutes): its `expirationTime`, and the oldest `issuedAt` accepted.
    #[must_use]
    pub fn challenge_ttl(mut self, ttl: Duration) -> Self {
        self.challenge_ttl = ttl;
        self
    }

    /// Lists an EVM chain (CAIP-2, `eip155:8453`) in `supportedChains`
    /// (default: the networks of the route's EVM offers).
    #[must_use]
    pub fn network(mut self, network: impl Into<String>) -> Self {
        self.networks.push(network.into());
        self
    }

    /// How long a payment grants access.
    pub fn access_ttl(&self) -> Duration {
        self.access_ttl
    }
}

/// The engine's sign-in-with-x settings
/// ([`EngineBuilder::sign_in_with_x`](crate::EngineBuilder::sign_in_with_x)):
/// the store, the nonce key and the store deadline.
#[derive(Clone, Debug)]
#[must_use]
pub struct SignInConfig {
    pub(crate) store: Arc<dyn SignInStore>,
    pub(crate) key: NonceKey,
    pub(crate) deadline: Duration,
    pub(crate) smart_wallets: Option<Arc<dyn SmartWallets>>,
}

impl std::fmt::Debug for dyn SignInStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SignInStore")
    }
}

impl Default for SignInConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl SignInConfig {
    /// In memory, with a random nonce key and a 250 ms deadline: one process.
    pub fn new() -> Self {
        Self {
            store: Arc::new(MemorySignInStore::new()),
            key: NonceKey::random(),
            deadline: Duration::from_millis(250),
            smart_wallets: None,
        }
    }

    /// Where paid accesses and used nonces live (share a
    /// [`RedisSignInStore`] between instances).
    pub fn store(mut self, store: impl SignInStore) -> Self {
        self.store = Arc::new(store);
        self
    }

    /// The key that signs nonces; every instance sharing a store must use
    /// the same one.
    pub fn nonce_key(mut self, key: NonceKey) -> Self {
        self.key = key;
        self
    }

    /// How long a store call (or a smart-wallet check) may take before the
    /// request is answered `503 siwx_unavailable` (default 250 ms).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Checks EIP-1271 smart-wallet signatures with `wallets` (an
    /// [`RpcSmartWallets`](crate::siwx) per chain, say): a proof whose
    /// signature does not recover its address passes if the address is a
    /// contract that says the signature is its own. Default: none, and such
    /// proofs are refused (`invalid_siwx_signature`).
    pub fn smart_wallets(mut self, wallets: impl SmartWallets) -> Self {
        self.smart_wallets = Some(Arc::new(wallets));
        self
    }
}

/// Who signed in, on a [`VerifiedPayment`](crate::VerifiedPayment) whose
/// request passed by sign-in-with-x.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SignedIn {
    /// The signer's address (EIP-55).
    pub address: String,
    /// The chain it signed for (CAIP-2).
    pub chain_id: String,
}

/// The key an address is stored under: lowercase for EVM addresses (case
/// is only a checksum there), as it is otherwise.
pub(crate) fn address_key(address: &str) -> String {
    if address.starts_with("0x") || address.starts_with("0X") {
        address.to_ascii_lowercase()
    } else {
        address.to_owned()
    }
}

/// The static part of a route's declaration: `info.version` (and
/// `statement`), `supportedChains` (the EVM chains among `networks`, or
/// the configured ones) and the payload schema.
pub(crate) fn declaration<'a>(
    config: &SignInWithX,
    offer_networks: impl Iterator<Item = &'a str>,
) -> Value {
    let mut chains: Vec<&str> = Vec::new();
    let configured = config.networks.iter().map(String::as_str);
    let networks: Vec<&str> = if config.networks.is_empty() {
        offer_networks.collect()
    } else {
        configured.collect()
    };
    for n in networks {
        if message::evm_chain_id(n).is_some() && !chains.contains(&n) {
            chains.push(n);
        }
    }
    let mut info = json!({ "version": "1" });
    if let (Some(s), Value::Object(map)) = (&config.statement, &mut info) {
        map.insert("statement".into(), Value::String(s.clone()));
    }
    json!({
        "info": info,
        "supportedChains": chains
            .iter()
            .map(|c| json!({ "chainId": c, "type": "eip191" }))
            .collect::<Vec<_>>(),
        "schema": schema(),
    })
}

/// The JSON Schema of the `SIGN-IN-WITH-X` payload.
fn schema() -> Value {
    let s = || json!({ "type": "string" });
    let t = || json!({ "type": "string", "format": "date-time" });
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "domain": s(), "address": s(), "statement": s(),
            "uri": { "type": "string", "format": "uri" },
            "version": s(), "chainId": s(), "type": s(), "nonce": s(),
            "issuedAt": t(), "expirationTime": t(), "notBefore": t(),
            "requestId": s(),
            "resources": { "type": "array", "items": { "type": "string", "format": "uri" } },
            "signature": s()
        },
        "required": ["domain", "address", "uri", "version", "chainId", "type", "nonce", "issuedAt", "signature"]
    })
}

/// What a challenge is issued for: the public origin and the request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Site<'a> {
    /// `scheme://host[:port]`, the default port left out.
    pub(crate) origin: &'a str,
    /// `host[:port]`, as `origin` writes it.
    pub(crate) domain: &'a str,
    /// The route's pattern (nonces are bound to it).
    pub(crate) route: &'a str,
}

/// The origin and domain (JavaScript's `URL.origin` and `URL.host`) of
/// `scheme://authority`: the default port is left out.
pub(crate) fn origin_and_domain(scheme: &str, authority: &str) -> (String, String) {
    let authority = authority.to_ascii_lowercase();
    let default = match scheme {
        "https" => ":443",
        _ => ":80",
    };
    let domain = authority
        .strip_suffix(default)
        .map_or(authority.clone(), str::to_owned);
    (format!("{scheme}://{domain}"), domain)
}

/// The declaration with this challenge's `info`: `domain`, `uri`, a fresh
/// nonce, `issuedAt`, `resources` and `expirationTime`.
pub(crate) fn challenge(
    declaration: &Value,
    config: &SignInWithX,
    key: &NonceKey,
    site: Site<'_>,
    path: &str,
    now_ms: u64,
) -> Value {
    let mut out = declaration.clone();
    let ttl_ms = u64::try_from(config.challenge_ttl.as_millis()).unwrap_or(u64::MAX);
    let expires_ms = now_ms.saturating_add(ttl_ms);
    let issued_at = time::format_millis(now_ms);
    let nonce = key.issue(site.route, &issued_at);
    let uri = format!("{}{path}", site.origin);
    if let Some(Value::Object(info)) = out.get_mut("info") {
        let version = info.remove("version").unwrap_or_else(|| json!("1"));
        let statement = info.remove("statement");
        info.insert("domain".into(), json!(site.domain));
        info.insert("uri".into(), json!(uri));
        info.insert("version".into(), version);
        info.insert("nonce".into(), json!(nonce));
        info.insert("issuedAt".into(), json!(issued_at));
        info.insert("resources".into(), json!([uri]));
        info.insert(
            "expirationTime".into(),
            json!(time::format_millis(expires_ms)),
        );
        if let Some(statement) = statement {
            info.insert("statement".into(), statement);
        }
    }
    out
}

/// The EVM chains a declaration lists.
pub(crate) fn listed_chains(declaration: Option<&Value>) -> Vec<&str> {
    declaration
        .and_then(|d| d.get("supportedChains"))
        .and_then(Value::as_array)
        .map(|chains| {
            chains
                .iter()
                .filter(|c| c.get("type").and_then(Value::as_str) == Some("eip191"))
                .filter_map(|c| c.get("chainId").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// A proof that passed every check that needs no store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checked {
    pub(crate) address: Address,
    pub(crate) chain_id: String,
    pub(crate) nonce: String,
    /// The nonce's expiry, Unix seconds.
    pub(crate) nonce_expires_at: u64,
    /// Set when the signature does not recover `address`: the EIP-191
    /// hash and the signature, for the wallet contract to judge (EIP-1271).
    pub(crate) smart_wallet: Option<(B256, Vec<u8>)>,
}

/// Checks a proof against the site, the chains offered and the clock:
/// everything but "has paid" and "nonce unused". `Err` is the reason code.
pub(crate) fn check(
    p: &SiwxPayload,
    key: &NonceKey,
    site: Site<'_>,
    chains: &[&str],
    challenge_ttl: Duration,
    now_ms: u64,
) -> Result<Checked, &'static str> {
    if p.domain != site.domain {
        return Err("invalid_siwx_domain_mismatch");
    }
    let uri: http::Uri = p.uri.parse().map_err(|_| "invalid_siwx_uri_mismatch")?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err("invalid_siwx_uri_mismatch");
    };
    if authority.as_str().contains('@')
        || origin_and_domain(&scheme.to_ascii_lowercase(), authority.as_str()).0 != site.origin
    {
        return Err("invalid_siwx_uri_mismatch");
    }
    if p.version != "1" {
        return Err("invalid_siwx_message");
    }
    if p.kind != "eip191" || !chains.contains(&p.chain_id.as_str()) {
        return Err("invalid_siwx_unsupported_chain");
    }
    if let Some(scheme) = p.signature_scheme.as_deref() {
        if !matches!(scheme, "eip191" | "eip1271") {
            return Err("invalid_siwx_signature");
        }
    }
    let issued = time::parse_millis(&p.issued_at).ok_or("invalid_siwx_issued_at")?;
    if issued > now_ms.saturating_add(CLOCK_SKEW_MS) {
        return Err("invalid_siwx_issued_at_in_future");
    }
    let max_age = u64::try_from(challenge_ttl.as_millis()).unwrap_or(u64::MAX);
    if now_ms.saturating_sub(issued) > max_age {
        return Err("invalid_siwx_issued_at_too_old");
    }
    if let Some(exp) = &p.expiration_time {
        let exp = time::parse_millis(exp).ok_or("invalid_siwx_expiration_time")?;
        if exp < now_ms {
            return Err("invalid_siwx_expired");
        }
    }
    if let Some(nbf) = &p.not_before {
        let nbf = time::parse_millis(nbf).ok_or("invalid_siwx_not_before")?;
        if now_ms < nbf {
            return Err("invalid_siwx_not_yet_valid");
        }
    }
    if !key.issued(&p.nonce, site.route, &p.issued_at) {
        return Err("invalid_siwx_nonce");
    }
    // Past this, `issuedAt` is too old and the nonce refused anyway.
    let nonce_expires_at = issued
        .saturating_add(max_age)
        .saturating_add(CLOCK_SKEW_MS)
        .div_ceil(1000);
    let message = message::siwe_message(p).map_err(|m| m.0)?;
    let address: Address = p.address.parse().map_err(|_| "invalid_siwx_message")?;
    let signature = p
        .signature
        .strip_prefix("0x")
        .and_then(|h| alloy_primitives::hex::decode(h).ok())
        .ok_or("invalid_siwx_malformed_signature")?;
    let digest: B256 = alloy_primitives::eip191_hash_message(message.as_bytes());
    // An EIP-6492 signature (for a wallet not deployed yet) ends with its
    // magic suffix: not supported, refused rather than sent to a contract.
    if signature.ends_with(&EIP6492_SUFFIX) {
        return Err("invalid_siwx_signature");
    }
    let eoa = matches!(crate::evm::recover_signer(digest, &signature), Ok(s) if s == address);
    Ok(Checked {
        address,
        chain_id: p.chain_id.clone(),
        nonce: p.nonce.clone(),
        nonce_expires_at,
        smart_wallet: (!eoa).then_some((digest, signature)),
    })
}
