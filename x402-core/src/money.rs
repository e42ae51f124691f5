//! Money: atomic amounts as integers and prices parsed exactly.
//!
//! Amounts on the x402 wire are JSON strings of base-10 integers in the asset's
//! smallest unit (`"10000"` is 0.01 of a 6-decimal stablecoin). [`AtomicAmount`]
//! is that value as a [`U256`]; it never passes through a float.
//!
//! [`Price`] is what a seller writes in configuration. Its string form follows
//! one rule, so a price never means two things:
//!
//! | Written | Meaning |
//! |---|---|
//! | `"$0.01"` | dollars (the asset's whole units), converted with the asset's decimals |
//! | `"0.01"`  | the same: a decimal point means whole units |
//! | `"10000"` | atomic units, used as written |
//!
//! Scientific notation, signs, `NaN`, empty strings, more fractional digits
//! than the asset has, and prices of zero are errors, never guesses.
//!
//! ```
//! use x402_core::money::{AtomicAmount, Price};
//!
//! let price: Price = "$0.001".parse()?;
//! assert_eq!(price.to_atomic(6)?, AtomicAmount::from(1000u64));
//! assert!("1e3".parse::<Price>().is_err());
//! assert!("$0.0000001".parse::<Price>()?.to_atomic(6).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::{fmt, str::FromStr};

use alloy_primitives::U256;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An amount in an asset's smallest unit (a uint256), serialised as a decimal
/// string as every x402 implementation expects.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AtomicAmount(U256);

impl AtomicAmount {
    /// Zero.
    pub const ZERO: Self = Self(U256::ZERO);

    /// Wraps a [`U256`].
    pub const fn new(value: U256) -> Self {
        Self(value)
    }

    /// The value as a [`U256`].
    pub const fn get(self) -> U256 {
        self.0
    }

    /// Whether the amount is zero.
    pub fn is_zero(self) -> bool {
        self.0.is_zero()
    }

    /// Parses a base-10 integer string of ASCII digits (no sign, no spaces,
    /// no `0x`, at most 78 digits and within uint256).
    pub fn parse_decimal(s: &str) -> Result<Self, AmountError> {
        if s.is_empty() {
            return Err(AmountError::Empty);
        }
        if !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AmountError::NotAnInteger);
        }
        if s.len() > 78 {
            return Err(AmountError::Overflow);
        }
        U256::from_str_radix(s, 10)
            .map(Self)
            .map_err(|_| AmountError::Overflow)
    }

    /// Parses a decimal string, or a `0x`-prefixed hexadecimal one (Permit2
    /// nonces are sometimes written in hex).
    pub fn parse_decimal_or_hex(s: &str) -> Result<Self, AmountError> {
        match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(hex) => {
                if hex.is_empty() || hex.len() > 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(AmountError::NotAnInteger);
                }
                U256::from_str_radix(hex, 16)
                    .map(Self)
                    .map_err(|_| AmountError::Overflow)
            }
            None => Self::parse_decimal(s),
        }
    }

    /// `self * numerator / denominator`, rounded down; `None` on overflow or a
    /// zero denominator.
    pub fn mul_div_floor(self, numerator: U256, denominator: U256) -> Option<Self> {
        if denominator.is_zero() {
            return None;
        }
        self.0.checked_mul(numerator).map(|p| Self(p / denominator))
    }
}

impl From<u64> for AtomicAmount {
    fn from(value: u64) -> Self {
        Self(U256::from(value))
    }
}

impl From<U256> for AtomicAmount {
    fn from(value: U256) -> Self {
        Self(value)
    }
}

impl From<AtomicAmount> for U256 {
    fn from(value: AtomicAmount) -> Self {
        value.0
    }
}

impl FromStr for AtomicAmount {
    type Err = AmountError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_decimal(s)
    }
}

impl fmt::Display for AtomicAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for AtomicAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AtomicAmount({})", self.0)
    }
}

impl Serialize for AtomicAmount {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for AtomicAmount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        with_str(deserializer, Self::parse_decimal)
    }
}

/// Deserialises a string and hands it to `parse` without copying it when
/// the input lends it (as `Cow<str>` does not: serde always gives that an
/// owned `String`).
pub(crate) fn with_str<'de, D, T, E>(
    deserializer: D,
    parse: impl FnOnce(&str) -> Result<T, E>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    E: std::fmt::Display,
{
    struct Visit<F>(F);
    impl<'de, T, E, F> serde::de::Visitor<'de> for Visit<F>
    where
        F: FnOnce(&str) -> Result<T, E>,
        E: std::fmt::Display,
    {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<X: serde::de::Error>(self, v: &str) -> Result<T, X> {
            (self.0)(v).map_err(X::custom)
        }
    }
    deserializer.deserialize_str(Visit(parse))
}

/// Serde helpers for uint256 fields that may arrive as decimal or `0x` hex
/// strings (written back as decimal).
pub mod decimal_or_hex {
    use super::*;

