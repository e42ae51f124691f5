//! The spec's reason codes this crate answers with.

/// The payload's `type` is not one this operation takes.
pub const PAYLOAD_TYPE: &str = "invalid_batch_settlement_evm_payload_type";
/// A malformed `voucher` payload.
pub const VOUCHER_PAYLOAD: &str = "invalid_batch_settlement_evm_voucher_payload";
/// A malformed `deposit` payload.
pub const DEPOSIT_PAYLOAD: &str = "invalid_batch_settlement_evm_deposit_payload";
/// A malformed `refund` payload.
pub const REFUND_PAYLOAD: &str = "invalid_batch_settlement_evm_refund_payload";
/// The config does not hash to the voucher's channel id.
pub const CHANNEL_ID_MISMATCH: &str = "invalid_batch_settlement_evm_channel_id_mismatch";
/// The channel's receiver is not the requirement's `payTo`.
pub const RECEIVER_MISMATCH: &str = "invalid_batch_settlement_evm_receiver_mismatch";
/// The channel's receiver authorizer is not `extra.receiverAuthorizer`.
pub const RECEIVER_AUTHORIZER_MISMATCH: &str =
    "invalid_batch_settlement_evm_receiver_authorizer_mismatch";
/// The channel's token is not the requirement's asset.
pub const TOKEN_MISMATCH: &str = "invalid_batch_settlement_evm_token_mismatch";
/// The channel's withdraw delay is not `extra.withdrawDelay`.
pub const WITHDRAW_DELAY_MISMATCH: &str = "invalid_batch_settlement_evm_withdraw_delay_mismatch";
/// The withdraw delay is outside 15 minutes to 30 days.
pub const WITHDRAW_DELAY_OUT_OF_RANGE: &str =
    "invalid_batch_settlement_evm_withdraw_delay_out_of_range";
/// The voucher's signature does not recover the payer authorizer.
pub const VOUCHER_SIGNATURE: &str = "invalid_batch_settlement_evm_voucher_signature";
/// The voucher's ceiling is above the channel's balance.
pub const CUMULATIVE_EXCEEDS_BALANCE: &str =
    "invalid_batch_settlement_evm_cumulative_exceeds_balance";
/// The voucher's ceiling is not above what is claimed on chain.
pub const CUMULATIVE_BELOW_CLAIMED: &str = "invalid_batch_settlement_evm_cumulative_below_claimed";
/// The voucher's ceiling is not the seller's count plus the price: the
/// corrective 402.
pub const CUMULATIVE_AMOUNT_MISMATCH: &str =
    "invalid_batch_settlement_evm_cumulative_amount_mismatch";
/// Another request holds the channel.
pub const CHANNEL_BUSY: &str = "invalid_batch_settlement_evm_channel_busy";
/// The charge would exceed the voucher's ceiling.
pub const CHARGE_EXCEEDS_SIGNED_CUMULATIVE: &str =
    "invalid_batch_settlement_evm_charge_exceeds_signed_cumulative";
/// The seller has no state for the channel (a refund of an unknown channel).
pub const MISSING_CHANNEL: &str = "invalid_batch_settlement_evm_missing_channel";
/// Nothing is left to refund.
pub const REFUND_NO_BALANCE: &str = "invalid_batch_settlement_evm_refund_no_balance";
/// The refund amount is not a positive integer.
pub const REFUND_AMOUNT_INVALID: &str = "invalid_batch_settlement_evm_refund_amount_invalid";
/// The seller could not read or write its channel state.
pub const STATE_UNAVAILABLE: &str = "invalid_batch_settlement_evm_verification_state_unavailable";
/// The facilitator's answer lacked the channel snapshot.
pub const CHANNEL_STATE_READ_FAILED: &str =
    "invalid_batch_settlement_evm_channel_state_read_failed";
