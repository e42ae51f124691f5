//! The in-process EVM facilitator (`x402_core::local`): the dev ledger
//! directly, through the engine and axum, served over HTTP (x402-axum's
//! `facilitator_router`), and against a local anvil node.
//!
//! Moved from x402-core's tests (axum, anvil). Anvil comes from
//! `tests/js/node_modules` (`bash scripts/test-all.sh`).

// The helpers are test code too, though not `#[test]` functions.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use alloy_primitives::{address, Address, B256, U256};
use alloy_signer_local::PrivateKeySigner;
use async_trait::async_trait;
use x402_core::{
    evm::ExactEvmPayload,
    facilitator::HttpFacilitator,
    local::{
        reason, DevLedger, DevLedgerError, FixedClock, LocalConfigError, LocalFacilitator,
        DEV_LEDGER_SIGNER,
    },
    proto::{FacilitatorRequest, PaymentPayload, PaymentRequirements, X402Version},
    Facilitator,
};
use x402_tests::core_support::local::*;

/// A token address for the dev ledger (Base Sepolia USDC).
const DEV_TOKEN: Address = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");

fn dev() -> (Arc<DevLedger>, Arc<LocalFacilitator>) {
    let ledger = Arc::new(DevLedger::new());
    let facilitator = LocalFacilitator::builder(ledger.clone())
        .network(NETWORK)
        .build()
        .unwrap();
    (ledger, Arc::new(facilitator))
}

fn funded(ledger: &DevLedger, amount: u64) -> PrivateKeySigner {
    let key = payer();
    ledger
        .fund(NETWORK, DEV_TOKEN, key.address(), amount)
        .unwrap();
    key
}

fn bal(ledger: &DevLedger, who: Address) -> U256 {
    ledger.balance(NETWORK, DEV_TOKEN, who)
}

/// The refusals every ledger must give, as `(name, reason, funding, spec)`.
fn refusals(token: Address) -> Vec<(&'static str, &'static str, u64, Spec)> {
    let now = now();
    let valid = || Spec::valid(token);
    vec![
        (
            "expired",
            reason::VALID_BEFORE,
            10_000,
            Spec {
                valid_before: now - 1,
                ..valid()
            },
        ),
        (
            "within the 6 s margin",
            reason::VALID_BEFORE,
            10_000,
            Spec {
                valid_before: now + 3,
                ..valid()
            },
        ),
        (
            "not yet valid",
            reason::VALID_AFTER,
            10_000,
            Spec {
                valid_after: now + 120,
                ..valid()
            },
        ),
        (
            "insufficient balance",
            reason::INSUFFICIENT_BALANCE,
            PRICE - 1,
            valid(),
        ),
        (
            "other chain id",
            reason::SIGNATURE,
            10_000,
            Spec {
                chain_id: 8453,
                ..valid()
            },
        ),
        (
            "wrong EIP-712 name",
            reason::SIGNATURE,
            10_000,
            Spec {
                name: "USD Coin".into(),
                ..valid()
            },
        ),
        (
            "wrong EIP-712 version",
            reason::SIGNATURE,
            10_000,
            Spec {
                version: "1".into(),
                ..valid()
            },
        ),
        (
            "wrong recipient",
            reason::RECIPIENT_MISMATCH,
            10_000,
            Spec {
                to: address!("1111111111111111111111111111111111111111"),
                ..valid()
            },
        ),
        (
            "value too low",
            reason::VALUE,
            10_000,
            Spec {
                value: PRICE - 1,
                ..valid()
            },
        ),
        (
            "value too high",
            reason::VALUE,
            10_000,
            Spec {
                value: PRICE + 1,
                ..valid()
            },
        ),
    ]
}

// ---------------------------------------------------------------------------
// The dev ledger, directly.

