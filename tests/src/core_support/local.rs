//! Signing EIP-3009 payloads and building facilitator requests for the
//! in-process EVM facilitator's tests (`core_local_facilitator`,
//! `core_local_upto`), and a seller (engine + axum) on 127.0.0.1:0.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{SystemTime, UNIX_EPOCH},
};

use alloy_primitives::{address, keccak256, Address, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use axum::{routing::get, Router};
use serde_json::{json, Map};
use x402_core::{
    codec,
    evm::{eip3009_domain, Eip3009Authorization, ExactEvmPayload},
    money::AtomicAmount,
    proto::{
        v1, v2, FacilitatorRequest, PaymentPayload, PaymentRequirements, SettleResponse, Version,
    },
    route::{Asset, Offer, Route},
    Engine, Facilitator,
};

/// Base Sepolia.
pub const NETWORK: &str = "eip155:84532";
/// Base Sepolia's chain id.
pub const CHAIN_ID: u64 = 84532;
/// The seller.
pub const PAYEE: Address = address!("209693Bc6afc0C5328bA36FaF03C514EF312287C");
/// $0.001 in 6-decimal atomic units.
pub const PRICE: u64 = 1_000;
/// Anvil account 0: deploys and mints.
pub const DEPLOYER_KEY: &str = crate::anvil::accounts::KEY_0;
/// Anvil account 1: the facilitator, which pays the gas of settlements.
pub const FACILITATOR_KEY: &str = crate::anvil::accounts::KEY_1;

/// The current unix time.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A fresh random payer key.
pub fn payer() -> PrivateKeySigner {
    PrivateKeySigner::random()
}

/// A random nonce.
pub fn nonce() -> B256 {
    keccak256(PrivateKeySigner::random().address())
}

/// How to sign: the EIP-712 domain and the authorization's fields.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub version: String,
    pub chain_id: u64,
    pub token: Address,
    pub to: Address,
    pub value: u64,
    pub valid_after: u64,
    pub valid_before: u64,
    pub nonce: B256,
}

impl Spec {
    /// A valid payment of [`PRICE`] to [`PAYEE`] for `token`.
    pub fn valid(token: Address) -> Self {
        let now = now();
        Self {
            name: "USDC".into(),
            version: "2".into(),
            chain_id: CHAIN_ID,
            token,
            to: PAYEE,
            value: PRICE,
            valid_after: now - 600,
            valid_before: now + 300,
            nonce: nonce(),
        }
    }

    /// Signs with `key`.
    pub fn sign(&self, key: &PrivateKeySigner) -> ExactEvmPayload {
        let authorization = Eip3009Authorization {
            from: key.address(),
            to: self.to,
            value: AtomicAmount::from(self.value),
            valid_after: U256::from(self.valid_after),
            valid_before: U256::from(self.valid_before),
            nonce: self.nonce,
        };
        let domain = eip3009_domain(&self.name, &self.version, self.chain_id, self.token);
        let signature = key
            .sign_hash_sync(&authorization.signing_hash(&domain))
            .unwrap();
        ExactEvmPayload {
            signature: signature.as_bytes().to_vec().into(),
            authorization,
        }
    }
}

/// The v2 requirement a seller of `token` at [`PRICE`] to [`PAYEE`] sends.
pub fn requirements_v2(token: Address) -> v2::PaymentRequirements {
    let mut extra = Map::new();
    extra.insert("name".into(), json!("USDC"));
    extra.insert("version".into(), json!("2"));
    v2::PaymentRequirements {
        scheme: "exact".into(),
        network: NETWORK.into(),
        amount: AtomicAmount::from(PRICE),
        asset: token.to_checksum(None),
        pay_to: PAYEE.to_checksum(None),
        max_timeout_seconds: 300,
        extra,
        other: Map::new(),
    }
}

/// The v2 payment carrying `payload` for `accepted`.
pub fn payment_v2(
    accepted: &v2::PaymentRequirements,
    payload: &ExactEvmPayload,
) -> v2::PaymentPayload {
    v2::PaymentPayload {
        x402_version: Version::<2>,
        resource: None,
        accepted: accepted.clone(),
        payload: serde_json::to_value(payload).unwrap(),
        extensions: None,
        other: Map::new(),
    }
}

