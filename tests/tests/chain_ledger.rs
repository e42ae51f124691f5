//! `ChainLedger` on anvil, through a real engine and paid HTTP requests:
//! once a settlement's transaction may have been sent, the ledger never
//! answers "refused" (a 402 would tell the buyer they were not charged).
//!
//! - The node answers "transaction already imported" (anvil's "already
//!   known"): a proxy in front of anvil sends the signed transaction twice,
//!   as a load balancer retrying a lost answer does, with automine off. The
//!   engine answers 502 `{"error":"settlement_unknown"}`, the claim is kept,
//!   a `payment.settlement_unknown` event is recorded, and once a block is
//!   mined the buyer has indeed paid.
//! - The transaction is sent but no receipt comes within the timeout
//!   (automine off): the same.
//! - The node answers "nonce too low" because the first copy was mined in
//!   between: the ledger finds the receipt of its own transaction hash and
//!   settles (200), and the tokens moved exactly once.
//!
//! - A transfer the token refuses at gas estimation, before anything is
//!   signed or sent, stays a refusal (`success: false`), and neither it nor
//!   the dry run shows the node's text.
//!
//! A resend of the unknown payment is refused and never runs the handler
//! again: by the node's pending state while the transaction waits, and by
//! the kept claim once it is dropped from the pool.
//!
//! Needs `tests/js/node_modules` (`npm ci` in `tests/js`) for anvil.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use alloy_primitives::{keccak256, Address, B256, U256};
use alloy_provider::{DynProvider, Provider};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use axum::{routing::get, Router};
use serde_json::{json, Value};
use x402_core::{
    codec,
    evm::{eip3009_domain, Eip3009Authorization, ExactEvmPayload},
    local::{ChainLedger, LocalFacilitator},
    proto::{v2, FacilitatorRequest, SettleResponse},
    route::{Asset, Offer, Route},
    webhook::{WebhookSecret, Webhooks},
    Engine, Facilitator,
};
use x402_tests::anvil::{self, accounts, Anvil, ResendingProxy};

const NETWORK: &str = "eip155:84532";
/// The payer's starting balance (atomic units: 1 USDC).
const FUNDING: u64 = 1_000_000;
/// $0.001 in atomic units.
const PRICE: u64 = 1_000;

/// anvil with TestUSDC ("USDC", "2") minted to the payer (account 1); the
/// facilitator is account 0, the payee account 2.
struct Chain {
    anvil: Anvil,
    provider: DynProvider,
    token: Address,
    payer: PrivateKeySigner,
    payee: Address,
}

impl Chain {
    async fn start() -> Self {
        let anvil = Anvil::start();
        let provider = anvil.provider(accounts::KEY_0).await;
        let token = anvil::deploy_test_usdc(&provider, "USDC", "2").await;
        let payer: PrivateKeySigner = accounts::KEY_1.parse().unwrap();
        anvil::mint(&provider, token, payer.address(), FUNDING).await;
        Self {
            anvil,
            provider,
            token,
            payer,
            payee: anvil::address_of(accounts::KEY_2),
        }
    }

    /// The payer's and the payee's token balances.
    async fn balances(&self) -> (U256, U256) {
        (
            anvil::balance_of(&self.provider, self.token, self.payer.address()).await,
            anvil::balance_of(&self.provider, self.token, self.payee).await,
        )
    }

    /// The facilitator account's pending and mined transaction counts.
    async fn facilitator_nonces(&self) -> (u64, u64) {
        let facilitator = anvil::address_of(accounts::KEY_0);
        (
            self.provider
                .get_transaction_count(facilitator)
                .pending()
                .await
                .unwrap(),
            self.provider
                .get_transaction_count(facilitator)
                .latest()
                .await
                .unwrap(),
        )
    }

    /// A `PAYMENT-SIGNATURE` paying `accepted` (of [`Chain::token`]) with
    /// a fresh authorization.
    fn sign(&self, accepted: &v2::PaymentRequirements) -> String {
        let payload = self.payload(
            self.token,
            accepted.pay_to.parse().unwrap(),
            accepted.amount.to_string().parse().unwrap(),
        );
        codec::encode(&json!({
            "x402Version": 2,
            "accepted": accepted,
            "payload": payload,
        }))
        .unwrap()
    }