#[tokio::test]
async fn dev_valid_v2_verifies_settles_and_moves_exactly_the_price() {
    let (ledger, facilitator) = dev();
    let key = funded(&ledger, 10_000);
    let spec = Spec::valid(DEV_TOKEN);
    let request = request_v2(DEV_TOKEN, &spec.sign(&key));
    let payer = key.address().to_checksum(None);

    let verdict = facilitator.verify(&request).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    assert_eq!(verdict.payer.as_deref(), Some(payer.as_str()));
    assert_eq!(verdict.invalid_reason, None);

    let receipt = facilitator.settle(&request).await.unwrap();
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(receipt.network, NETWORK);
    assert_eq!(receipt.payer.as_deref(), Some(payer.as_str()));
    assert_eq!(
        receipt.amount.map(|a| a.to_string()),
        Some(PRICE.to_string())
    );
    let expected_id = DevLedger::transaction_id(NETWORK, DEV_TOKEN, key.address(), spec.nonce);
    assert_eq!(receipt.transaction, expected_id);
    assert_eq!(receipt.transaction.len(), 66);
    assert!(receipt.transaction.starts_with("0x"));
    assert_eq!(bal(&ledger, key.address()), U256::from(10_000 - PRICE));
    assert_eq!(bal(&ledger, PAYEE), U256::from(PRICE));
    assert!(ledger.nonce_used(NETWORK, DEV_TOKEN, key.address(), spec.nonce));

    // The same authorization again: refused, nothing moves.
    let again = facilitator.verify(&request).await.unwrap();
    assert!(!again.is_valid);
    assert_eq!(again.invalid_reason.as_deref(), Some(reason::NONCE_USED));
    assert_eq!(again.payer.as_deref(), Some(payer.as_str()));
    let again = facilitator.settle(&request).await.unwrap();
    assert!(!again.success);
    assert_eq!(again.error_reason.as_deref(), Some(reason::NONCE_USED));
    assert_eq!(again.transaction, "");
    assert_eq!(bal(&ledger, key.address()), U256::from(10_000 - PRICE));
    assert_eq!(bal(&ledger, PAYEE), U256::from(PRICE));
}

#[tokio::test]
async fn dev_transaction_id_is_deterministic() {
    let nonce = B256::repeat_byte(7);
    let from = address!("857b06519E91e3A54538791bDbb0E22373e36b66");
    let id = DevLedger::transaction_id(NETWORK, DEV_TOKEN, from, nonce);
    assert_eq!(
        id,
        DevLedger::transaction_id(NETWORK, DEV_TOKEN, from, nonce)
    );
    assert_ne!(
        id,
        DevLedger::transaction_id(NETWORK, DEV_TOKEN, from, B256::repeat_byte(8))
    );
    assert_ne!(
        id,
        DevLedger::transaction_id("eip155:31337", DEV_TOKEN, from, nonce)
    );

    // Two ledgers settling the same authorization give the same id.
    let key = payer();
    let spec = Spec::valid(DEV_TOKEN);
    let payload = spec.sign(&key);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (ledger, facilitator) = dev();
        ledger
            .fund(NETWORK, DEV_TOKEN, key.address(), PRICE)
            .unwrap();
        let receipt = facilitator
            .settle(&request_v2(DEV_TOKEN, &payload))
            .await
            .unwrap();
        assert!(receipt.success);
        ids.push(receipt.transaction);
    }
    assert_eq!(ids[0], ids[1]);
    assert_eq!(
        ids[0],
        DevLedger::transaction_id(NETWORK, DEV_TOKEN, key.address(), spec.nonce)
    );
}

#[tokio::test]
async fn dev_refusals_have_their_reason_and_move_nothing() {
    for (name, expected, funding, spec) in refusals(DEV_TOKEN) {
        let (ledger, facilitator) = dev();
        let key = funded(&ledger, funding);
        let request = request_v2(DEV_TOKEN, &spec.sign(&key));
        let verdict = facilitator.verify(&request).await.unwrap();
        assert!(!verdict.is_valid, "{name}: {verdict:?}");
        assert_eq!(verdict.invalid_reason.as_deref(), Some(expected), "{name}");
        assert_eq!(
            verdict.payer,
            Some(key.address().to_checksum(None)),
            "{name}"
        );
        let receipt = facilitator.settle(&request).await.unwrap();
        assert!(!receipt.success, "{name}");
        assert_eq!(receipt.error_reason.as_deref(), Some(expected), "{name}");
        assert_eq!(receipt.transaction, "", "{name}");
        assert_eq!(bal(&ledger, key.address()), U256::from(funding), "{name}");
        assert_eq!(bal(&ledger, PAYEE), U256::ZERO, "{name}");
        assert!(
            !ledger.nonce_used(NETWORK, DEV_TOKEN, key.address(), spec.nonce),
            "{name}"
        );
    }
}

