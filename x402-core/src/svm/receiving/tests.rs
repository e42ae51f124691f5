use super::*;
use crate::route::Asset;

#[test]
fn redacts_to_scheme_host_and_port() {
    for (url, expected) in [
        (
            "https://user:pw@rpc.example/v2/SECRET?api-key=K#f",
            "https://rpc.example",
        ),
        ("http://127.0.0.1:8899/?key=SECRET", "http://127.0.0.1:8899"),
        ("https://rpc.example:443/SECRET", "https://rpc.example"),
    ] {
        assert_eq!(redact_text(url), expected);
    }
    assert_eq!(redact_text("not a url SECRET"), "<not a URL>");
    let check = ReceivingAccounts::new("https://rpc.example/SECRET")
        .network_rpc("solana:x", "https://other.example/?k=SECRET");
    let debug = format!("{check:?}");
    assert!(!debug.contains("SECRET"), "{debug}");
    assert!(debug.contains("https://other.example"), "{debug}");
}

#[test]
fn node_errors_lose_the_urls_secrets() {
    let url =
        Url::parse("https://me:hunter22@rpc.example/v2/KEY123456?api-key=QUERY7890&x=1").unwrap();
    assert_eq!(
        scrub(
            &redact_urls(
                "bad key KEY123456 (QUERY7890) for me at https://rpc.example/v2/KEY123456"
            ),
            &url
        ),
        "bad key <redacted> (<redacted>) for me at https://rpc.example"
    );
    assert_eq!(
        scrub("hunter22 api-key v2", &url),
        "<redacted> <redacted> v2"
    );
}

#[test]
fn rpc_urls_must_be_http() {
    assert!(parse_rpc_url("https://rpc.example/k").is_some());
    assert!(parse_rpc_url(" http://127.0.0.1:8899 ").is_some());
    for bad in ["wss://rpc.example", "rpc.example", "file:///etc/passwd", ""] {
        assert!(parse_rpc_url(bad).is_none(), "{bad}");
    }
}

#[test]
fn targets_are_the_distinct_solana_offers() {
    let wallet = "3h1zGmCwsRJnVk5BuRNMLsPaQu1y2aqXqXDWYCgrp5UG";
    let offers = [
        Offer::exact(
            "eip155:8453",
            "$0.01",
            "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
        ),
        Offer::exact(network::SOLANA_MAINNET, "$0.01", wallet),
        Offer::exact(network::SOLANA_MAINNET, "$0.02", wallet),
        Offer::exact("solana-devnet", "$0.01", wallet),
        Offer::exact(network::SOLANA_MAINNET, "1", wallet).asset(Asset::new("Mint", 0)),
        Offer::exact("solana:custom", "1", wallet),
    ];
    let targets = targets(&offers);
    let listed: Vec<_> = targets
        .iter()
        .map(|t| (t.network.as_str(), t.mint.as_str()))
        .collect();
    assert_eq!(
        listed,
        [
            (
                network::SOLANA_MAINNET,
                "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"
            ),
            (
                network::SOLANA_DEVNET,
                "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU"
            ),
            (network::SOLANA_MAINNET, "Mint"),
        ]
    );
}

#[tokio::test]
async fn no_solana_offers_need_no_rpc() {
    let offers = [Offer::exact(
        "eip155:8453",
        "$0.01",
        "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
    )];
    let check = ReceivingAccounts::new("not a url");
    assert_eq!(check.check(&offers).await, Ok(Vec::new()));
}

#[tokio::test]
async fn bad_addresses_are_problems_before_any_rpc() {
    let offers = [Offer::exact(
        network::SOLANA_DEVNET,
        "$0.01",
        "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
    )];
    let check = ReceivingAccounts::new("http://127.0.0.1:9").mode(CheckMode::Warn);
    let problems = check.check(&offers).await.unwrap();
    assert!(matches!(
        problems.as_slice(),
        [ReceivingAccountProblem::InvalidAddress { field: "payTo", .. }]
    ));
    assert!(problems[0].to_string().contains("is not a Solana address"));
}

#[tokio::test]
async fn an_invalid_rpc_url_is_its_own_error() {
    let offers = [Offer::exact(
        network::SOLANA_DEVNET,
        "$0.01",
        "3h1zGmCwsRJnVk5BuRNMLsPaQu1y2aqXqXDWYCgrp5UG",
    )];
    let check = ReceivingAccounts::new("wss://rpc.example/SECRET");
    let error = check.check(&offers).await.unwrap_err();
    assert_eq!(
        error,
        ReceivingAccountError::InvalidRpcUrl {
            network: network::SOLANA_DEVNET.to_owned(),
            endpoint: "wss://rpc.example".to_owned(),
        }
    );
    assert!(!error.to_string().contains("SECRET"));
}
