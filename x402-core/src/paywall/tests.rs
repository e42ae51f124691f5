#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::json;

use super::*;
use crate::{engine::Decision, route::RequestView, testing::StandIn, Engine, Offer, Route};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const BASE_SEPOLIA_USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
const HOSTILE: &str =
    "</title></style></script><script>alert(1)</script><img src=x onerror=alert(2)>\"'&";

fn challenge(value: serde_json::Value) -> PaymentRequired {
    serde_json::from_value(value).unwrap()
}

/// A challenge with one of each kind of offer: exact EIP-3009 (payable),
/// exact Permit2, upto, Solana, and a session offer.
fn every_kind() -> PaymentRequired {
    let exact = |amount: &str, extra: serde_json::Value| {
        json!({
            "scheme": "exact", "network": "eip155:84532", "amount": amount,
            "asset": BASE_SEPOLIA_USDC, "payTo": PAY_TO, "maxTimeoutSeconds": 60, "extra": extra
        })
    };
    challenge(json!({
        "x402Version": 2,
        "resource": {"url": "https://api.example/report", "description": "The report", "mimeType": "application/json"},
        "accepts": [
            exact("1000", json!({"name": "USDC", "version": "2"})),
            exact("2000", json!({"name": "USDC", "version": "2", "assetTransferMethod": "permit2"})),
            {"scheme": "upto", "network": "eip155:84532", "amount": "2000", "asset": BASE_SEPOLIA_USDC,
             "payTo": PAY_TO, "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"}},
            {"scheme": "exact", "network": network::SOLANA_DEVNET, "amount": "1000",
             "asset": "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU", "payTo": "Fk1", "maxTimeoutSeconds": 60, "extra": {}},
        ],
        "extensions": {"session": {"info": {"offers": [{
            "id": "demo-100", "calls": 100, "ttlSeconds": 3600, "scope": "demo",
            "accepts": [exact("50000", json!({"name": "USDC", "version": "2"}))]
        }]}}}
    }))
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.to_ascii_lowercase().matches(needle).count()
}

/// The nonce of the page's `<script nonce="…">`.
fn script_nonce(html: &str) -> &str {
    let start = html.find("<script nonce=\"").unwrap() + "<script nonce=\"".len();
    let end = start + html[start..].find('"').unwrap();
    &html[start..end]
}

#[test]
fn escapes_and_formats() {
    assert_eq!(escape("<script>\"'&"), "&lt;script&gt;&quot;&#39;&amp;");
    assert_eq!(format_units("1000", 6), "$0.001");
    assert_eq!(format_units("1000000", 6), "$1");
    assert_eq!(format_units("1500000", 6), "$1.5");
    assert_eq!(format_units("0", 6), "$0");
    assert_eq!(duration(3600), "1 hour");
    assert_eq!(duration(5400), "90 minutes");
    assert_eq!(duration(172_800), "2 days");
    assert_eq!(duration(45), "45 seconds");
    assert_eq!(network_name("eip155:84532"), "Base Sepolia");
    assert_eq!(network_label("eip155:84532"), "Base Sepolia (test network)");
    assert_eq!(network_label("eip155:8453"), "Base");
    assert_eq!(network_name("base"), "Base");
    assert_eq!(network_name("eip155:31337"), "EVM chain 31337");
    assert_eq!(network_name(network::SOLANA_MAINNET), "Solana");
}

