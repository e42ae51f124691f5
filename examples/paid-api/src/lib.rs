//! An axum API that sells its endpoints with x402: a template to copy.
//!
//! Routes (the upstream e2e server contract, `DESIGN.md` §9):
//!
//! | Route | Price |
//! |---|---|
//! | `GET /exact/evm/eip3009` | $0.001, `exact` (EIP-3009) |
//! | `GET /upto/evm/permit2` | `upto`, ceiling 2000 atomic units; the handler charges 1000 |
//! | `GET /session/demo` | $0.001 per call, or a prepaid session: 100 calls for $0.05 |
//! | `GET /health` | free |
//! | `POST /close` | free; answers, then the server shuts down (loopback only, see below) |
//!
//! `POST /close` stops the server only when it is bound to a loopback
//! address (`HOST` 127.0.0.1, the default, or `::1`). Bound to any other
//! address (`HOST=0.0.0.0`, say), anyone who can reach the port could stop
//! it, so `POST /close` answers 404 with an empty body, as for a path that
//! does not exist, and changes nothing; stop such a server with SIGTERM or
//! ctrl-c. The decision is made from the address the listener is bound to
//! ([`Config::bound_to`]), never from a request's `Host`.
//!
//! Configuration comes from the environment ([`Config::from_env`]); with
//! nothing set, the server runs offline on an in-memory **dev ledger** (fake
//! balances on a testnet, never a mainnet).
//!
//! The framework-neutral part (facilitator, route table, stores, webhooks)
//! is [`engine`]; [`app`] puts that engine in front of an axum router. The
//! actix-web twin, `examples/paid-api-actix`, reuses [`engine`] and
//! [`Config`] as they are: one route table, two frameworks.
//!
//! ```no_run
//! # async fn run() -> Result<(), paid_api::Error> {
//! let config = paid_api::Config::from_env()?;
//! let listener = tokio::net::TcpListener::bind(config.addr()).await?;
//! let config = config.bound_to(listener.local_addr()?);
//! let (router, state) = paid_api::app(config).await?;
//! paid_api::serve(listener, router, state).await?;
//! # Ok(()) }
//! ```

use std::{
    env,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::{Arc, OnceLock},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use alloy_primitives::{Address, U256};
use axum::{
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
    Json, Router,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::{json, Value};
use tokio::sync::{watch, Mutex};
use x402_axum::{
    discovery::{prometheus_router, Discovery},
    Payment, PaywallLayer, UsageMeter,
};
use x402_core::{
    claim::{RedisClaimStore, ReplayGuard},
    discovery::OpenApiInfo,
    facilitator::HttpFacilitator,
    local::{ChainLedger, DevLedger, LocalFacilitator},
    money::AtomicAmount,
    network,
    session::{RedisSessionStore, SessionOffer},
    webhook::{outbox::RedisOutbox, WebhookSecret, WebhookWorker, Webhooks},
    Asset, Engine, Facilitator, Offer, Route,
};

/// The default port (the upstream e2e harness passes its own in `PORT`).
pub const DEFAULT_PORT: u16 = 4021;
/// The default network: Base Sepolia (a testnet).
pub const DEFAULT_NETWORK: &str = "eip155:84532";
/// Where payments go when `EVM_PAYEE_ADDRESS` is unset. A placeholder for
/// local runs: **set your own address** before taking real payments.
pub const DEFAULT_PAYEE: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// The `upto` route's ceiling, in atomic units of the asset.
pub const UPTO_CEILING: u64 = 2_000;
/// What the `upto` route's handler charges, in atomic units.
pub const UPTO_CHARGE: u64 = 1_000;

/// Why the server could not be configured or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An environment variable (or config field) is missing or malformed.
    #[error("configuration: {0}")]
    Config(String),
    /// The facilitator could not be set up.
    #[error("facilitator: {0}")]
    Facilitator(String),
    /// Redis could not be reached.
    #[error("redis: {0}")]
    Redis(String),
    /// The engine refused the route table.
    #[error(transparent)]
    Engine(#[from] x402_core::engine::ConfigError),
    /// Binding or serving failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn config_error(message: impl Into<String>) -> Error {
    Error::Config(message.into())
}

/// The token the API is priced in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetConfig {
    /// The token contract.
    pub address: Address,
    /// Its EIP-712 domain name (`USDC` on Base Sepolia, `USD Coin` on Base).
    pub name: String,
    /// Its EIP-712 domain version.
    pub version: String,
    /// Its decimals (6 for USDC).
    pub decimals: u8,
}

impl AssetConfig {
    /// The default stablecoin of `network` (USDC on the networks that have one).
    pub fn default_for(network: &str) -> Result<Self, Error> {
        let coin = network::default_stablecoin(network)
            .filter(|c| network::family(c.network) == network::Family::Evm)
            .ok_or_else(|| {
                config_error(format!(
                    "no default stablecoin for {network}: set EVM_ASSET, EVM_ASSET_NAME, \
                     EVM_ASSET_VERSION and EVM_ASSET_DECIMALS"
                ))
            })?;
        Ok(Self {
            address: parse_address("default asset", coin.address)?,
            name: coin.eip712_name.to_owned(),
            version: coin.eip712_version.to_owned(),
            decimals: coin.decimals,
        })
    }

    fn asset(&self) -> Asset {
        Asset::new(self.address.to_checksum(None), self.decimals).eip712(&self.name, &self.version)
    }
}

/// Who verifies and settles payments.
///
/// Its `Debug` output shows URLs as `scheme://host[:port]` and never the
/// private key.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FacilitatorConfig {
    /// In process, on an in-memory dev ledger (offline; testnets only). The
    /// listed payers start with these balances (atomic units).
    DevLedger {
        /// `(payer, amount)` credited at start-up (`DEV_FUND`).
        fund: Vec<(Address, U256)>,
    },
    /// In process, on a real chain: the facilitator key pays the gas.
    Chain {
        /// JSON-RPC endpoint (`EVM_RPC_URL`).
        rpc_url: String,
        /// The facilitator's key (`FACILITATOR_EVM_PRIVATE_KEY`); never logged.
        private_key: String,
    },
    /// A hosted facilitator over HTTP (`FACILITATOR_URL`).
    Http {
        /// Its base URL: `https://`, or `http://` to a loopback host only.
        url: String,
    },
}

