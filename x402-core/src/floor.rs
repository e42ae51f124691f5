//! Per-network minimum prices: [`PriceFloors`], the smallest prices, in
//! dollars, routes may charge on each network (a route priced under one
//! settlement's gas loses money on every call).

use std::{cmp::Ordering, collections::BTreeMap};

use alloy_primitives::U256;

use crate::{
    money::{pow10, Price, PriceError},
    network,
    route::Offer,
};

/// The default floors: Base, Arbitrum One, Ethereum.
const DEFAULT_FLOORS: [(&str, &str); 3] = [
    ("eip155:8453", "$0.01"),
    ("eip155:42161", "$0.02"),
    ("eip155:1", "$0.05"),
];

/// The smallest price, in dollars, a route may charge on each network.
///
/// A settlement costs the seller gas (the facilitator's, paid back one way or
/// another). A route priced under what one settlement costs on its chain
/// loses money on every call, so [`Engine::builder`](crate::Engine::builder)
/// refuses to build one and a route priced per request has its cheaper
/// offers left out (see [`EngineBuilder::price_floors`](crate::EngineBuilder::price_floors)).
///
/// [`PriceFloors::default()`] holds these floors, over the settlement gas
/// measured on each chain:
///
/// | Network | CAIP-2 | Settlement gas (measured) | Floor |
/// |---|---|---|---|
/// | Base | `eip155:8453` | about $0.001 | $0.01 |
/// | Arbitrum One | `eip155:42161` | about $0.0035 | $0.02 |
/// | Ethereum | `eip155:1` | about $0.028 | $0.05 |
///
/// Testnets and every other network have no floor. [`PriceFloors::none()`]
/// has none at all.
///
/// Which prices are compared with a floor (all exactly, as decimals, never
/// as floats):
///
/// - a price in the network's default stablecoin (the offer names no asset,
///   or names the default stablecoin's own address), or in Ethereum's USDC
///   (Ethereum has no default stablecoin, so routes there name it), whether
///   written in
///   dollars (`"$0.01"`) or in atomic units (`"10000"`, converted with the
///   stablecoin's decimals);
/// - an `upto` offer's ceiling: a ceiling under the floor could never
///   settle a call worth a settlement. What the handler then charges is not
///   compared: the seller chooses to charge less, and the floor is about
///   what the route can settle;
/// - a session offer's price: the whole session pays for one settlement.
///
/// A price in any other asset has no known dollar value and is **not
/// checked**, whichever way it is written (`"$0.01"` means 0.01 whole units
/// of that asset).
///
/// ```
/// use x402_core::floor::PriceFloors;
///
/// let floors = PriceFloors::default()
///     .set("eip155:137", "$0.005") // Polygon
///     .remove("eip155:1");
/// assert_eq!(floors.get("eip155:8453").map(|p| p.to_string()), Some("$0.01".into()));
/// assert_eq!(floors.get("eip155:137").map(|p| p.to_string()), Some("$0.005".into()));
/// assert_eq!(floors.get("eip155:1"), None);
/// assert_eq!(floors.get("eip155:84532"), None); // Base Sepolia: a testnet
/// assert_eq!(PriceFloors::none().get("eip155:8453"), None);
/// ```
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriceFloors {
    /// Floors by CAIP-2 id; an unparseable floor is kept to be reported by
    /// the engine builder.
    floors: BTreeMap<String, Result<Price, PriceError>>,
}

impl Default for PriceFloors {
    /// The floors of Base ($0.01), Arbitrum One ($0.02) and Ethereum ($0.05):
    /// see the [type's docs](PriceFloors).
    fn default() -> Self {
        DEFAULT_FLOORS
            .iter()
            .fold(Self::none(), |floors, (network, floor)| {
                floors.set(*network, floor)
            })
    }
}

impl PriceFloors {
    /// No floor on any network.
    pub fn none() -> Self {
        Self {
            floors: BTreeMap::new(),
        }
    }

    /// Sets the floor of `network` (a CAIP-2 id, or a version 1 name such as
    /// `base`) to a dollar amount: `"$0.05"`, `"0.05"` or `"1"` (one dollar;
    /// a floor is always whole dollars and cents, never atomic units). A
    /// floor that cannot be parsed is reported by
    /// [`EngineBuilder::build`](crate::EngineBuilder::build).
    pub fn set(mut self, network: impl Into<String>, floor: impl AsRef<str>) -> Self {
        let floor = Price::units(floor.as_ref()).map(normalize);
        self.floors
            .insert(network::canonical(&network.into()).to_owned(), floor);
        self
    }

    /// Removes the floor of `network` (CAIP-2 id or version 1 name).
    pub fn remove(mut self, network: impl Into<String>) -> Self {
        self.floors.remove(network::canonical(&network.into()));
        self
    }

    /// The floor of `network` (CAIP-2 id or version 1 name), in dollars.
    pub fn get(&self, network: &str) -> Option<Price> {
        self.floors
            .get(network::canonical(network))?
            .as_ref()
            .ok()
            .copied()
    }

