//! The HTML page browsers get instead of the v1 JSON body: a paywall a
//! person can pay with.
//!
//! A request whose `Accept` has `text/html` and whose `User-Agent` has
//! `Mozilla` gets this page with status 402 (the v2 `PAYMENT-REQUIRED` header
//! is still sent), under a strict `Content-Security-Policy` with a nonce made
//! for that response ([`ContentSecurityPolicy::strict`]).
//!
//! The default page ([`DefaultPaywallPage`], or a [`PaywallTheme`] with the
//! seller's title, description and name) lists each offer with its price and
//! network, and pays `exact` EIP-3009 offers on EVM networks from the
//! visitor's browser wallet (an injected EIP-1193 provider, found through
//! EIP-6963 when several are installed): it switches the wallet to the
//! offer's chain, has it sign the same `TransferWithAuthorization` typed data
//! the official x402 client signs (`eth_signTypedData_v4`), sends the request
//! again with `PAYMENT-SIGNATURE`, and shows the paid response (JSON
//! pretty-printed, text as text, anything else as a download) with the
//! transaction of its `PAYMENT-RESPONSE` receipt. `upto` ceilings, session
//! offers and other networks are shown with what they mean and left to x402
//! clients.
//!
//! **Where the page's script gets the challenge.** A script cannot read the
//! headers of the response that delivered its own document, and the page
//! carries no copy of the challenge a route description could break out of.
//! So the script asks again: `fetch` of the same URL, with
//! `Accept: application/json`, no credentials and no payment header, and
//! reads the `PAYMENT-REQUIRED` header of that 402 (same origin: no CORS
//! involved). The offers shown are rendered here, escaped; the payment is
//! built only from the challenge of that header, matched to the button the
//! visitor pressed by scheme, network, asset, recipient and amount (a price
//! that changed in between is reported, never paid).
//!
//! **Nothing from another origin.** The script and the style sheet are
//! inline (embedded in the crate), with the response's nonce; no fonts,
//! images or CDNs, so the page works offline and the policy can forbid
//! everything else (`default-src 'none'`, `connect-src 'self'`).
//!
//! ```
//! use x402_core::paywall::{PaywallPage, PaywallTheme};
//! # use x402_core::proto::v2::{PaymentRequired, ResourceInfo};
//! # let challenge: PaymentRequired = serde_json::from_value(serde_json::json!({
//! #     "x402Version": 2,
//! #     "resource": {"url": "https://api.example/report", "description": "", "mimeType": ""},
//! #     "accepts": []
//! # })).unwrap();
//!
//! let page = PaywallTheme::new()
//!     .title("The quarterly report")
//!     .description("Forty pages of numbers, as a PDF.")
//!     .seller("Example Research <Ltd>");
//! let html = page.html(&challenge);
//! assert!(html.contains("Example Research &lt;Ltd&gt;"));
//! // Engine::builder(facilitator).paywall_page(page)
//! ```
//!
//! Replace the page by implementing [`PaywallPage`]; a closure
//! `Fn(&PaymentRequired) -> String` is one, and [`with_nonce`] makes one of
//! a closure that also takes the response's nonce.

use std::{fmt, fmt::Write as _};

use base64::Engine as _;
use serde_json::Value;

use crate::{
    network,
    proto::v2::{PaymentRequired, PaymentRequirements},
};

#[cfg(test)]
mod tests;

/// The page's script, inlined with the response's nonce.
const SCRIPT: &str = include_str!("page.js");
/// The page's style sheet, inlined with the response's nonce.
const STYLE: &str = include_str!("page.css");

