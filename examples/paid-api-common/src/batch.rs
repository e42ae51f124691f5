//! The `batch-settlement` route's settings (`BATCH_*`), and its claimer.

use std::{str::FromStr, time::Duration};

use alloy_primitives::Address;

use crate::{config_error, Error};

/// The `batch-settlement` route's per-call ceiling, in atomic units.
pub const BATCH_CEILING: u64 = 1_000;

/// The `GET /batch/evm` route's settings (see [`Config::from_env`](crate::Config::from_env)).
#[derive(Clone, PartialEq, Eq)]
pub struct BatchConfig {
    /// `BATCH_RECEIVER_AUTHORIZER_KEY`: the seller's receiver-authorizer
    /// key, which signs claims and refunds. Unset: the facilitator's
    /// authorizer (from its `/supported`) signs them.
    pub authorizer_key: Option<String>,
    /// `BATCH_WITHDRAW_DELAY` (seconds, default 900).
    pub withdraw_delay: u64,
    /// `BATCH_MIN_DEPOSIT` (atomic units): the deposit buyers are asked for
    /// (default 100 calls' worth).
    pub min_deposit: u128,
    /// `BATCH_CHARGE` (atomic units, default the ceiling): what one call
    /// costs, reported through the meter.
    pub charge: u64,
    /// `BATCH_CLAIM_INTERVAL_SECS` (default 60; 0: no claimer): how often
    /// the claimer claims the latest vouchers and settles them.
    pub claim_interval: Option<Duration>,
    /// `BATCH_CLAIM_THRESHOLD` (atomic units): claim sooner once this much
    /// is charged and unclaimed.
    pub claim_threshold: Option<u128>,
    /// `BATCH_ESCROW_ADDRESS`: the escrow contract (default the canonical
    /// `x402BatchSettlement` address).
    pub escrow: Option<Address>,
}

impl std::fmt::Debug for BatchConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchConfig")
            .field(
                "authorizer_key",
                &self.authorizer_key.as_ref().map(|_| "<redacted>"),
            )
            .field("withdraw_delay", &self.withdraw_delay)
            .field("min_deposit", &self.min_deposit)
            .field("charge", &self.charge)
            .field("claim_interval", &self.claim_interval)
            .field("claim_threshold", &self.claim_threshold)
            .field("escrow", &self.escrow)
            .finish()
    }
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            authorizer_key: None,
            withdraw_delay: x402_core::batch::MIN_WITHDRAW_DELAY,
            min_deposit: u128::from(BATCH_CEILING) * 100,
            charge: BATCH_CEILING,
            claim_interval: Some(Duration::from_secs(60)),
            claim_threshold: None,
            escrow: None,
        }
    }
}

fn number<T: FromStr>(name: &str, value: &str) -> Result<T, Error> {
    value
        .trim()
        .parse()
        .map_err(|_| config_error(format!("{name} {value:?} is not a number")))
}

impl BatchConfig {
    /// Reads the `BATCH_*` variables.
    pub(crate) fn from_lookup(var: &impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let mut config = Self {
            authorizer_key: var("BATCH_RECEIVER_AUTHORIZER_KEY"),
            ..Self::default()
        };
        if let Some(v) = var("BATCH_WITHDRAW_DELAY") {
            config.withdraw_delay = number("BATCH_WITHDRAW_DELAY", &v)?;
        }
        if let Some(v) = var("BATCH_MIN_DEPOSIT") {
            config.min_deposit = number("BATCH_MIN_DEPOSIT", &v)?;
        }
        if let Some(v) = var("BATCH_CHARGE") {
            config.charge = number("BATCH_CHARGE", &v)?;
            if config.charge > BATCH_CEILING {
                return Err(config_error(format!(
                    "BATCH_CHARGE {} is above the ceiling {BATCH_CEILING}",
                    config.charge
                )));
            }
        }
        if let Some(v) = var("BATCH_CLAIM_INTERVAL_SECS") {
            let secs: u64 = number("BATCH_CLAIM_INTERVAL_SECS", &v)?;
            config.claim_interval = (secs > 0).then(|| Duration::from_secs(secs));
        }
        if let Some(v) = var("BATCH_CLAIM_THRESHOLD") {
            config.claim_threshold = Some(number("BATCH_CLAIM_THRESHOLD", &v)?);
        }
        if let Some(v) = var("BATCH_ESCROW_ADDRESS") {
            config.escrow = Some(v.trim().parse().map_err(|_| {
                config_error(format!("BATCH_ESCROW_ADDRESS {v:?} is not an address"))
            })?);
        }
        Ok(config)
    }
}
