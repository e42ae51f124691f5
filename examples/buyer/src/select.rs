//! Choosing what to pay: the static checks of an offer against the buyer's
//! limits, the choice between paying per call and buying a session, and the
//! first acceptable offer with its budget reservation.

use alloy_primitives::{Address, U256};
use reqwest::Url;
use x402_core::{money::AtomicAmount, network, proto::v2};

use crate::{
    budget::{Budget, Reservation},
    challenge::{Challenge, Row, Terms},
    error::{DeclinedOffer, Refusal, UnsupportedOffer},
    session::OfferDecl,
};

/// The allow-lists (`None`: anything is allowed) and the per-call cap.
#[derive(Debug)]
pub(crate) struct Limits {
    pub(crate) networks: Option<Vec<String>>,
    pub(crate) assets: Option<Vec<Address>>,
    pub(crate) recipients: Option<Vec<Address>>,
    pub(crate) origins: Option<Vec<String>>,
    pub(crate) max_per_call: AtomicAmount,
}

/// An offer that passed the static checks, with what signing it needs.
#[derive(Debug)]
pub(crate) struct Offer {
    pub(crate) chain_id: u64,
    pub(crate) asset: Address,
    pub(crate) pay_to: Address,
    pub(crate) amount: AtomicAmount,
    pub(crate) max_timeout_seconds: u64,
    /// The token's EIP-712 domain name (`extra.name`).
    pub(crate) name: String,
    /// The token's EIP-712 domain version (`extra.version`).
    pub(crate) version: String,
    pub(crate) terms: Terms,
}

/// Whether to pay per call or buy a session.
#[derive(Debug)]
pub(crate) enum Plan {
    PerCall,
    Session(Box<SessionChoice>),
}

/// A session offer whose cheapest acceptable row passed every static check.
#[derive(Debug)]
pub(crate) struct SessionChoice {
    pub(crate) decl: OfferDecl,
    pub(crate) offer: Offer,
}

/// `scheme://host[:port]`, default ports left out.
pub(crate) fn url_origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}

impl Limits {
    /// The static checks of one offer, in a fixed order.
    pub(crate) fn check(&self, row: &Row<'_>) -> Result<Offer, Refusal> {
        if row.scheme != "exact" {
            return Err(UnsupportedOffer::Scheme(row.scheme.to_owned()).into());
        }
        let caip2 = if row.network.contains(':') {
            row.network
        } else {
            network::caip2(row.network).unwrap_or(row.network)
        };
        let chain_id = network::evm_chain_id(caip2)
            .ok_or_else(|| UnsupportedOffer::Network(row.network.to_owned()))?;
        let extra_str = |key: &str| {
            row.extra
                .and_then(|e| e.get(key))
                .and_then(serde_json::Value::as_str)
        };
        match row.extra.and_then(|e| e.get("assetTransferMethod")) {
            None => {}
            Some(m) if m.as_str() == Some("eip3009") => {}
            Some(m) => return Err(UnsupportedOffer::TransferMethod(m.clone()).into()),
        }
        if let Some(allowed) = &self.networks {
            if !allowed.iter().any(|n| n == caip2) {
                return Err(Refusal::NetworkNotAllowed(row.network.to_owned()));
            }
        }
        let asset: Address = row
            .asset
            .parse()
            .map_err(|_| UnsupportedOffer::InvalidAsset(row.asset.to_owned()))?;
        if let Some(allowed) = &self.assets {
            if !allowed.contains(&asset) {
                return Err(Refusal::AssetNotAllowed(asset));
            }
        }
        let pay_to: Address = row
            .pay_to
            .parse()
            .map_err(|_| UnsupportedOffer::InvalidPayTo(row.pay_to.to_owned()))?;
        if let Some(allowed) = &self.recipients {
            if !allowed.contains(&pay_to) {
                return Err(Refusal::RecipientNotAllowed(pay_to));
            }
        }
        let (Some(name), Some(version)) = (extra_str("name"), extra_str("version")) else {
            return Err(UnsupportedOffer::MissingDomain.into());
        };
        if row.amount > self.max_per_call {
            return Err(Refusal::OverPerCallCap {
                amount: row.amount,
                cap: self.max_per_call,
            });
        }
        Ok(Offer {
            chain_id,
            asset,
            pay_to,
            amount: row.amount,
            max_timeout_seconds: row.max_timeout_seconds,
            name: name.to_owned(),
            version: version.to_owned(),
            terms: row.terms(),
        })
    }

