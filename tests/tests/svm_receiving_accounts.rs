//! The start-up check of Solana receiving accounts
//! (`x402_core::svm::ReceivingAccounts`, feature `svm-rpc`) against a
//! JSON-RPC stand-in: a real HTTP server on 127.0.0.1 answering
//! `getGenesisHash` and `getAccountInfo` (base64, with `dataSlice`) from a
//! table of accounts, or failing in the ways a node fails.
//!
//! Every stand-in is reached through a URL with an API key in its path and
//! query, which no error or log line may show.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::{
    collections::HashMap,
    fmt::Write as _,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{extract::State, http::StatusCode, response::IntoResponse, Json, Router};
use base64::{engine::general_purpose::STANDARD, Engine as _};
use serde_json::{json, Value};
use x402_core::{
    network::{SOLANA_DEVNET, SOLANA_MAINNET},
    route::Asset,
    svm::{
        associated_token_address, check_receiving_accounts, CheckMode, Pubkey,
        ReceivingAccountError, ReceivingAccountProblem, ReceivingAccounts, TokenProgram,
        TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID,
    },
    testing::StandIn,
    Engine, Offer, Route,
};
use x402_tests::standin::ClosedPort;

/// The devnet cluster's genesis hash (`solana:` + its first 32 characters
/// is [`SOLANA_DEVNET`]).
const DEVNET_GENESIS: &str = "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG";
const MAINNET_GENESIS: &str = "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d";
/// Devnet USDC (the network's default asset), a classic Token mint.
const USDC_DEVNET: &str = "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU";
/// A Token-2022 mint (PYUSD's address, served by the stand-in on devnet).
const TOKEN_2022_MINT: &str = "2b1kV6DkPAnxd5ixfnxCpjxmKwqjjaYmCZfHsFu24GXo";
/// A wallet whose USDC account exists.
const READY: &str = "3h1zGmCwsRJnVk5BuRNMLsPaQu1y2aqXqXDWYCgrp5UG";
/// A wallet without any token account.
const FRESH: &str = "AAAGuCgkmxYDTiBvzx1QT5XEjqXPRtQaiEXQo4gatD2o";
/// ATA(FRESH, TOKEN_2022_MINT, Token-2022), from `x402-core/tests/data/svm_ata_vectors.json`
/// (`@solana-program/token-2022`'s `findAssociatedTokenPda`).
const FRESH_TOKEN_2022_ATA: &str = "9vLaaZsrLKWo2ohiNJh3vpZHE7SMp3NLPQY1p5By56LA";
/// What the stand-in URLs carry, and nothing may show.
const SECRET: &str = "SECRETKEY42";

fn key(text: &str) -> Pubkey {
    text.parse().unwrap()
}

/// The first 165 bytes of an SPL token account: mint, owner, amount,
/// no delegate, `state`, the rest zero.
fn token_account(mint: &str, owner: &str, state: u8) -> Vec<u8> {
    let mut data = vec![0u8; 165];
    data[..32].copy_from_slice(key(mint).as_bytes());
    data[32..64].copy_from_slice(key(owner).as_bytes());
    data[64..72].copy_from_slice(&1_000_000u64.to_le_bytes());
    data[108] = state;
    data
}

/// How the stand-in answers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// From its accounts.
    Normal,
    /// This HTTP status, empty body.
    Status(StatusCode),
    /// A JSON-RPC error object that quotes the URL.
    RpcError,
    /// 200 with a body that is not JSON.
    NotJson,
    /// Sleeps past any deadline of these tests.
    Slow,
}

#[derive(Debug)]
struct Inner {
    genesis: String,
    mode: Mutex<Mode>,
    /// Address → (owner program, data).
    accounts: Mutex<HashMap<String, (String, Vec<u8>)>>,
    /// Every request body.
    requests: Mutex<Vec<Value>>,
}

/// A running stand-in.
#[derive(Debug, Clone)]
struct Rpc {
    url: String,
    inner: Arc<Inner>,
}

impl Rpc {
    async fn start(genesis: &str) -> Self {
        let inner = Arc::new(Inner {
            genesis: genesis.to_owned(),
            mode: Mutex::new(Mode::Normal),
            accounts: Mutex::default(),
            requests: Mutex::default(),
        });
        let router = Router::new().fallback(answer).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self {
            url: format!("http://{addr}/v2/{SECRET}?api-key={SECRET}"),
            inner,
        }
    }