impl std::fmt::Debug for FacilitatorConfig {
    // By hand: the key must never reach a log, and URLs may carry an API key
    // in their userinfo, path or query.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::DevLedger { fund } => f.debug_struct("DevLedger").field("fund", fund).finish(),
            Self::Chain { rpc_url, .. } => f
                .debug_struct("Chain")
                .field("rpc_url", &redact_url(rpc_url))
                .field("private_key", &"<redacted>")
                .finish(),
            Self::Http { url } => f
                .debug_struct("Http")
                .field("url", &redact_url(url))
                .finish(),
        }
    }
}

/// `url` cut down to `scheme://host[:port]`, for logs and `Debug`: no
/// userinfo, path, query or fragment, any of which may hold a token (node
/// providers put API keys in the path, webhook endpoints in the query).
/// Text that does not look like a URL, or whose host part does not look like
/// a host (a password with a stray `/` in it, say), is not shown at all.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.trim().split_once("://") else {
        return "<redacted>".to_owned();
    };
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    {
        return "<redacted>".to_owned();
    }
    // The authority ends at the first `/`, `?` or `#` (or `\`, which URL
    // parsers read as `/` in http URLs); the host follows the last `@`.
    let authority = rest.split(['/', '?', '#', '\\']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    let port_ok = |port: &str| port.bytes().all(|b| b.is_ascii_digit());
    let plausible = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').is_some_and(|(ip, port)| {
            ip.bytes()
                .all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'))
                && (port.is_empty() || port.strip_prefix(':').is_some_and(port_ok))
        }),
        None => {
            let (name, port) = host.split_once(':').unwrap_or((host, ""));
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
                && port_ok(port)
        }
    };
    if plausible {
        format!("{scheme}://{host}")
    } else {
        format!("{scheme}://<redacted>")
    }
}

/// Everything the server needs; see [`Config::from_env`] for the variables.
#[derive(Clone, PartialEq, Eq)]
pub struct Config {
    /// Address to bind (`HOST`, default 127.0.0.1).
    pub host: IpAddr,
    /// Port to bind (`PORT`, default 4021; 0 picks a free one).
    pub port: u16,
    /// The origin clients reach the server at (`PUBLIC_URL`,
    /// `scheme://host[:port]`); default `http://HOST:PORT`. Challenges,
    /// discovery and the facilitator are given URLs under it, never under a
    /// client's `Host`.
    pub public_url: Option<String>,
    /// CAIP-2 network (`EVM_NETWORK`).
    pub network: String,
    /// Who gets paid (`EVM_PAYEE_ADDRESS`).
    pub pay_to: Address,
    /// The token (`EVM_ASSET*`).
    pub asset: AssetConfig,
    /// The facilitator.
    pub facilitator: FacilitatorConfig,
    /// Redis for replay claims, sessions and the webhook outbox (`REDIS_URL`);
    /// in memory (one process) when unset.
    pub redis_url: Option<String>,
    /// Where settlement webhooks go (`WEBHOOK_URL`) and their secret
    /// (`WEBHOOK_SECRET`, `whsec_...`).
    pub webhook: Option<(String, String)>,
}

