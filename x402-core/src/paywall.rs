//! The HTML page browsers get instead of the v1 JSON body.
//!
//! A request whose `Accept` has `text/html` and whose `User-Agent` has
//! `Mozilla` gets this page with status 402 (the v2 `PAYMENT-REQUIRED` header
//! is still sent). Replace it with your own by implementing [`PaywallPage`]; a
//! closure `Fn(&PaymentRequired) -> String` is one.

use std::fmt::Write as _;

use crate::{network, proto::v2::PaymentRequired};

/// Renders the paywall page.
pub trait PaywallPage: Send + Sync + 'static {
    /// The HTML for a challenge. Escape everything you interpolate.
    fn html(&self, challenge: &PaymentRequired) -> String;
}

impl<F> PaywallPage for F
where
    F: Fn(&PaymentRequired) -> String + Send + Sync + 'static,
{
    fn html(&self, challenge: &PaymentRequired) -> String {
        self(challenge)
    }
}

/// A plain page listing the ways to pay. Everything interpolated is escaped.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultPaywallPage;

impl PaywallPage for DefaultPaywallPage {
    fn html(&self, challenge: &PaymentRequired) -> String {
        let mut rows = String::new();
        for r in &challenge.accepts {
            let decimals = network::default_stablecoin(&r.network)
                .filter(|c| c.address.eq_ignore_ascii_case(&r.asset))
                .map(|c| c.decimals);
            let amount = match decimals {
                Some(d) => format_units(&r.amount.to_string(), d),
                None => format!("{} (atomic units)", r.amount),
            };
            let _ = write!(
                rows,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td><code>{}</code></td></tr>",
                escape(&r.scheme),
                escape(&r.network),
                escape(&amount),
                escape(&r.asset),
                escape(&r.pay_to),
            );
        }
        let title = if challenge.resource.description.is_empty() {
            "Payment required".to_owned()
        } else {
            challenge.resource.description.clone()
        };
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
<title>{title}</title><style>body{{font-family:system-ui,sans-serif;max-width:48rem;margin:3rem auto;padding:0 1rem}}\
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.3rem .6rem;text-align:left}}</style></head><body>\
<h1>{title}</h1><p>This resource costs money: <code>{url}</code></p>\
<p>Pay with an x402 client (a wallet or an agent that speaks the HTTP 402 payment protocol), then request it again.</p>\
<table><tr><th>Scheme</th><th>Network</th><th>Price</th><th>Asset</th><th>Pay to</th></tr>{rows}</table></body></html>",
            title = escape(&title),
            url = escape(&challenge.resource.url),
        )
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_formats() {
        assert_eq!(escape("<script>\"'&"), "&lt;script&gt;&quot;&#39;&amp;");
        assert_eq!(format_units("1000", 6), "$0.001");
        assert_eq!(format_units("1000000", 6), "$1");
        assert_eq!(format_units("1500000", 6), "$1.5");
    }
}