    /// A devnet node with both mints and READY's USDC account.
    async fn devnet() -> Self {
        let rpc = Self::start(DEVNET_GENESIS).await;
        rpc.put(USDC_DEVNET, TOKEN_PROGRAM_ID, vec![0; 82]);
        rpc.put(TOKEN_2022_MINT, TOKEN_2022_PROGRAM_ID, vec![0; 234]);
        let ata = associated_token_address(&key(READY), &key(USDC_DEVNET), TokenProgram::Token);
        rpc.put(
            &ata.to_string(),
            TOKEN_PROGRAM_ID,
            token_account(USDC_DEVNET, READY, 1),
        );
        rpc
    }

    fn put(&self, address: &str, owner: Pubkey, data: Vec<u8>) {
        self.inner
            .accounts
            .lock()
            .unwrap()
            .insert(address.to_owned(), (owner.to_string(), data));
    }

    fn set_mode(&self, mode: Mode) {
        *self.inner.mode.lock().unwrap() = mode;
    }

    fn requests(&self) -> Vec<Value> {
        self.inner.requests.lock().unwrap().clone()
    }

    /// The addresses `getAccountInfo` was asked about, in order.
    fn asked(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter(|r| r["method"] == "getAccountInfo")
            .map(|r| r["params"][0].as_str().unwrap().to_owned())
            .collect()
    }
}

async fn answer(
    State(inner): State<Arc<Inner>>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    inner.requests.lock().unwrap().push(request.clone());
    let mode = inner.mode.lock().unwrap().clone();
    let id = request["id"].clone();
    match mode {
        Mode::Normal => {}
        Mode::Status(status) => return status.into_response(),
        Mode::NotJson => return "<html>maintenance</html>".into_response(),
        Mode::Slow => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            return StatusCode::OK.into_response();
        }
        Mode::RpcError => {
            return Json(json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {
                    "code": -32005,
                    "message": format!("rate limited at https://rpc.example/{SECRET} for key {SECRET}x"),
                },
            }))
            .into_response()
        }
    }
    let result = match request["method"].as_str() {
        Some("getGenesisHash") => json!(inner.genesis),
        Some("getAccountInfo") => {
            let address = request["params"][0].as_str().unwrap_or_default();
            let config = &request["params"][1];
            assert_eq!(config["encoding"], "base64", "{request}");
            assert_eq!(config["commitment"], "confirmed", "{request}");
            let offset = config["dataSlice"]["offset"].as_u64().unwrap() as usize;
            let length = config["dataSlice"]["length"].as_u64().unwrap() as usize;
            let value = inner
                .accounts
                .lock()
                .unwrap()
                .get(address)
                .map(|(owner, data)| {
                    let end = (offset + length).min(data.len());
                    let slice = data.get(offset.min(end)..end).unwrap_or_default();
                    json!({
                        "data": [STANDARD.encode(slice), "base64"],
                        "executable": false,
                        "lamports": 2_039_280,
                        "owner": owner,
                        "rentEpoch": 18_446_744_073_709_551_615u64,
                        "space": data.len(),
                    })
                });
            json!({ "context": { "apiVersion": "2.2.0", "slot": 1234 }, "value": value })
        }
        _ => {
            return Json(json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": { "code": -32601, "message": "Method not found" },
            }))
            .into_response()
        }
    };
    Json(json!({ "jsonrpc": "2.0", "id": id, "result": result })).into_response()
}

/// An engine selling `/a` for each of `offers`.
fn engine(offers: impl IntoIterator<Item = Offer>) -> Engine {
    let mut route = Route::get("/a");
    for offer in offers {
        route = route.offer(offer);
    }
    Engine::builder(StandIn::new())
        .route(route)
        .build()
        .unwrap()
}

fn usdc(pay_to: &str) -> Offer {
    Offer::exact(SOLANA_DEVNET, "$0.01", pay_to)
}

fn token_2022(pay_to: &str) -> Offer {
    Offer::exact(SOLANA_DEVNET, "$0.01", pay_to).asset(Asset::new(TOKEN_2022_MINT, 6))
}

/// The error's text and debug form, checked free of the URL's secret.
fn shown(error: &ReceivingAccountError) -> String {
    let text = format!("{error} {error:?}");
    assert!(!text.contains(SECRET), "{text}");
    text
}