impl std::fmt::Debug for Config {
    // By hand, so that the facilitator key, the webhook secret and the
    // tokens URLs may carry (userinfo, path, query) never reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("public_url", &self.public_origin())
            .field("network", &self.network)
            .field("pay_to", &self.pay_to)
            .field("asset", &self.asset)
            .field("facilitator", &self.facilitator)
            .field("redis_url", &self.redis_url.as_deref().map(redact_url))
            .field(
                "webhook",
                &self
                    .webhook
                    .as_ref()
                    .map(|(url, _)| (redact_url(url), "<redacted>")),
            )
            .finish()
    }
}

impl Config {
    /// The offline default: Base Sepolia USDC on a dev ledger, in-memory
    /// stores, port 4021 on 127.0.0.1.
    pub fn dev() -> Self {
        Self {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: DEFAULT_PORT,
            public_url: None,
            network: DEFAULT_NETWORK.to_owned(),
            // DEFAULT_PAYEE
            pay_to: alloy_primitives::address!("209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            asset: AssetConfig {
                address: alloy_primitives::address!("036CbD53842c5426634e7929541eC2318f3dCF7e"),
                name: "USDC".to_owned(),
                version: "2".to_owned(),
                decimals: 6,
            },
            facilitator: FacilitatorConfig::DevLedger { fund: Vec::new() },
            redis_url: None,
            webhook: None,
        }
    }

    /// Reads the configuration from the environment:
    ///
    /// - `PORT` (default 4021), `HOST` (default 127.0.0.1);
    /// - `PUBLIC_URL`: the origin clients reach the server at (default
    ///   `http://HOST:PORT`);
    /// - `EVM_NETWORK` (CAIP-2, default `eip155:84532`);
    /// - `EVM_PAYEE_ADDRESS` (default [`DEFAULT_PAYEE`]: change it);
    /// - `EVM_ASSET`, `EVM_ASSET_NAME`, `EVM_ASSET_VERSION`,
    ///   `EVM_ASSET_DECIMALS` (default: the network's USDC);
    /// - `FACILITATOR_URL`: a hosted facilitator (`https://`; plain
    ///   `http://` only to a loopback host, or [`engine`] refuses it); else
    ///   `EVM_RPC_URL` +
    ///   `FACILITATOR_EVM_PRIVATE_KEY`: the in-process facilitator on that
    ///   chain; else the dev ledger, with `DEV_FUND=0xPAYER=AMOUNT,...`
    ///   (atomic units) credited at start-up;
    /// - `REDIS_URL` (unset: in-memory stores);
    /// - `WEBHOOK_URL` + `WEBHOOK_SECRET`.
    pub fn from_env() -> Result<Self, Error> {
        Self::from_lookup(|name| env::var(name).ok().filter(|v| !v.trim().is_empty()))
    }

    /// [`from_env`](Self::from_env) over any source of variables (tests).
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let mut config = Self::dev();
        if let Some(host) = var("HOST") {
            config.host = host
                .trim()
                .parse()
                .map_err(|_| config_error(format!("HOST {host:?} is not an IP address")))?;
        }
        if let Some(port) = var("PORT") {
            config.port = port
                .trim()
                .parse()
                .map_err(|_| config_error(format!("PORT {port:?} is not a port number")))?;
        }
        config.public_url = var("PUBLIC_URL").map(|url| url.trim().to_owned());
        if let Some(network) = var("EVM_NETWORK") {
            let network = network.trim().to_owned();
            if network::evm_chain_id(&network).is_none() || !network.starts_with("eip155:") {
                return Err(config_error(format!(
                    "EVM_NETWORK {network:?} is not a CAIP-2 EVM network (eip155:<chain id>)"
                )));
            }
            config.network = network;
        }
        if let Some(payee) = var("EVM_PAYEE_ADDRESS") {
            config.pay_to = parse_address("EVM_PAYEE_ADDRESS", &payee)?;
        }