    /// The first floor that is not a dollar amount, with its network.
    pub(crate) fn invalid(&self) -> Option<(&str, &PriceError)> {
        self.floors
            .iter()
            .find_map(|(network, floor)| floor.as_ref().err().map(|e| (network.as_str(), e)))
    }

    /// Whether `offer` is priced under its network's floor. Offers whose
    /// price cannot be valued in dollars (another asset, or a price that does
    /// not convert, which the offer's resolution reports) pass.
    pub(crate) fn check(&self, offer: &Offer) -> Result<(), BelowFloor> {
        let Some(floor) = self.get(&offer.network) else {
            return Ok(());
        };
        let Some(price) = usd_value(offer) else {
            return Ok(());
        };
        if compare(price, floor) == Ordering::Less {
            return Err(BelowFloor {
                network: offer.network.clone(),
                price,
                floor,
            });
        }
        Ok(())
    }
}

/// An offer priced under its network's floor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BelowFloor {
    /// The offer's network.
    pub(crate) network: String,
    /// The offer's price, in dollars.
    pub(crate) price: Price,
    /// The network's floor, in dollars.
    pub(crate) floor: Price,
}

/// Dollar stablecoins the floors value besides the networks' default ones
/// (network, address, decimals): Ethereum has no default stablecoin (a `$`
/// price there names its asset, as upstream's servers require), but a
/// route priced in its USDC is still checked against Ethereum's floor.
const OTHER_DOLLAR_COINS: &[(&str, &str, u8)] =
    &[("eip155:1", "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", 6)];

/// What an offer's price is worth in dollars, when that is known: a price in
/// the network's default stablecoin (or another known dollar stablecoin),
/// exactly.
fn usd_value(offer: &Offer) -> Option<Price> {
    let price = offer.price.as_ref().ok()?;
    let default = network::default_stablecoin(&offer.network).map(|c| (c.address, c.decimals));
    let (decimals, scale) = match &offer.asset {
        None => default.map(|(_, d)| (d, d))?,
        Some(asset) => {
            let others = OTHER_DOLLAR_COINS
                .iter()
                .filter(|(network, _, _)| *network == offer.network)
                .map(|&(_, address, decimals)| (address, decimals));
            let (_, scale) = default
                .into_iter()
                .chain(others)
                .find(|(address, _)| same_address(&offer.network, &asset.address, address))?;
            (asset.decimals, scale)
        }
    };
    // The amount the route would ask for, worth `amount / 10^scale`
    // dollars of the stablecoin.
    let amount = price.to_atomic(decimals).ok()?;
    Some(normalize(Price::Units {
        digits: amount.get(),
        scale,
    }))
}

/// EVM addresses compare without their checksum case; other networks'
/// (base58 mints) exactly.
fn same_address(network: &str, a: &str, b: &str) -> bool {
    match network::family(network) {
        network::Family::Evm => a.eq_ignore_ascii_case(b),
        _ => a == b,
    }
}

/// The decimal without trailing fractional zeros (`$0.010` → `$0.01`).
fn normalize(price: Price) -> Price {
    match price {
        Price::Units {
            mut digits,
            mut scale,
        } => {
            let ten = U256::from(10u8);
            while scale > 0 && !digits.is_zero() && (digits % ten).is_zero() {
                digits /= ten;
                scale -= 1;
            }
            if digits.is_zero() {
                scale = 0;
            }
            Price::Units { digits, scale }
        }
        atomic @ Price::Atomic(_) => atomic,
    }
}

/// Compares two whole-unit decimals exactly. An atomic price (never given
/// here) counts as whole units.
fn compare(a: Price, b: Price) -> Ordering {
    let (a, sa) = units(a);
    let (b, sb) = units(b);
    if sa >= sb {
        scaled_cmp(a, b, sa - sb)
    } else {
        scaled_cmp(b, a, sb - sa).reverse()
    }
}

fn units(price: Price) -> (U256, u8) {
    match price {
        Price::Units { digits, scale } => (digits, scale),
        Price::Atomic(amount) => (amount.get(), 0),
    }
}

