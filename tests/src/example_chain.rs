//! An example server (`examples/paid-api` on axum or `examples/paid-api-actix`)
//! in process, settling TestUSDC on its own anvil chain with the in-process
//! facilitator: what the interop tests of the official clients pay.
//!
//! Accounts: the facilitator settles with account 0, the payer is account 1
//! (minted [`FUNDING`]), the payee account 2.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{future::Future, pin::Pin};

use alloy_primitives::{Address, U256};
use alloy_provider::DynProvider;
use paid_api_common::{AssetConfig, Config, FacilitatorConfig};
use tokio::task::JoinHandle;

use crate::anvil::{self, accounts, Anvil};

/// A running example server: its base URL and its task.
pub type Running = (String, JoinHandle<Result<(), paid_api::Error>>);

/// Starts an example server for a configuration ([`axum()`] or [`actix()`]).
pub type Start = fn(Config) -> Pin<Box<dyn Future<Output = Running> + Send>>;

/// The payer's starting balance (atomic units: 1 USDC).
pub const FUNDING: u64 = 1_000_000;

/// `examples/paid-api` (axum) on a free loopback port.
pub fn axum(config: Config) -> Pin<Box<dyn Future<Output = Running> + Send>> {
    Box::pin(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let config = config.bound_to(listener.local_addr().unwrap());
        let (app, state) = paid_api::app(config).await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        (base, tokio::spawn(paid_api::serve(listener, app, state)))
    })
}

/// `examples/paid-api-actix` on a free loopback port.
pub fn actix(config: Config) -> Pin<Box<dyn Future<Output = Running> + Send>> {
    Box::pin(async move {
        let server = paid_api_actix::server(config).await.unwrap();
        let base = format!("http://{}", server.local_addr());
        (base, tokio::spawn(server.run()))
    })
}

/// What the chain and the server start with, beyond the defaults.
#[derive(Debug, Default)]
pub struct Setup {
    /// Install the test Permit2 and the x402 Permit2 proxies at their
    /// canonical addresses and have the payer approve Permit2 (what a wallet
    /// does once per token), so that `upto` can settle.
    pub permit2: bool,
    /// The server's `REDIS_URL` (claims, sessions, payment ids, sign-ins).
    pub redis_url: Option<String>,
}

/// anvil with TestUSDC, and an example server settling on it. The server's
/// task is aborted on drop; anvil ends with its [`Anvil`].
pub struct ExampleChain {
    /// The chain.
    pub anvil: Anvil,
    /// A provider signing as account 0.
    pub provider: DynProvider,
    /// TestUSDC.
    pub token: Address,
    /// Account 1.
    pub payer: Address,
    /// Account 2.
    pub payee: Address,
    /// The server's base URL.
    pub base: String,
    /// The server's configuration, to start more instances of it.
    pub config: Config,
    server: JoinHandle<Result<(), paid_api::Error>>,
}

impl std::fmt::Debug for ExampleChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExampleChain")
            .field("anvil", &self.anvil.url)
            .field("token", &self.token)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Drop for ExampleChain {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl ExampleChain {
    /// A chain and a server started by `server`, with the defaults.
    pub async fn start(server: Start) -> Self {
        Self::start_with(server, Setup::default()).await
    }

    /// A chain and a server started by `server`, with `setup`.
    pub async fn start_with(server: Start, setup: Setup) -> Self {
        let anvil = Anvil::start();
        let provider = anvil.provider(accounts::KEY_0).await;
        let token = anvil::deploy_test_usdc(&provider, "USDC", "2").await;
        let payer = anvil::address_of(accounts::KEY_1);
        let payee = anvil::address_of(accounts::KEY_2);
        anvil::mint(&provider, token, payer, FUNDING).await;
        if setup.permit2 {
            anvil::install_permit2(&provider).await;
            let owner = anvil.provider(accounts::KEY_1).await;
            anvil::approve(&owner, token, x402_core::evm::PERMIT2_ADDRESS, U256::MAX).await;
        }
        // What EVM_RPC_URL, FACILITATOR_EVM_PRIVATE_KEY, EVM_ASSET* and
        // EVM_PAYEE_ADDRESS would configure.
        let config = Config {
            port: 0,
            pay_to: payee,
            asset: AssetConfig {
                address: token,
                name: "USDC".into(),
                version: "2".into(),
                decimals: 6,
            },
            facilitator: FacilitatorConfig::Chain {
                rpc_url: anvil.url.clone(),
                private_key: accounts::KEY_0.into(),
            },
            redis_url: setup.redis_url,
            ..Config::dev()
        };
        let (base, server) = server(config.clone()).await;
        Self {
            anvil,
            provider,
            token,
            payer,
            payee,
            base,
            config,
            server,
        }
    }

    /// The payer's and the payee's TestUSDC balances.
    pub async fn balances(&self) -> (U256, U256) {
        (
            anvil::balance_of(&self.provider, self.token, self.payer).await,
            anvil::balance_of(&self.provider, self.token, self.payee).await,
        )
    }
}