        // The asset: the network's USDC unless EVM_ASSET names another token,
        // in which case its EIP-712 domain must be given too (a wrong name or
        // version makes every signature fail).
        config.asset = match var("EVM_ASSET") {
            None => AssetConfig::default_for(&config.network)?,
            Some(address) => {
                let need = |name: &str| {
                    var(name)
                        .ok_or_else(|| config_error(format!("EVM_ASSET is set: set {name} too")))
                };
                let decimals = need("EVM_ASSET_DECIMALS")?;
                AssetConfig {
                    address: parse_address("EVM_ASSET", &address)?,
                    name: need("EVM_ASSET_NAME")?,
                    version: need("EVM_ASSET_VERSION")?,
                    decimals: decimals.trim().parse().map_err(|_| {
                        config_error(format!("EVM_ASSET_DECIMALS {decimals:?} is not a number"))
                    })?,
                }
            }
        };

        config.facilitator = match (var("FACILITATOR_URL"), var("EVM_RPC_URL")) {
            (Some(url), _) => FacilitatorConfig::Http { url },
            (None, Some(rpc_url)) => FacilitatorConfig::Chain {
                rpc_url,
                private_key: var("FACILITATOR_EVM_PRIVATE_KEY").ok_or_else(|| {
                    config_error("EVM_RPC_URL is set: set FACILITATOR_EVM_PRIVATE_KEY too")
                })?,
            },
            (None, None) => FacilitatorConfig::DevLedger {
                fund: match var("DEV_FUND") {
                    Some(list) => parse_dev_fund(&list)?,
                    None => Vec::new(),
                },
            },
        };

        config.redis_url = var("REDIS_URL");
        config.webhook = match (var("WEBHOOK_URL"), var("WEBHOOK_SECRET")) {
            (Some(url), Some(secret)) => Some((url, secret)),
            (None, None) => None,
            _ => {
                return Err(config_error(
                    "set both WEBHOOK_URL and WEBHOOK_SECRET, or neither",
                ))
            }
        };
        Ok(config)
    }

    /// The address to bind.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port)
    }

    /// The configuration once its listener is bound: `HOST` and `PORT` are
    /// the listener's (so `PORT=0` names the port it picked).
    pub fn bound_to(mut self, addr: SocketAddr) -> Self {
        self.host = addr.ip();
        self.port = addr.port();
        self
    }

    /// The public origin: `PUBLIC_URL`, else `http://HOST:PORT`.
    pub fn public_origin(&self) -> String {
        match &self.public_url {
            Some(url) => url.clone(),
            None => format!("http://{}", self.addr()),
        }
    }
}

fn parse_address(what: &str, value: &str) -> Result<Address, Error> {
    value
        .trim()
        .parse()
        .map_err(|_| config_error(format!("{what} {value:?} is not a 0x-prefixed EVM address")))
}

/// Parses `DEV_FUND`: `0xPAYER=AMOUNT` pairs (atomic units), comma-separated.
fn parse_dev_fund(list: &str) -> Result<Vec<(Address, U256)>, Error> {
    list.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (who, amount) = entry.split_once('=').ok_or_else(|| {
                config_error(format!(
                    "DEV_FUND entry {entry:?}: expected 0xADDRESS=AMOUNT"
                ))
            })?;
            let amount = AtomicAmount::parse_decimal(amount.trim())
                .map_err(|_| config_error(format!("DEV_FUND entry {entry:?}: bad amount")))?;
            Ok((parse_address("DEV_FUND", who)?, amount.get()))
        })
        .collect()
}

/// Handles the running app hands out: the dev ledger (to fund payers and read
/// balances), the route's network and asset, and the shutdown switch.
#[derive(Debug, Clone)]
pub struct AppState {
    // axum clones the state for every request it routes (and the paywall
    // clones the route service for every protected one): Arcs and copies
    // only, no Strings.
    dev_ledger: Option<Arc<DevLedger>>,
    network: Arc<str>,
    asset: Arc<AssetConfig>,
    pay_to: Address,
    shutdown: Arc<watch::Sender<bool>>,
    webhook_worker: Arc<Mutex<Option<WebhookWorker>>>,
    /// Whether `POST /close` may stop the server: bound to loopback.
    close_enabled: bool,
}

impl AppState {
    /// The dev ledger, when the server runs on one.
    pub fn dev_ledger(&self) -> Option<&Arc<DevLedger>> {
        self.dev_ledger.as_ref()
    }

