//! Checking a payload against the seller's requirement and a voucher
//! against its signature and the mirrored channel, without the chain.

use alloy_primitives::{Address, U256};
use alloy_sol_types::Eip712Domain;
use serde_json::Value;

use super::{
    eip712::{channel_id, voucher_digest},
    payload::{ChannelConfig, Voucher},
    reason, ChannelRecord, MAX_WITHDRAW_DELAY, MIN_WITHDRAW_DELAY,
};
use crate::{evm::recover_signer, proto::v2};

fn address_of(value: Option<&Value>) -> Option<Address> {
    value?.as_str()?.parse().ok()
}

fn same(a: Address, text: &str) -> bool {
    text.parse::<Address>().is_ok_and(|b| a == b)
}

/// The channel `config` is one the seller's `requirement` offers, and the
/// voucher's channel id is its hash: receiver = `payTo`, receiver
/// authorizer = `extra.receiverAuthorizer`, token = asset, withdraw delay =
/// `extra.withdrawDelay` (and within its bounds). The spec's reason if not.
pub fn check_config(
    config: &ChannelConfig,
    voucher: &Voucher,
    requirement: &v2::PaymentRequirements,
    domain: &Eip712Domain,
) -> Result<(), &'static str> {
    if channel_id(config, domain) != voucher.channel_id {
        return Err(reason::CHANNEL_ID_MISMATCH);
    }
    if !same(config.receiver, &requirement.pay_to) {
        return Err(reason::RECEIVER_MISMATCH);
    }
    match address_of(requirement.extra.get("receiverAuthorizer")) {
        Some(a) if a != Address::ZERO && a == config.receiver_authorizer => {}
        _ => return Err(reason::RECEIVER_AUTHORIZER_MISMATCH),
    }
    if !same(config.token, &requirement.asset) {
        return Err(reason::TOKEN_MISMATCH);
    }
    if let Some(delay) = requirement
        .extra
        .get("withdrawDelay")
        .and_then(Value::as_u64)
    {
        if delay != config.withdraw_delay {
            return Err(reason::WITHDRAW_DELAY_MISMATCH);
        }
    }
    if !(MIN_WITHDRAW_DELAY..=MAX_WITHDRAW_DELAY).contains(&config.withdraw_delay) {
        return Err(reason::WITHDRAW_DELAY_OUT_OF_RANGE);
    }
    Ok(())
}

/// Whether the voucher can be checked here: its channel names an EOA payer
/// authorizer (a zero authorizer means the payer's ERC-1271 wallet, which
/// only the chain can check).
pub fn locally_verifiable(config: &ChannelConfig) -> bool {
    config.payer_authorizer != Address::ZERO
}

/// The voucher's signature recovers the channel's payer authorizer.
pub fn check_signature(
    config: &ChannelConfig,
    voucher: &Voucher,
    domain: &Eip712Domain,
) -> Result<(), &'static str> {
    let amount = voucher.max_claimable_amount.get();
    if amount > U256::from(u128::MAX) {
        return Err(reason::VOUCHER_PAYLOAD);
    }
    let digest = voucher_digest(voucher.channel_id, amount.to::<u128>(), domain);
    match recover_signer(digest, &voucher.signature) {
        Ok(signer) if signer == config.payer_authorizer => Ok(()),
        _ => Err(reason::VOUCHER_SIGNATURE),
    }
}

/// The voucher's ceiling fits the mirrored channel: at most its balance,
/// above what is claimed.
pub fn check_against_channel(
    record: &ChannelRecord,
    voucher: &Voucher,
) -> Result<(), &'static str> {
    let max = voucher.max_claimable_amount.get();
    if max > record.balance {
        return Err(reason::CUMULATIVE_EXCEEDS_BALANCE);
    }
    if max <= record.total_claimed {
        return Err(reason::CUMULATIVE_BELOW_CLAIMED);
    }
    Ok(())
}

/// Everything a voucher is checked for in process: signature, then
/// balance and claimed total. `check_config` must have passed.
pub fn verify_voucher(
    record: &ChannelRecord,
    config: &ChannelConfig,
    voucher: &Voucher,
    domain: &Eip712Domain,
) -> Result<(), &'static str> {
    check_signature(config, voucher, domain)?;
    check_against_channel(record, voucher)
}
