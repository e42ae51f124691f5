//! The state handles the running app hands out.

use std::{net::IpAddr, sync::Arc, time::Duration};

use alloy_primitives::{Address, U256};
use tokio::sync::{watch, Mutex};
use x402_core::{local::DevLedger, money::AtomicAmount, webhook::WebhookWorker};

use crate::{config::AssetConfig, config_error, Error};

/// Handles the running app hands out: the dev ledger (to fund payers and read
/// balances), the route's network and asset, and the shutdown switch.
///
/// axum clones the state for every request it routes, and the paywall
/// clones the route service (and so the state) for every protected one: the
/// handles live behind one `Arc`, so that a clone is one reference count.
#[derive(Debug, Clone)]
pub struct AppState(Arc<SharedState>);

/// What every clone of an [`AppState`] shares (read through it).
#[derive(Debug)]
pub struct SharedState {
    pub(crate) dev_ledger: Option<Arc<DevLedger>>,
    pub(crate) network: Arc<str>,
    pub(crate) asset: Arc<AssetConfig>,
    pub(crate) pay_to: Address,
    pub(crate) shutdown: Arc<watch::Sender<bool>>,
    pub(crate) webhook_worker: Arc<Mutex<Option<WebhookWorker>>>,
    /// Whether `POST /close` may stop the server: bound to loopback.
    pub(crate) close_enabled: bool,
    /// How many times each paid handler has run.
    pub(crate) runs: Arc<crate::Runs>,
    /// Whether `GET /batch/evm` is sold (the facilitator lists
    /// batch-settlement).
    pub(crate) batch_enabled: bool,
    /// What one `GET /batch/evm` call charges.
    pub(crate) batch_charge: u64,
    /// The batch-settlement claimer's task, when one runs.
    pub(crate) batch_claimer: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl std::ops::Deref for AppState {
    type Target = SharedState;

    fn deref(&self) -> &SharedState {
        &self.0
    }
}

impl AppState {
    pub(crate) fn new(shared: SharedState) -> Self {
        Self(Arc::new(shared))
    }

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

    /// Counts one more run of `route`'s handler and says which it is (1 for
    /// the first since start): its body's `"run"`, so a check can count
    /// handler runs exactly.
    pub fn count_run(&self, route: crate::PaidRoute) -> u64 {
        self.runs.count(route)
    }

    /// How many times `route`'s handler has run.
    pub fn runs(&self, route: crate::PaidRoute) -> u64 {
        self.runs.get(route)
    }

    /// Who gets paid.
    pub fn pay_to(&self) -> Address {
        self.pay_to
    }

    /// Whether `POST /close` stops the server: only when the configuration
    /// given to [`engine`](crate::engine) names a loopback address (bound to 0.0.0.0 or a
    /// public address, `POST /close` answers 404 and changes nothing).
    pub fn close_enabled(&self) -> bool {
        self.close_enabled
    }

    /// Asks the server to shut down gracefully (as `POST /close` does): both
    /// example servers (`paid_api::serve`, `paid_api_actix::Server::run`)
    /// stop on [`wait_for_shutdown`](Self::wait_for_shutdown).
    pub fn shutdown(&self) {
        // `send_replace`, not `send`: the flag must stick even while nobody
        // waits on it yet.
        self.shutdown.send_replace(true);
    }

    /// Whether [`shutdown`](Self::shutdown) has been called.
    pub fn shutdown_requested(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Resolves once [`shutdown`](Self::shutdown) has been called (at once if
    /// it already was). A server stops on it.
    pub async fn wait_for_shutdown(&self) {
        let mut rx = self.shutdown.subscribe();
        let _ = rx.wait_for(|closed| *closed).await;
    }

    /// Whether `GET /batch/evm` is sold: the facilitator listed
    /// `batch-settlement` on the network at start-up. Servers route it only
    /// then (404 otherwise).
    pub fn batch_enabled(&self) -> bool {
        self.batch_enabled
    }

    /// How many times the `GET /batch/evm` handler has run.
    pub fn batch_runs(&self) -> u64 {
        self.runs(crate::PaidRoute::Batch)
    }

    /// Stops the batch-settlement claimer, if one runs (vouchers not
    /// claimed yet stay in the channel store for the next start).
    pub fn stop_claimer(&self) {
        let task = self
            .batch_claimer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            task.abort();
        }
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
pub fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