    /// Credits `amount` atomic units of the API's asset to `payer` on the dev
    /// ledger. Fails when the server does not run on the dev ledger.
    pub fn fund(&self, payer: Address, amount: impl Into<AtomicAmount>) -> Result<(), Error> {
        let ledger = self.dev_ledger.as_ref().ok_or_else(|| {
            config_error("funding needs the dev ledger (no FACILITATOR_URL, no EVM_RPC_URL)")
        })?;
        ledger
            .fund(&self.network, self.asset.address, payer, amount)
            .map_err(|e| Error::Facilitator(e.to_string()))
    }

    /// `owner`'s balance of the API's asset on the dev ledger (`None` when the
    /// server does not run on one).
    pub fn dev_balance(&self, owner: Address) -> Option<U256> {
        self.dev_ledger
            .as_ref()
            .map(|l| l.balance(&self.network, self.asset.address, owner))
    }

    /// The network payments are taken on.
    pub fn network(&self) -> &str {
        &self.network
    }

    /// The asset payments are taken in.
    pub fn asset(&self) -> &AssetConfig {
        &self.asset
    }

    /// Who gets paid.
    pub fn pay_to(&self) -> Address {
        self.pay_to
    }

    /// Whether `POST /close` stops the server: only when the configuration
    /// given to [`engine`] names a loopback address (bound to 0.0.0.0 or a
    /// public address, `POST /close` answers 404 and changes nothing).
    pub fn close_enabled(&self) -> bool {
        self.close_enabled
    }

    /// Asks [`serve`] to shut down gracefully (as `POST /close` does).
    pub fn shutdown(&self) {
        // `send_replace`, not `send`: the flag must stick even while nobody
        // waits on it yet.
        self.shutdown.send_replace(true);
    }

    /// Resolves once [`shutdown`](Self::shutdown) has been called (at once if
    /// it already was). Servers other than [`serve`] stop on it.
    pub async fn wait_for_shutdown(&self) {
        let mut rx = self.shutdown.subscribe();
        let _ = rx.wait_for(|closed| *closed).await;
    }

    /// Stops the webhook worker, if any, letting pending deliveries finish
    /// for up to `grace` (undelivered ones stay in the outbox). Call it once
    /// the server has stopped taking requests.
    pub async fn stop_webhooks(&self, grace: Duration) {
        if let Some(worker) = self.webhook_worker.lock().await.take() {
            worker.shutdown(grace).await;
        }
    }
}

/// Whether `ip` is a loopback address (`127.0.0.0/8`, `::1`, or
/// `::ffff:127.x.y.z`). The unspecified addresses (`0.0.0.0`, `::`) listen on
/// every interface and are not.
fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// Builds the facilitator the config asks for.
async fn facilitator(
    config: &Config,
) -> Result<(Arc<dyn Facilitator>, Option<Arc<DevLedger>>), Error> {
    let facilitator_error = |e: &dyn std::fmt::Display| Error::Facilitator(e.to_string());
    Ok(match &config.facilitator {
        // Plain http:// to a host that is not loopback is refused (payment
        // payloads and verdicts would travel unencrypted); HttpFacilitator's
        // error names the fix.
        FacilitatorConfig::Http { url } => (
            Arc::new(
                HttpFacilitator::new(url)
                    .map_err(|e| Error::Facilitator(format!("FACILITATOR_URL: {e}")))?,
            ),
            None,
        ),
        FacilitatorConfig::Chain {
            rpc_url,
            private_key,
        } => {
            let ledger = ChainLedger::new(rpc_url, private_key)
                .await
                .map_err(|e| facilitator_error(&e))?;
            let expected = network::evm_chain_id(&config.network);
            if expected != Some(ledger.chain_id()) {
                return Err(Error::Facilitator(format!(
                    "EVM_RPC_URL serves chain id {}, but EVM_NETWORK is {}",
                    ledger.chain_id(),
                    config.network
                )));
            }
            let local = LocalFacilitator::builder(ledger)
                .network(&config.network)
                .build()
                .map_err(|e| facilitator_error(&e))?;
            (Arc::new(local), None)
        }
        FacilitatorConfig::DevLedger { fund } => {
            // The dev ledger fakes settlements, so it refuses mainnets. A
            // server runs for long: it forgets nonces once they expire.
            let ledger = Arc::new(DevLedger::new().forget_expired_nonces());
            let local = LocalFacilitator::builder(Arc::clone(&ledger))
                .network(&config.network)
                .build()
                .map_err(|e| facilitator_error(&e))?;
            for (payer, amount) in fund {
                ledger
                    .fund(&config.network, config.asset.address, *payer, *amount)
                    .map_err(|e| facilitator_error(&e))?;
            }
            (Arc::new(local), Some(ledger))
        }
    })
}