/// A route description, a seller's name and offer fields that try to break
/// out of the text, the attributes and the elements stay text.
#[test]
fn hostile_route_configuration_stays_text() {
    let hostile = challenge(json!({
        "x402Version": 2,
        "resource": {"url": format!("https://api.example/r?q={HOSTILE}"), "description": HOSTILE, "mimeType": ""},
        "accepts": [{
            "scheme": "exact", "network": "eip155:84532", "amount": "1000",
            "asset": format!("0xabc\"{HOSTILE}"), "payTo": format!("' onclick='alert(3){HOSTILE}"),
            "maxTimeoutSeconds": 60, "extra": {"name": HOSTILE, "version": "2"}
        }],
        "extensions": {"session": {"info": {"offers": [{
            "id": HOSTILE, "calls": 3, "ttlSeconds": 60, "scope": HOSTILE,
            "accepts": [{"scheme": "exact", "network": HOSTILE, "amount": "5", "asset": HOSTILE, "payTo": HOSTILE}]
        }]}}}
    }));
    let theme = PaywallTheme::new().description(HOSTILE).seller(HOSTILE);
    for html in [
        DefaultPaywallPage.html(&hostile),
        theme.html(&hostile),
        theme.clone().title(HOSTILE).html(&hostile),
    ] {
        // Only the page's own elements: one script, one style, no image, no
        // handler attributes.
        assert_eq!(count(&html, "<script"), 1, "{html}");
        assert_eq!(count(&html, "</script"), 1, "{html}");
        assert_eq!(count(&html, "<style"), 1, "{html}");
        assert_eq!(count(&html, "</title"), 1, "{html}");
        assert_eq!(count(&html, "<img"), 0, "{html}");
        assert!(!html.contains("onclick='"), "{html}");
        assert!(!html.contains("alert(3)\""), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        // Attribute values never end early: every quote inside is escaped.
        assert!(
            html.contains("data-asset=\"0xabc&quot;&lt;/title&gt;"),
            "{html}"
        );
        assert!(
            html.contains("data-pay-to=\"&#39; onclick=&#39;alert(3)"),
            "{html}"
        );
    }
}

/// The inlined assets cannot end their element early or open a comment,
/// and each carries the response's nonce.
#[test]
fn inline_assets_carry_the_nonce() {
    for (asset, closer) in [(SCRIPT, "</script"), (STYLE, "</style")] {
        assert_eq!(count(asset, closer), 0);
        assert_eq!(count(asset, "<!--"), 0);
    }
    let nonce = CspNonce::generate();
    let html = DefaultPaywallPage.html_with_nonce(&every_kind(), &nonce);
    assert!(html.contains(&format!("<script nonce=\"{nonce}\">")));
    assert!(html.contains(&format!("<style nonce=\"{nonce}\">")));
    // No style attributes (the policy forbids them), nothing from elsewhere.
    let markup = &html[..html.find("<script nonce=").unwrap()];
    assert!(!markup.contains(" style="), "{markup}");
    assert!(!markup.contains(" src="), "{markup}");
    assert!(!markup.contains("href=\"http"), "{markup}");
    assert_eq!(count(&html, "<link"), 1, "only the empty data: icon");
    assert!(html.contains("<link rel=\"icon\" href=\"data:,\">"));
}

#[test]
fn nonces_are_fresh_and_policy_is_strict() {
    let (a, b) = (CspNonce::generate(), CspNonce::generate());
    assert_ne!(a, b);
    assert_eq!(a.as_str().len(), 22, "128 bits, base64url without padding");
    assert!(a
        .as_str()
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
    assert_eq!(format!("{a:?}"), "CspNonce(..)");
    let policy = ContentSecurityPolicy::strict(&a);
    assert_eq!(
        policy,
        format!(
            "default-src 'none'; script-src 'nonce-{a}'; style-src 'nonce-{a}'; img-src data:; \
             connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )
    );
    assert!(!policy.contains("unsafe"));
    // The provided methods: a closure page gets the strict policy too.
    let closure = |c: &PaymentRequired| format!("<p>{}</p>", escape(&c.resource.url));
    assert_eq!(closure.content_security_policy(&a), Some(policy.clone()));
    assert_eq!(
        closure.html_with_nonce(&every_kind(), &a),
        closure.html(&every_kind())
    );
    let nonced =
        with_nonce(|_: &PaymentRequired, n: &CspNonce| format!("<style nonce=\"{n}\"></style>"));
    assert_eq!(
        nonced.html_with_nonce(&every_kind(), &a),
        format!("<style nonce=\"{a}\"></style>")
    );
    assert_eq!(format!("{nonced:?}"), "NoncedPage(<closure>)");
}

#[test]
fn theme_title_description_seller() {
    let c = every_kind();
    let plain = DefaultPaywallPage.html(&c);
    assert!(plain.contains("<title>The report</title>"));
    assert!(plain.contains("<h1>The report</h1>"));
    assert!(!plain.contains("class=\"seller\""));
    assert!(
        !plain.contains("class=\"description\""),
        "the description is the title"
    );

    let themed = PaywallTheme::new()
        .title("Quarterly numbers")
        .description("Forty pages, as JSON.")
        .seller("Example Research")
        .html(&c);
    assert!(themed.contains("<title>Quarterly numbers</title>"));
    assert!(themed.contains("<h1>Quarterly numbers</h1>"));
    assert!(themed.contains("<p class=\"description\">Forty pages, as JSON.</p>"));
    assert!(themed.contains("<p class=\"seller\">Example Research</p>"));

    // The route's description shows under a theme's title.
    let titled = PaywallTheme::new().title("Reports").html(&c);
    assert!(titled.contains("<p class=\"description\">The report</p>"));

    let untitled = challenge(json!({
        "x402Version": 2, "resource": {"url": "https://a.example/r"}, "accepts": []
    }));
    assert!(DefaultPaywallPage
        .html(&untitled)
        .contains("<h1>Payment required</h1>"));
}

#[test]
fn offers_say_what_they_mean() {
    let html = DefaultPaywallPage.html(&every_kind());
    // exact EIP-3009 on EVM: a dollar price, the network, a pay button.
    assert!(html.contains("<p class=\"price\">$0.001</p><p class=\"meaning\">per request</p>"));
    assert!(html.contains("on Base Sepolia (test network)"));
    assert_eq!(
        html.matches("<button type=\"button\" class=\"pay\"")
            .count(),
        1,
        "{html}"
    );
    assert!(html.contains(&format!(
        "data-scheme=\"exact\" data-network=\"eip155:84532\" data-asset=\"{BASE_SEPOLIA_USDC}\" \
data-pay-to=\"{PAY_TO}\" data-amount=\"1000\" data-network-name=\"Base Sepolia\" \
data-price=\"$0.001\">Pay $0.001</button>"
    )));
    // Permit2 exact, upto and Solana: shown, left to x402 clients.
    assert!(html.contains("<p class=\"price\">$0.002</p><p class=\"meaning\">per request</p>"));
    assert!(html.contains("<p class=\"price\">up to $0.002</p>"));
    assert!(html.contains("you authorise this ceiling and are charged what the request uses"));
    assert!(html.contains("on Solana Devnet (test network)"));
    assert_eq!(html.matches("Pay this one with an x402 client.").count(), 3);
    // The session: N calls for a price.
    assert!(html.contains("<p class=\"price\">$0.05</p>"));
    assert!(html.contains("for 100 requests within 1 hour (a prepaid session"));

    // A token the page does not know: atomic units, until declared.
    let mut custom = every_kind();
    custom.accepts.truncate(1);
    custom.accepts[0].asset = "0x5FbDB2315678afecb367f032d93F642f64180aa3".into();
    let unknown = DefaultPaywallPage.html(&custom);
    assert!(unknown.contains("<p class=\"price\">1000 atomic units of USDC</p>"));
    custom.accepts[0].extra.clear();
    assert!(DefaultPaywallPage
        .html(&custom)
        .contains("<p class=\"price\">1000 atomic units</p>"));
    custom.accepts[0].extra = every_kind().accepts[0].extra.clone();
    let declared = PaywallTheme::new()
        .stablecoin(
            "base-sepolia",
            "0x5fbdb2315678afecb367f032d93f642f64180aa3",
            6,
        )
        .html(&custom);
    assert!(declared.contains("<p class=\"price\">$0.001</p>"));
    let other_network = PaywallTheme::new()
        .stablecoin("eip155:1", "0x5fbdb2315678afecb367f032d93f642f64180aa3", 6)
        .html(&custom);
    assert!(other_network.contains("1000 atomic units"));
}

fn browser_request(path: &str) -> http::request::Parts {
    let (parts, ()) = http::Request::get(path)
        .header("host", "a.example")
        .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
        .header("user-agent", "Mozilla/5.0 (X11; Linux x86_64) Chrome/120")
        .body(())
        .unwrap()
        .into_parts();
    parts
}

async fn respond(engine: &Engine, parts: &http::request::Parts) -> crate::engine::EngineResponse {
    match engine.process(RequestView::from_parts(parts)).await {
        Decision::Respond(response) => response,
        _ => panic!("expected a response"),
    }
}

fn header<'a>(response: &'a crate::engine::EngineResponse, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

/// The engine sends the page with a strict policy whose nonce is the one on
/// the page's script and style, new for every response; JSON clients get
/// the challenge with no policy.
#[tokio::test]
async fn engine_sends_the_policy_with_the_page() {
    let route = || {
        Route::get("/r")
            .offer(Offer::exact("eip155:84532", "$0.001", PAY_TO))
            .description(HOSTILE)
            .resource_url("https://api.example.test/r")
    };
    let engine = Engine::builder(StandIn::new())
        .route(route())
        .build()
        .unwrap();
    let first = respond(&engine, &browser_request("/r")).await;
    let second = respond(&engine, &browser_request("/r")).await;
    assert_eq!(first.status(), 402);
    assert!(header(&first, "payment-required").is_some());
    assert_eq!(
        header(&first, "content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(header(&first, "x-content-type-options"), Some("nosniff"));
    let html = std::str::from_utf8(first.body()).unwrap();
    let nonce = script_nonce(html).to_owned();
    assert!(html.contains(&format!("<style nonce=\"{nonce}\">")));
    let policy = header(&first, "content-security-policy").unwrap();
    assert!(
        policy.contains(&format!("script-src 'nonce-{nonce}';")),
        "{policy}"
    );
    assert!(policy.starts_with("default-src 'none';"), "{policy}");
    assert!(!policy.contains("unsafe"), "{policy}");
    assert_eq!(count(html, "<script"), 1, "the description stays text");
    let other = std::str::from_utf8(second.body()).unwrap();
    assert_ne!(script_nonce(other), nonce, "a nonce per response");

    let (json_parts, ()) = http::Request::get("/r")
        .header("accept", "application/json")
        .header("user-agent", "Mozilla/5.0")
        .body(())
        .unwrap()
        .into_parts();
    let json_reply = respond(&engine, &json_parts).await;
    assert_eq!(json_reply.status(), 402);
    assert!(header(&json_reply, "content-security-policy").is_none());
    assert_eq!(
        header(&json_reply, "content-type"),
        Some("application/json")
    );

    // A custom page: a closure gets the strict policy; a page that opts out
    // gets none; a policy that is no header value falls back to strict.
    struct Policy(Option<&'static str>);
    impl PaywallPage for Policy {
        fn html(&self, _: &PaymentRequired) -> String {
            "<p>custom</p>".into()
        }
        fn content_security_policy(&self, _: &CspNonce) -> Option<String> {
            self.0.map(str::to_owned)
        }
    }
    let closure = Engine::builder(StandIn::new())
        .route(route())
        .paywall_page(|_: &PaymentRequired| "<p>closure</p>".to_owned())
        .build()
        .unwrap();
    let reply = respond(&closure, &browser_request("/r")).await;
    assert_eq!(reply.body().as_ref(), b"<p>closure</p>");
    assert!(header(&reply, "content-security-policy")
        .unwrap()
        .starts_with("default-src 'none'; script-src 'nonce-"));
    for (policy, expected) in [
        (None, None),
        (Some("default-src 'self'"), Some("default-src 'self'")),
        (
            Some("default-src 'none'\r\nX-Injected: 1"),
            Some("default-src 'none'; script-src 'nonce-"),
        ),
    ] {
        let engine = Engine::builder(StandIn::new())
            .route(route())
            .paywall_page(Policy(policy))
            .build()
            .unwrap();
        let reply = respond(&engine, &browser_request("/r")).await;
        assert_eq!(reply.body().as_ref(), b"<p>custom</p>");
        let sent = header(&reply, "content-security-policy");
        match expected {
            None => assert!(sent.is_none()),
            Some(prefix) => assert!(sent.unwrap().starts_with(prefix), "{sent:?}"),
        }
        assert!(header(&reply, "x-injected").is_none());
    }
}
