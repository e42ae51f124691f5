//! The payment side: the facilitator, the route table (what is sold, where,
//! for how much) and the engine built from them.

use std::{sync::Arc, time::Duration};

use tokio::sync::{watch, Mutex};
use x402_core::{
    batch::{BatchSettlement, Claimer, RedisChannelStore},
    claim::{RedisClaimStore, ReplayGuard},
    discovery::OpenApiInfo,
    facilitator::{FailoverFacilitator, HttpFacilitator},
    local::{ChainLedger, DevLedger, LocalFacilitator},
    money::AtomicAmount,
    network,
    payment_id::{PaymentIdentifiers, RedisPaymentIdStore},
    paywall::PaywallTheme,
    session::{RedisSessionStore, SessionOffer},
    siwx::{NonceKey, RedisSignInStore, RpcSmartWallets, SignInConfig, SignInWithX},
    webhook::{outbox::RedisOutbox, WebhookSecret, Webhooks},
    Engine, Facilitator, Offer, Route,
};

use crate::{config_error, is_loopback, AppState, Config, Error, FacilitatorConfig, SharedState};

/// The `upto` route's ceiling, in atomic units of the asset.
pub const UPTO_CEILING: u64 = 2_000;
/// What the `upto` route's handler charges, in atomic units
/// ([`upto_body`](crate::upto_body)).
pub const UPTO_CHARGE: u64 = 1_000;

/// How long a payment on `GET /siwx/demo` lets its payer sign in.
pub const SIWX_ACCESS: Duration = Duration::from_secs(3600);

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
        // Each URL as for FACILITATOR_URL; members are named by position
        // (logs and metrics never show the URLs).
        FacilitatorConfig::Failover { urls } => {
            let mut failover = FailoverFacilitator::builder();
            for (i, url) in urls.iter().enumerate() {
                let member = HttpFacilitator::new(url).map_err(|e| {
                    Error::Facilitator(format!("FACILITATOR_URLS, URL {}: {e}", i + 1))
                })?;
                failover = failover.member(format!("facilitator-{}", i + 1), member);
            }
            let failover = failover.build().map_err(|e| facilitator_error(&e))?;
            (Arc::new(failover), None)
        }
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

/// The batch-settlement receiver authorizer the seller signs with, when
/// `BATCH_RECEIVER_AUTHORIZER_KEY` is set.
fn batch_signer(config: &Config) -> Result<Option<alloy_signer_local::PrivateKeySigner>, Error> {
    config
        .batch
        .authorizer_key
        .as_deref()
        .map(|key| {
            key.trim().parse().map_err(|_| {
                // Never the key itself.
                config_error("BATCH_RECEIVER_AUTHORIZER_KEY is not a 32-byte hex private key")
            })
        })
        .transpose()
}

/// The paid routes: what is sold, where, for how much. Change prices here.
fn routes(
    config: &Config,
    batch: bool,
    authorizer: Option<alloy_primitives::Address>,
) -> Vec<Route> {
    let network = config.network.as_str();
    let pay_to = config.pay_to.to_checksum(None);
    let asset = config.asset.asset();
    let exact = |price: &str| Offer::exact(network, price, &pay_to).asset(asset.clone());
    let mut routes = vec![
        // $0.001 per call, paid with an EIP-3009 authorization.
        Route::get("/exact/evm/eip3009")
            .offer(exact("$0.001"))
            .description("A paid endpoint: $0.001 per call")
            .mime_type("application/json")
            // Buyers may send a payment id: a resend of a settled payment
            // with it gets the stored response back (not required).
            .payment_identifier(false),
        // The buyer authorises up to the ceiling; the handler charges what the
        // call cost (see `upto_body`).
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
        // $0.001 once; then, for an hour, the payer signs in
        // (sign-in-with-x) instead of paying again.
        Route::get("/siwx/demo")
            .offer(exact("$0.001"))
            .sign_in_with_x(
                SignInWithX::new(SIWX_ACCESS).statement("Sign in to the x402 paid-api demo"),
            )
            .description("Pay $0.001 once, then sign in for an hour")
            .mime_type("application/json"),
    ];
    // batch-settlement needs a facilitator that speaks it (the in-process
    // one does not): the route is served when the facilitator lists it.
    if batch {
        routes.push(
            // One deposit into an escrow channel, then a signed cumulative voucher
            // per call, claimed on chain in batches (see `batch_body`).
            Route::get("/batch/evm")
                .offer(
                    Offer::batch_settlement(
                        network,
                        AtomicAmount::from(crate::BATCH_CEILING),
                        &pay_to,
                        authorizer,
                    )
                    .asset(asset.clone())
                    .withdraw_delay(config.batch.withdraw_delay)
                    .min_deposit(config.batch.min_deposit),
                )
                .description("batch-settlement: up to 1000 atomic units per call, one deposit")
                .mime_type("application/json"),
        );
    }
    routes
}