/// The paid routes: what is sold, where, for how much. Change prices here.
fn routes(config: &Config) -> Vec<Route> {
    let network = config.network.as_str();
    let pay_to = config.pay_to.to_checksum(None);
    let asset = config.asset.asset();
    let exact = |price: &str| Offer::exact(network, price, &pay_to).asset(asset.clone());
    vec![
        // $0.001 per call, paid with an EIP-3009 authorization.
        Route::get("/exact/evm/eip3009")
            .offer(exact("$0.001"))
            .description("A paid endpoint: $0.001 per call")
            .mime_type("application/json"),
        // The buyer authorises up to the ceiling; the handler charges what the
        // call cost (see `upto`).
        Route::get("/upto/evm/permit2")
            .offer(
                Offer::upto(network, AtomicAmount::from(UPTO_CEILING), &pay_to)
                    .asset(asset.clone()),
            )
            .description("A metered endpoint: up to 2000 atomic units per call")
            .mime_type("application/json"),
        // $0.001 per call, or 100 calls within an hour for $0.05 (prepaid
        // session; v2 clients that understand `extensions.session`).
        Route::get("/session/demo")
            .offer(exact("$0.001"))
            .session(
                SessionOffer::new("demo-100", 100, Duration::from_secs(3600), "demo")
                    .offer(exact("$0.05")),
            )
            .description("Pay per call, or buy 100 calls for $0.05")
            .mime_type("application/json"),
    ]
}

/// Builds the payment engine (facilitator, route table, replay and session
/// stores, webhooks) and the state handles: everything but the web framework.
///
/// [`app`] wraps an axum router in it; `examples/paid-api-actix` wraps an
/// actix-web `App` in the same engine. The webhook worker (when
/// `WEBHOOK_URL` is set) starts here, on the current tokio runtime.
///
/// Give it the configuration [bound to](Config::bound_to) the listener's
/// address: whether `POST /close` may stop the server
/// ([`AppState::close_enabled`]) is decided from `config.host`.
pub async fn engine(config: &Config) -> Result<(Engine, AppState), Error> {
    let (facilitator, dev_ledger) = facilitator(config).await?;
    let mut engine = Engine::builder_arc(facilitator)
        .routes(routes(config))
        .public_origin(config.public_origin());

    // One process: claims and sessions in memory (the defaults). Several
    // instances behind a load balancer must share Redis.
    if let Some(url) = &config.redis_url {
        let claims = RedisClaimStore::connect(url)
            .await
            .map_err(|e| Error::Redis(e.to_string()))?;
        let sessions = RedisSessionStore::connect(url)
            .await
            .map_err(|e| Error::Redis(e.to_string()))?;
        engine = engine
            .replay_guard(ReplayGuard::new(claims))
            .session_store(sessions);
    }

    // Signed settlement webhooks, delivered in the background.
    let mut webhook_worker = None;
    if let Some((url, secret)) = &config.webhook {
        let secret = WebhookSecret::parse(secret)
            .map_err(|e| config_error(format!("WEBHOOK_SECRET: {e}")))?;
        let mut builder = Webhooks::builder(url, [secret]);
        if let Some(redis) = &config.redis_url {
            let outbox = RedisOutbox::connect(redis)
                .await
                .map_err(|e| Error::Redis(e.to_string()))?;
            builder = builder.outbox(outbox);
        }
        let webhooks = builder
            .build()
            .map_err(|e| config_error(format!("WEBHOOK_URL: {e}")))?;
        engine = engine.hooks(webhooks.hooks());
        webhook_worker = Some(webhooks.start());
    }

    let engine = engine.build()?;
    let (shutdown, _) = watch::channel(false);
    let state = AppState {
        dev_ledger,
        network: config.network.as_str().into(),
        asset: Arc::new(config.asset.clone()),
        pay_to: config.pay_to,
        shutdown: Arc::new(shutdown),
        webhook_worker: Arc::new(Mutex::new(webhook_worker)),
        close_enabled: is_loopback(config.host),
    };
    Ok((engine, state))
}

