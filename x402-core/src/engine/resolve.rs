//! Offers → requirements.

use std::sync::{Arc, OnceLock};

use serde_json::Value;

use crate::{
    money::PriceError,
    network::{self, Family, TransferMethod},
    payment::{SharedRequirements, SharedStr},
    proto::{
        v2, JsonObject, PaymentRequirements, SupportedResponse, WrittenRequirement, X402Version,
    },
    route::{Offer, SettlementTiming, EXACT, UPTO},
};

/// Why an offer cannot become a requirement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OfferError {
    /// The price is unusable.
    #[error("offer on {network}: {source}")]
    Price {
        /// The network.
        network: String,
        /// Why.
        #[source]
        source: PriceError,
    },
    /// No asset given and the network has no default stablecoin.
    #[error("offer on {0}: no asset given and the network has no default stablecoin")]
    NoAsset(String),
    /// An EVM EIP-3009 offer without the token's EIP-712 name and version.
    #[error("offer on {0}: an EIP-3009 asset needs its EIP-712 name and version")]
    NoEip712Domain(String),
    /// The facilitator does not list what the offer needs from it
    /// (`feePayer` for Solana, `facilitatorAddress` for `upto`).
    #[error("offer {scheme} on {network}: the facilitator's /supported has no {field}")]
    MissingFacilitatorExtra {
        /// The scheme.
        scheme: String,
        /// The network.
        network: String,
        /// The `extra` field that is missing.
        field: &'static str,
    },
    /// The network id is not CAIP-2.
    #[error("offer network {0:?} is not a CAIP-2 id (e.g. eip155:84532)")]
    NetworkNotCaip2(String),
}

/// Whether resolving this offer needs the facilitator's `/supported`.
pub(crate) fn needs_supported(offer: &Offer) -> bool {
    offer.scheme == UPTO || network::family(&offer.network) == Family::Svm || batch_delegates(offer)
}

/// A `batch-settlement` offer that names no receiver authorizer: the
/// facilitator's, from `/supported`.
fn batch_delegates(offer: &Offer) -> bool {
    offer.scheme == crate::batch::BATCH_SETTLEMENT
        && !offer.extra.contains_key("receiverAuthorizer")
}

/// An offer resolved into the requirement it advertises, with the asset's
/// decimals (for `upto` overrides written in whole units).
#[derive(Debug, Clone)]
pub(crate) struct ResolvedOffer {
    pub(crate) requirements: Arc<v2::PaymentRequirements>,
    pub(crate) decimals: u8,
    /// Whether the offer lives as long as its route (a static price),
    /// rather than being resolved for one request: its names are then kept
    /// for the life of the process (see [`SharedStr`]).
    pub(crate) lasting: bool,
    /// The requirement's names, and the requirement as payments share it:
    /// made by the first payment that matches it (see
    /// [`names`](Self::names)); reset by whatever changes `requirements`.
    names: OnceLock<OfferNames>,
    /// The requirement as the facilitator gets it, and its JSON, shared the
    /// same way (see [`wire`](Self::wire)); reset by whatever changes
    /// `requirements`.
    wire: OnceLock<WrittenRequirement>,
}

impl ResolvedOffer {
    /// The requirement's names, made once, when a payment first matched
    /// this offer: routes priced per request resolve their offers for every
    /// request, 402s included, and most of those offers are never paid.
    pub(crate) fn names(&self) -> &OfferNames {
        self.names
            .get_or_init(|| OfferNames::of(&self.requirements, self.lasting))
    }

    /// The version 2 requirement of a facilitator request, copied and
    /// written as JSON once, when a payment first matched this offer (as
    /// [`names`](Self::names)), and shared by every request after: a copy
    /// per payment was about ten allocations, and writing it is about a
    /// third of a request body's JSON, twice when the buyer's `accepted` is
    /// the same requirement.
    pub(crate) fn wire(&self) -> &WrittenRequirement {
        self.wire.get_or_init(|| {
            WrittenRequirement::new(PaymentRequirements::V2((*self.requirements).clone()))
        })
    }
}

/// A requirement's scheme, network, asset and recipient as [`SharedStr`]s,
/// and the requirement itself as a [`SharedRequirements`]: made at most
/// once per offer, so that a [`VerifiedPayment`](crate::VerifiedPayment)
/// shares them instead of copying them per request (kept for the offers
/// that last: see [`SharedStr`]).
#[derive(Debug, Clone)]
pub(crate) struct OfferNames {
    pub(crate) scheme: SharedStr,
    pub(crate) network: SharedStr,
    pub(crate) asset: SharedStr,
    pub(crate) pay_to: SharedStr,
    /// The requirement itself, as the payments share it.
    pub(crate) requirements: SharedRequirements,
}