#[tokio::test]
async fn an_existing_account_passes() {
    let rpc = Rpc::devnet().await;
    let engine = engine([usdc(READY)]);
    let problems = ReceivingAccounts::new(&rpc.url)
        .check(&engine.static_offers())
        .await
        .unwrap();
    assert_eq!(problems, []);
    check_receiving_accounts(&engine.static_offers(), &rpc.url, CheckMode::Refuse)
        .await
        .unwrap();
    // The genesis hash, the mint, the account: nothing else.
    let expected = associated_token_address(&key(READY), &key(USDC_DEVNET), TokenProgram::Token);
    let methods: Vec<_> = rpc
        .requests()
        .iter()
        .map(|r| r["method"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        methods[..3],
        ["getGenesisHash", "getAccountInfo", "getAccountInfo"]
    );
    assert_eq!(
        rpc.asked()[..2],
        [USDC_DEVNET.to_owned(), expected.to_string()]
    );
}

#[tokio::test]
async fn a_missing_account_is_refused_with_the_derived_address() {
    let rpc = Rpc::devnet().await;
    // The same receiving account twice is checked once; READY's passes.
    let engine = engine([usdc(READY), usdc(FRESH), usdc(FRESH)]);
    let error = ReceivingAccounts::new(&rpc.url)
        .check(&engine.static_offers())
        .await
        .unwrap_err();
    let expected = associated_token_address(&key(FRESH), &key(USDC_DEVNET), TokenProgram::Token);
    let ReceivingAccountError::Refused(problems) = &error else {
        panic!("{error:?}")
    };
    assert_eq!(
        problems,
        &[ReceivingAccountProblem::MissingAccount {
            network: SOLANA_DEVNET.to_owned(),
            pay_to: FRESH.to_owned(),
            mint: USDC_DEVNET.to_owned(),
            token_program: TokenProgram::Token,
            expected,
        }]
    );
    let text = shown(&error);
    assert!(
        text.contains(&format!(
            "{SOLANA_DEVNET}: no token account for payTo {FRESH} and mint {USDC_DEVNET} \
             (expected associated token account {expected}, Token program); create it before \
             taking payments"
        )),
        "{text}"
    );
    // The convenience function refuses too.
    let error = check_receiving_accounts(&engine.static_offers(), &rpc.url, CheckMode::Refuse)
        .await
        .unwrap_err();
    assert!(shown(&error).contains(&expected.to_string()));
}

#[tokio::test(flavor = "current_thread")]
async fn warn_mode_logs_and_returns_ok() {
    let rpc = Rpc::devnet().await;
    let engine = engine([usdc(FRESH), token_2022(FRESH)]);
    let capture = Capture::default();
    let guard = tracing::subscriber::set_default(capture.clone());
    let problems = ReceivingAccounts::new(&rpc.url)
        .mode(CheckMode::Warn)
        .check(&engine.static_offers())
        .await
        .unwrap();
    check_receiving_accounts(&engine.static_offers(), &rpc.url, CheckMode::Warn)
        .await
        .unwrap();
    drop(guard);
    assert_eq!(problems.len(), 2);
    let warnings: Vec<String> = capture
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("WARN"))
        .collect();
    // Each problem, from each of the two checks.
    assert_eq!(warnings.len(), 4, "{warnings:#?}");
    let usdc_ata = associated_token_address(&key(FRESH), &key(USDC_DEVNET), TokenProgram::Token);
    for (warning, (ata, program)) in warnings.iter().zip(
        [
            (usdc_ata.to_string(), "Token program"),
            (FRESH_TOKEN_2022_ATA.to_owned(), "Token-2022 program"),
        ]
        .iter()
        .cycle(),
    ) {
        assert!(
            warning.contains(ata) && warning.contains(program),
            "{warning}"
        );
        assert!(warning.contains(&format!("pay_to={FRESH}")), "{warning}");
        assert!(
            warning.contains(&format!("network={SOLANA_DEVNET}")),
            "{warning}"
        );
    }
    for line in capture.lines() {
        assert!(!line.contains(SECRET), "{line}");
    }
}

#[tokio::test]
async fn a_token_2022_mint_uses_the_token_2022_derivation() {
    let rpc = Rpc::devnet().await;
    let engine = engine([token_2022(FRESH)]);
    let classic = associated_token_address(&key(FRESH), &key(TOKEN_2022_MINT), TokenProgram::Token);
    assert_ne!(classic.to_string(), FRESH_TOKEN_2022_ATA);

    // Missing: the error names the Token-2022 address and program.
    let error = ReceivingAccounts::new(&rpc.url)
        .check(&engine.static_offers())
        .await
        .unwrap_err();
    let text = shown(&error);
    assert!(text.contains(FRESH_TOKEN_2022_ATA), "{text}");
    assert!(text.contains("Token-2022 program"), "{text}");
    assert!(!rpc.asked().contains(&classic.to_string()));

    // Created under Token-2022: passes. (An account at the classic address
    // would not do.)
    rpc.put(
        FRESH_TOKEN_2022_ATA,
        TOKEN_2022_PROGRAM_ID,
        token_account(TOKEN_2022_MINT, FRESH, 1),
    );
    let problems = ReceivingAccounts::new(&rpc.url)
        .check(&engine.static_offers())
        .await
        .unwrap();
    assert_eq!(problems, []);
    assert!(rpc.asked().contains(&FRESH_TOKEN_2022_ATA.to_owned()));
}