    /// Serialises as a decimal string.
    pub fn serialize<S: Serializer>(value: &U256, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(value)
    }

    /// Accepts a decimal or `0x`-prefixed hexadecimal string.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<U256, D::Error> {
        with_str(deserializer, |s| {
            AtomicAmount::parse_decimal_or_hex(s).map(AtomicAmount::get)
        })
    }
}

/// Why a string is not an [`AtomicAmount`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AmountError {
    /// The string was empty.
    #[error("amount is empty")]
    Empty,
    /// The string is not a plain non-negative integer.
    #[error("amount is not a non-negative integer string")]
    NotAnInteger,
    /// The value does not fit in uint256.
    #[error("amount does not fit in uint256")]
    Overflow,
}

/// A price as a seller writes it: whole units of the asset (dollars for a
/// stablecoin) or atomic units. See the [module docs](self) for the string form.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Price {
    /// Whole units as an exact decimal: `digits / 10^scale`.
    Units {
        /// All digits of the decimal, without the point.
        digits: U256,
        /// How many of them stand after the decimal point.
        scale: u8,
    },
    /// Atomic units, used as they are.
    Atomic(AtomicAmount),
}

impl Price {
    /// A price in atomic units.
    pub fn atomic(amount: impl Into<AtomicAmount>) -> Self {
        Self::Atomic(amount.into())
    }

    /// A price in whole units (dollars for a stablecoin), parsed exactly from a
    /// decimal such as `"0.01"` or `"$0.01"`.
    pub fn units(decimal: &str) -> Result<Self, PriceError> {
        let s = decimal.strip_prefix('$').unwrap_or(decimal);
        parse_units(s)
    }

    /// The price in the atomic units of an asset with `decimals` decimals.
    ///
    /// Fails when the price is zero, has more fractional digits than the asset
    /// (a non-zero digit would be lost), or overflows uint256.
    pub fn to_atomic(self, decimals: u8) -> Result<AtomicAmount, PriceError> {
        let amount = match self {
            Self::Atomic(amount) => amount,
            Self::Units { digits, scale } => {
                if scale <= decimals {
                    let factor = pow10(decimals - scale).ok_or(PriceError::Overflow)?;
                    AtomicAmount(digits.checked_mul(factor).ok_or(PriceError::Overflow)?)
                } else {
                    let divisor =
                        pow10(scale - decimals).ok_or(PriceError::TooManyDecimals { decimals })?;
                    if !(digits % divisor).is_zero() {
                        return Err(if (digits / divisor).is_zero() {
                            PriceError::RoundsToZero { decimals }
                        } else {
                            PriceError::TooManyDecimals { decimals }
                        });
                    }
                    AtomicAmount(digits / divisor)
                }
            }
        };
        if amount.is_zero() {
            return Err(PriceError::Zero);
        }
        Ok(amount)
    }
}

pub(crate) fn pow10(exp: u8) -> Option<U256> {
    U256::from(10u8).checked_pow(U256::from(exp))
}

fn parse_units(s: &str) -> Result<Price, PriceError> {
    let (int, frac) = match s.split_once('.') {
        Some((int, frac)) => (int, frac),
        None => (s, ""),
    };
    let digits_ok = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits_ok(int) || !digits_ok(frac) {
        return Err(PriceError::Malformed);
    }
    if int.len() + frac.len() > 78 {
        return Err(PriceError::Overflow);
    }
    let scale = u8::try_from(frac.len()).map_err(|_| PriceError::Overflow)?;
    let mut all = String::with_capacity(int.len() + frac.len());
    all.push_str(int);
    all.push_str(frac);
    let digits = U256::from_str_radix(&all, 10).map_err(|_| PriceError::Overflow)?;
    Ok(Price::Units { digits, scale })
}

impl FromStr for Price {
    type Err = PriceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(dollars) = s.strip_prefix('$') {
            return parse_units(dollars);
        }
        if s.contains('.') {
            return parse_units(s);
        }
        AtomicAmount::parse_decimal(s)
            .map(Price::Atomic)
            .map_err(|e| match e {
                AmountError::Overflow => PriceError::Overflow,
                _ => PriceError::Malformed,
            })
    }
}

impl fmt::Debug for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Atomic(a) => write!(f, "{a}"),
            Self::Units { digits, scale } => {
                let s = digits.to_string();
                let scale = usize::from(*scale);
                if scale == 0 {
                    return write!(f, "${s}");
                }
                let padded = format!("{s:0>width$}", width = scale + 1);
                let (int, frac) = padded.split_at(padded.len() - scale);
                write!(f, "${int}.{frac}")
            }
        }
    }
}