/// Whether `GET /batch/evm` is served: when a hosted facilitator's
/// `/supported` lists `batch-settlement` on the network (asked once, at
/// start-up).
async fn batch_enabled(config: &Config, facilitator: &dyn Facilitator) -> bool {
    if !matches!(
        config.facilitator,
        FacilitatorConfig::Http { .. } | FacilitatorConfig::Failover { .. }
    ) {
        return false;
    }
    match facilitator.supported().await {
        Ok(supported) => supported
            .kinds
            .iter()
            .any(|k| k.scheme == x402_core::batch::BATCH_SETTLEMENT && k.network == config.network),
        Err(e) => {
            tracing::warn!(error = %e, "the facilitator's /supported did not answer; GET /batch/evm is not served");
            false
        }
    }
}

/// Builds the payment engine (facilitator, route table, replay and session
/// stores, webhooks) and the state handles: everything but the web framework.
///
/// `paid_api::app` wraps an axum router in it; `paid_api_actix::server`
/// wraps an actix-web `App` in the same engine. The webhook worker (when
/// `WEBHOOK_URL` is set) starts here, on the current tokio runtime.
///
/// Give it the configuration [bound to](Config::bound_to) the listener's
/// address: whether `POST /close` may stop the server
/// ([`AppState::close_enabled`]) is decided from `config.host`.
pub async fn engine(config: &Config) -> Result<(Engine, AppState), Error> {
    let (facilitator, dev_ledger) = facilitator(config).await?;
    let signer = batch_signer(config)?;
    let authorizer = signer
        .as_ref()
        .map(alloy_signer_local::PrivateKeySigner::address);
    // The browser paywall shows prices in dollars: tell it the configured
    // token's decimals (it knows the networks' own USDC already).
    let asset = config.asset.address.to_checksum(None);
    let batch_on = batch_enabled(config, &*facilitator).await;
    let mut engine = Engine::builder_arc(facilitator.clone())
        .local_precheck(config.local_precheck)
        .precheck_known_payers(config.precheck_known_payers)
        .routes(routes(config, batch_on, authorizer))
        .public_origin(config.public_origin())
        .paywall_page(
            PaywallTheme::new()
                .seller("x402 paid-api example")
                .stablecoin(&config.network, &asset, config.asset.decimals),
        );

    // One process: claims, sessions and payment ids in memory (the defaults). Several
    // instances behind a load balancer must share Redis: one server
    // (REDIS_URL) or a Redis Cluster (REDIS_CLUSTER_URLS).
    let redis = |e: &dyn std::fmt::Display| Error::Redis(e.to_string());
    let cluster = &config.redis_cluster_urls;
    let mut sign_in = SignInConfig::new();
    if let Some(hex) = &config.siwx_nonce_key {
        let key = NonceKey::from_hex(hex)
            .ok_or_else(|| config_error("SIWX_NONCE_KEY: expected 64 hex digits"))?;
        sign_in = sign_in.nonce_key(key);
    }
    // On a real chain, smart-contract wallets sign in too (EIP-1271, asked
    // over the same JSON-RPC endpoint).
    if let FacilitatorConfig::Chain { rpc_url, .. } = &config.facilitator {
        sign_in = sign_in.smart_wallets(RpcSmartWallets::new().chain(&config.network, rpc_url));
    }
    if let Some(url) = &config.redis_url {
        let store = RedisSignInStore::connect(url)
            .await
            .map_err(|e| redis(&e))?;
        sign_in = sign_in.store(store);
    } else if !cluster.is_empty() {
        let store = RedisSignInStore::connect_cluster(cluster)
            .await
            .map_err(|e| redis(&e))?;
        sign_in = sign_in.store(store);
    }
    engine = engine.sign_in_with_x(sign_in);
    // Batch-settlement channels: with the claims and sessions (Redis keeps
    // what was charged and not claimed yet across restarts).
    let mut batch = if let Some(url) = &config.redis_url {
        BatchSettlement::new(
            RedisChannelStore::connect(url)
                .await
                .map_err(|e| redis(&e))?,
        )
    } else if !cluster.is_empty() {
        BatchSettlement::new(
            RedisChannelStore::connect_cluster(cluster)
                .await
                .map_err(|e| redis(&e))?,
        )
    } else {
        BatchSettlement::in_memory()
    };
    if let Some(signer) = signer {
        batch = batch.authorizer(signer);
    }
    if let Some(escrow) = config.batch.escrow {
        batch = batch.contract(escrow);
    }
    engine = engine.batch_settlement(batch);
    if let Some(url) = &config.redis_url {
        let claims = RedisClaimStore::connect(url).await.map_err(|e| redis(&e))?;
        let sessions = RedisSessionStore::connect(url)
            .await
            .map_err(|e| redis(&e))?;
        let ids = RedisPaymentIdStore::connect(url)
            .await
            .map_err(|e| redis(&e))?;
        engine = engine
            .replay_guard(ReplayGuard::new(claims))
            .session_store(sessions)
            .payment_identifiers(PaymentIdentifiers::new(ids));
    } else if !cluster.is_empty() {
        let claims = RedisClaimStore::connect_cluster(cluster)
            .await
            .map_err(|e| redis(&e))?;
        let sessions = RedisSessionStore::connect_cluster(cluster)
            .await
            .map_err(|e| redis(&e))?;
        let ids = RedisPaymentIdStore::connect_cluster(cluster)
            .await
            .map_err(|e| redis(&e))?;
        engine = engine
            .replay_guard(ReplayGuard::new(claims))
            .session_store(sessions)
            .payment_identifiers(PaymentIdentifiers::new(ids));
    }

    // Signed settlement webhooks, delivered in the background.
    let mut webhook_worker = None;
    if let Some((url, secret)) = &config.webhook {
        let secret = WebhookSecret::parse(secret)
            .map_err(|e| config_error(format!("WEBHOOK_SECRET: {e}")))?;
        let mut builder = Webhooks::builder(url, [secret]);
        if let Some(url) = &config.redis_url {
            let outbox = RedisOutbox::connect(url).await.map_err(|e| redis(&e))?;
            builder = builder.outbox(outbox);
        } else if !cluster.is_empty() {
            let outbox = RedisOutbox::connect_cluster(cluster)
                .await
                .map_err(|e| redis(&e))?;
            builder = builder.outbox(outbox);
        }
        let webhooks = builder
            .build()
            .map_err(|e| config_error(format!("WEBHOOK_URL: {e}")))?;
        engine = engine.hooks(webhooks.hooks());
        webhook_worker = Some(webhooks.start());
    }

    let engine = engine.build()?;
    // Claims the latest vouchers of every channel and settles them to
    // `pay_to`, every BATCH_CLAIM_INTERVAL_SECS (and sooner past
    // BATCH_CLAIM_THRESHOLD).
    let claimer = config
        .batch
        .claim_interval
        .filter(|_| batch_on)
        .map(|interval| {
            Claimer::new(
                facilitator,
                engine.batch_settlement(),
                &config.network,
                config.pay_to,
                config.asset.address,
            )
            .spawn(
                interval,
                config
                    .batch
                    .claim_threshold
                    .map(alloy_primitives::U256::from),
            )
        });
    let (shutdown, _) = watch::channel(false);
    let state = AppState::new(SharedState {
        dev_ledger,
        network: config.network.as_str().into(),
        asset: Arc::new(config.asset.clone()),
        pay_to: config.pay_to,
        shutdown: Arc::new(shutdown),
        webhook_worker: Arc::new(Mutex::new(webhook_worker)),
        close_enabled: is_loopback(config.host),
        runs: Arc::default(),
        batch_enabled: batch_on,
        batch_charge: config.batch.charge,
        batch_claimer: Arc::new(std::sync::Mutex::new(claimer)),
    });
    Ok((engine, state))
}

/// The `info` of the OpenAPI document both example servers serve at
/// `/.well-known/x402/openapi.json`.
pub fn openapi_info() -> OpenApiInfo {
    OpenApiInfo::new("paid-api", env!("CARGO_PKG_VERSION")).description(
        "An x402 example API: exact, upto, prepaid-session, sign-in-with-x and batch-settlement routes.",
    )
}