/// Builds the router (with the paywall) and the state handles: [`engine`]
/// in front of the axum handlers.
pub async fn app(config: Config) -> Result<(Router, AppState), Error> {
    let (engine, state) = engine(&config).await?;

    // The engine's route table decides what is paid: `/health` and `/close`
    // are not in it, so they pass through the paywall for free.
    let router = Router::new()
        .route("/exact/evm/eip3009", get(exact))
        .route("/upto/evm/permit2", get(upto))
        .route("/session/demo", get(session))
        .route("/health", get(health))
        .route("/close", post(close))
        .layer(PaywallLayer::new(engine.clone()))
        .with_state(state.clone())
        // What agents and catalogues read: every paid route with its offers
        // and session offers, generated from the same route table.
        .merge(Discovery::new(engine).openapi(openapi_info()).into_router())
        // Prometheus counters of challenges, payments, settlements and
        // sessions. This server binds 127.0.0.1 by default; keep /metrics off
        // the public internet if you change that.
        .merge(prometheus_router("/metrics", metrics_handle()));
    Ok((router, state))
}

/// The `info` of the OpenAPI document both example servers serve at
/// `/.well-known/x402/openapi.json`.
pub fn openapi_info() -> OpenApiInfo {
    OpenApiInfo::new("paid-api", env!("CARGO_PKG_VERSION"))
        .description("An x402 example API: exact, upto and prepaid-session routes.")
}

/// The process's Prometheus recorder, installed (with x402-core's metric
/// descriptions and an upkeep thread) on first use; both example servers
/// render `GET /metrics` from it. If another recorder was installed first,
/// `/metrics` shows only what this one records.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics stays empty");
            } else {
                x402_core::metrics::describe();
                // Histogram samples pile up until rendered or upkept: without
                // this, the process would grow with every paid request while
                // nobody scrapes /metrics.
                let upkeep = handle.clone();
                let spawned = std::thread::Builder::new()
                    .name("metrics-upkeep".into())
                    .spawn(move || loop {
                        std::thread::sleep(Duration::from_secs(5));
                        upkeep.run_upkeep();
                    });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "metrics upkeep thread not started");
                }
            }
            handle
        })
        .clone()
}

/// Serves `router` on `listener` until `POST /close`, ctrl-c or SIGTERM, then
/// lets requests in flight finish (and pending webhooks, up to 5 s).
///
/// Refuses to start when `state` allows `POST /close` but `listener` is not
/// bound to loopback (the configuration given to [`app`] was not
/// [bound to](Config::bound_to) this listener).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    state: AppState,
) -> Result<(), Error> {
    let bound = listener.local_addr()?;
    if state.close_enabled() && !is_loopback(bound.ip()) {
        return Err(config_error(format!(
            "the listener is bound to {bound}, but the app was built for a loopback address: \
             build it from config.bound_to(listener.local_addr()?)"
        )));
    }
    let stop = state.clone();
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            tokio::select! {
                () = stop.wait_for_shutdown() => {}
                () = shutdown_signal() => {}
            }
        })
        .await?;
    state.stop_webhooks(Duration::from_secs(5)).await;
    Ok(())
}

/// Resolves on ctrl-c or (on unix) SIGTERM: the process signals that stop
/// the server gracefully.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

// ---------------------------------------------------------------------------
// Handlers: your business logic goes here. They only run for paid requests.

/// `GET /exact/evm/eip3009`: paid $0.001.
async fn exact(Payment(payment): Payment) -> Json<Value> {
    tracing::info!(payer = ?payment.payer, amount = %payment.amount, "paid call");
    success("Paid content: exact (EIP-3009)")
}

/// `GET /upto/evm/permit2`: report what the call cost through the meter
/// (here a fixed [`UPTO_CHARGE`]; in a real API, tokens used, bytes sent...).
async fn upto(UsageMeter(meter): UsageMeter) -> Json<Value> {
    meter.set(UPTO_CHARGE);
    success("Paid content: upto (metered)")
}

/// `GET /session/demo`: paid per call, or redeemed from a prepaid session.
async fn session(Payment(payment): Payment) -> Json<Value> {
    let mut body = success("Paid content: session demo");
    if let (Some(call), Value::Object(map)) = (&payment.session, &mut body.0) {
        map.insert("sessionCallsRemaining".into(), json!(call.remaining));
    }
    body
}

/// `GET /health`: free.
async fn health() -> Json<Value> {
    Json(json!({ "status": "ok", "timestamp": timestamp() }))
}

/// `POST /close`: answers, then shuts the server down (the e2e harness's way
/// to stop a server). Only when bound to loopback: otherwise 404 with an
/// empty body, as for a path that does not exist, and the server keeps
/// running.
async fn close(State(state): State<AppState>) -> Response {
    if !state.close_enabled() {
        tracing::debug!("POST /close ignored: the server is not bound to loopback");
        return StatusCode::NOT_FOUND.into_response();
    }
    state.shutdown();
    Json(json!({ "message": "closing", "timestamp": timestamp() })).into_response()
}

