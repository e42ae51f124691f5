//! sign-in-with-x with an EIP-1271 smart-contract wallet, on anvil: a tiny
//! wallet contract (`tests/js/contracts/TestSiwxWallet.sol`, which accepts
//! its owner's ECDSA signature of the hash) is deployed, and an engine with
//! `RpcSmartWallets` pointing at anvil lets the wallet sign in once it has
//! paid. A signature by someone other than the owner, a wallet that never
//! paid, and the same proof without smart-wallet checks are refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{sync::Arc, time::Duration};

use alloy_network::TransactionBuilder;
use alloy_primitives::{Address, Bytes};
use alloy_rpc_types_eth::TransactionRequest;
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::SolValue;
use async_trait::async_trait;
use http::{Request, Response, StatusCode};
use serde_json::Value;
use x402_core::{
    codec,
    siwx::{
        MemorySignInStore, RpcSmartWallets, SignInConfig, SignInStore, SignInStoreError,
        SignInWithX, SiwxPayload,
    },
    testing::{self, StandIn},
    Engine, Offer, Route, VerifiedPayment,
};
use x402_tests::anvil::{self, accounts, Anvil};

const ROUTE: &str = "/siwx/demo";
const CHAIN: &str = "eip155:84532";

/// One memory store the test and the engine share (the test records the
/// wallet's payment directly: paying from a contract wallet is not what is
/// tested here).
#[derive(Clone, Default)]
struct Shared(Arc<MemorySignInStore>);

#[async_trait]
impl SignInStore for Shared {
    async fn record_access(&self, r: &str, a: &str, e: u64) -> Result<(), SignInStoreError> {
        self.0.record_access(r, a, e).await
    }
    async fn has_access(&self, r: &str, a: &str, n: u64) -> Result<bool, SignInStoreError> {
        self.0.has_access(r, a, n).await
    }
    async fn use_nonce(&self, n: &str, e: u64) -> Result<bool, SignInStoreError> {
        self.0.use_nonce(n, e).await
    }
}

async fn deploy_wallet(anvil: &Anvil, owner: Address) -> Address {
    let deployer = anvil.provider(accounts::KEY_0).await;
    let path = anvil::js_dir().join("contracts/TestSiwxWallet.json");
    let artifact: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let mut code: Vec<u8> = artifact["bytecode"]
        .as_str()
        .unwrap()
        .parse::<Bytes>()
        .unwrap()
        .to_vec();
    code.extend(owner.abi_encode());
    let receipt = anvil::send(
        &deployer,
        TransactionRequest::default().with_deploy_code(Bytes::from(code)),
    )
    .await;
    assert!(receipt.status(), "wallet deployment reverted");
    receipt.contract_address.unwrap()
}

fn engine(store: Shared, wallets: Option<RpcSmartWallets>) -> Engine {
    let mut config = SignInConfig::new().store(store);
    if let Some(wallets) = wallets {
        config = config.smart_wallets(wallets);
    }
    Engine::builder(StandIn::new())
        .public_origin("https://api.example.com")
        .sign_in_with_x(config.deadline(Duration::from_secs(2)))
        .route(
            Route::get(ROUTE)
                .offer(Offer::exact(CHAIN, "$0.001", testing::PAY_TO))
                .sign_in_with_x(SignInWithX::new(Duration::from_secs(3600))),
        )
        .build()
        .unwrap()
}

/// A proof for `address`, the SIWE message signed (EIP-191) by `signer`.
async fn proof(engine: &Engine, address: Address, signer: &PrivateKeySigner) -> String {
    let challenge = testing::challenge(engine, Request::get(ROUTE).body(()).unwrap()).await;
    let declaration = serde_json::to_value(&challenge.extensions["sign-in-with-x"]).unwrap();
    let info = &declaration["info"];
    let mut v = info.clone();
    v["chainId"] = CHAIN.into();
    v["type"] = "eip191".into();
    v["address"] = address.to_checksum(None).into();
    v["signatureScheme"] = "eip1271".into();
    v["signature"] = "0x".into();
    let mut p: SiwxPayload = serde_json::from_value(v).unwrap();
    let s = |k: &str| info[k].as_str().unwrap().to_owned();
    let message = format!(
        "{} wants you to sign in with your Ethereum account:\n{}\n\n\nURI: {}\nVersion: 1\nChain ID: 84532\nNonce: {}\nIssued At: {}\nExpiration Time: {}\nResources:\n- {}",
        s("domain"),
        p.address,
        s("uri"),
        s("nonce"),
        s("issuedAt"),
        s("expirationTime"),
        s("uri"),
    );
    let signature = signer.sign_message_sync(message.as_bytes()).unwrap();
    p.signature = format!("0x{}", alloy_primitives::hex::encode(signature.as_bytes()));
    codec::encode(&p).unwrap()
}

async fn send(engine: &Engine, proof: String) -> Response<bytes::Bytes> {
    let request = Request::get(ROUTE)
        .header("sign-in-with-x", proof)
        .body(())
        .unwrap();
    testing::serve(engine, request, |r: Request<()>| async move {
        let payment = r.extensions().get::<VerifiedPayment>().cloned().unwrap();
        Response::new(payment.sign_in.map(|s| s.address).unwrap_or_default())
    })
    .await
}

fn error_of(response: &Response<bytes::Bytes>) -> String {
    let header = response.headers().get(codec::PAYMENT_REQUIRED).unwrap();
    let challenge: Value = codec::decode(header.as_bytes(), 1 << 20).unwrap();
    challenge["error"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smart_wallet_signs_in_through_eip1271_on_anvil() {
    let anvil = Anvil::start();
    let owner = PrivateKeySigner::from_slice(
        &alloy_primitives::hex::decode(&accounts::KEY_3[2..]).unwrap(),
    )
    .unwrap();
    let stranger = PrivateKeySigner::random();
    let wallet = deploy_wallet(&anvil, owner.address()).await;
    let unpaid_wallet = deploy_wallet(&anvil, owner.address()).await;

    let store = Shared::default();
    let far = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let key = format!("{wallet:#x}");
    store.record_access(ROUTE, &key, far).await.unwrap();
    let rpc = RpcSmartWallets::new().chain(CHAIN, &anvil.url);
    let engine = engine(store.clone(), Some(rpc));

    // The owner's signature, judged by the wallet contract: signed in.
    let ok = send(&engine, proof(&engine, wallet, &owner).await).await;
    assert_eq!(ok.status(), StatusCode::OK, "{:?}", ok.headers());
    assert_eq!(ok.body(), &wallet.to_checksum(None));

    // Someone else's signature: the wallet says no.
    let r = send(&engine, proof(&engine, wallet, &stranger).await).await;
    assert_eq!(r.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(error_of(&r), "invalid_siwx_signature");

    // A wallet that accepts the signature but never paid.
    let r = send(&engine, proof(&engine, unpaid_wallet, &owner).await).await;
    assert_eq!(error_of(&r), "invalid_siwx_not_paid");

    // An address with no code: `eth_call` answers nothing, refused.
    let eoa = anvil::address_of(accounts::KEY_2);
    store
        .record_access(ROUTE, &format!("{eoa:#x}"), far)
        .await
        .unwrap();
    let r = send(&engine, proof(&engine, eoa, &owner).await).await;
    assert_eq!(error_of(&r), "invalid_siwx_signature");

    // Without smart-wallet checks, the wallet's proof is refused.
    let plain = self::engine(store, None);
    let r = send(&plain, proof(&plain, wallet, &owner).await).await;
    assert_eq!(error_of(&r), "invalid_siwx_signature");
}
