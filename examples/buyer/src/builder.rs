//! Configuring a buyer: [`BuyerBuilder`] and its checks.

use std::{
    fmt,
    sync::{atomic::AtomicU64, Arc},
    time::Duration,
};

use alloy_primitives::Address;
use alloy_signer_local::PrivateKeySigner;
use reqwest::Url;
use x402_core::{money::AtomicAmount, network};

use crate::{
    budget::Budget,
    client::{Buyer, Inner},
    error::{BuyerError, ConfigError},
    select::{url_origin, Limits},
    session,
};

/// The request timeout of the default HTTP client.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

impl Buyer {
    /// Starts configuring a buyer that signs with `signer`.
    ///
    /// See [`BuyerBuilder`] for the limits; every allow-list starts empty,
    /// which allows nothing.
    pub fn builder(signer: PrivateKeySigner) -> BuyerBuilder {
        BuyerBuilder {
            signer,
            networks: Vec::new(),
            any_network: false,
            assets: Vec::new(),
            any_asset: false,
            recipients: Vec::new(),
            any_recipient: false,
            origins: Vec::new(),
            any_origin: false,
            max_per_call: None,
            max_total: None,
            prefer_v1: false,
            planned_calls: 1,
            client: None,
        }
    }
}

/// Configures a [`Buyer`]. Every setter consumes and returns the builder.
///
/// Allow-lists start empty and **an empty allow-list allows nothing**: a
/// buyer must be told at least one network, asset, recipient and origin
/// before it pays anything. [`max_per_call`](Self::max_per_call) is required.
///
/// ```
/// use x402_buyer::{Buyer, PrivateKeySigner};
/// use x402_core::money::AtomicAmount;
///
/// let buyer = Buyer::builder(PrivateKeySigner::random())
///     .allow_network("eip155:84532")
///     .allow_asset("0x036CbD53842c5426634e7929541eC2318f3dCF7e".parse()?)
///     .allow_recipient("0x209693Bc6afc0C5328bA36FaF03C514EF312287C".parse()?)
///     .allow_origin("http://127.0.0.1:4021")
///     .max_per_call(AtomicAmount::from(10_000u64))
///     .build()?;
/// assert_eq!(buyer.signatures_made(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub struct BuyerBuilder {
    signer: PrivateKeySigner,
    networks: Vec<String>,
    any_network: bool,
    assets: Vec<Address>,
    any_asset: bool,
    recipients: Vec<Address>,
    any_recipient: bool,
    origins: Vec<String>,
    any_origin: bool,
    max_per_call: Option<AtomicAmount>,
    max_total: Option<AtomicAmount>,
    prefer_v1: bool,
    planned_calls: u64,
    client: Option<reqwest::Client>,
}

impl fmt::Debug for BuyerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuyerBuilder")
            .field("address", &self.signer.address())
            .field("networks", &self.networks)
            .field("any_network", &self.any_network)
            .field("assets", &self.assets)
            .field("any_asset", &self.any_asset)
            .field("recipients", &self.recipients)
            .field("any_recipient", &self.any_recipient)
            .field("origins", &self.origins)
            .field("any_origin", &self.any_origin)
            .field("max_per_call", &self.max_per_call)
            .field("max_total", &self.max_total)
            .field("prefer_v1", &self.prefer_v1)
            .field("planned_calls", &self.planned_calls)
            .finish_non_exhaustive()
    }
}

impl BuyerBuilder {
    /// Allows paying on a network: a CAIP-2 id (`eip155:84532`) or a v1 name
    /// (`base-sepolia`), which [`build`](Self::build) maps to its CAIP-2 id.
    /// v1 challenges are matched through the same mapping.
    pub fn allow_network(mut self, network: impl Into<String>) -> Self {
        self.networks.push(network.into());
        self
    }

    /// Allows paying in a token (the requirement's `asset`); compared
    /// case-insensitively.
    pub fn allow_asset(mut self, asset: Address) -> Self {
        self.assets.push(asset);
        self
    }

    /// Allows paying a recipient (the requirement's `payTo`); compared
    /// case-insensitively.
    pub fn allow_recipient(mut self, recipient: Address) -> Self {
        self.recipients.push(recipient);
        self
    }