/// A v2 facilitator request.
pub fn request_v2(token: Address, payload: &ExactEvmPayload) -> FacilitatorRequest {
    let requirements = requirements_v2(token);
    FacilitatorRequest::new(
        PaymentPayload::V2(payment_v2(&requirements, payload)),
        PaymentRequirements::V2(requirements),
    )
    .unwrap()
}

/// A v1 facilitator request (`base-sepolia`, `maxAmountRequired`).
pub fn request_v1(token: Address, payload: &ExactEvmPayload) -> FacilitatorRequest {
    let requirements = v1::PaymentRequirements {
        scheme: "exact".into(),
        network: "base-sepolia".into(),
        max_amount_required: AtomicAmount::from(PRICE),
        resource: "http://127.0.0.1/paid".into(),
        description: String::new(),
        mime_type: String::new(),
        output_schema: None,
        pay_to: PAYEE.to_checksum(None),
        max_timeout_seconds: 300,
        asset: token.to_checksum(None),
        extra: Some(requirements_v2(token).extra),
        other: Map::new(),
    };
    let payment = v1::PaymentPayload {
        x402_version: Version::<1>,
        scheme: "exact".into(),
        network: "base-sepolia".into(),
        payload: serde_json::to_value(payload).unwrap(),
        other: Map::new(),
    };
    FacilitatorRequest::new(
        PaymentPayload::V1(payment),
        PaymentRequirements::V1(requirements),
    )
    .unwrap()
}

/// A seller on 127.0.0.1:0: `GET /paid` costs $0.001 of `token`.
#[derive(Debug)]
pub struct Seller {
    pub url: String,
    pub handler_calls: Arc<AtomicUsize>,
    pub client: reqwest::Client,
}

impl Seller {
    pub async fn start(facilitator: Arc<dyn Facilitator>, token: Address) -> Self {
        let engine = Engine::builder_arc(facilitator)
            .route(
                Route::get("/paid").offer(
                    Offer::exact(NETWORK, "$0.001", PAYEE.to_checksum(None))
                        .asset(Asset::new(token.to_checksum(None), 6).eip712("USDC", "2")),
                ),
            )
            .build()
            .unwrap();
        let handler_calls = Arc::new(AtomicUsize::new(0));
        let calls = handler_calls.clone();
        let app = Router::new()
            .route(
                "/paid",
                get(move || {
                    let calls = calls.clone();
                    async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        "paid content"
                    }
                }),
            )
            .layer(x402_axum::PaywallLayer::new(engine));
        let addr = serve(app).await;
        Self {
            url: format!("http://{addr}/paid"),
            handler_calls,
            client: reqwest::Client::new(),
        }
    }

    pub fn calls(&self) -> usize {
        self.handler_calls.load(Ordering::SeqCst)
    }

    /// The challenge's first requirement, from an unpaid request (asserting
    /// the 402).
    pub async fn challenge(&self) -> v2::PaymentRequirements {
        let response = self.client.get(&self.url).send().await.unwrap();
        assert_eq!(response.status(), 402);
        let header = response.headers().get("PAYMENT-REQUIRED").unwrap();
        let required: v2::PaymentRequired = codec::decode(header.as_bytes(), 1 << 20).unwrap();
        assert_eq!(required.accepts.len(), 1);
        required.accepts[0].clone()
    }

    /// Pays with `payload`: the status, the body and the decoded receipt.
    pub async fn pay(
        &self,
        accepted: &v2::PaymentRequirements,
        payload: &ExactEvmPayload,
    ) -> (u16, String, Option<SettleResponse>) {
        let header = codec::encode(&payment_v2(accepted, payload)).unwrap();
        let response = self
            .client
            .get(&self.url)
            .header("PAYMENT-SIGNATURE", header)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let receipt = response
            .headers()
            .get("PAYMENT-RESPONSE")
            .map(|h| codec::decode::<SettleResponse>(h.as_bytes(), 1 << 20).unwrap());
        (status, response.text().await.unwrap(), receipt)
    }
}

/// Serves `app` on 127.0.0.1:0 and returns its address.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    addr
}