#[tokio::test]
async fn an_rpc_that_is_down_is_its_own_error() {
    let closed = ClosedPort::new();
    let addr = closed.addr();
    let url = format!("http://{addr}/v2/{SECRET}?api-key={SECRET}");
    let engine = engine([usdc(FRESH)]);
    for mode in [CheckMode::Refuse, CheckMode::Warn] {
        let error = ReceivingAccounts::new(&url)
            .mode(mode)
            .timeout(Duration::from_secs(2))
            .check(&engine.static_offers())
            .await
            .unwrap_err();
        let ReceivingAccountError::Rpc {
            endpoint, network, ..
        } = &error
        else {
            panic!("{error:?}")
        };
        assert_eq!(endpoint, &format!("http://{addr}"));
        assert_eq!(network, SOLANA_DEVNET);
        let text = shown(&error);
        assert!(text.contains("could not check"), "{text}");
        assert!(!text.contains("no token account"), "{text}");
    }
}

#[tokio::test]
async fn a_node_that_fails_is_an_rpc_error() {
    let rpc = Rpc::devnet().await;
    let engine = engine([usdc(READY)]);
    let check = ReceivingAccounts::new(&rpc.url).timeout(Duration::from_millis(300));
    for (mode, expected) in [
        (Mode::Status(StatusCode::UNAUTHORIZED), "HTTP 401"),
        (Mode::Status(StatusCode::TOO_MANY_REQUESTS), "HTTP 429"),
        (Mode::NotJson, "not JSON"),
        (
            Mode::RpcError,
            "JSON-RPC error -32005: rate limited at https://rpc.example for key <redacted>x",
        ),
        (Mode::Slow, "no answer within 300ms"),
    ] {
        rpc.set_mode(mode.clone());
        let error = check.check(&engine.static_offers()).await.unwrap_err();
        assert!(
            matches!(error, ReceivingAccountError::Rpc { .. }),
            "{mode:?}: {error:?}"
        );
        let text = shown(&error);
        assert!(text.contains(expected), "{mode:?}: {text}");
    }
}

#[tokio::test]
async fn a_node_of_another_cluster_is_refused() {
    let mainnet = Rpc::start(MAINNET_GENESIS).await;
    let devnet = Rpc::devnet().await;
    let engine = engine([usdc(READY)]);
    let error = ReceivingAccounts::new(&mainnet.url)
        .check(&engine.static_offers())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ReceivingAccountError::WrongCluster { network, genesis_hash, .. }
            if network == SOLANA_DEVNET && genesis_hash == MAINNET_GENESIS),
        "{error:?}"
    );
    assert!(shown(&error).contains("network_rpc"));
    assert_eq!(mainnet.asked(), Vec::<String>::new());

    // Devnet offers go to the devnet node; mainnet ones to the default.
    let mixed = engine_with_mainnet(&engine);
    mainnet.put(
        "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
        TOKEN_PROGRAM_ID,
        vec![0; 82],
    );
    let mainnet_ata = associated_token_address(
        &key(READY),
        &key("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"),
        TokenProgram::Token,
    );
    mainnet.put(
        &mainnet_ata.to_string(),
        TOKEN_PROGRAM_ID,
        token_account("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", READY, 1),
    );
    let problems = ReceivingAccounts::new(&mainnet.url)
        .network_rpc(SOLANA_DEVNET, &devnet.url)
        .check(&mixed.static_offers())
        .await
        .unwrap();
    assert_eq!(problems, []);
    assert!(devnet.asked().contains(&USDC_DEVNET.to_owned()));
    assert!(!mainnet.asked().contains(&USDC_DEVNET.to_owned()));
}

/// `engine`'s offers plus the same payTo on mainnet (default USDC).
fn engine_with_mainnet(engine: &Engine) -> Engine {
    let mut offers = engine.static_offers();
    offers.push(Offer::exact(SOLANA_MAINNET, "$0.01", READY));
    self::engine(offers)
}

