//! The reason codes of the EVM checks (`invalidReason` / `errorReason`):
//! those the in-process facilitator answers with, and those the engine's
//! pre-check refuses a payment with before any facilitator call. Also at
//! `x402_core::local::reason`.

/// A scheme other than `exact` on either side.
pub const SCHEME: &str = "invalid_exact_evm_scheme";
/// The payment names another network than the requirement.
pub const NETWORK_MISMATCH: &str = "invalid_exact_evm_network_mismatch";
/// The requirement's network is not one this facilitator serves.
pub const UNSUPPORTED_NETWORK: &str = "invalid_network";
/// `extra.name` or `extra.version` is missing from the requirement.
pub const MISSING_EIP712_DOMAIN: &str = "invalid_exact_evm_missing_eip712_domain";
/// The requirement's `asset` or `payTo` is not an EVM address.
pub const INVALID_REQUIREMENTS: &str = "invalid_payment_requirements";
/// The payload is not an EIP-3009 payload.
pub const PAYLOAD: &str = "invalid_exact_evm_payload";
/// A Permit2 payload (not handled by this facilitator).
pub const UNSUPPORTED_PAYLOAD_TYPE: &str = "unsupported_payload_type";
/// The signature does not recover `authorization.from`.
pub const SIGNATURE: &str = "invalid_exact_evm_signature";
/// A smart-wallet signature (longer than 65 bytes), not supported.
pub const UNDEPLOYED_SMART_WALLET: &str = "invalid_exact_evm_payload_undeployed_smart_wallet";
/// `authorization.to` is not the requirement's `payTo`.
pub const RECIPIENT_MISMATCH: &str = "invalid_exact_evm_recipient_mismatch";
/// Expired, or expiring within the margin.
pub const VALID_BEFORE: &str = "invalid_exact_evm_payload_authorization_valid_before";
/// Not valid yet.
pub const VALID_AFTER: &str = "invalid_exact_evm_payload_authorization_valid_after";
/// `authorization.value` differs from the requirement's amount.
pub const VALUE: &str = "invalid_exact_evm_authorization_value";
/// The token already used (or cancelled) this nonce.
pub const NONCE_USED: &str = "invalid_exact_evm_nonce_already_used";
/// The payer's balance is below the value.
pub const INSUFFICIENT_BALANCE: &str = "invalid_exact_evm_insufficient_balance";
/// Simulating the transfer on the chain failed (the token refuses it).
pub const SIMULATION_FAILED: &str = "invalid_exact_evm_transaction_simulation_failed";
/// The settlement transaction reverted, the node refused it, or it did
/// not move the tokens.
pub const TRANSACTION_FAILED: &str = "invalid_exact_evm_transaction_failed";

/// `upto`: a scheme other than `upto` on either side, or protocol v1.
pub const UPTO_SCHEME: &str = "invalid_upto_evm_scheme";
/// `upto`: the payment names another network than the requirement.
pub const UPTO_NETWORK_MISMATCH: &str = "invalid_upto_evm_network_mismatch";
/// `upto`: the payload is not a Permit2 payload with an `upto` witness
/// (one naming a facilitator).
pub const UPTO_PAYLOAD: &str = "invalid_upto_evm_payload";
/// `upto`: `witness.facilitator` is not this facilitator's signer.
pub const UPTO_FACILITATOR_MISMATCH: &str = "upto_facilitator_mismatch";
/// `upto`: a ledger was asked to move more than the permitted amount.
pub const UPTO_AMOUNT_EXCEEDS_PERMITTED: &str = "upto_amount_exceeds_permitted";
/// `upto`: the charge to settle is above `permitted.amount`.
pub const UPTO_SETTLEMENT_EXCEEDS_AMOUNT: &str =
    "invalid_upto_evm_payload_settlement_exceeds_amount";
/// `upto`: the settlement transaction reverted or moved nothing.
pub const UPTO_TRANSACTION_FAILED: &str = "invalid_upto_evm_transaction_failed";

/// Permit2: `spender` is not the scheme's x402 proxy.
pub const PERMIT2_SPENDER: &str = "invalid_permit2_spender";
/// Permit2: `witness.to` is not the requirement's `payTo`.
pub const PERMIT2_RECIPIENT_MISMATCH: &str = "invalid_permit2_recipient_mismatch";
/// Permit2: `deadline` has passed, or falls within the margin.
pub const PERMIT2_DEADLINE_EXPIRED: &str = "permit2_deadline_expired";
/// Permit2: `witness.validAfter` is in the future.
pub const PERMIT2_NOT_YET_VALID: &str = "permit2_not_yet_valid";
/// Permit2: `permitted.amount` is not the required amount (the price for
/// `exact`, the ceiling for `upto`).
pub const PERMIT2_AMOUNT_MISMATCH: &str = "permit2_amount_mismatch";
/// Permit2: `permitted.token` is not the requirement's `asset`.
pub const PERMIT2_TOKEN_MISMATCH: &str = "permit2_token_mismatch";
/// Permit2: the signature does not recover `from` over the
/// `PermitWitnessTransferFrom` digest in Permit2's domain.
pub const PERMIT2_SIGNATURE: &str = "invalid_permit2_signature";
/// Permit2: the payer's balance is below the amount.
pub const PERMIT2_INSUFFICIENT_BALANCE: &str = "permit2_insufficient_balance";
/// Permit2: the owner has already used this nonce.
pub const PERMIT2_INVALID_NONCE: &str = "permit2_invalid_nonce";
/// Permit2: a ledger was asked to move another amount than an `exact`
/// permit allows.
pub const PERMIT2_INVALID_AMOUNT: &str = "permit2_invalid_amount";
/// Permit2: the payer has not approved Permit2 for the amount on the token.
pub const PERMIT2_ALLOWANCE_REQUIRED: &str = "permit2_allowance_required";
/// Permit2: simulating the settlement on the chain failed.
pub const PERMIT2_SIMULATION_FAILED: &str = "permit2_simulation_failed";
/// Permit2: the scheme's x402 proxy (or Permit2) has no code on the chain.
pub const PERMIT2_PROXY_NOT_DEPLOYED: &str = "permit2_proxy_not_deployed";