/// Why a price cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PriceError {
    /// Not a plain decimal (signs, exponents, `NaN`, spaces and empty strings
    /// are refused).
    #[error("price is not a plain decimal such as \"$0.01\", \"0.01\" or \"10000\" (atomic)")]
    Malformed,
    /// More fractional digits than the asset has.
    #[error("price has more fractional digits than the asset's {decimals} decimals")]
    TooManyDecimals {
        /// The asset's decimals.
        decimals: u8,
    },
    /// A non-zero price smaller than one atomic unit.
    #[error(
        "price is non-zero but smaller than one atomic unit of an asset with {decimals} decimals"
    )]
    RoundsToZero {
        /// The asset's decimals.
        decimals: u8,
    },
    /// A price of zero: a free route needs no paywall.
    #[error("price is zero")]
    Zero,
    /// Larger than uint256.
    #[error("price does not fit in uint256")]
    Overflow,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atomic(s: &str, decimals: u8) -> Result<String, PriceError> {
        s.parse::<Price>()?
            .to_atomic(decimals)
            .map(|a| a.to_string())
    }

    #[test]
    fn converts_exactly() {
        assert_eq!(atomic("$0.01", 6).unwrap(), "10000");
        assert_eq!(atomic("0.01", 6).unwrap(), "10000");
        assert_eq!(atomic("$0.001", 6).unwrap(), "1000");
        assert_eq!(atomic("10000", 6).unwrap(), "10000");
        assert_eq!(atomic("$1", 6).unwrap(), "1000000");
        assert_eq!(atomic("$1.5", 18).unwrap(), "1500000000000000000");
        assert_eq!(atomic("$.5", 6).unwrap(), "500000");
        assert_eq!(atomic("$2.", 6).unwrap(), "2000000");
        assert_eq!(atomic("$0.0100000", 6).unwrap(), "10000");
        assert_eq!(atomic("$0.000001", 6).unwrap(), "1");
        // 0.1 + 0.2 style float traps stay exact.
        assert_eq!(atomic("$0.3", 6).unwrap(), "300000");
    }

    #[test]
    fn refuses_what_it_would_have_to_guess() {
        for bad in [
            "1e3", "$1e-3", "-1", "$-0.01", "NaN", "nan", "inf", "", "$", ".", " 1", "1 ", "0x10",
            "+1", "1,5", "$0.0.1",
        ] {
            assert_eq!(bad.parse::<Price>(), Err(PriceError::Malformed), "{bad:?}");
        }
        assert_eq!(
            atomic("$0.0000001", 6),
            Err(PriceError::RoundsToZero { decimals: 6 })
        );
        assert_eq!(
            atomic("$1.0000001", 6),
            Err(PriceError::TooManyDecimals { decimals: 6 })
        );
        assert_eq!(atomic("$0", 6), Err(PriceError::Zero));
        assert_eq!(atomic("0", 6), Err(PriceError::Zero));
        assert_eq!(atomic("$0.000", 6), Err(PriceError::Zero));
        let huge = "9".repeat(79);
        assert_eq!(huge.parse::<Price>(), Err(PriceError::Overflow));
        assert_eq!(
            format!("${}", "9".repeat(77))
                .parse::<Price>()
                .unwrap()
                .to_atomic(18),
            Err(PriceError::Overflow)
        );
    }

    #[test]
    fn amount_serde_is_a_decimal_string() {
        let a = AtomicAmount::from(10000u64);
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"10000\"");
        assert_eq!(
            serde_json::from_str::<AtomicAmount>("\"10000\"").unwrap(),
            a
        );
        assert!(serde_json::from_str::<AtomicAmount>("10000").is_err());
        assert!(serde_json::from_str::<AtomicAmount>("\"0x10\"").is_err());
        assert!(serde_json::from_str::<AtomicAmount>("\"-1\"").is_err());
        assert!(serde_json::from_str::<AtomicAmount>("\"1.0\"").is_err());
        assert_eq!(
            AtomicAmount::parse_decimal_or_hex("0x1").unwrap(),
            AtomicAmount::from(1u64)
        );
        assert_eq!(
            AtomicAmount::parse_decimal_or_hex("01").unwrap(),
            AtomicAmount::from(1u64)
        );
    }

    #[test]
    fn price_display_round_trips() {
        for s in ["$0.01", "$1", "10000", "$0.000001"] {
            let p: Price = s.parse().unwrap();
            assert_eq!(p.to_string().parse::<Price>().unwrap(), p);
        }
    }

    proptest::proptest! {
        #[test]
        fn price_parse_never_panics(s in ".{0,100}") {
            if let Ok(p) = s.parse::<Price>() {
                let _ = p.to_atomic(6);
                let _ = p.to_atomic(18);
                let _ = p.to_atomic(0);
            }
        }

        #[test]
        fn amount_round_trips(n in proptest::prelude::any::<[u64; 4]>()) {
            let a = AtomicAmount::new(U256::from_limbs(n));
            let json = serde_json::to_string(&a).unwrap();
            proptest::prop_assert_eq!(serde_json::from_str::<AtomicAmount>(&json).unwrap(), a);
        }
    }
}