#[tokio::test]
async fn session_and_bound_route_offers_are_checked_too() {
    let rpc = Rpc::devnet().await;
    let engine = Engine::builder(StandIn::new())
        .route(
            Route::get("/a").offer(usdc(READY)).session(
                x402_core::session::SessionOffer::new("pack", 10, Duration::from_secs(60), "/a")
                    .offer(token_2022(FRESH)),
            ),
        )
        .build()
        .unwrap();
    let _bound = engine
        .bind(Route::post("/b").offer(Offer::exact(SOLANA_DEVNET, "$0.02", FRESH)))
        .unwrap();
    let networks: Vec<_> = engine
        .static_offers()
        .iter()
        .map(|o| o.network().to_owned())
        .collect();
    assert_eq!(networks.len(), 3);
    let error = ReceivingAccounts::new(&rpc.url)
        .check(&engine.static_offers())
        .await
        .unwrap_err();
    let ReceivingAccountError::Refused(problems) = &error else {
        panic!("{error:?}")
    };
    let usdc_ata = associated_token_address(&key(FRESH), &key(USDC_DEVNET), TokenProgram::Token);
    let missing: Vec<String> = problems
        .iter()
        .map(|p| match p {
            ReceivingAccountProblem::MissingAccount { expected, .. } => expected.to_string(),
            other => panic!("{other:?}"),
        })
        .collect();
    // The session's Token-2022 account, then the bound route's USDC one.
    assert_eq!(
        missing,
        [FRESH_TOKEN_2022_ATA.to_owned(), usdc_ata.to_string()]
    );
}

#[tokio::test]
async fn other_problems_are_named() {
    let rpc = Rpc::devnet().await;
    let ready_ata = associated_token_address(&key(READY), &key(USDC_DEVNET), TokenProgram::Token);
    // payTo set to READY's token account instead of READY.
    let engine_ata = engine([usdc(&ready_ata.to_string())]);
    let problems = ReceivingAccounts::new(&rpc.url)
        .mode(CheckMode::Warn)
        .check(&engine_ata.static_offers())
        .await
        .unwrap();
    assert_eq!(
        problems,
        [ReceivingAccountProblem::PayToIsTokenAccount {
            network: SOLANA_DEVNET.to_owned(),
            pay_to: ready_ata.to_string(),
            mint: USDC_DEVNET.to_owned(),
            account_mint: key(USDC_DEVNET),
            wallet: key(READY),
        }]
    );
    assert!(problems[0]
        .to_string()
        .contains(&format!("set payTo to the owner wallet {READY}")));

    // A frozen account, a mint that does not exist, an asset that is no
    // mint, a payTo that is no Solana address.
    let frozen = "56ZdHCDefg7Kf12wNTzGJzQreWLqn31CEy7XtrT8f4QY";
    let frozen_ata = associated_token_address(&key(frozen), &key(USDC_DEVNET), TokenProgram::Token);
    rpc.put(
        &frozen_ata.to_string(),
        TOKEN_PROGRAM_ID,
        token_account(USDC_DEVNET, frozen, 2),
    );
    let not_a_mint = "8KbkFiNkrQ637TAeKQ3DwkaiipF2aArc8BsMR65KABmD";
    rpc.put(
        not_a_mint,
        key("11111111111111111111111111111111"),
        Vec::new(),
    );
    let missing_mint = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";
    let engine = engine([
        usdc(frozen),
        Offer::exact(SOLANA_DEVNET, "1", READY).asset(Asset::new(missing_mint, 6)),
        Offer::exact(SOLANA_DEVNET, "1", READY).asset(Asset::new(not_a_mint, 6)),
        usdc("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
    ]);
    let error = ReceivingAccounts::new(&rpc.url)
        .check(&engine.static_offers())
        .await
        .unwrap_err();
    let ReceivingAccountError::Refused(problems) = &error else {
        panic!("{error:?}")
    };
    assert!(
        matches!(
            problems.as_slice(),
            [
                ReceivingAccountProblem::FrozenAccount { account, .. },
                ReceivingAccountProblem::MintNotFound { .. },
                ReceivingAccountProblem::NotAMint { owner, .. },
                ReceivingAccountProblem::InvalidAddress { field: "payTo", .. },
            ] if *account == frozen_ata && owner == "11111111111111111111111111111111"
        ),
        "{problems:#?}"
    );
    let text = shown(&error);
    for part in [
        "is frozen",
        &format!("mint {missing_mint} (offer to payTo {READY}) does not exist"),
        "is not a token mint",
        "is not a Solana address",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
}

// ---------------------------------------------------------------------------
// Log capture

/// Every event, as `LEVEL field=value ... message`.
#[derive(Clone, Default)]
struct Capture {
    lines: Arc<Mutex<Vec<String>>>,
}

impl Capture {
    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        let _ = write!(self.0, " {}={value}", field.name());
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(event.metadata().level().to_string());
        event.record(&mut fields);
        self.lines.lock().unwrap().push(fields.0);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}
