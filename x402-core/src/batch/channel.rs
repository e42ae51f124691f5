//! The seller's per-channel state, as the spec lists it.

use alloy_primitives::{Bytes, B256, U256};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::payload::ChannelConfig;
use crate::money::decimal_or_hex;

/// A request holding a channel: no other request on the channel proceeds
/// until it commits, is released, or expires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    /// The holding request's random id.
    pub id: u64,
    /// Unix milliseconds after which the hold lapses (a crashed instance).
    pub expires_at: u64,
}

/// A claim on its way: what it claims, since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimMark {
    /// The cumulative amount claimed.
    #[serde(with = "decimal_or_hex")]
    pub total_claimed: U256,
    /// The voucher ceiling it claims under.
    #[serde(with = "decimal_or_hex")]
    pub max_claimable: U256,
    /// The voucher signature it claims with.
    pub signature: Bytes,
    /// When the claim was started (Unix ms).
    pub started_at: u64,
}

/// One channel's state on the seller's side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelRecord {
    /// The channel id.
    pub channel_id: B256,
    /// The channel's configuration.
    pub channel_config: ChannelConfig,
    /// What the seller has charged on this channel in all (cumulative).
    #[serde(with = "decimal_or_hex")]
    pub charged_cumulative_amount: U256,
    /// The ceiling of the latest voucher the buyer signed.
    #[serde(with = "decimal_or_hex")]
    pub signed_max_claimable: U256,
    /// The latest voucher's signature.
    pub signature: Bytes,
    /// The channel's balance on chain (mirrored).
    #[serde(with = "decimal_or_hex")]
    pub balance: U256,
    /// What has been claimed on chain (mirrored, and raised by the claimer).
    #[serde(with = "decimal_or_hex")]
    pub total_claimed: U256,
    /// When a timed withdrawal was started (Unix seconds), 0 if none
    /// (mirrored).
    pub withdraw_requested_at: u64,
    /// The next refund nonce (mirrored).
    #[serde(with = "decimal_or_hex")]
    pub refund_nonce: U256,
    /// When the mirrored fields were last read from the chain (Unix ms).
    #[serde(default)]
    pub onchain_synced_at: Option<u64>,
    /// When the last paid request committed (Unix ms).
    pub last_request_timestamp: u64,
    /// The request holding the channel, if any.
    #[serde(default)]
    pub pending: Option<Pending>,
    /// A claim the claimer submitted and has not seen answered. Set before
    /// the claim is sent, so that no other claimer sends it too, and a
    /// claimer that restarts checks the chain before claiming again.
    #[serde(default)]
    pub claim_in_flight: Option<ClaimMark>,
    /// Bumped by every write; stores swap records only at the revision read.
    #[serde(default)]
    pub revision: u64,
}

impl ChannelRecord {
    /// Whether a live request holds the channel at `now_ms`.
    pub fn is_held(&self, now_ms: u64) -> bool {
        self.pending.as_ref().is_some_and(|p| p.expires_at > now_ms)
    }

    /// What has been charged but not claimed yet.
    pub fn unclaimed(&self) -> U256 {
        self.charged_cumulative_amount
            .saturating_sub(self.total_claimed)
    }

    /// The `channelState` object of receipts and corrective 402s.
    pub fn channel_state(&self) -> Value {
        json!({
            "channelId": self.channel_id,
            "balance": self.balance.to_string(),
            "totalClaimed": self.total_claimed.to_string(),
            "withdrawRequestedAt": self.withdraw_requested_at,
            "refundNonce": self.refund_nonce.to_string(),
            "chargedCumulativeAmount": self.charged_cumulative_amount.to_string(),
        })
    }

    /// The `voucherState` object of corrective 402s: the latest voucher, so
    /// that the buyer can check the seller's count against its own signature.
    pub fn voucher_state(&self) -> Value {
        json!({
            "signedMaxClaimable": self.signed_max_claimable.to_string(),
            "signature": self.signature,
        })
    }
}

/// The on-chain part of a channel, as a facilitator reports it (`/verify`'s
/// `extra`, `/settle`'s `extra.channelState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OnchainState {
    /// The balance.
    pub balance: U256,
    /// The amount claimed.
    pub total_claimed: U256,
    /// When a timed withdrawal was started, 0 if none.
    pub withdraw_requested_at: u64,
    /// The refund nonce.
    pub refund_nonce: U256,
}

impl OnchainState {
    /// Reads the snapshot from a facilitator's object; `None` if `balance` or
    /// `totalClaimed` is missing or not an integer.
    pub fn from_extra(object: &serde_json::Map<String, Value>) -> Option<Self> {
        let uint = |key: &str| -> Option<U256> {
            match object.get(key)? {
                Value::String(s) => crate::money::AtomicAmount::parse_decimal(s)
                    .ok()
                    .map(crate::money::AtomicAmount::get),
                Value::Number(n) => n.as_u64().map(U256::from),
                _ => None,
            }
        };
        Some(Self {
            balance: uint("balance")?,
            total_claimed: uint("totalClaimed")?,
            withdraw_requested_at: uint("withdrawRequestedAt")
                .map(|v| v.saturating_to::<u64>())
                .unwrap_or(0),
            refund_nonce: uint("refundNonce").unwrap_or(U256::ZERO),
        })
    }

    /// Copies the snapshot into `record`, read at `now_ms`.
    pub fn mirror_into(self, record: &mut ChannelRecord, now_ms: u64) {
        record.balance = self.balance;
        record.total_claimed = record.total_claimed.max(self.total_claimed);
        record.withdraw_requested_at = self.withdraw_requested_at;
        record.refund_nonce = self.refund_nonce;
        record.onchain_synced_at = Some(now_ms);
    }
}