/// Renders the paywall page.
///
/// Only [`html`](Self::html) is required, so closures implement it. A page
/// with inline scripts or styles puts the response's nonce on them by
/// overriding [`html_with_nonce`](Self::html_with_nonce) (or through
/// [`with_nonce`]); the policy sent with the page is
/// [`content_security_policy`](Self::content_security_policy), strict by
/// default.
pub trait PaywallPage: Send + Sync + 'static {
    /// The HTML for a challenge. Escape everything you interpolate
    /// ([`escape`]).
    fn html(&self, challenge: &PaymentRequired) -> String;

    /// The HTML for one response, whose `Content-Security-Policy` allows
    /// the inline `<script>` and `<style>` elements that carry
    /// `nonce="{nonce}"`. Default: [`html`](Self::html), whose inline
    /// scripts and styles the default policy then blocks.
    fn html_with_nonce(&self, challenge: &PaymentRequired, nonce: &CspNonce) -> String {
        let _ = nonce;
        self.html(challenge)
    }

    /// The `Content-Security-Policy` sent with the page, `None` for none.
    /// Default: [`ContentSecurityPolicy::strict`] with the response's nonce.
    fn content_security_policy(&self, nonce: &CspNonce) -> Option<String> {
        Some(ContentSecurityPolicy::strict(nonce))
    }
}

impl<F> PaywallPage for F
where
    F: Fn(&PaymentRequired) -> String + Send + Sync + 'static,
{
    fn html(&self, challenge: &PaymentRequired) -> String {
        self(challenge)
    }
}

/// A page made of a closure that also takes the response's CSP nonce.
///
/// ```
/// use x402_core::paywall::{self, escape};
///
/// let page = paywall::with_nonce(|challenge, nonce| {
///     format!(
///         "<!doctype html><title>{}</title><style nonce=\"{nonce}\">body{{margin:2rem}}</style>",
///         escape(&challenge.resource.description),
///     )
/// });
/// // Engine::builder(facilitator).paywall_page(page)
/// # let _ = page;
/// ```
pub fn with_nonce<F>(render: F) -> NoncedPage<F>
where
    F: Fn(&PaymentRequired, &CspNonce) -> String + Send + Sync + 'static,
{
    NoncedPage(render)
}

/// A [`PaywallPage`] of a closure taking the nonce: see [`with_nonce`].
#[derive(Clone, Copy)]
pub struct NoncedPage<F>(F);

impl<F> fmt::Debug for NoncedPage<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NoncedPage(<closure>)")
    }
}

impl<F> PaywallPage for NoncedPage<F>
where
    F: Fn(&PaymentRequired, &CspNonce) -> String + Send + Sync + 'static,
{
    fn html(&self, challenge: &PaymentRequired) -> String {
        (self.0)(challenge, &CspNonce::generate())
    }

    fn html_with_nonce(&self, challenge: &PaymentRequired, nonce: &CspNonce) -> String {
        (self.0)(challenge, nonce)
    }
}

/// A Content-Security-Policy nonce: 128 random bits, base64url, new for
/// every page served.
#[derive(Clone, PartialEq, Eq)]
pub struct CspNonce(String);

impl CspNonce {
    /// A fresh nonce.
    pub fn generate() -> Self {
        let bytes: [u8; 16] = rand::random();
        Self(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
    }

    /// The nonce's text, as it goes into `nonce="…"` and `'nonce-…'`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CspNonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for CspNonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CspNonce(..)")
    }
}

/// The policies the engine sends with paywall pages.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ContentSecurityPolicy;

impl ContentSecurityPolicy {
    /// The default: nothing but the inline scripts and styles carrying
    /// `nonce`, requests to the page's own origin (the page's `fetch`),
    /// and `data:` images (wallet icons); no frames around the page, no
    /// forms, no `<base>`.
    pub fn strict(nonce: &CspNonce) -> String {
        format!(
            "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; \
             img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'"
        )
    }
}

/// The default page: a [`PaywallTheme`] with nothing set (the title is the
/// route's description, or "Payment required").
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultPaywallPage;

impl PaywallPage for DefaultPaywallPage {
    fn html(&self, challenge: &PaymentRequired) -> String {
        render(&PaywallTheme::EMPTY, challenge, &CspNonce::generate())
    }

    fn html_with_nonce(&self, challenge: &PaymentRequired, nonce: &CspNonce) -> String {
        render(&PaywallTheme::EMPTY, challenge, nonce)
    }
}