/// `a` against `b * 10^shift`. When that product does not fit in a uint256
/// it is larger than `a`, which does.
fn scaled_cmp(a: U256, b: U256, shift: u8) -> Ordering {
    if b.is_zero() {
        return a.cmp(&U256::ZERO);
    }
    match pow10(shift).and_then(|f| b.checked_mul(f)) {
        Some(scaled) => a.cmp(&scaled),
        None => Ordering::Less,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{money::AtomicAmount, route::Asset};

    const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
    /// MegaETH: its default stablecoin (MegaUSD) has 18 decimals.
    const MEGAETH: &str = "eip155:4326";

    fn usd(s: &str) -> Price {
        Price::units(s).unwrap()
    }

    #[test]
    fn compares_decimals_exactly_at_the_boundary() {
        use Ordering::*;
        assert_eq!(compare(usd("$0.00999999"), usd("$0.01")), Less);
        assert_eq!(compare(usd("$0.01"), usd("$0.01")), Equal);
        assert_eq!(compare(usd("$0.0100"), usd("$0.01")), Equal);
        assert_eq!(compare(usd("$0.01"), usd("$0.010000000000000001")), Less);
        assert_eq!(compare(usd("$0.010000000000000001"), usd("$0.01")), Greater);
        assert_eq!(compare(usd("$1"), usd("$0.999999999999999999")), Greater);
        assert_eq!(compare(usd("$0"), usd("$0.000000000000000001")), Less);
        assert_eq!(compare(usd("$0"), usd("$0.00")), Equal);
        // Scales far apart: the product would not fit a uint256.
        let tiny = Price::Units {
            digits: U256::from(1u8),
            scale: 200,
        };
        assert_eq!(compare(tiny, usd("$0.01")), Less);
        assert_eq!(compare(usd("$0.01"), tiny), Greater);
        let huge = format!("${}", "9".repeat(77));
        assert_eq!(compare(usd(&huge), usd("$0.01")), Greater);
    }

    #[test]
    fn a_6_decimal_stablecoin_at_the_floor() {
        let floors = PriceFloors::default();
        let base = |price: &str| Offer::exact("eip155:8453", price, PAY_TO);
        // $0.00999999 does not exist in 6 decimals: the resolver reports it,
        // the floor does not guess.
        assert_eq!(floors.check(&base("$0.00999999")), Ok(()));
        let below = floors.check(&base("$0.009999")).unwrap_err();
        assert_eq!(below.price.to_string(), "$0.009999");
        assert_eq!(below.floor.to_string(), "$0.01");
        assert!(floors.check(&base("9999")).is_err());
        assert_eq!(floors.check(&base("10000")), Ok(()));
        assert_eq!(floors.check(&base("$0.01")), Ok(()));
        assert_eq!(floors.check(&base("$0.010001")), Ok(()));
        let atomic = Offer::exact("eip155:8453", AtomicAmount::from(9_999u64), PAY_TO);
        assert_eq!(
            floors.check(&atomic).unwrap_err().price.to_string(),
            "$0.009999"
        );
    }

    #[test]
    fn an_18_decimal_stablecoin_at_the_floor() {
        let floors = PriceFloors::none().set(MEGAETH, "$0.01");
        let mega = |price: &str| Offer::exact(MEGAETH, price, PAY_TO);
        let below = floors.check(&mega("$0.00999999")).unwrap_err();
        assert_eq!(below.price.to_string(), "$0.00999999");
        assert!(floors.check(&mega("$0.009999999999999999")).is_err());
        assert!(floors.check(&mega("9999999999999999")).is_err());
        assert_eq!(floors.check(&mega("10000000000000000")), Ok(()));
        assert_eq!(floors.check(&mega("$0.01")), Ok(()));
        assert_eq!(floors.check(&mega("$0.010000000000000001")), Ok(()));
    }

    #[test]
    fn only_the_default_stablecoin_is_valued() {
        let floors = PriceFloors::default();
        let usdc_base = "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913"; // lower case
        let named = Offer::exact("eip155:8453", "$0.001", PAY_TO).asset(Asset::new(usdc_base, 6));
        assert!(floors.check(&named).is_err());
        let other = Offer::exact("eip155:8453", "$0.001", PAY_TO)
            .asset(Asset::new("0x4200000000000000000000000000000000000006", 18));
        assert_eq!(floors.check(&other), Ok(()));
        // A price that does not parse is the resolver's to report.
        assert_eq!(
            floors.check(&Offer::exact("eip155:8453", "1e3", PAY_TO)),
            Ok(())
        );
    }

    #[test]
    fn floors_are_set_removed_and_named_either_way() {
        let floors = PriceFloors::default();
        assert_eq!(floors.get("base"), Some(usd("$0.01")));
        assert_eq!(floors.get("eip155:42161"), Some(usd("$0.02")));
        assert_eq!(floors.get("ethereum"), Some(usd("$0.05")));
        assert_eq!(floors.get("eip155:84532"), None);
        assert_eq!(floors.get("eip155:421614"), None);
        let floors = floors.set("base", "0.0001").remove("ethereum");
        assert_eq!(floors.get("eip155:8453"), Some(usd("$0.0001")));
        assert_eq!(floors.get("eip155:1"), None);
        assert_eq!(floors.invalid(), None);
        let bad = PriceFloors::none().set("eip155:8453", "1e-2");
        assert_eq!(bad.invalid(), Some(("eip155:8453", &PriceError::Malformed)));
        assert_eq!(bad.get("eip155:8453"), None);
        assert_eq!(normalize(usd("$0.0100")).to_string(), "$0.01");
        assert_eq!(normalize(usd("$10.00")).to_string(), "$10");
        assert_eq!(normalize(usd("$0.000")).to_string(), "$0");
    }
}
