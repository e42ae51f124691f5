//! What buyers send: the `deposit`, `voucher` and `refund` payloads, and the
//! channel config they all carry.

use alloy_primitives::{Address, Bytes, B256};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::reason;
use crate::money::AtomicAmount;

/// A channel's immutable configuration; its EIP-712 hash is the channel id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelConfig {
    /// The buyer's wallet.
    pub payer: Address,
    /// The key that signs vouchers, or zero for the payer itself (ERC-1271).
    pub payer_authorizer: Address,
    /// The seller's receiving address (`payTo`).
    pub receiver: Address,
    /// The address that authorizes claims and refunds.
    pub receiver_authorizer: Address,
    /// The token.
    pub token: Address,
    /// Seconds a timed withdrawal waits.
    pub withdraw_delay: u64,
    /// Tells channels of the same parameters apart.
    pub salt: B256,
}

/// A signed cumulative voucher.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Voucher {
    /// The channel it draws on.
    pub channel_id: B256,
    /// The cumulative ceiling the seller may claim.
    pub max_claimable_amount: AtomicAmount,
    /// The payer authorizer's EIP-712 signature.
    pub signature: Bytes,
}

/// A buyer's batch-settlement payload.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BatchPayload {
    /// A deposit (first request or top-up) with the request's voucher.
    Deposit {
        /// The channel.
        config: ChannelConfig,
        /// The request's voucher.
        voucher: Voucher,
        /// The amount deposited.
        amount: AtomicAmount,
    },
    /// A voucher against the channel's balance.
    Voucher {
        /// The channel.
        config: ChannelConfig,
        /// The request's voucher.
        voucher: Voucher,
    },
    /// A cooperative refund request, with a zero-charge voucher.
    Refund {
        /// The channel.
        config: ChannelConfig,
        /// The zero-charge voucher.
        voucher: Voucher,
        /// The amount asked back; all that is left when `None`.
        amount: Option<AtomicAmount>,
    },
}

impl BatchPayload {
    /// Reads a payment's `payload`, or the spec's reason why it cannot be.
    pub fn parse(value: &Value) -> Result<Self, &'static str> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire {
            #[serde(rename = "type")]
            kind: String,
            channel_config: ChannelConfig,
            voucher: Voucher,
            #[serde(default)]
            deposit: Option<DepositWire>,
            #[serde(default)]
            amount: Option<AtomicAmount>,
        }
        #[derive(Deserialize)]
        struct DepositWire {
            amount: AtomicAmount,
            authorization: serde_json::Map<String, Value>,
        }
        let kind = value.get("type").and_then(Value::as_str);
        let malformed = match kind {
            Some("deposit") => reason::DEPOSIT_PAYLOAD,
            Some("refund") => reason::REFUND_PAYLOAD,
            Some("voucher") => reason::VOUCHER_PAYLOAD,
            _ => return Err(reason::PAYLOAD_TYPE),
        };
        let wire = Wire::deserialize(value).map_err(|_| malformed)?;
        if wire.voucher.max_claimable_amount.get() > alloy_primitives::U256::from(u128::MAX) {
            return Err(malformed);
        }
        match wire.kind.as_str() {
            "deposit" => {
                let deposit = wire.deposit.ok_or(malformed)?;
                if deposit.authorization.is_empty() || deposit.amount.is_zero() {
                    return Err(malformed);
                }
                Ok(Self::Deposit {
                    config: wire.channel_config,
                    voucher: wire.voucher,
                    amount: deposit.amount,
                })
            }
            "voucher" => Ok(Self::Voucher {
                config: wire.channel_config,
                voucher: wire.voucher,
            }),
            _ => Ok(Self::Refund {
                config: wire.channel_config,
                voucher: wire.voucher,
                amount: wire.amount,
            }),
        }
    }

    /// The channel config.
    pub fn config(&self) -> &ChannelConfig {
        match self {
            Self::Deposit { config, .. }
            | Self::Voucher { config, .. }
            | Self::Refund { config, .. } => config,
        }
    }

    /// The voucher.
    pub fn voucher(&self) -> &Voucher {
        match self {
            Self::Deposit { voucher, .. }
            | Self::Voucher { voucher, .. }
            | Self::Refund { voucher, .. } => voucher,
        }
    }

    /// Whether this is a refund request (zero charge, no handler).
    pub fn is_refund(&self) -> bool {
        matches!(self, Self::Refund { .. })
    }
}
