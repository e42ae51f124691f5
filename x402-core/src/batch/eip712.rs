//! The scheme's EIP-712 messages: channel ids, vouchers, refunds and claim
//! batches, all under the `x402 Batch Settlement` domain of the escrow
//! contract on one chain.

use std::borrow::Cow;

use alloy_primitives::{address, aliases::U40, Address, B256, U256};
use alloy_sol_types::{Eip712Domain, SolStruct};

use super::payload::ChannelConfig;

/// The canonical (CREATE2) address of the `x402BatchSettlement` escrow
/// contract, the same on every chain it is deployed to.
pub const BATCH_SETTLEMENT_ADDRESS: Address = address!("4020074e9dF2ce1deE5A9C1b5c3f541D02a10003");

mod sol {
    alloy_sol_types::sol! {
        struct ChannelConfig {
            address payer;
            address payerAuthorizer;
            address receiver;
            address receiverAuthorizer;
            address token;
            uint40 withdrawDelay;
            bytes32 salt;
        }
        struct Voucher {
            bytes32 channelId;
            uint128 maxClaimableAmount;
        }
        struct Refund {
            bytes32 channelId;
            uint256 nonce;
            uint128 amount;
        }
        struct ClaimEntry {
            bytes32 channelId;
            uint128 maxClaimableAmount;
            uint128 totalClaimed;
        }
        struct ClaimBatch {
            ClaimEntry[] claims;
        }
    }
}

/// The EIP-712 domain of the escrow `contract` on `chain_id`.
pub fn domain(chain_id: u64, contract: Address) -> Eip712Domain {
    Eip712Domain::new(
        Some(Cow::Borrowed("x402 Batch Settlement")),
        Some(Cow::Borrowed("1")),
        Some(U256::from(chain_id)),
        Some(contract),
        None,
    )
}

/// The id of the channel `config` describes: its EIP-712 signing hash under
/// `domain` (so one config names different channels on different chains or
/// deployments).
pub fn channel_id(config: &ChannelConfig, domain: &Eip712Domain) -> B256 {
    sol::ChannelConfig {
        payer: config.payer,
        payerAuthorizer: config.payer_authorizer,
        receiver: config.receiver,
        receiverAuthorizer: config.receiver_authorizer,
        token: config.token,
        withdrawDelay: U40::saturating_from(config.withdraw_delay),
        salt: config.salt,
    }
    .eip712_signing_hash(domain)
}

/// The digest a payer (or its authorizer) signs for a voucher of
/// `max_claimable` on `channel_id`.
pub fn voucher_digest(channel_id: B256, max_claimable: u128, domain: &Eip712Domain) -> B256 {
    sol::Voucher {
        channelId: channel_id,
        maxClaimableAmount: max_claimable,
    }
    .eip712_signing_hash(domain)
}

/// The digest the receiver authorizer signs to refund `amount` of
/// `channel_id` at refund nonce `nonce`.
pub fn refund_digest(channel_id: B256, nonce: U256, amount: u128, domain: &Eip712Domain) -> B256 {
    sol::Refund {
        channelId: channel_id,
        nonce,
        amount,
    }
    .eip712_signing_hash(domain)
}

/// One row of a claim batch: claim `total_claimed` of `channel_id` under a
/// voucher of `max_claimable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimRow {
    /// The channel.
    pub channel_id: B256,
    /// The voucher's signed ceiling.
    pub max_claimable: u128,
    /// The cumulative amount claimed after this row.
    pub total_claimed: u128,
}

/// The digest the receiver authorizer signs for `claimWithSignature` over
/// `rows`.
pub fn claim_batch_digest(rows: &[ClaimRow], domain: &Eip712Domain) -> B256 {
    sol::ClaimBatch {
        claims: rows
            .iter()
            .map(|r| sol::ClaimEntry {
                channelId: r.channel_id,
                maxClaimableAmount: r.max_claimable,
                totalClaimed: r.total_claimed,
            })
            .collect(),
    }
    .eip712_signing_hash(domain)
}
