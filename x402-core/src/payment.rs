//! What a paid handler receives: the [`VerifiedPayment`] the engine puts in
//! the request's extensions (the adapters' `Payment` extractors hand it
//! over), with the [`SessionCall`] when the call was redeemed from a
//! prepaid session.

use std::sync::Arc;

use crate::{
    meter::Meter,
    money::AtomicAmount,
    proto::{v2, X402Version},
};

/// The verified payment, put in the request's extensions for the handler.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct VerifiedPayment {
    /// The payment's protocol version.
    pub version: X402Version,
    /// The scheme.
    pub scheme: String,
    /// The network as a CAIP-2 id.
    pub network: String,
    /// The payer's address, as the facilitator reported it.
    pub payer: Option<String>,
    /// The amount authorised (the price for `exact`, the ceiling for `upto`,
    /// zero for a call redeemed from a prepaid session).
    pub amount: AtomicAmount,
    /// The asset.
    pub asset: String,
    /// The recipient.
    pub pay_to: String,
    /// The seller's requirement the payment matched (for a session call, the
    /// first way the session was sold). Shared with the engine's route table.
    pub requirements: Arc<v2::PaymentRequirements>,
    /// The matched route's pattern.
    pub route: String,
    /// On `upto` routes, where the handler reports what the call cost.
    pub meter: Option<Meter>,
    /// Set when the call was redeemed from a prepaid session.
    pub session: Option<SessionCall>,
    /// Set when the request passed by [sign-in-with-x](crate::siwx): who
    /// signed in (the amount is then zero, and nothing is settled).
    pub sign_in: Option<crate::siwx::SignedIn>,
}

/// A call redeemed from a prepaid session.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionCall {
    /// Calls left after this one.
    pub remaining: u64,
    /// The session's scope.
    pub scope: String,
}