#[tokio::test]
async fn dev_request_shape_refusals() {
    let (ledger, facilitator) = dev();
    let key = funded(&ledger, 10_000);
    let payload = Spec::valid(DEV_TOKEN).sign(&key);

    let check = |request: FacilitatorRequest, expected: &'static str| {
        let facilitator = facilitator.clone();
        async move {
            let verdict = facilitator.verify(&request).await.unwrap();
            assert_eq!(
                verdict.invalid_reason.as_deref(),
                Some(expected),
                "{verdict:?}"
            );
            let receipt = facilitator.settle(&request).await.unwrap();
            assert_eq!(
                receipt.error_reason.as_deref(),
                Some(expected),
                "{receipt:?}"
            );
        }
    };
    let with = |f: &dyn Fn(
        &mut x402_core::proto::v2::PaymentRequirements,
        &mut x402_core::proto::v2::PaymentPayload,
    )| {
        let mut request = request_v2(DEV_TOKEN, &payload);
        if let (PaymentRequirements::V2(r), PaymentPayload::V2(p)) = (
            std::sync::Arc::make_mut(&mut request.payment_requirements),
            &mut request.payment_payload,
        ) {
            f(r, p);
        }
        request
    };

    check(
        with(&|r, p| {
            r.scheme = "upto".into();
            p.accepted.scheme = "upto".into();
        }),
        // An upto requirement with an EIP-3009 payload: upto is Permit2 only.
        reason::UPTO_PAYLOAD,
    )
    .await;
    check(
        with(&|_, p| p.accepted.scheme = "upto".into()),
        reason::SCHEME,
    )
    .await;
    check(
        with(&|_, p| p.accepted.network = "eip155:1".into()),
        reason::NETWORK_MISMATCH,
    )
    .await;
    check(
        with(&|r, p| {
            r.network = "eip155:11155111".into();
            p.accepted.network = r.network.clone();
        }),
        reason::UNSUPPORTED_NETWORK,
    )
    .await;
    check(
        with(&|r, _| {
            r.extra.remove("name");
        }),
        reason::MISSING_EIP712_DOMAIN,
    )
    .await;
    check(
        with(&|r, _| {
            r.extra.remove("version");
        }),
        reason::MISSING_EIP712_DOMAIN,
    )
    .await;
    check(
        with(&|_, p| p.payload = serde_json::json!({"signature": "0x"})),
        reason::PAYLOAD,
    )
    .await;
    check(
        with(&|_, p| p.payload["authorization"]["value"] = serde_json::json!(1000)),
        reason::PAYLOAD,
    )
    .await;
    check(
        with(&|r, _| r.asset = "not an address".into()),
        reason::INVALID_REQUIREMENTS,
    )
    .await;
    // A smart-wallet (longer than 65 bytes) signature.
    let mut long = payload.clone();
    let mut bytes = long.signature.to_vec();
    bytes.extend_from_slice(&[0u8; 32]);
    long.signature = bytes.into();
    check(
        request_v2(DEV_TOKEN, &long),
        reason::UNDEPLOYED_SMART_WALLET,
    )
    .await;
    // Signed by someone else than `from`.
    let mut forged: ExactEvmPayload = payload.clone();
    forged.authorization.from = payer().address();
    ledger
        .fund(NETWORK, DEV_TOKEN, forged.authorization.from, 10_000)
        .unwrap();
    check(request_v2(DEV_TOKEN, &forged), reason::SIGNATURE).await;

    assert_eq!(bal(&ledger, key.address()), U256::from(10_000u64));
    assert_eq!(bal(&ledger, PAYEE), U256::ZERO);
}