    /// Allows paying for URLs of an origin, `scheme://host[:port]`
    /// (`http://127.0.0.1:4021`). Default ports may be written or left out.
    /// Only the origin of the URL that was requested counts, not the
    /// `resource` the seller describes.
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.origins.push(origin.into());
        self
    }

    /// The most one call may pay, in the asset's atomic units. Required.
    pub fn max_per_call(mut self, cap: AtomicAmount) -> Self {
        self.max_per_call = Some(cap);
        self
    }

    /// The most this buyer (and its clones) may pay in total. Each payment is
    /// reserved against it before signing and released when the seller did
    /// not charge, so concurrent calls cannot overrun it. Unset: no total
    /// limit beyond [`max_per_call`](Self::max_per_call) per call.
    ///
    /// The budget counts atomic units whatever the asset, so it is meaningful
    /// when the allowed assets share a unit (e.g. USDC on several chains).
    pub fn max_total(mut self, budget: AtomicAmount) -> Self {
        self.max_total = Some(budget);
        self
    }

    /// Pays with protocol v1 (`X-PAYMENT`) when the 402 offers both a v2
    /// header and a valid v1 body. Default `false`: v2 whenever a
    /// `PAYMENT-REQUIRED` header is present, v1 only when only a v1 body is
    /// offered.
    pub fn prefer_v1(mut self, prefer: bool) -> Self {
        self.prefer_v1 = prefer;
        self
    }

    /// How many calls [`Buyer::get`] and [`Buyer::request`] plan to make to a
    /// route, for deciding whether a prepaid session is cheaper than paying
    /// per call (see the [crate docs](crate#prepaid-sessions)). Default 1
    /// (a session is bought only if it costs less than one call); 0 counts
    /// as 1. [`Buyer::get_planned`] overrides it per call.
    pub fn planned_calls(mut self, calls: u64) -> Self {
        self.planned_calls = calls.max(1);
        self
    }

    /// The HTTP client to use. It **must not follow redirects**
    /// (`reqwest::redirect::Policy::none()`): a buyer refuses a response that
    /// came from another URL than the one requested, but by then a following
    /// client has already requested the redirect target. Default: a client
    /// with `Policy::none()` and a 30 s timeout.
    pub fn client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// **Dangerous:** pays on any network the buyer can sign for.
    pub fn dangerous_allow_any_network(mut self) -> Self {
        self.any_network = true;
        self
    }

    /// **Dangerous:** pays in any token a seller names. A seller could name a
    /// token worth far more per atomic unit than the one you meant.
    pub fn dangerous_allow_any_asset(mut self) -> Self {
        self.any_asset = true;
        self
    }

    /// **Dangerous:** pays any recipient a seller names.
    pub fn dangerous_allow_any_recipient(mut self) -> Self {
        self.any_recipient = true;
        self
    }

    /// **Dangerous:** pays for URLs of any origin.
    pub fn dangerous_allow_any_origin(mut self) -> Self {
        self.any_origin = true;
        self
    }

    /// Checks the configuration and builds the buyer.
    ///
    /// # Errors
    ///
    /// [`BuyerError::Config`] when `max_per_call` is unset
    /// ([`ConfigError::MissingMaxPerCall`]), a network is neither CAIP-2 nor
    /// a known v1 name ([`ConfigError::UnknownNetwork`]), or an origin is not
    /// an `http(s)://host[:port]` origin ([`ConfigError::InvalidOrigin`]);
    /// [`BuyerError::Http`] when the default client cannot be built.
    pub fn build(self) -> Result<Buyer, BuyerError> {
        let max_per_call = self.max_per_call.ok_or(ConfigError::MissingMaxPerCall)?;
        let networks = self
            .networks
            .iter()
            .map(|n| normalize_network(n))
            .collect::<Result<Vec<_>, _>>()?;
        let origins = self
            .origins
            .iter()
            .map(|o| normalize_origin(o))
            .collect::<Result<Vec<_>, _>>()?;
        let client = match self.client {
            Some(client) => client,
            None => reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(DEFAULT_TIMEOUT)
                .build()?,
        };
        Ok(Buyer {
            inner: Arc::new(Inner {
                signer: self.signer,
                client,
                limits: Limits {
                    networks: (!self.any_network).then_some(networks),
                    assets: (!self.any_asset).then_some(self.assets),
                    recipients: (!self.any_recipient).then_some(self.recipients),
                    origins: (!self.any_origin).then_some(origins),
                    max_per_call,
                },
                prefer_v1: self.prefer_v1,
                planned_calls: self.planned_calls,
                budget: Budget::new(self.max_total),
                signatures: AtomicU64::new(0),
                sessions: session::Wallet::default(),
            }),
        })
    }
}

fn normalize_network(network: &str) -> Result<String, ConfigError> {
    if network.contains(':') {
        Ok(network.to_owned())
    } else {
        network::caip2(network)
            .map(str::to_owned)
            .ok_or_else(|| ConfigError::UnknownNetwork(network.to_owned()))
    }
}

fn normalize_origin(origin: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::InvalidOrigin(origin.to_owned());
    let url = Url::parse(origin).map_err(|_| bad())?;
    let plain = matches!(url.scheme(), "http" | "https")
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none();
    if !plain {
        return Err(bad());
    }
    Ok(url_origin(&url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_networks_are_normalized_or_refused() {
        assert_eq!(
            normalize_origin("https://h:443").as_deref(),
            Ok("https://h")
        );
        assert_eq!(
            normalize_origin("http://h/path"),
            Err(ConfigError::InvalidOrigin("http://h/path".into()))
        );
        assert_eq!(
            normalize_network("base-sepolia").as_deref(),
            Ok("eip155:84532")
        );
        assert_eq!(
            normalize_network("no-such-chain"),
            Err(ConfigError::UnknownNetwork("no-such-chain".into()))
        );
    }
}