    pub(crate) fn check_origin(&self, url: &Url) -> Result<(), Refusal> {
        if let Some(allowed) = &self.origins {
            let origin = url_origin(url);
            if !allowed.contains(&origin) {
                return Err(Refusal::OriginNotAllowed(origin));
            }
        }
        Ok(())
    }

    /// Decides between paying per call and buying one of `offers` (the
    /// challenge's session offers) for `planned` calls. Only the static
    /// checks run here; nothing is reserved.
    ///
    /// A session is bought when its cheapest acceptable row costs strictly
    /// less than the cheapest acceptable per-call row × `min(planned,
    /// calls)` (ties pay per call); of several, the one saving most (the
    /// first on a tie). When no per-call row is acceptable, the cheapest
    /// acceptable session is the only way to pay, and is chosen.
    pub(crate) fn plan(
        &self,
        challenge: &Challenge,
        url: &Url,
        offers: Vec<OfferDecl>,
        planned: u64,
    ) -> Result<Plan, Refusal> {
        self.check_origin(url)?;
        // Sessions are sold in v2 challenges only.
        let Challenge::V2(required) = challenge else {
            return Ok(Plan::PerCall);
        };
        if offers.is_empty() {
            return Ok(Plan::PerCall);
        }
        let per_call = challenge
            .rows()
            .iter()
            .filter_map(|row| self.check(row).ok())
            .map(|offer| offer.amount.get())
            .min();
        let mut best: Option<(U256, SessionChoice)> = None;
        for decl in offers {
            let Some(offer) = self.cheapest(required, &decl.accepts) else {
                continue;
            };
            let price = offer.amount.get();
            let score = match per_call {
                Some(unit) => {
                    let covered = unit.saturating_mul(U256::from(planned.max(1).min(decl.calls)));
                    if price >= covered {
                        continue;
                    }
                    covered - price
                }
                None => U256::MAX - price,
            };
            if best.as_ref().is_none_or(|(s, _)| score > *s) {
                best = Some((score, SessionChoice { decl, offer }));
            }
        }
        Ok(best.map_or(Plan::PerCall, |(_, c)| Plan::Session(Box::new(c))))
    }

    /// The cheapest of a session offer's rows that passes the static checks
    /// (the first on a tie).
    fn cheapest(
        &self,
        required: &v2::PaymentRequired,
        rows: &[v2::PaymentRequirements],
    ) -> Option<Offer> {
        rows.iter()
            .filter_map(|row| self.check(&Row::v2(required, row)).ok())
            .min_by_key(|offer| offer.amount.get())
    }

    /// Picks the first offer that passes every check and reserves its
    /// amount against `budget`.
    pub(crate) fn choose<'b>(
        &self,
        budget: &'b Budget,
        challenge: &Challenge,
        url: &Url,
    ) -> Result<(Offer, Reservation<'b>), Refusal> {
        self.check_origin(url)?;
        let mut declined = Vec::new();
        for (index, row) in challenge.rows().iter().enumerate() {
            let checked = self
                .check(row)
                .and_then(|offer| budget.reserve(offer.amount).map(|r| (offer, r)));
            match checked {
                Ok(chosen) => return Ok(chosen),
                Err(refusal) => declined.push(DeclinedOffer { index, refusal }),
            }
        }
        Err(summarize(declined))
    }
}

/// One refusal when every offer was declined for the same kind of reason,
/// else the list.
fn summarize(mut declined: Vec<DeclinedOffer>) -> Refusal {
    let Some(first) = declined.first().map(|d| std::mem::discriminant(&d.refusal)) else {
        return Refusal::NoAcceptableOffer { declined };
    };
    if declined
        .iter()
        .all(|d| std::mem::discriminant(&d.refusal) == first)
    {
        return declined.swap_remove(0).refusal;
    }
    Refusal::NoAcceptableOffer { declined }
}

#[cfg(test)]
mod tests;
