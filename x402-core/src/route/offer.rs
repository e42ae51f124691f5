//! Offers: the ways to pay for a route (scheme, network, price, asset,
//! recipient).

use std::time::Duration;

use serde_json::Value;

use crate::{
    money::{Price, PriceError},
    network::TransferMethod,
    proto::JsonObject,
};

/// A token to be paid in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asset {
    /// Contract address or mint.
    pub address: String,
    /// Decimals, used to convert whole-unit prices.
    pub decimals: u8,
    /// EIP-712 domain `(name, version)` of the token (EVM).
    pub eip712: Option<(String, String)>,
    /// How the token is transferred; EIP-3009 on EVM when unset.
    pub transfer_method: Option<TransferMethod>,
}

impl Asset {
    /// An asset with its address and decimals.
    pub fn new(address: impl Into<String>, decimals: u8) -> Self {
        Self {
            address: address.into(),
            decimals,
            eip712: None,
            transfer_method: None,
        }
    }

    /// Sets the token's EIP-712 domain name and version (they must be the
    /// token's own: a wrong name makes every signature fail).
    #[must_use]
    pub fn eip712(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.eip712 = Some((name.into(), version.into()));
        self
    }

    /// Sets how the token is transferred.
    #[must_use]
    pub fn transfer_method(mut self, method: TransferMethod) -> Self {
        self.transfer_method = Some(method);
        self
    }
}

/// The `upto` scheme's name.
pub const UPTO: &str = "upto";
/// The `exact` scheme's name.
pub const EXACT: &str = "exact";

/// One way to pay for a route.
#[derive(Debug, Clone)]
pub struct Offer {
    pub(crate) scheme: String,
    pub(crate) network: String,
    pub(crate) price: Result<Price, PriceError>,
    pub(crate) asset: Option<Asset>,
    pub(crate) pay_to: String,
    pub(crate) max_timeout_seconds: u64,
    pub(crate) extra: JsonObject,
}

/// The default `maxTimeoutSeconds` (as the TypeScript and Python SDKs).
pub const DEFAULT_MAX_TIMEOUT_SECONDS: u64 = 300;

impl Offer {
    /// An `exact` payment of `price` on `network` (CAIP-2) to `pay_to`.
    ///
    /// `price` is `"$0.01"` / `"0.01"` (whole units of the asset) or
    /// `"10000"` (atomic units), or a [`Price`]. The asset defaults to the
    /// network's stablecoin. A price that cannot be parsed is reported by the
    /// engine builder.
    pub fn exact(
        network: impl Into<String>,
        price: impl IntoPrice,
        pay_to: impl Into<String>,
    ) -> Self {
        Self::new(EXACT, network, price, pay_to)
    }

    /// An `upto` (metered) payment: the buyer authorises `ceiling`, the
    /// handler's reported usage is charged.
    pub fn upto(
        network: impl Into<String>,
        ceiling: impl IntoPrice,
        pay_to: impl Into<String>,
    ) -> Self {
        Self::new(UPTO, network, ceiling, pay_to)
    }

    /// An offer of any scheme.
    pub fn new(
        scheme: impl Into<String>,
        network: impl Into<String>,
        price: impl IntoPrice,
        pay_to: impl Into<String>,
    ) -> Self {
        Self {
            scheme: scheme.into(),
            network: network.into(),
            price: price.into_price(),
            asset: None,
            pay_to: pay_to.into(),
            max_timeout_seconds: DEFAULT_MAX_TIMEOUT_SECONDS,
            extra: JsonObject::new(),
        }
    }

    /// Pays in `asset` instead of the network's default stablecoin.
    #[must_use]
    pub fn asset(mut self, asset: Asset) -> Self {
        self.asset = Some(asset);
        self
    }

    /// How long the seller waits for settlement (default 300 s).
    #[must_use]
    pub fn max_timeout(mut self, timeout: Duration) -> Self {
        self.max_timeout_seconds = timeout.as_secs().max(1);
        self
    }

    /// Adds a key to the requirement's `extra` object.
    #[must_use]
    pub fn extra(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.extra.insert(key.into(), value.into());
        self
    }

    /// The scheme.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The network.
    pub fn network(&self) -> &str {
        &self.network
    }
}

/// Something a price can be read from: `&str`, `String`, [`Price`] or an
/// [`AtomicAmount`](crate::money::AtomicAmount).
pub trait IntoPrice {
    /// The price, or why it is not one.
    fn into_price(self) -> Result<Price, PriceError>;
}

impl IntoPrice for &str {
    fn into_price(self) -> Result<Price, PriceError> {
        self.parse()
    }
}

impl IntoPrice for String {
    fn into_price(self) -> Result<Price, PriceError> {
        self.parse()
    }
}

impl IntoPrice for Price {
    fn into_price(self) -> Result<Price, PriceError> {
        Ok(self)
    }
}

impl IntoPrice for crate::money::AtomicAmount {
    fn into_price(self) -> Result<Price, PriceError> {
        Ok(Price::Atomic(self))
    }
}
