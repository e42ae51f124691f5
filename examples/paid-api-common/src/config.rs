//! The configuration, from the environment ([`Config::from_env`]), and its
//! redacting `Debug`.

use std::{
    env,
    net::{IpAddr, Ipv4Addr, SocketAddr},
};

use alloy_primitives::{Address, U256};
use x402_core::{money::AtomicAmount, network, Asset};

use crate::Error;

/// The default port (the upstream e2e harness passes its own in `PORT`).
pub const DEFAULT_PORT: u16 = 4021;
/// The default network: Base Sepolia (a testnet).
pub const DEFAULT_NETWORK: &str = "eip155:84532";
/// Where payments go when `EVM_PAYEE_ADDRESS` is unset. A placeholder for
/// local runs: **set your own address** before taking real payments.
pub const DEFAULT_PAYEE: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

pub(crate) fn config_error(message: impl Into<String>) -> Error {
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

    /// The asset as the route table names it.
    pub fn asset(&self) -> Asset {
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
    /// Several hosted facilitators, the first the primary, behind
    /// `x402_core::facilitator::FailoverFacilitator` (`FACILITATOR_URLS`).
    Failover {
        /// Their base URLs, in order (each as for [`Http`](Self::Http)).
        urls: Vec<String>,
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
            Self::Failover { urls } => f
                .debug_struct("Failover")
                .field(
                    "urls",
                    &urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>(),
                )
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
    /// Redis for replay claims, sessions, payment ids and the webhook outbox (`REDIS_URL`);
    /// in memory (one process) when unset and no cluster is given.
    pub redis_url: Option<String>,
    /// A Redis Cluster for the same stores instead (`REDIS_CLUSTER_URLS`:
    /// node URLs, comma-separated; some nodes are enough, the others are
    /// found from them). Empty when unset; never set with `redis_url`.
    pub redis_cluster_urls: Vec<String>,
    /// Where settlement webhooks go (`WEBHOOK_URL`) and their secret
    /// (`WEBHOOK_SECRET`, `whsec_...`).
    pub webhook: Option<(String, String)>,
    /// The key sign-in-with-x nonces are signed with (`SIWX_NONCE_KEY`, 64
    /// hex digits): set the same one on every instance sharing Redis.
    /// Random per process when unset.
    pub siwx_nonce_key: Option<String>,
    /// The `batch-settlement` route (`BATCH_*`).
    pub batch: crate::BatchConfig,
    /// Whether the engine checks each EVM payment's signature, window,
    /// amount and recipient itself before calling the facilitator
    /// ([`EngineBuilder::local_precheck`](x402_core::EngineBuilder::local_precheck)):
    /// `true`, and no variable turns it off. Without it, every forged
    /// payload costs the facilitator a `/verify` call. The load harness
    /// turns it off to measure what it costs.
    pub local_precheck: bool,
    /// Whether that check leaves the signature of a payer the facilitator
    /// already accepted to the facilitator
    /// ([`EngineBuilder::precheck_known_payers`](x402_core::EngineBuilder::precheck_known_payers)):
    /// `true`, and no variable turns it off. The load harness turns it off
    /// to measure a server whose every payer is new.
    pub precheck_known_payers: bool,
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
                "redis_cluster_urls",
                &self
                    .redis_cluster_urls
                    .iter()
                    .map(|url| redact_url(url))
                    .collect::<Vec<_>>(),
            )
            .field(
                "webhook",
                &self
                    .webhook
                    .as_ref()
                    .map(|(url, _)| (redact_url(url), "<redacted>")),
            )
            .field(
                "siwx_nonce_key",
                &self.siwx_nonce_key.as_ref().map(|_| "<redacted>"),
            )
            .field("batch", &self.batch)
            .field("local_precheck", &self.local_precheck)
            .field("precheck_known_payers", &self.precheck_known_payers)
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
            redis_cluster_urls: Vec::new(),
            webhook: None,
            siwx_nonce_key: None,
            batch: crate::BatchConfig::default(),
            local_precheck: true,
            precheck_known_payers: true,
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
    ///   `http://` only to a loopback host, or [`engine`](crate::engine)
    ///   refuses it); else `EVM_RPC_URL` + `FACILITATOR_EVM_PRIVATE_KEY`:
    ///   the in-process facilitator on that chain; else the dev ledger, with
    ///   `DEV_FUND=0xPAYER=AMOUNT,...` (atomic units) credited at start-up;
    ///   `FACILITATOR_URLS` (`https://a,https://b`, instead of
    ///   `FACILITATOR_URL`): several facilitators, tried in order with
    ///   failover;
    /// - `REDIS_URL`: one Redis server for replay claims, sessions, payment ids and the
    ///   webhook outbox, shared by every instance; or `REDIS_CLUSTER_URLS`
    ///   (`redis://host:port,redis://host:port,...`): a Redis Cluster for the
    ///   same, and for sign-in-with-x (unset: in-memory stores, one process);
    /// - `WEBHOOK_URL` + `WEBHOOK_SECRET`;
    /// - `SIWX_NONCE_KEY`: 64 hex digits, the key of sign-in-with-x nonces,
    ///   the same on every instance (unset: random per process);
    /// - the `batch-settlement` route: `BATCH_RECEIVER_AUTHORIZER_KEY`
    ///   (unset: the facilitator's authorizer signs claims and refunds),
    ///   `BATCH_WITHDRAW_DELAY` (900), `BATCH_MIN_DEPOSIT` (100 000),
    ///   `BATCH_CHARGE` (1000), `BATCH_CLAIM_INTERVAL_SECS` (60; 0: no
    ///   claimer), `BATCH_CLAIM_THRESHOLD`, `BATCH_ESCROW_ADDRESS` (see
    ///   [`BatchConfig`](crate::BatchConfig)).
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

        let facilitator_urls: Vec<String> = var("FACILITATOR_URLS")
            .map(|list| {
                list.split(',')
                    .map(str::trim)
                    .filter(|url| !url.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if !facilitator_urls.is_empty() && var("FACILITATOR_URL").is_some() {
            return Err(config_error(
                "set FACILITATOR_URL (one facilitator) or FACILITATOR_URLS (several, in order), not both",
            ));
        }
        config.facilitator = match (var("FACILITATOR_URL"), var("EVM_RPC_URL")) {
            _ if !facilitator_urls.is_empty() => FacilitatorConfig::Failover {
                urls: facilitator_urls,
            },
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

        config.siwx_nonce_key = var("SIWX_NONCE_KEY");
        config.redis_url = var("REDIS_URL");
        config.redis_cluster_urls = var("REDIS_CLUSTER_URLS")
            .map(|list| {
                list.split(',')
                    .map(str::trim)
                    .filter(|url| !url.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if config.redis_url.is_some() && !config.redis_cluster_urls.is_empty() {
            return Err(config_error(
                "set REDIS_URL (one Redis server) or REDIS_CLUSTER_URLS (a Redis Cluster), not both",
            ));
        }
        config.webhook = match (var("WEBHOOK_URL"), var("WEBHOOK_SECRET")) {
            (Some(url), Some(secret)) => Some((url, secret)),
            (None, None) => None,
            _ => {
                return Err(config_error(
                    "set both WEBHOOK_URL and WEBHOOK_SECRET, or neither",
                ))
            }
        };
        config.batch = crate::BatchConfig::from_lookup(&var)?;
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
    fn several_facilitators_in_order() {
        let several = Config::from_lookup(|k| {
            (k == "FACILITATOR_URLS").then(|| " https://a.example, https://b.example/x402 ,".into())
        });
        assert!(matches!(
            several.map(|c| c.facilitator),
            Ok(FacilitatorConfig::Failover { urls })
                if urls == ["https://a.example", "https://b.example/x402"]
        ));
        let both = Config::from_lookup(|k| match k {
            "FACILITATOR_URL" | "FACILITATOR_URLS" => Some("https://a.example".into()),
            _ => None,
        });
        assert!(matches!(both, Err(e) if e.to_string().contains("not both")));
    }

    #[test]
    fn redis_is_one_server_or_a_cluster() {
        let cluster = Config::from_lookup(|k| {
            (k == "REDIS_CLUSTER_URLS")
                .then(|| " redis://10.0.0.1:7000, redis://10.0.0.2:7000 ,,".into())
        });
        assert!(matches!(
            cluster,
            Ok(c) if c.redis_cluster_urls == ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]
                && c.redis_url.is_none()
        ));
        let both = Config::from_lookup(|k| match k {
            "REDIS_URL" => Some("redis://10.0.0.1:6379".into()),
            "REDIS_CLUSTER_URLS" => Some("redis://10.0.0.1:7000".into()),
            _ => None,
        });
        assert!(matches!(both, Err(e) if e.to_string().contains("not both")));
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
            redis_cluster_urls: vec!["redis://:clusterpw@node.example:7000".into()],
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
            "clusterpw",
            "HOOKTOKEN",
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        ] {
            assert!(!debug.contains(secret), "{secret} in {debug}");
        }
        for shown in [
            "https://rpc.example",
            "redis://redis.example:6379",
            "redis://node.example:7000",
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
        let failover = FacilitatorConfig::Failover {
            urls: vec!["https://k:FACPW@f.example/api?key=FACQ".into()],
        };
        let debug = format!("{failover:?}");
        assert!(
            !debug.contains("FACPW") && !debug.contains("FACQ"),
            "{debug}"
        );
    }
}