/// The default page, themed: a title, a description and the seller's name,
/// plus the stablecoins whose prices show in dollars beyond each network's
/// default (USDC). Every text is escaped.
///
/// ```
/// use x402_core::paywall::PaywallTheme;
///
/// let page = PaywallTheme::new()
///     .title("Premium weather")
///     .description("Hourly forecasts for the next ten days.")
///     .seller("Example Weather Co.")
///     // A token of your own: prices in it show as dollars.
///     .stablecoin("eip155:84532", "0x5FbDB2315678afecb367f032d93F642f64180aa3", 6);
/// # let _ = page;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct PaywallTheme {
    title: Option<String>,
    description: Option<String>,
    seller: Option<String>,
    stablecoins: Vec<(String, String, u8)>,
}

impl PaywallTheme {
    const EMPTY: Self = Self {
        title: None,
        description: None,
        seller: None,
        stablecoins: Vec::new(),
    };

    /// A theme with nothing set: the default page.
    pub fn new() -> Self {
        Self::default()
    }

    /// The page's heading and `<title>` (default: the route's description,
    /// or "Payment required").
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// A paragraph under the heading (default: the route's description
    /// when it is not the title).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Who sells: shown above the heading.
    pub fn seller(mut self, seller: impl Into<String>) -> Self {
        self.seller = Some(seller.into());
        self
    }

    /// A dollar stablecoin on `network` (CAIP-2 or v1 name), with its
    /// decimals, so its prices show in dollars (a network's default USDC
    /// already does). Other tokens show their amount in atomic units.
    pub fn stablecoin(mut self, network: &str, address: &str, decimals: u8) -> Self {
        self.stablecoins.push((
            network::canonical(network).to_owned(),
            address.to_ascii_lowercase(),
            decimals,
        ));
        self
    }

    /// The decimals of a dollar stablecoin, if `asset` is one on `network`.
    fn dollar_decimals(&self, network_id: &str, asset: &str) -> Option<u8> {
        let canonical = network::canonical(network_id);
        self.stablecoins
            .iter()
            .find(|(n, a, _)| n == canonical && a.eq_ignore_ascii_case(asset))
            .map(|(_, _, d)| *d)
            .or_else(|| {
                network::default_stablecoin(network_id)
                    .filter(|c| c.address.eq_ignore_ascii_case(asset))
                    .map(|c| c.decimals)
            })
    }

    /// An amount of `asset`: dollars for a known stablecoin, else atomic
    /// units, of the token named `token` when known (its EIP-712 name).
    fn price(&self, network_id: &str, asset: &str, amount: &str, token: Option<&str>) -> String {
        match (self.dollar_decimals(network_id, asset), token) {
            (Some(d), _) => format_units(amount, d),
            (None, Some(token)) if !token.is_empty() => format!("{amount} atomic units of {token}"),
            (None, _) => format!("{amount} atomic units"),
        }
    }
}

impl PaywallPage for PaywallTheme {
    fn html(&self, challenge: &PaymentRequired) -> String {
        render(self, challenge, &CspNonce::generate())
    }

    fn html_with_nonce(&self, challenge: &PaymentRequired, nonce: &CspNonce) -> String {
        render(self, challenge, nonce)
    }
}

/// A network's name for people, with "(test network)" when it is one.
fn network_label(network_id: &str) -> String {
    match network::lookup(network_id) {
        Some(n) if !n.mainnet => format!("{} (test network)", network_name(network_id)),
        _ => network_name(network_id),
    }
}