impl OfferNames {
    fn of(requirements: &Arc<v2::PaymentRequirements>, keep: bool) -> Self {
        let name = |s: &str| SharedStr::kept_if(keep, s);
        Self {
            scheme: name(&requirements.scheme),
            network: name(&requirements.network),
            asset: name(&requirements.asset),
            pay_to: name(&requirements.pay_to),
            requirements: SharedRequirements::kept_if(keep, requirements),
        }
    }
}

/// Turns an offer into the v2 requirement the challenge advertises;
/// `lasting` as [`ResolvedOffer::lasting`].
pub(crate) fn resolve_offer(
    offer: &Offer,
    supported: Option<&SupportedResponse>,
    lasting: bool,
) -> Result<ResolvedOffer, OfferError> {
    if !offer.network.contains(':') {
        return Err(OfferError::NetworkNotCaip2(offer.network.clone()));
    }
    let default = network::default_stablecoin(&offer.network);
    let (address, decimals, eip712, method) = match (&offer.asset, default) {
        (Some(a), _) => (
            a.address.clone(),
            a.decimals,
            a.eip712.clone(),
            a.transfer_method,
        ),
        (None, Some(c)) => (
            c.address.to_owned(),
            c.decimals,
            (!c.eip712_name.is_empty())
                .then(|| (c.eip712_name.to_owned(), c.eip712_version.to_owned())),
            Some(c.transfer_method),
        ),
        (None, None) => return Err(OfferError::NoAsset(offer.network.clone())),
    };
    let price = offer.price.clone().map_err(|source| OfferError::Price {
        network: offer.network.clone(),
        source,
    })?;
    let amount = price
        .to_atomic(decimals)
        .map_err(|source| OfferError::Price {
            network: offer.network.clone(),
            source,
        })?;

    let mut extra = JsonObject::new();
    let family = network::family(&offer.network);
    if family == Family::Evm {
        let permit2 = offer.scheme == UPTO || method == Some(TransferMethod::Permit2);
        match (&eip712, permit2) {
            (Some((name, version)), _) => {
                extra.insert("name".into(), Value::String(name.clone()));
                extra.insert("version".into(), Value::String(version.clone()));
            }
            (None, false) => return Err(OfferError::NoEip712Domain(offer.network.clone())),
            (None, true) => {}
        }
        if permit2 {
            extra.insert(
                "assetTransferMethod".into(),
                Value::String("permit2".into()),
            );
        }
    }
    let facilitator_field = if offer.scheme == UPTO {
        Some("facilitatorAddress")
    } else if batch_delegates(offer) {
        Some("receiverAuthorizer")
    } else if family == Family::Svm {
        Some("feePayer")
    } else {
        None
    };
    if let Some(field) = facilitator_field {
        let value = supported
            .and_then(|s| s.kind(X402Version::V2, &offer.scheme, &offer.network))
            .and_then(|k| k.extra.as_ref())
            .and_then(|e| e.get(field))
            .cloned()
            .ok_or_else(|| OfferError::MissingFacilitatorExtra {
                scheme: offer.scheme.clone(),
                network: offer.network.clone(),
                field,
            })?;
        extra.insert(field.into(), value);
    }
    for (k, v) in &offer.extra {
        extra.insert(k.clone(), v.clone());
    }
    Ok(ResolvedOffer {
        requirements: Arc::new(v2::PaymentRequirements {
            scheme: offer.scheme.clone(),
            network: offer.network.clone(),
            amount,
            asset: address,
            pay_to: offer.pay_to.clone(),
            max_timeout_seconds: offer.max_timeout_seconds,
            extra,
            other: JsonObject::new(),
        }),
        decimals,
        lasting,
        names: OnceLock::new(),
        wire: OnceLock::new(),
    })
}

/// The `extra` key naming a requirement's payment flow (upstream
/// `PaymentFlowName`: `authorization`, `upfront`, `escrow`).
pub(crate) const PAYMENT_FLOW: &str = "paymentFlow";

/// Announces the payment flow of a route's `exact` requirements the way
/// upstream's resource server does (`@x402/core` 2.27
/// `applyPaymentFlowWireExtra`): routes that settle before their handler
/// are `extra.paymentFlow: "upfront"` (settle, then the resource); the
/// default, `authorization` (verify, the resource, then settle), is left
/// unsaid, as upstream omits it on the wire. A `paymentFlow` the offer sets
/// itself is kept.
pub(crate) fn announce_flow(mut offer: ResolvedOffer, timing: SettlementTiming) -> ResolvedOffer {
    if timing == SettlementTiming::BeforeHandler
        && offer.requirements.scheme == EXACT
        && !offer.requirements.extra.contains_key(PAYMENT_FLOW)
    {
        Arc::make_mut(&mut offer.requirements)
            .extra
            .insert(PAYMENT_FLOW.into(), Value::String("upfront".into()));
        // A facilitator's copy, or a payment's, made before would say
        // otherwise.
        offer.wire = OnceLock::new();
        offer.names = OnceLock::new();
    }
    offer
}