    /// An EIP-3009 authorization of `value` of `token` to `to` with a fresh
    /// nonce, signed in the domain `{"USDC", "2", 84532, token}`.
    fn payload(&self, token: Address, to: Address, value: u64) -> ExactEvmPayload {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let authorization = Eip3009Authorization {
            from: self.payer.address(),
            to,
            value: value.into(),
            valid_after: U256::from(now - 600),
            valid_before: U256::from(now + 300),
            nonce: keccak256(PrivateKeySigner::random().address()),
        };
        let domain = eip3009_domain("USDC", "2", 84532, token);
        let signature = self
            .payer
            .sign_hash_sync(&authorization.signing_hash(&domain))
            .unwrap();
        ExactEvmPayload {
            signature: signature.as_bytes().to_vec().into(),
            authorization,
        }
    }
}

/// A seller on 127.0.0.1:0 whose `GET /paid` costs $0.001 of the token,
/// settled by a `ChainLedger` on `rpc_url`, with settlement webhooks whose
/// outbox is read, never delivered.
struct Shop {
    url: String,
    calls: Arc<AtomicUsize>,
    webhooks: Webhooks,
    client: reqwest::Client,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Shop {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// What a paid request got.
#[derive(Debug)]
struct Reply {
    status: u16,
    body: String,
    /// The decoded `PAYMENT-RESPONSE`.
    receipt: Option<SettleResponse>,
    /// The decoded `PAYMENT-REQUIRED` of a 402.
    challenge: Option<Value>,
}

impl Shop {
    async fn start(chain: &Chain, rpc_url: &str, receipt_timeout: Duration) -> Self {
        let ledger = ChainLedger::new(rpc_url, accounts::KEY_0)
            .await
            .unwrap()
            .receipt_timeout(receipt_timeout);
        let facilitator = LocalFacilitator::builder(ledger)
            .network(NETWORK)
            .build()
            .unwrap();
        // Nothing listens there: the worker is never started, and the
        // events stay in the outbox for the test to read.
        let webhooks = Webhooks::builder("http://127.0.0.1:9/hook", [WebhookSecret::generate()])
            .build()
            .unwrap();
        let engine = Engine::builder_arc(Arc::new(facilitator))
            .public_origin("http://shop.example.test")
            .route(
                Route::get("/paid").offer(
                    Offer::exact(NETWORK, "$0.001", chain.payee.to_checksum(None))
                        .asset(Asset::new(chain.token.to_checksum(None), 6).eip712("USDC", "2")),
                ),
            )
            .hooks(webhooks.hooks())
            .build()
            .unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let app = Router::new()
            .route(
                "/paid",
                get(move || {
                    let counter = counter.clone();
                    async move {
                        counter.fetch_add(1, Ordering::SeqCst);
                        "paid content"
                    }
                }),
            )
            .layer(x402_axum::PaywallLayer::new(engine));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/paid", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            calls,
            webhooks,
            client: reqwest::Client::new(),
            server,
        }
    }

    /// The challenge's only requirement.
    async fn accepted(&self) -> v2::PaymentRequirements {
        let reply = self.get(None).await;
        assert_eq!(reply.status, 402, "{reply:?}");
        let required: v2::PaymentRequired =
            serde_json::from_value(reply.challenge.unwrap()).unwrap();
        assert_eq!(required.accepts.len(), 1);
        required.accepts[0].clone()
    }

    async fn get(&self, payment: Option<&str>) -> Reply {
        let mut request = self.client.get(&self.url);
        if let Some(payment) = payment {
            request = request.header("PAYMENT-SIGNATURE", payment);
        }
        let response = request.send().await.unwrap();
        let decode = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|h| codec::decode::<Value>(h.as_bytes(), 1 << 20).unwrap())
        };
        let receipt = decode("PAYMENT-RESPONSE").map(|v| serde_json::from_value(v).unwrap());
        let challenge = decode("PAYMENT-REQUIRED");
        Reply {
            status: response.status().as_u16(),
            receipt,
            challenge,
            body: response.text().await.unwrap(),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// The event types waiting in the webhook outbox, with their bodies.
    async fn events(&self) -> Vec<(String, Value)> {
        let mut events = Vec::new();
        while let Some(message) = self
            .webhooks
            .outbox()
            .claim(Duration::from_secs(60))
            .await
            .unwrap()
        {
            events.push((
                message.event_type.clone(),
                serde_json::from_str(&message.body).unwrap(),
            ));
        }
        events
    }
}

/// The reply is the engine's 502 `settlement_unknown`: opaque, no handler
/// body, no receipt, no node text.
fn assert_settlement_unknown(reply: &Reply) {
    assert_eq!(reply.status, 502, "{reply:?}");
    let body: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(body, json!({"error": "settlement_unknown"}), "{reply:?}");
    assert!(reply.receipt.is_none(), "{reply:?}");
    for leak in ["paid content", "imported", "nonce", "127.0.0.1", "receipt"] {
        assert!(!reply.body.contains(leak), "{leak:?} leaked: {reply:?}");
    }
}

/// The one recorded event is `payment.settlement_unknown` for this payment,
/// with no node text in it. (The webhook hook names the cause only as
/// `facilitator_unavailable`, and no transaction hash.)
async fn assert_unknown_event(shop: &Shop, chain: &Chain) {
    let events = shop.events().await;
    assert_eq!(events.len(), 1, "{events:?}");
    let (kind, body) = &events[0];
    assert_eq!(kind, "payment.settlement_unknown", "{body}");
    assert_eq!(body["type"], "payment.settlement_unknown", "{body}");
    let data = &body["data"];
    assert_eq!(data["network"], NETWORK, "{body}");
    assert_eq!(data["amount"], PRICE.to_string(), "{body}");
    let address = |key: &str| data[key].as_str().map(|a| a.parse::<Address>().unwrap());
    assert_eq!(address("payTo"), Some(chain.payee), "{body}");
    assert_eq!(address("asset"), Some(chain.token), "{body}");
    assert_eq!(data["transaction"], "", "{body}");
    assert_eq!(data["errorReason"], "facilitator_unavailable", "{body}");
    let text = body.to_string();
    for leak in ["imported", "nonce too low", "receipt"] {
        assert!(!text.contains(leak), "{leak:?} leaked: {text}");
    }
}

/// A resend of the same payment is refused with `error` in its 402, and the
/// handler does not run again.
async fn assert_resend_refused(shop: &Shop, payment: &str, error: &str) {
    let calls = shop.calls();
    let reply = shop.get(Some(payment)).await;
    assert_eq!(reply.status, 402, "{reply:?}");
    assert_eq!(
        reply.challenge.as_ref().unwrap()["error"],
        error,
        "{reply:?}"
    );
    assert!(!reply.body.contains("paid content"), "{reply:?}");
    assert_eq!(shop.calls(), calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_already_known_transaction_is_settlement_unknown_not_a_refusal() {
    let chain = Chain::start().await;
    let proxy = ResendingProxy::start(&chain.anvil.url).await;
    let shop = Shop::start(&chain, &proxy.url, Duration::from_secs(60)).await;
    let accepted = shop.accepted().await;
    let payment = chain.sign(&accepted);
    // From here on transactions wait in the pool.
    anvil::set_automine(&chain.provider, false).await;

    let reply = shop.get(Some(&payment)).await;
    assert_settlement_unknown(&reply);
    assert_eq!(shop.calls(), 1, "the handler ran once");

    // The node took the first copy and answered the second "already
    // imported": the transaction the buyer was told nothing about is
    // pending.
    let resent = proxy.resent();
    assert_eq!(resent.len(), 1, "{resent:?}");
    let hash: B256 = resent[0].first["result"]
        .as_str()
        .unwrap_or_else(|| panic!("the first copy was refused: {resent:?}"))
        .parse()
        .unwrap();
    assert_eq!(
        resent[0].second["error"]["message"], "transaction already imported",
        "{resent:?}"
    );
    let (pending, mined) = chain.facilitator_nonces().await;
    assert_eq!(pending, mined + 1, "one settlement is pending");
    assert_unknown_event(&shop, &chain).await;
    // A resend is refused: the node's pending state already spends the
    // authorization's nonce.
    assert_resend_refused(&shop, &payment, "invalid_exact_evm_nonce_already_used").await;
    assert!(
        chain
            .provider
            .get_transaction_receipt(hash)
            .await
            .unwrap()
            .is_none(),
        "nothing is mined yet"
    );

    // Once mined, the buyer has paid: a 402 "not charged" would have lied.
    anvil::mine(&chain.provider).await;
    let receipt = anvil::receipt(&chain.provider, hash).await;
    assert!(receipt.status());
    assert_eq!(
        chain.balances().await,
        (U256::from(FUNDING - PRICE), U256::from(PRICE))
    );
    assert_eq!(shop.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sent_transaction_without_a_receipt_in_time_is_settlement_unknown() {
    let chain = Chain::start().await;
    // Straight to anvil: the send succeeds, the receipt never comes in time.
    let shop = Shop::start(&chain, &chain.anvil.url, Duration::from_millis(500)).await;
    let accepted = shop.accepted().await;
    let payment = chain.sign(&accepted);
    anvil::set_automine(&chain.provider, false).await;

    let reply = shop.get(Some(&payment)).await;
    assert_settlement_unknown(&reply);
    assert_eq!(shop.calls(), 1);
    let (pending, mined) = chain.facilitator_nonces().await;
    assert_eq!(pending, mined + 1, "the settlement is in the pool");
    assert_unknown_event(&shop, &chain).await;

    // Even with the transaction gone from the pool (the authorization
    // valid again on chain), the payment stays claimed: a resend is
    // `payment_replayed` and the handler does not run twice.
    anvil::drop_pending(&chain.provider).await;
    let (pending, mined) = chain.facilitator_nonces().await;
    assert_eq!(pending, mined, "the pool is empty");
    assert_resend_refused(&shop, &payment, "payment_replayed").await;
    assert!(shop.events().await.is_empty(), "no second settlement");
    anvil::mine(&chain.provider).await;
    assert_eq!(
        chain.balances().await,
        (U256::from(FUNDING), U256::ZERO),
        "the dropped settlement moved nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonce_too_low_after_the_first_copy_was_mined_settles_from_its_receipt() {
    let chain = Chain::start().await;
    let proxy = ResendingProxy::mining_between(&chain.anvil.url).await;
    let shop = Shop::start(&chain, &proxy.url, Duration::from_secs(60)).await;
    let accepted = shop.accepted().await;
    let payment = chain.sign(&accepted);
    anvil::set_automine(&chain.provider, false).await;

    // The proxy mines the first copy before sending the second, which is
    // answered "nonce too low".
    let reply = shop.get(Some(&payment)).await;
    let resent = proxy.resent();
    assert_eq!(resent.len(), 1, "{resent:?}");
    assert_eq!(
        resent[0].second["error"]["message"], "nonce too low",
        "{resent:?}"
    );
    let hash = resent[0].first["result"].as_str().unwrap().to_owned();

    // The ledger looked its own transaction up, found it mined, and
    // settled: the buyer gets the content and a true receipt.
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.body, "paid content");
    let receipt = reply.receipt.unwrap();
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(receipt.transaction, hash);
    assert_eq!(
        chain.balances().await,
        (U256::from(FUNDING - PRICE), U256::from(PRICE)),
        "the tokens moved exactly once"
    );
    let events = shop.events().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "payment.settled", "{events:?}");
    assert_eq!(events[0].1["data"]["transaction"], hash, "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_refused_before_sending_stays_a_refusal_without_the_node_text() {
    let chain = Chain::start().await;
    // A token whose real EIP-712 name is not the "USDC" the seller
    // advertises: every offline check passes, the token reverts the
    // transfer, so gas estimation fails and nothing is signed or sent.
    let other = anvil::deploy_test_usdc(&chain.provider, "Other Coin", "2").await;
    anvil::mint(&chain.provider, other, chain.payer.address(), FUNDING).await;
    let ledger = ChainLedger::new(&chain.anvil.url, accounts::KEY_0)
        .await
        .unwrap();
    let facilitator = LocalFacilitator::builder(ledger)
        .network(NETWORK)
        .build()
        .unwrap();
    let requirements = json!({
        "scheme": "exact",
        "network": NETWORK,
        "amount": PRICE.to_string(),
        "asset": other.to_checksum(None),
        "payTo": chain.payee.to_checksum(None),
        "maxTimeoutSeconds": 300,
        "extra": {"name": "USDC", "version": "2"},
    });
    let request: FacilitatorRequest = serde_json::from_value(json!({
        "x402Version": 2,
        "paymentPayload": {
            "x402Version": 2,
            "accepted": requirements,
            "payload": chain.payload(other, chain.payee, PRICE),
        },
        "paymentRequirements": requirements,
    }))
    .unwrap();
    let before = chain.facilitator_nonces().await;

    let verdict = facilitator.verify(&request).await.unwrap();
    assert!(!verdict.is_valid);
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some("invalid_exact_evm_transaction_simulation_failed")
    );
    assert_eq!(
        verdict.invalid_message.as_deref(),
        Some("the token refused the transfer in a dry run")
    );

    let receipt = facilitator.settle(&request).await.unwrap();
    assert!(!receipt.success, "{receipt:?}");
    assert_eq!(
        receipt.error_reason.as_deref(),
        Some("invalid_exact_evm_transaction_failed")
    );
    assert_eq!(
        receipt.error_message.as_deref(),
        Some("the ledger refused the transfer; nothing was sent")
    );
    assert_eq!(receipt.transaction, "");
    for answer in [
        serde_json::to_string(&verdict).unwrap(),
        serde_json::to_string(&receipt).unwrap(),
    ] {
        for leak in ["revert", "invalid signature", "127.0.0.1"] {
            assert!(!answer.contains(leak), "{leak:?} leaked: {answer}");
        }
    }
    assert_eq!(chain.facilitator_nonces().await, before, "nothing was sent");
    assert_eq!(
        anvil::balance_of(&chain.provider, other, chain.payer.address()).await,
        U256::from(FUNDING)
    );
}
