//! Metering for `upto` routes: the handler reports what the call cost.
//!
//! On an `upto` route the buyer authorises a ceiling and the seller charges
//! what the call actually cost, known only after the handler ran. The handler
//! reports it in one of two ways:
//!
//! - through the [`Meter`] in the verified payment (`VerifiedPayment::meter`;
//!   the axum and actix extractors hand it over directly): [`Meter::add`] as
//!   the work goes, or [`Meter::set`] once;
//! - through the upstream `Settlement-Overrides` response header: raw atomic
//!   units (`1000`), a percentage of the ceiling with up to two decimals
//!   (`37%`, `33.33%`, rounded down), or whole units of the asset (`$0.05`),
//!   bare or in upstream's JSON form `{"amount":"…"}`. The header never
//!   reaches the client.
//!
//! The charge is capped at the ceiling (an excess is logged and never
//! charged). A charge of zero settles nothing. A route where the handler
//! reports nothing is charged the ceiling, as upstream does. A malformed
//! override charges nothing: the response is replaced by a 500 rather than
//! guessing.
//!
//! ```
//! use x402_core::meter::Meter;
//! use x402_core::money::AtomicAmount;
//!
//! let meter = Meter::new(AtomicAmount::from(2000u64));
//! meter.add(300u64);
//! meter.add(70u64);
//! assert_eq!(meter.reported(), Some(AtomicAmount::from(370u64)));
//! ```

use std::{
    fmt,
    sync::{Arc, Mutex},
};

use alloy_primitives::U256;
use http::HeaderName;

use crate::money::{AtomicAmount, Price, PriceError};

/// `Settlement-Overrides`: the handler's charge, as a response header.
pub const SETTLEMENT_OVERRIDES: HeaderName = HeaderName::from_static("settlement-overrides");

/// A handle the handler of an `upto` route reports usage through. Clones
/// share one total.
#[derive(Clone)]
pub struct Meter {
    ceiling: AtomicAmount,
    reported: Arc<Mutex<Option<U256>>>,
}

impl Meter {
    /// A meter for a payment authorising `ceiling`.
    pub fn new(ceiling: AtomicAmount) -> Self {
        Self {
            ceiling,
            reported: Arc::new(Mutex::new(None)),
        }
    }

    /// The most this call may be charged.
    pub fn ceiling(&self) -> AtomicAmount {
        self.ceiling
    }

    /// Adds usage, in atomic units (saturating).
    pub fn add(&self, amount: impl Into<AtomicAmount>) {
        let amount = amount.into().get();
        let mut r = self.lock();
        *r = Some(r.unwrap_or_default().saturating_add(amount));
    }

    /// Sets the total, in atomic units.
    pub fn set(&self, total: impl Into<AtomicAmount>) {
        *self.lock() = Some(total.into().get());
    }

    /// What has been reported, if anything.
    pub fn reported(&self) -> Option<AtomicAmount> {
        self.lock().map(AtomicAmount::new)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<U256>> {
        // The guarded value is a plain number: a panic elsewhere cannot leave
        // it half-written, so a poisoned lock is still sound to use.
        self.reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl fmt::Debug for Meter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Meter")
            .field("ceiling", &self.ceiling)
            .field("reported", &self.reported())
            .finish()
    }
}

impl PartialEq for Meter {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.reported, &other.reported)
    }
}

/// Why a `Settlement-Overrides` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OverrideError {
    /// Not one of the accepted forms.
    #[error("Settlement-Overrides is not an amount, a percentage or a price")]
    Malformed,
    /// A percentage over 100 or with more than two decimals.
    #[error("Settlement-Overrides percentage is out of range")]
    Percentage,
    /// A price the asset cannot represent.
    #[error("Settlement-Overrides price: {0}")]
    Price(PriceError),
}

/// Reads a `Settlement-Overrides` value into atomic units, for a ceiling and
/// the asset's decimals. The result may exceed the ceiling (the caller caps
/// it).
pub fn parse_override(
    value: &str,
    ceiling: AtomicAmount,
    decimals: u8,
) -> Result<AtomicAmount, OverrideError> {
    let value = value.trim();
    if value.starts_with('{') {
        #[derive(serde::Deserialize)]
        struct Wire {
            amount: String,
        }
        let wire: Wire = serde_json::from_str(value).map_err(|_| OverrideError::Malformed)?;
        return parse_amount(wire.amount.trim(), ceiling, decimals);
    }
    parse_amount(value, ceiling, decimals)
}

fn parse_amount(
    value: &str,
    ceiling: AtomicAmount,
    decimals: u8,
) -> Result<AtomicAmount, OverrideError> {
    if let Some(pct) = value.strip_suffix('%') {
        let (int, frac) = pct.split_once('.').unwrap_or((pct, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty() || !digits(int) || !digits(frac) || int.len() > 3 {
            return Err(OverrideError::Malformed);
        }
        if frac.len() > 2 {
            return Err(OverrideError::Percentage);
        }
        let hundredths: u64 = format!("{int}{frac:0<2}")
            .parse()
            .map_err(|_| OverrideError::Malformed)?;
        if hundredths > 10_000 {
            return Err(OverrideError::Percentage);
        }
        return ceiling
            .mul_div_floor(U256::from(hundredths), U256::from(10_000u64))
            .ok_or(OverrideError::Malformed);
    }
    if value.starts_with('$') || value.contains('.') {
        return match Price::units(value)
            .map_err(OverrideError::Price)?
            .to_atomic(decimals)
        {
            Ok(a) => Ok(a),
            Err(PriceError::Zero) => Ok(AtomicAmount::ZERO),
            Err(e) => Err(OverrideError::Price(e)),
        };
    }
    AtomicAmount::parse_decimal(value).map_err(|_| OverrideError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &str) -> Result<String, OverrideError> {
        parse_override(v, AtomicAmount::from(2000u64), 6).map(|a| a.to_string())
    }

    #[test]
    fn forms() {
        assert_eq!(p("1000").unwrap(), "1000");
        assert_eq!(p("0").unwrap(), "0");
        assert_eq!(p("50%").unwrap(), "1000");
        assert_eq!(p("37%").unwrap(), "740");
        assert_eq!(p("33.33%").unwrap(), "666");
        assert_eq!(p("100%").unwrap(), "2000");
        assert_eq!(p("$0.001").unwrap(), "1000");
        assert_eq!(p("$0").unwrap(), "0");
        assert_eq!(p(r#"{"amount":"1000"}"#).unwrap(), "1000");
        assert_eq!(p(r#"{"amount":"50%"}"#).unwrap(), "1000");
        assert_eq!(p(r#"{"amount":"$0.0015"}"#).unwrap(), "1500");
        assert_eq!(p("99999").unwrap(), "99999", "capping is the caller's job");
    }

    #[test]
    fn refusals() {
        for bad in [
            "",
            "abc",
            "-1",
            "1e3",
            "%",
            "101%",
            "33.333%",
            "$0.0000001",
            "{}",
            r#"{"amount":1}"#,
            "0x10",
            "NaN",
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn meter_adds_and_sets() {
        let m = Meter::new(AtomicAmount::from(10u64));
        assert_eq!(m.reported(), None);
        m.add(3u64);
        m.clone().add(4u64);
        assert_eq!(m.reported(), Some(AtomicAmount::from(7u64)));
        m.set(1u64);
        assert_eq!(m.reported(), Some(AtomicAmount::from(1u64)));
        assert_eq!(m, m.clone());
        assert_ne!(m, Meter::new(AtomicAmount::from(10u64)));
    }
}