#[tokio::test]
async fn dev_v1_payload_is_valid_and_settles() {
    let (ledger, facilitator) = dev();
    let key = funded(&ledger, 5_000);
    let request = request_v1(DEV_TOKEN, &Spec::valid(DEV_TOKEN).sign(&key));
    assert_eq!(request.version(), X402Version::V1);
    let verdict = facilitator.verify(&request).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    let receipt = facilitator.settle(&request).await.unwrap();
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(receipt.network, "base-sepolia");
    assert_eq!(bal(&ledger, key.address()), U256::from(5_000 - PRICE));
    assert_eq!(bal(&ledger, PAYEE), U256::from(PRICE));
    // v1 with the payment naming another network.
    let mut request = request_v1(DEV_TOKEN, &Spec::valid(DEV_TOKEN).sign(&key));
    if let PaymentPayload::V1(p) = &mut request.payment_payload {
        p.network = "base".into();
    }
    let verdict = facilitator.verify(&request).await.unwrap();
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some(reason::NETWORK_MISMATCH)
    );
}

#[tokio::test]
async fn dev_ledger_refuses_mainnets() {
    let ledger = DevLedger::new();
    for mainnet in ["eip155:8453", "base", "eip155:1", "eip155:999999"] {
        let err = LocalFacilitator::builder(DevLedger::new())
            .network(mainnet)
            .build()
            .unwrap_err();
        assert!(
            matches!(err, LocalConfigError::Ledger(_)),
            "{mainnet}: {err:?}"
        );
        assert!(err.to_string().contains("mainnet"), "{err}");
        assert_eq!(
            ledger.fund(mainnet, DEV_TOKEN, PAYEE, 1u64),
            Err(DevLedgerError::Mainnet(mainnet.to_owned()))
        );
    }
    // Dev chains and testnets are fine.
    for ok in [
        "eip155:31337",
        "eip155:84532",
        "base-sepolia",
        "eip155:11155111",
    ] {
        LocalFacilitator::builder(DevLedger::new())
            .network(ok)
            .build()
            .unwrap();
    }
    assert!(matches!(
        LocalFacilitator::builder(DevLedger::new())
            .network("solana:devnet")
            .build(),
        Err(LocalConfigError::NotEvm(_))
    ));
    assert!(matches!(
        LocalFacilitator::builder(DevLedger::new()).build(),
        Err(LocalConfigError::NoNetworks)
    ));
}