/// A network's name for people: "Base Sepolia", "EVM chain 31337".
fn network_name(network_id: &str) -> String {
    let known = network::lookup(network_id);
    let name = match known {
        Some(n) => n
            .v1_name
            .split('-')
            .map(|word| match word {
                "iotex" => "IoTeX".to_owned(),
                "educhain" => "EDU Chain".to_owned(),
                "skale" => "SKALE".to_owned(),
                "sei" => "Sei".to_owned(),
                word => {
                    let mut chars = word.chars();
                    chars.next().map_or_else(String::new, |first| {
                        first.to_uppercase().chain(chars).collect()
                    })
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
        None => match network::evm_chain_id(network_id) {
            Some(id) => format!("EVM chain {id}"),
            None => network_id.to_owned(),
        },
    };
    name
}

/// Whether the page's script can pay this requirement: `exact`, EVM, an
/// EIP-712 domain in `extra`, EIP-3009 (not Permit2).
fn payable(r: &PaymentRequirements) -> bool {
    let text = |key: &str| r.extra.get(key).and_then(Value::as_str);
    r.scheme == "exact"
        && network::evm_chain_id(&r.network).is_some()
        && text("name").is_some_and(|s| !s.is_empty())
        && text("version").is_some_and(|s| !s.is_empty())
        && r.extra
            .get("assetTransferMethod")
            .is_none_or(|m| m.as_str() == Some("eip3009"))
}

/// A duration for people: "1 hour", "90 minutes", "2 days".
fn duration(seconds: u64) -> String {
    let (n, unit) = match seconds {
        s if s >= 86_400 && s % 86_400 == 0 => (s / 86_400, "day"),
        s if s >= 3_600 && s % 3_600 == 0 => (s / 3_600, "hour"),
        s if s >= 60 && s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// One offer of the list: what it costs, what that means, and how to pay.
fn offer_item(theme: &PaywallTheme, r: &PaymentRequirements, out: &mut String) {
    let token = r.extra.get("name").and_then(Value::as_str);
    let price = theme.price(&r.network, &r.asset, &r.amount.to_string(), token);
    let (headline, meaning) = match r.scheme.as_str() {
        "exact" => (price.clone(), "per request".to_owned()),
        "upto" => (
            format!("up to {price}"),
            "per request: you authorise this ceiling and are charged what the request uses"
                .to_owned(),
        ),
        other => (price.clone(), format!("per request ({other} scheme)")),
    };
    let _ = write!(
        out,
        "<li class=\"offer\"><p class=\"price\">{}</p><p class=\"meaning\">{}</p>\
<p class=\"network\">on {}</p>",
        escape(&headline),
        escape(&meaning),
        escape(&network_label(&r.network)),
    );
    if payable(r) {
        let _ = write!(
            out,
            "<button type=\"button\" class=\"pay\" disabled data-scheme=\"{}\" data-network=\"{}\" \
data-asset=\"{}\" data-pay-to=\"{}\" data-amount=\"{}\" data-network-name=\"{}\" data-price=\"{}\">Pay {}</button>",
            escape(&r.scheme),
            escape(&r.network),
            escape(&r.asset),
            escape(&r.pay_to),
            escape(&r.amount.to_string()),
            escape(&network_name(&r.network)),
            escape(&price),
            escape(&price),
        );
    } else {
        out.push_str("<p class=\"note\">Pay this one with an x402 client.</p>");
    }
    let _ = write!(
        out,
        "<details><summary>Details</summary><dl><dt>Scheme</dt><dd>{}</dd><dt>Network</dt>\
<dd><code>{}</code></dd><dt>Token</dt><dd><code>{}</code></dd><dt>Recipient</dt><dd><code>{}</code></dd>\
<dt>Amount</dt><dd>{} atomic units</dd></dl></details></li>",
        escape(&r.scheme),
        escape(&r.network),
        escape(&r.asset),
        escape(&r.pay_to),
        escape(&r.amount.to_string()),
    );
}

/// The session offers of `extensions.session`: N calls for a price.
fn session_items(theme: &PaywallTheme, challenge: &PaymentRequired, out: &mut String) {
    let Some(offers) = challenge
        .extensions
        .get("session")
        .and_then(|s| s.pointer("/info/offers"))
        .and_then(Value::as_array)
    else {
        return;
    };
    for offer in offers {
        let calls = offer.get("calls").and_then(Value::as_u64);
        let ttl = offer.get("ttlSeconds").and_then(Value::as_u64);
        let accepts = offer.get("accepts").and_then(Value::as_array);
        let (Some(calls), Some(accepts)) = (calls, accepts) else {
            continue;
        };
        for r in accepts {
            let text = |key: &str| r.get(key).and_then(Value::as_str).unwrap_or_default();
            let (network_id, asset, amount) = (text("network"), text("asset"), text("amount"));
            if amount.is_empty() || !amount.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let token = r.pointer("/extra/name").and_then(Value::as_str);
            let price = theme.price(network_id, asset, amount, token);
            let within = ttl
                .map(|t| format!(" within {}", duration(t)))
                .unwrap_or_default();
            let _ = write!(
                out,
                "<li class=\"offer session\"><p class=\"price\">{}</p>\
<p class=\"meaning\">for {calls} requests{} (a prepaid session: pay once, then call without paying again)</p>\
<p class=\"network\">on {}</p><p class=\"note\">Buy sessions with an x402 client that supports them.</p></li>",
                escape(&price),
                escape(&within),
                escape(&network_label(network_id)),
            );
        }
    }
}

/// The page: the theme's texts, the offers, the status and result areas,
/// and the inline style and script with `nonce`.
fn render(theme: &PaywallTheme, challenge: &PaymentRequired, nonce: &CspNonce) -> String {
    let route_description = challenge.resource.description.as_str();
    let title = theme
        .title
        .as_deref()
        .or((!route_description.is_empty()).then_some(route_description))
        .unwrap_or("Payment required");
    let description = theme
        .description
        .as_deref()
        .or(
            (!route_description.is_empty() && route_description != title)
                .then_some(route_description),
        );

    let mut offers = String::new();
    for r in &challenge.accepts {
        offer_item(theme, r, &mut offers);
    }
    session_items(theme, challenge, &mut offers);

    let mut head = String::new();
    if let Some(seller) = &theme.seller {
        let _ = write!(head, "<p class=\"seller\">{}</p>", escape(seller));
    }
    let _ = write!(head, "<h1>{}</h1>", escape(title));
    if let Some(description) = description {
        let _ = write!(head, "<p class=\"description\">{}</p>", escape(description));
    }

    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
<title>{title}</title>\n<link rel=\"icon\" href=\"data:,\">\n\
<style nonce=\"{nonce}\">\n{STYLE}</style>\n</head>\n<body>\n<main>\n<header>\n{head}\n\
<p class=\"resource\">Payment required for <code>{url}</code></p>\n</header>\n\
<section aria-labelledby=\"offers-heading\">\n<h2 id=\"offers-heading\">Ways to pay</h2>\n\
<ul class=\"offers\">{offers}</ul>\n</section>\n\
<section id=\"wallets\" aria-labelledby=\"wallets-heading\" hidden>\n\
<h2 id=\"wallets-heading\">Choose a wallet</h2>\n<ul id=\"wallet-list\"></ul>\n</section>\n\
<section id=\"status\" class=\"status\" role=\"status\" aria-live=\"polite\" hidden>\n\
<p id=\"status-title\" class=\"status-title\"></p>\n<p id=\"status-detail\"></p>\n\
<p id=\"status-actions\"></p>\n</section>\n\
<section id=\"result\" aria-labelledby=\"result-heading\" hidden>\n\
<h2 id=\"result-heading\">Your purchase</h2>\n<p id=\"receipt\"></p>\n<pre id=\"body\" hidden></pre>\n\
<p id=\"download\" hidden></p>\n</section>\n\
<noscript><p>Paying from this page needs JavaScript. You can also pay with an x402 client \
(a wallet or an agent that speaks the HTTP 402 payment protocol).</p></noscript>\n\
<footer>\n<p>Payments use the x402 protocol. Your wallet shows what you sign; you are charged \
only when the seller settles, after it has your response ready.</p>\n</footer>\n</main>\n\
<script nonce=\"{nonce}\">\n{SCRIPT}</script>\n</body>\n</html>\n",
        title = escape(title),
        url = escape(&challenge.resource.url),
    )
}

/// `atomic` (decimal digits) as dollars with `decimals` places: `$0.001`.
fn format_units(atomic: &str, decimals: u8) -> String {
    let d = usize::from(decimals);
    let padded = format!("{atomic:0>width$}", width = d + 1);
    let (int, frac) = padded.split_at(padded.len() - d);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        format!("${int}")
    } else {
        format!("${int}.{frac}")
    }
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