fn success(message: &str) -> Json<Value> {
    Json(json!({ "message": message, "timestamp": timestamp() }))
}

/// Now as RFC 3339 UTC (`2026-01-31T12:00:00Z`).
pub fn timestamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_overrides() {
        assert!(matches!(Config::from_lookup(|_| None), Ok(c) if c == Config::dev()));
        assert_eq!(Config::dev().pay_to.to_checksum(None), DEFAULT_PAYEE);
        let config = Config::from_lookup(|k| match k {
            "PORT" => Some("0".into()),
            "DEV_FUND" => Some("0x857b06519E91e3A54538791bDbb0E22373e36b66=5000".into()),
            _ => None,
        });
        assert!(matches!(
            config.map(|c| (c.port, c.facilitator)),
            Ok((0, FacilitatorConfig::DevLedger { fund })) if fund.len() == 1
        ));
        assert!(Config::from_lookup(|k| (k == "EVM_ASSET").then(|| "0x01".into())).is_err());
        assert!(Config::from_lookup(|k| (k == "EVM_RPC_URL").then(|| "http://x".into())).is_err());
    }

    #[test]
    fn urls_are_cut_to_scheme_host_and_port() {
        for (url, shown) in [
            (
                "https://user:pw@rpc.example:8443/v2/KEY?k=1#f",
                "https://rpc.example:8443",
            ),
            ("redis://:pw@10.0.0.5:6379/0", "redis://10.0.0.5:6379"),
            ("http://h.example\\@evil/x", "http://h.example"),
            ("http://a@b@c.example?x", "http://c.example"),
            ("http://[::1]:4022/hook", "http://[::1]:4022"),
            ("no scheme at all", "<redacted>"),
            ("https://user:pa/ss@host.example", "https://<redacted>"),
            ("https://user:p?ss@host.example", "https://<redacted>"),
            ("my password://x", "<redacted>"),
            ("redis+unix:///tmp/redis.sock", "redis+unix://"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn debug_shows_no_secret() {
        let key = "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";
        let config = Config {
            facilitator: FacilitatorConfig::Chain {
                rpc_url: "https://u:rpcpw@rpc.example/v2/RPCKEY?apikey=RPCQ".into(),
                private_key: key.into(),
            },
            redis_url: Some("redis://:redispw@redis.example:6379".into()),
            webhook: Some((
                "https://hooks.example/in?token=HOOKTOKEN".into(),
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            )),
            ..Config::dev()
        };
        let debug = format!("{config:?} {:?}", config.facilitator);
        for secret in [
            &key[2..],
            "rpcpw",
            "RPCKEY",
            "RPCQ",
            "redispw",
            "HOOKTOKEN",
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        ] {
            assert!(!debug.contains(secret), "{secret} in {debug}");
        }
        for shown in [
            "https://rpc.example",
            "redis://redis.example:6379",
            "https://hooks.example",
        ] {
            assert!(debug.contains(shown), "{shown} not in {debug}");
        }
        let http = FacilitatorConfig::Http {
            url: "https://k:FACPW@f.example/api?key=FACQ".into(),
        };
        let debug = format!("{http:?}");
        assert!(
            !debug.contains("FACPW") && !debug.contains("FACQ"),
            "{debug}"
        );
    }

    #[test]
    fn loopback_addresses() {
        for ip in ["127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "0.0.0.0",
            "::",
            "10.0.0.1",
            "::ffff:10.0.0.1",
            "2001:db8::1",
        ] {
            assert!(!is_loopback(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn close_answers_404_unless_bound_to_loopback() {
        let public = Config {
            host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            ..Config::dev()
        };
        let (_, state) = engine(&public).await.unwrap();
        assert!(!state.close_enabled());
        let response = close(State(state.clone())).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let mut stopped = state.shutdown.subscribe();
        assert!(!*stopped.borrow_and_update(), "a 404 /close shut down");

        let (_, state) = engine(&Config::dev()).await.unwrap();
        assert!(state.close_enabled());
        let response = close(State(state.clone())).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(*state.shutdown.subscribe().borrow());
    }

    #[tokio::test]
    async fn serve_refuses_a_loopback_app_on_a_public_listener() {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
            .await
            .unwrap();
        let (router, state) = app(Config::dev()).await.unwrap();
        let error = serve(listener, router, state).await.unwrap_err();
        assert!(error.to_string().contains("bound_to"), "{error}");
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let t = timestamp();
        assert_eq!(t.len(), 20);
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T');
    }
}