#[tokio::test]
async fn dev_supported_lists_v2_and_v1_kinds_and_the_dev_signer() {
    let facilitator = LocalFacilitator::builder(DevLedger::new())
        .networks(["eip155:84532", "eip155:31337"])
        .build()
        .unwrap();
    let supported = facilitator.supported().await.unwrap();
    let kinds: Vec<_> = supported
        .kinds
        .iter()
        .map(|k| (k.x402_version, k.scheme.as_str(), k.network.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            (X402Version::V2, "exact", "eip155:31337"),
            (X402Version::V2, "exact", "eip155:84532"),
            (X402Version::V1, "exact", "base-sepolia"),
            (X402Version::V2, "upto", "eip155:31337"),
            (X402Version::V2, "upto", "eip155:84532"),
        ]
    );
    assert_eq!(
        supported.signers.get("eip155:*"),
        Some(&vec![DEV_LEDGER_SIGNER.to_checksum(None)])
    );
    assert!(supported.extensions.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dev_20_concurrent_settles_of_20_payers_all_succeed() {
    let (ledger, facilitator) = dev();
    let mut tasks = Vec::new();
    let mut payers = Vec::new();
    for _ in 0..20 {
        let key = funded(&ledger, PRICE);
        let request = request_v2(DEV_TOKEN, &Spec::valid(DEV_TOKEN).sign(&key));
        payers.push(key.address());
        let facilitator = facilitator.clone();
        tasks.push(tokio::spawn(async move {
            facilitator.settle(&request).await.unwrap()
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for task in tasks {
        let receipt = task.await.unwrap();
        assert!(receipt.success, "{receipt:?}");
        ids.insert(receipt.transaction);
    }
    assert_eq!(ids.len(), 20);
    for p in payers {
        assert_eq!(bal(&ledger, p), U256::ZERO);
    }
    assert_eq!(bal(&ledger, PAYEE), U256::from(20 * PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dev_20_concurrent_settles_of_one_authorization_succeed_once() {
    let (ledger, facilitator) = dev();
    let key = funded(&ledger, 100 * PRICE);
    let request = Arc::new(request_v2(DEV_TOKEN, &Spec::valid(DEV_TOKEN).sign(&key)));
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (facilitator, request, barrier) =
                (facilitator.clone(), request.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                facilitator.settle(&request).await.unwrap()
            })
        })
        .collect();
    let mut successes = 0;
    for task in tasks {
        let receipt = task.await.unwrap();
        if receipt.success {
            successes += 1;
        } else {
            assert_eq!(receipt.error_reason.as_deref(), Some(reason::NONCE_USED));
        }
    }
    assert_eq!(successes, 1);
    assert_eq!(bal(&ledger, key.address()), U256::from(99 * PRICE));
    assert_eq!(bal(&ledger, PAYEE), U256::from(PRICE));
}

#[tokio::test]
async fn upstream_spec_vector_verifies_with_its_clock() {
    let payload: ExactEvmPayload = serde_json::from_str(
        r#"{"signature":"0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c","authorization":{"from":"0x857b06519E91e3A54538791bDbb0E22373e36b66","to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000","validAfter":"1740672089","validBefore":"1740672154","nonce":"0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"}}"#,
    )
    .unwrap();
    let payer = payload.authorization.from;
    let mut request = request_v2(DEV_TOKEN, &payload);
    if let (PaymentRequirements::V2(r), PaymentPayload::V2(p)) = (
        std::sync::Arc::make_mut(&mut request.payment_requirements),
        &mut request.payment_payload,
    ) {
        r.amount = 10_000u64.into();
        p.accepted = r.clone();
    }
    let ledger = Arc::new(DevLedger::new());
    ledger.fund(NETWORK, DEV_TOKEN, payer, 10_000u64).unwrap();
    let at = |now: u64| {
        LocalFacilitator::builder(ledger.clone())
            .network(NETWORK)
            .clock(FixedClock(now))
            .build()
            .unwrap()
    };
    let verdict = at(1_740_672_100).verify(&request).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    assert_eq!(
        verdict.payer.as_deref(),
        Some("0x857b06519E91e3A54538791bDbb0E22373e36b66")
    );
    // Too close to validBefore (1740672154 - 6 s margin), and too early.
    let late = at(1_740_672_149).verify(&request).await.unwrap();
    assert_eq!(late.invalid_reason.as_deref(), Some(reason::VALID_BEFORE));
    let early = at(1_740_672_088).verify(&request).await.unwrap();
    assert_eq!(early.invalid_reason.as_deref(), Some(reason::VALID_AFTER));
    // With the system clock it has long expired.
    let (_, now) = dev();
    let expired = now.verify(&request).await.unwrap();
    assert_eq!(
        expired.invalid_reason.as_deref(),
        Some(reason::VALID_BEFORE)
    );
}

// ---------------------------------------------------------------------------
// Through the engine and axum, on any ledger.

/// What the engine scenarios need from a ledger.
#[async_trait]
trait Env: Send + Sync {
    fn facilitator(&self) -> Arc<dyn Facilitator>;
    fn token(&self) -> Address;
    async fn fund(&self, who: Address, amount: u64);
    async fn balance(&self, who: Address) -> U256;
    /// Asserts that a settled receipt's `transaction` is real for the ledger.
    async fn check_transaction(&self, transaction: &str, payer: Address, nonce: B256);
}

struct DevEnv {
    ledger: Arc<DevLedger>,
    facilitator: Arc<dyn Facilitator>,
}

#[async_trait]
impl Env for DevEnv {
    fn facilitator(&self) -> Arc<dyn Facilitator> {
        self.facilitator.clone()
    }
    fn token(&self) -> Address {
        DEV_TOKEN
    }
    async fn fund(&self, who: Address, amount: u64) {
        self.ledger.fund(NETWORK, DEV_TOKEN, who, amount).unwrap();
    }
    async fn balance(&self, who: Address) -> U256 {
        self.ledger.balance(NETWORK, DEV_TOKEN, who)
    }
    async fn check_transaction(&self, transaction: &str, payer: Address, nonce: B256) {
        assert_eq!(
            transaction,
            DevLedger::transaction_id(NETWORK, DEV_TOKEN, payer, nonce)
        );
    }
}

/// Paid → 200 with a receipt; replay, and every refusal → 402 with the
/// handler not running and nothing moved.
async fn engine_scenarios(env: &dyn Env) {
    let token = env.token();
    let seller = Seller::start(env.facilitator(), token).await;
    let accepted = seller.challenge().await;
    assert_eq!(accepted.amount.to_string(), PRICE.to_string());
    assert_eq!(accepted.asset, token.to_checksum(None));
    assert_eq!(
        accepted.extra.get("name").and_then(|v| v.as_str()),
        Some("USDC")
    );
    assert_eq!(seller.calls(), 0);

    // Paid.
    let key = payer();
    env.fund(key.address(), 10 * PRICE).await;
    let spec = Spec::valid(token);
    let payload = spec.sign(&key);
    let payee_before = env.balance(PAYEE).await;
    let (status, body, receipt) = seller.pay(&accepted, &payload).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "paid content");
    assert_eq!(seller.calls(), 1);
    let receipt = receipt.expect("PAYMENT-RESPONSE");
    assert!(receipt.success);
    assert_eq!(receipt.network, NETWORK);
    assert_eq!(receipt.payer, Some(key.address().to_checksum(None)));
    assert!(!receipt.transaction.is_empty());
    env.check_transaction(&receipt.transaction, key.address(), spec.nonce)
        .await;
    assert_eq!(env.balance(key.address()).await, U256::from(9 * PRICE));
    assert_eq!(env.balance(PAYEE).await, payee_before + U256::from(PRICE));

    // The same authorization again.
    let (status, _, receipt) = seller.pay(&accepted, &payload).await;
    assert_eq!(status, 402);
    assert!(receipt.is_none());
    assert_eq!(seller.calls(), 1);
    assert_eq!(env.balance(key.address()).await, U256::from(9 * PRICE));
    assert_eq!(env.balance(PAYEE).await, payee_before + U256::from(PRICE));

    // The refusals.
    for (name, _, funding, spec) in refusals(token) {
        let key = payer();
        env.fund(key.address(), funding).await;
        let (status, body, receipt) = seller.pay(&accepted, &spec.sign(&key)).await;
        assert_eq!(status, 402, "{name}: {body}");
        assert!(receipt.is_none(), "{name}");
        assert_eq!(seller.calls(), 1, "{name}: the handler ran");
        assert_eq!(
            env.balance(key.address()).await,
            U256::from(funding),
            "{name}"
        );
        assert_eq!(
            env.balance(PAYEE).await,
            payee_before + U256::from(PRICE),
            "{name}"
        );
    }
}

#[tokio::test]
async fn engine_and_axum_on_the_dev_ledger() {
    let (ledger, facilitator) = dev();
    engine_scenarios(&DevEnv {
        ledger,
        facilitator,
    })
    .await;
}

#[tokio::test]
async fn engine_through_the_facilitator_served_over_http() {
    let (ledger, local) = dev();
    let addr = serve(x402_axum::facilitator_router(local)).await;
    let remote = HttpFacilitator::new(format!("http://{addr}")).unwrap();
    // The served API itself.
    let supported = remote.supported().await.unwrap();
    // exact v2, exact v1 (base-sepolia), upto v2.
    assert_eq!(supported.kinds.len(), 3);
    assert_eq!(
        supported.signers["eip155:*"],
        [DEV_LEDGER_SIGNER.to_checksum(None)]
    );
    engine_scenarios(&DevEnv {
        ledger,
        facilitator: Arc::new(remote),
    })
    .await;
}

#[tokio::test]
async fn served_facilitator_answers_malformed_requests_with_400() {
    let (_, local) = dev();
    let addr = serve(x402_axum::facilitator_router(local)).await;
    let client = reqwest::Client::new();
    for path in ["verify", "settle"] {
        for body in [
            "not json",
            r#"{"paymentPayload": {"x402Version": 2}}"#,
            r#"{"secret":"0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"}"#,
        ] {
            let response = client
                .post(format!("http://{addr}/{path}"))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 400, "{path} {body}");
            let json: serde_json::Value = response.json().await.unwrap();
            let error = json["error"].as_str().unwrap();
            assert!(!error.is_empty());
            assert!(!error.contains("ac0974"), "{error}");
        }
    }
    let response = client
        .get(format!("http://{addr}/supported"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let json: serde_json::Value = response.json().await.unwrap();
    assert_eq!(json["kinds"][0]["network"], "eip155:84532");
    // A valid shape answers 200 with a verdict, even when invalid.
    let key = payer();
    let request = request_v2(DEV_TOKEN, &Spec::valid(DEV_TOKEN).sign(&key));
    let response = client
        .post(format!("http://{addr}/verify"))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let json: serde_json::Value = response.json().await.unwrap();
    assert_eq!(json["isValid"], false);
    assert_eq!(json["invalidReason"], reason::INSUFFICIENT_BALANCE);
}

// ---------------------------------------------------------------------------
// Against anvil.

mod chain {
    use alloy_provider::{DynProvider, Provider};
    use x402_core::local::ChainLedger;

    use super::*;
    use x402_tests::anvil::{self, Anvil};

    struct AnvilEnv {
        deployer: DynProvider,
        token: Address,
        facilitator: Arc<dyn Facilitator>,
    }

    #[async_trait]
    impl Env for AnvilEnv {
        fn facilitator(&self) -> Arc<dyn Facilitator> {
            self.facilitator.clone()
        }
        fn token(&self) -> Address {
            self.token
        }
        async fn fund(&self, who: Address, amount: u64) {
            anvil::mint(&self.deployer, self.token, who, amount).await;
        }
        async fn balance(&self, who: Address) -> U256 {
            anvil::balance_of(&self.deployer, self.token, who).await
        }
        async fn check_transaction(&self, transaction: &str, _: Address, _: B256) {
            let hash: B256 = transaction.parse().unwrap();
            let receipt = self
                .deployer
                .get_transaction_receipt(hash)
                .await
                .unwrap()
                .unwrap();
            assert!(receipt.status(), "settlement {transaction} reverted");
            assert_eq!(receipt.to, Some(self.token));
        }
    }

    async fn setup(anvil: &Anvil) -> AnvilEnv {
        let deployer = anvil.provider(DEPLOYER_KEY).await;
        let token = anvil::deploy_test_usdc(&deployer, "USDC", "2").await;
        let ledger = ChainLedger::new(&anvil.url, FACILITATOR_KEY).await.unwrap();
        assert_eq!(ledger.chain_id(), CHAIN_ID);
        let facilitator = LocalFacilitator::builder(ledger)
            .network(NETWORK)
            .build()
            .unwrap();
        let supported = facilitator.supported().await.unwrap();
        assert_eq!(
            supported.signers["eip155:*"],
            ["0x70997970C51812dc3A010C7d01b50e0d17dc79C8"]
        );
        AnvilEnv {
            deployer,
            token,
            facilitator: Arc::new(facilitator),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn anvil_engine_scenarios() {
        let started = Instant::now();
        let anvil = Anvil::start();
        eprintln!("anvil started in {:?}", started.elapsed());
        let env = setup(&anvil).await;
        let started = Instant::now();
        engine_scenarios(&env).await;
        eprintln!("anvil engine scenarios took {:?}", started.elapsed());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn anvil_20_concurrent_paid_requests_all_settle() {
        let anvil = Anvil::start();
        let env = setup(&anvil).await;
        let seller = Seller::start(env.facilitator(), env.token).await;
        let accepted = seller.challenge().await;
        let mut payments = Vec::new();
        for _ in 0..20 {
            let key = payer();
            env.fund(key.address(), PRICE).await;
            payments.push((key.address(), Spec::valid(env.token).sign(&key)));
        }
        let seller = Arc::new(seller);
        let started = Instant::now();
        let tasks: Vec<_> = payments
            .iter()
            .map(|(_, payload)| {
                let (seller, accepted, payload) =
                    (seller.clone(), accepted.clone(), payload.clone());
                tokio::spawn(async move { seller.pay(&accepted, &payload).await })
            })
            .collect();
        let mut hashes = std::collections::HashSet::new();
        for task in tasks {
            let (status, body, receipt) = task.await.unwrap();
            assert_eq!(status, 200, "{body}");
            let receipt = receipt.unwrap();
            assert!(receipt.success);
            hashes.insert(receipt.transaction);
        }
        let elapsed = started.elapsed();
        eprintln!("20 concurrent paid requests on anvil settled in {elapsed:?}");
        assert_eq!(hashes.len(), 20);
        assert_eq!(seller.calls(), 20);
        for hash in &hashes {
            env.check_transaction(hash, Address::ZERO, B256::ZERO).await;
        }
        for (payer, _) in &payments {
            assert_eq!(env.balance(*payer).await, U256::ZERO);
        }
        assert_eq!(env.balance(PAYEE).await, U256::from(20 * PRICE));
        assert!(elapsed < Duration::from_secs(60));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn anvil_direct_verify_reads_chain_state() {
        let anvil = Anvil::start();
        let env = setup(&anvil).await;
        let key = payer();
        let spec = Spec::valid(env.token);
        let request = request_v2(env.token, &spec.sign(&key));
        let verdict = env.facilitator.verify(&request).await.unwrap();
        assert_eq!(
            verdict.invalid_reason.as_deref(),
            Some(reason::INSUFFICIENT_BALANCE)
        );
        env.fund(key.address(), PRICE).await;
        assert!(env.facilitator.verify(&request).await.unwrap().is_valid);
        let receipt = env.facilitator.settle(&request).await.unwrap();
        assert!(receipt.success, "{receipt:?}");
        let verdict = env.facilitator.verify(&request).await.unwrap();
        assert_eq!(verdict.invalid_reason.as_deref(), Some(reason::NONCE_USED));
        // A network the RPC endpoint does not serve is refused at build time.
        let ledger = ChainLedger::new(&anvil.url, FACILITATOR_KEY).await.unwrap();
        assert!(LocalFacilitator::builder(ledger)
            .network("eip155:8453")
            .build()
            .is_err());
        // Keys never show in Debug.
        let ledger = ChainLedger::new(&anvil.url, FACILITATOR_KEY).await.unwrap();
        let debug = format!("{ledger:?}");
        assert!(!debug.contains("59c6995e"), "{debug}");
        assert!(debug.contains("84532"), "{debug}");
        assert!(ChainLedger::new(&anvil.url, "0x1234").await.is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn anvil_token_refusal_is_caught_by_simulation_and_settlement() {
        let anvil = Anvil::start();
        let env = setup(&anvil).await;
        // A token whose real EIP-712 name is not the `extra.name` ("USDC") the
        // seller advertises: every offline check passes, the chain refuses.
        let other = anvil::deploy_test_usdc(&env.deployer, "Other Coin", "2").await;
        let key = payer();
        anvil::mint(&env.deployer, other, key.address(), PRICE).await;
        let request = request_v2(other, &Spec::valid(other).sign(&key));
        let verdict = env.facilitator.verify(&request).await.unwrap();
        assert!(!verdict.is_valid);
        assert_eq!(
            verdict.invalid_reason.as_deref(),
            Some(reason::SIMULATION_FAILED)
        );
        // The node's revert text stays in the log; the buyer gets a fixed
        // message.
        assert_eq!(
            verdict.invalid_message.as_deref(),
            Some("the token refused the transfer in a dry run"),
            "{verdict:?}"
        );
        let receipt = env.facilitator.settle(&request).await.unwrap();
        assert!(!receipt.success);
        assert_eq!(
            receipt.error_reason.as_deref(),
            Some(reason::TRANSACTION_FAILED)
        );
        assert_eq!(
            receipt.error_message.as_deref(),
            Some("the ledger refused the transfer; nothing was sent"),
            "{receipt:?}"
        );
        assert_eq!(receipt.transaction, "");
        assert_eq!(
            anvil::balance_of(&env.deployer, other, key.address()).await,
            U256::from(PRICE)
        );
        assert_eq!(
            anvil::balance_of(&env.deployer, other, PAYEE).await,
            U256::ZERO
        );
    }
}
