//! Signing: an EIP-3009 `TransferWithAuthorization` for the chosen offer,
//! wrapped in the payment of the challenge's protocol version.
//!
//! This is the only way this buyer pays: `exact` EVM offers whose token
//! takes EIP-3009 authorizations. Permit2 and `upto` offers are declined
//! ([`UnsupportedOffer`](crate::UnsupportedOffer)) before anything is signed.

use std::time::{SystemTime, SystemTimeError, UNIX_EPOCH};

use alloy_primitives::{B256, U256};
use alloy_signer::Signer as _;
use alloy_signer_local::PrivateKeySigner;
use http::{HeaderName, HeaderValue};
use x402_core::{
    codec,
    evm::{eip3009_domain, Eip3009Authorization, ExactEvmPayload},
    proto::{v1, v2, JsonObject, PaymentPayload, Version},
};

use crate::{challenge::Terms, error::EncodeError, select::Offer, BuyerError};

/// The longest validity window this buyer signs, in seconds, whatever the
/// seller's `maxTimeoutSeconds` says (a signed authorization can be settled by
/// anyone who holds it until `validBefore`).
pub const MAX_VALIDITY_SECONDS: u64 = 3600;
/// How far back `validAfter` is set, in seconds (clock skew allowance; the
/// TypeScript client's default).
pub const VALID_AFTER_SKEW_SECONDS: u64 = 600;

/// Signs the offer's EIP-3009 authorization: from the signer's address to
/// `payTo`, for the offer's amount, valid from
/// [`VALID_AFTER_SKEW_SECONDS`] ago for `min(maxTimeoutSeconds,`
/// [`MAX_VALIDITY_SECONDS`]`)`, with a random nonce.
pub(crate) async fn authorize(
    signer: &PrivateKeySigner,
    offer: &Offer,
) -> Result<ExactEvmPayload, BuyerError> {
    let now = unix_now()?;
    let validity = offer.max_timeout_seconds.min(MAX_VALIDITY_SECONDS);
    let authorization = Eip3009Authorization {
        from: signer.address(),
        to: offer.pay_to,
        value: offer.amount,
        valid_after: U256::from(now.saturating_sub(VALID_AFTER_SKEW_SECONDS)),
        valid_before: U256::from(now.saturating_add(validity)),
        nonce: B256::from(rand::random::<[u8; 32]>()),
    };
    let domain = eip3009_domain(&offer.name, &offer.version, offer.chain_id, offer.asset);
    let hash = authorization.signing_hash(&domain);
    let signature = signer.sign_hash(&hash).await?;
    Ok(ExactEvmPayload {
        signature: signature.as_bytes().to_vec().into(),
        authorization,
    })
}

/// The payment carrying `payload` for `terms`, its header name
/// (`PAYMENT-SIGNATURE` for v2, `X-PAYMENT` for v1) and its header value.
pub(crate) fn payment(
    terms: &Terms,
    payload: &ExactEvmPayload,
) -> Result<(PaymentPayload, HeaderName, HeaderValue), EncodeError> {
    let payload = serde_json::to_value(payload).map_err(EncodeError::Payload)?;
    let (payment, name) = match terms {
        Terms::V2 {
            resource,
            accepted,
            extensions,
        } => {
            let payment = v2::PaymentPayload {
                x402_version: Version,
                resource: Some(resource.clone()),
                accepted: accepted.clone(),
                payload,
                extensions: (!extensions.is_empty()).then(|| extensions.clone()),
                other: JsonObject::new(),
            };
            (PaymentPayload::V2(payment), codec::PAYMENT_SIGNATURE)
        }
        Terms::V1 { scheme, network } => {
            let payment = v1::PaymentPayload {
                x402_version: Version,
                scheme: scheme.clone(),
                network: network.clone(),
                payload,
                other: JsonObject::new(),
            };
            (PaymentPayload::V1(payment), codec::X_PAYMENT)
        }
    };
    let value = codec::encode(&payment).map_err(EncodeError::Header)?;
    let value = HeaderValue::from_str(&value).map_err(EncodeError::HeaderValue)?;
    Ok((payment, name, value))
}

fn unix_now() -> Result<u64, SystemTimeError> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
}
