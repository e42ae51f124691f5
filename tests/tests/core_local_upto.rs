//! The in-process facilitator's `upto` scheme over Permit2 (and `exact` over
//! Permit2): on the dev ledger through the engine (`process` + `complete`
//! with a metered handler) and directly, and on a local anvil node with
//! minimal Permit2 and x402 proxy contracts placed at the canonical
//! addresses.
//!
//! Moved from x402-core's tests (anvil). Anvil and the contracts come from
//! `tests/js` (`bash scripts/test-all.sh`).

// The helpers are test code too, though not `#[test]` functions.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::sync::Arc;

use alloy_primitives::{address, Address, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Map, Value};
use x402_core::{
    codec,
    evm::{
        Permit2Authorization, Permit2Payload, Permit2Witness, TokenPermissions,
        EXACT_PERMIT2_PROXY, UPTO_PERMIT2_PROXY,
    },
    local::{reason, DevLedger, LocalFacilitator, DEV_LEDGER_SIGNER},
    money::AtomicAmount,
    proto::{
        v2, FacilitatorRequest, PaymentPayload, PaymentRequirements, SettleResponse, Version,
        X402Version,
    },
    route::{Asset, Offer, RequestView, Route},
    Completion, Decision, Engine, Facilitator,
};
use x402_tests::core_support::local::{now, payer, CHAIN_ID, NETWORK, PAYEE};

/// The token (Base Sepolia USDC).
const TOKEN: Address = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
/// The route's ceiling, in atomic units.
const CEILING: u64 = 2_000;
/// What each buyer is funded with.
const FUNDS: u64 = 10_000;

fn dev() -> (Arc<DevLedger>, Arc<LocalFacilitator>) {
    let ledger = Arc::new(DevLedger::new());
    let facilitator = LocalFacilitator::builder(ledger.clone())
        .network(NETWORK)
        .build()
        .unwrap();
    (ledger, Arc::new(facilitator))
}

fn funded(ledger: &DevLedger) -> PrivateKeySigner {
    let key = payer();
    ledger.fund(NETWORK, TOKEN, key.address(), FUNDS).unwrap();
    key
}

fn bal(ledger: &DevLedger, who: Address) -> U256 {
    ledger.balance(NETWORK, TOKEN, who)
}

/// A random Permit2 nonce (SDK clients send 256 random bits).
fn random_nonce() -> U256 {
    U256::from_be_bytes(payer().address().into_word().0)
}

/// What the buyer signs.
#[derive(Debug, Clone)]
struct Permit {
    chain_id: u64,
    token: Address,
    amount: u64,
    spender: Address,
    nonce: U256,
    deadline: u64,
    to: Address,
    facilitator: Option<Address>,
    valid_after: u64,
}

impl Permit {
    /// A valid `upto` permit of [`CEILING`] to [`PAYEE`], for the dev ledger's
    /// facilitator.
    fn upto() -> Self {
        let now = now();
        Self {
            chain_id: CHAIN_ID,
            token: TOKEN,
            amount: CEILING,
            spender: UPTO_PERMIT2_PROXY,
            nonce: random_nonce(),
            deadline: now + 300,
            to: PAYEE,
            facilitator: Some(DEV_LEDGER_SIGNER),
            valid_after: now - 600,
        }
    }

    fn authorization(&self, from: Address) -> Permit2Authorization {
        Permit2Authorization {
            from,
            permitted: TokenPermissions {
                token: self.token,
                amount: AtomicAmount::from(self.amount),
            },
            spender: self.spender,
            nonce: self.nonce,
            deadline: U256::from(self.deadline),
            witness: Permit2Witness {
                to: self.to,
                facilitator: self.facilitator,
                valid_after: U256::from(self.valid_after),
            },
        }
    }

    fn sign(&self, key: &PrivateKeySigner) -> Permit2Payload {
        let permit2_authorization = self.authorization(key.address());
        let signature = key
            .sign_hash_sync(&permit2_authorization.signing_hash(self.chain_id))
            .unwrap();
        Permit2Payload {
            signature: signature.as_bytes().to_vec().into(),
            permit2_authorization,
        }
    }
}

/// The v2 `upto` requirement a seller of [`CEILING`] sends.
fn upto_requirements() -> v2::PaymentRequirements {
    let mut extra = Map::new();
    extra.insert("name".into(), json!("USDC"));
    extra.insert("version".into(), json!("2"));
    extra.insert("assetTransferMethod".into(), json!("permit2"));
    extra.insert(
        "facilitatorAddress".into(),
        json!(DEV_LEDGER_SIGNER.to_checksum(None)),
    );
    v2::PaymentRequirements {
        scheme: "upto".into(),
        network: NETWORK.into(),
        amount: AtomicAmount::from(CEILING),
        asset: TOKEN.to_checksum(None),
        pay_to: PAYEE.to_checksum(None),
        max_timeout_seconds: 300,
        extra,
        other: Map::new(),
    }
}

/// A facilitator request for `payload` against `accepted`, with the
/// requirement's amount set to `amount` (the charge, at settle time).
fn request(
    accepted: &v2::PaymentRequirements,
    payload: &Permit2Payload,
    amount: u64,
) -> FacilitatorRequest {
    let payment = v2::PaymentPayload {
        x402_version: Version::<2>,
        resource: None,
        accepted: accepted.clone(),
        payload: serde_json::to_value(payload).unwrap(),
        extensions: None,
        other: Map::new(),
    };
    let mut requirements = accepted.clone();
    requirements.amount = AtomicAmount::from(amount);
    FacilitatorRequest::new(
        PaymentPayload::V2(payment),
        PaymentRequirements::V2(requirements),
    )
    .unwrap()
}

/// A seller: `GET /m` is metered, up to [`CEILING`] of [`TOKEN`].
fn engine(facilitator: Arc<LocalFacilitator>) -> Engine {
    engine_for(facilitator, TOKEN)
}

/// A seller: `GET /m` is metered, up to [`CEILING`] of `token`.
fn engine_for(facilitator: Arc<LocalFacilitator>, token: Address) -> Engine {
    Engine::builder_arc(facilitator)
        .route(
            Route::get("/m").offer(
                Offer::upto(NETWORK, CEILING.to_string(), PAYEE.to_checksum(None))
                    .asset(Asset::new(token.to_checksum(None), 6).eip712("USDC", "2")),
            ),
        )
        .build()
        .unwrap()
}

const URL: &str = "http://shop.example.test/m";

/// The challenge's only requirement.
async fn challenge(engine: &Engine) -> v2::PaymentRequirements {
    let (parts, ()) = http::Request::get(URL).body(()).unwrap().into_parts();
    let Decision::Respond(response) = engine.process(RequestView::from_parts(&parts)).await else {
        panic!("expected a 402 challenge");
    };
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    let required: v2::PaymentRequired = codec::decode(
        response.headers()[codec::PAYMENT_REQUIRED].as_bytes(),
        1 << 16,
    )
    .unwrap();
    assert_eq!(required.accepts.len(), 1);
    required.accepts[0].clone()
}

/// Sends a paid request; the engine's decision.
async fn present(
    engine: &Engine,
    accepted: &v2::PaymentRequirements,
    payload: &Permit2Payload,
) -> Decision {
    let payment = json!({
        "x402Version": 2,
        "accepted": accepted,
        "payload": payload,
    });
    let (parts, ()) = http::Request::get(URL)
        .header(codec::PAYMENT_SIGNATURE, codec::encode(&payment).unwrap())
        .body(())
        .unwrap()
        .into_parts();
    engine.process(RequestView::from_parts(&parts)).await
}

/// Pays, runs a handler that reports `usage` (none when `None`) and
/// completes with 200: the decoded receipt.
async fn pay_metered(
    engine: &Engine,
    accepted: &v2::PaymentRequirements,
    payload: &Permit2Payload,
    usage: Option<u64>,
) -> SettleResponse {
    let paid = match present(engine, accepted, payload).await {
        Decision::Paid(paid) => paid,
        other => panic!("expected a verified payment, got {other:?}"),
    };
    let meter = paid
        .payment()
        .meter
        .as_ref()
        .expect("an upto route has a meter");
    assert_eq!(meter.ceiling(), AtomicAmount::from(CEILING));
    if let Some(usage) = usage {
        meter.add(usage);
    }
    let mut headers = HeaderMap::new();
    let completion = paid.complete(StatusCode::OK, &mut headers).await;
    assert!(
        matches!(completion, Completion::Deliver),
        "expected the handler's response, got {completion:?}"
    );
    codec::decode(headers[codec::PAYMENT_RESPONSE].as_bytes(), 1 << 16).unwrap()
}

#[tokio::test]
async fn supported_lists_upto_with_the_facilitator_address() {
    let (_, facilitator) = dev();
    let supported = facilitator.supported().await.unwrap();
    let kind = supported
        .kind(X402Version::V2, "upto", NETWORK)
        .expect("upto is listed");
    assert_eq!(
        kind.extra.as_ref().unwrap()["facilitatorAddress"],
        json!(DEV_LEDGER_SIGNER.to_checksum(None))
    );
    assert!(supported
        .kind(X402Version::V1, "upto", "base-sepolia")
        .is_none());
    // The exact kinds are still there.
    assert!(supported.kind(X402Version::V2, "exact", NETWORK).is_some());
    assert!(supported
        .kind(X402Version::V1, "exact", "base-sepolia")
        .is_some());
}

#[tokio::test]
async fn challenge_carries_the_ceiling_and_the_facilitator_address() {
    let (_, facilitator) = dev();
    let accepted = challenge(&engine(facilitator)).await;
    assert_eq!(accepted.scheme, "upto");
    assert_eq!(accepted.amount, AtomicAmount::from(CEILING));
    assert_eq!(accepted.extra["assetTransferMethod"], json!("permit2"));
    assert_eq!(
        accepted.extra["facilitatorAddress"],
        json!(DEV_LEDGER_SIGNER.to_checksum(None))
    );
}

#[tokio::test]
async fn metered_call_settles_exactly_the_usage() {
    let (ledger, facilitator) = dev();
    let engine = engine(facilitator);
    let key = funded(&ledger);
    let accepted = challenge(&engine).await;
    let permit = Permit::upto();
    let payload = permit.sign(&key);

    // 37% of the ceiling.
    let receipt = pay_metered(&engine, &accepted, &payload, Some(CEILING * 37 / 100)).await;
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(receipt.amount, Some(AtomicAmount::from(740u64)));
    assert_eq!(
        receipt.transaction,
        DevLedger::permit2_transaction_id(NETWORK, key.address(), permit.nonce)
    );
    assert_eq!(
        receipt.payer.as_deref(),
        Some(&*key.address().to_checksum(None))
    );
    assert_eq!(bal(&ledger, key.address()), U256::from(FUNDS - 740));
    assert_eq!(bal(&ledger, PAYEE), U256::from(740u64));
    assert!(ledger.permit2_nonce_used(NETWORK, key.address(), permit.nonce));
}

#[tokio::test]
async fn usage_above_the_ceiling_is_charged_the_ceiling() {
    let (ledger, facilitator) = dev();
    let engine = engine(facilitator);
    let key = funded(&ledger);
    let accepted = challenge(&engine).await;
    let payload = Permit::upto().sign(&key);

    let receipt = pay_metered(&engine, &accepted, &payload, Some(CEILING * 3)).await;
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(receipt.amount, Some(AtomicAmount::from(CEILING)));
    assert_eq!(bal(&ledger, key.address()), U256::from(FUNDS - CEILING));
    assert_eq!(bal(&ledger, PAYEE), U256::from(CEILING));
}

#[tokio::test]
async fn zero_usage_moves_nothing() {
    let (ledger, facilitator) = dev();
    let engine = engine(facilitator);
    let key = funded(&ledger);
    let accepted = challenge(&engine).await;
    let permit = Permit::upto();
    let payload = permit.sign(&key);

    let receipt = pay_metered(&engine, &accepted, &payload, Some(0)).await;
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(receipt.amount, Some(AtomicAmount::ZERO));
    assert_eq!(receipt.transaction, "");
    assert_eq!(bal(&ledger, key.address()), U256::from(FUNDS));
    assert_eq!(bal(&ledger, PAYEE), U256::ZERO);
    assert!(!ledger.permit2_nonce_used(NETWORK, key.address(), permit.nonce));
}

#[tokio::test]
async fn direct_zero_charge_settles_without_a_transfer() {
    let (ledger, facilitator) = dev();
    let key = funded(&ledger);
    let permit = Permit::upto();
    let payload = permit.sign(&key);
    let receipt = facilitator
        .settle(&request(&upto_requirements(), &payload, 0))
        .await
        .unwrap();
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(receipt.transaction, "");
    assert_eq!(receipt.amount, Some(AtomicAmount::ZERO));
    assert_eq!(bal(&ledger, key.address()), U256::from(FUNDS));
    assert!(!ledger.permit2_nonce_used(NETWORK, key.address(), permit.nonce));
}

/// The refusals of a payment, as `(name, reason, permit)`; each is refused
/// at verify, so the engine answers 402 and nothing moves.
fn refusals() -> Vec<(&'static str, &'static str, Permit)> {
    let now = now();
    let valid = Permit::upto;
    vec![
        (
            "wrong spender (the exact proxy)",
            reason::PERMIT2_SPENDER,
            Permit {
                spender: EXACT_PERMIT2_PROXY,
                ..valid()
            },
        ),
        (
            "wrong facilitator in the witness",
            reason::UPTO_FACILITATOR_MISMATCH,
            Permit {
                facilitator: Some(address!("1111111111111111111111111111111111111111")),
                ..valid()
            },
        ),
        (
            "wrong recipient",
            reason::PERMIT2_RECIPIENT_MISMATCH,
            Permit {
                to: address!("2222222222222222222222222222222222222222"),
                ..valid()
            },
        ),
        (
            "expired deadline",
            reason::PERMIT2_DEADLINE_EXPIRED,
            Permit {
                deadline: now - 1,
                ..valid()
            },
        ),
        (
            "deadline within the 6 s margin",
            reason::PERMIT2_DEADLINE_EXPIRED,
            Permit {
                deadline: now + 3,
                ..valid()
            },
        ),
        (
            "not yet valid",
            reason::PERMIT2_NOT_YET_VALID,
            Permit {
                valid_after: now + 120,
                ..valid()
            },
        ),
        (
            "permitted amount below the ceiling",
            reason::PERMIT2_AMOUNT_MISMATCH,
            Permit {
                amount: CEILING - 1,
                ..valid()
            },
        ),
        (
            "permitted amount above the ceiling",
            reason::PERMIT2_AMOUNT_MISMATCH,
            Permit {
                amount: CEILING + 1,
                ..valid()
            },
        ),
        (
            "wrong token",
            reason::PERMIT2_TOKEN_MISMATCH,
            Permit {
                token: address!("3333333333333333333333333333333333333333"),
                ..valid()
            },
        ),
        (
            "signed for another chain",
            reason::PERMIT2_SIGNATURE,
            Permit {
                chain_id: 8453,
                ..valid()
            },
        ),
    ]
}

#[tokio::test]
async fn refusals_have_their_reason_and_move_nothing() {
    let (ledger, facilitator) = dev();
    let engine = engine(facilitator.clone());
    let accepted = challenge(&engine).await;
    for (name, expected, permit) in refusals() {
        let key = funded(&ledger);
        let payload = permit.sign(&key);

        let verdict = facilitator
            .verify(&request(&accepted, &payload, CEILING))
            .await
            .unwrap();
        assert_eq!(
            verdict.invalid_reason.as_deref(),
            Some(expected),
            "{name}: {verdict:?}"
        );
        assert_eq!(
            verdict.payer.as_deref(),
            Some(&*key.address().to_checksum(None)),
            "{name}"
        );
        match present(&engine, &accepted, &payload).await {
            Decision::Respond(response) => {
                assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED, "{name}");
            }
            other => panic!("{name}: expected a 402, got {other:?}"),
        }
        // Settling directly (with a charge within the ceiling) is refused with
        // the same reason.
        let receipt = facilitator
            .settle(&request(&accepted, &payload, 740))
            .await
            .unwrap();
        assert!(!receipt.success, "{name}: {receipt:?}");
        assert_eq!(receipt.error_reason.as_deref(), Some(expected), "{name}");
        assert_eq!(bal(&ledger, key.address()), U256::from(FUNDS), "{name}");
    }
    assert_eq!(bal(&ledger, PAYEE), U256::ZERO);
}

#[tokio::test]
async fn bad_signature_is_refused_and_moves_nothing() {
    let (ledger, facilitator) = dev();
    let engine = engine(facilitator.clone());
    let accepted = challenge(&engine).await;
    let key = funded(&ledger);
    let cases: Vec<(&str, Permit2Payload)> = {
        // Signed by someone else than `from`.
        let mut forged = Permit::upto().sign(&payer());
        forged.permit2_authorization.from = key.address();
        // A valid signature over other fields (the amount changed after signing).
        let mut tampered = Permit::upto().sign(&key);
        tampered.permit2_authorization.witness.valid_after = U256::ZERO;
        // Garbage of the right length, and of a smart wallet's length.
        let mut garbage = Permit::upto().sign(&key);
        garbage.signature = vec![0x11; 65].into();
        let mut long = Permit::upto().sign(&key);
        let mut bytes = long.signature.to_vec();
        bytes.extend_from_slice(&[0u8; 32]);
        long.signature = bytes.into();
        vec![
            ("forged", forged),
            ("tampered", tampered),
            ("garbage", garbage),
            ("too long", long),
        ]
    };
    for (name, payload) in cases {
        let verdict = facilitator
            .verify(&request(&accepted, &payload, CEILING))
            .await
            .unwrap();
        assert_eq!(
            verdict.invalid_reason.as_deref(),
            Some(reason::PERMIT2_SIGNATURE),
            "{name}: {verdict:?}"
        );
        let Decision::Respond(response) = present(&engine, &accepted, &payload).await else {
            panic!("{name}: expected a 402");
        };
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED, "{name}");
        let receipt = facilitator
            .settle(&request(&accepted, &payload, 740))
            .await
            .unwrap();
        assert_eq!(
            receipt.error_reason.as_deref(),
            Some(reason::PERMIT2_SIGNATURE),
            "{name}"
        );
    }
    assert_eq!(bal(&ledger, key.address()), U256::from(FUNDS));
    assert_eq!(bal(&ledger, PAYEE), U256::ZERO);
}

#[tokio::test]
async fn replayed_nonce_after_settlement_is_refused() {
    let (ledger, facilitator) = dev();
    let engine = engine(facilitator.clone());
    let key = funded(&ledger);
    let accepted = challenge(&engine).await;
    let permit = Permit::upto();
    let payload = permit.sign(&key);

    let receipt = pay_metered(&engine, &accepted, &payload, Some(740)).await;
    assert!(receipt.success, "{receipt:?}");
    let after_first = bal(&ledger, key.address());
    assert_eq!(after_first, U256::from(FUNDS - 740));

    // The same permit again: through the engine, and directly.
    match present(&engine, &accepted, &payload).await {
        Decision::Respond(response) => {
            assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
        }
        other => panic!("expected a 402, got {other:?}"),
    }
    let verdict = facilitator
        .verify(&request(&accepted, &payload, CEILING))
        .await
        .unwrap();
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some(reason::PERMIT2_INVALID_NONCE)
    );
    let receipt = facilitator
        .settle(&request(&accepted, &payload, 740))
        .await
        .unwrap();
    assert_eq!(
        receipt.error_reason.as_deref(),
        Some(reason::PERMIT2_INVALID_NONCE)
    );

    // Another permit with the same nonce for another token is spent too:
    // Permit2 nonces are per owner, across tokens.
    let other_token = address!("4444444444444444444444444444444444444444");
    ledger
        .fund(NETWORK, other_token, key.address(), FUNDS)
        .unwrap();
    let mut other = accepted.clone();
    other.asset = other_token.to_checksum(None);
    let same_nonce = Permit {
        token: other_token,
        nonce: permit.nonce,
        ..Permit::upto()
    }
    .sign(&key);
    let verdict = facilitator
        .verify(&request_for(&other, &same_nonce))
        .await
        .unwrap();
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some(reason::PERMIT2_INVALID_NONCE)
    );

    assert_eq!(bal(&ledger, key.address()), after_first);
    assert_eq!(bal(&ledger, PAYEE), U256::from(740u64));
}

fn request_for(accepted: &v2::PaymentRequirements, payload: &Permit2Payload) -> FacilitatorRequest {
    request(accepted, payload, accepted.amount.get().to::<u64>())
}

#[tokio::test]
async fn settle_above_the_permitted_amount_is_refused() {
    let (ledger, facilitator) = dev();
    let key = funded(&ledger);
    let payload = Permit::upto().sign(&key);
    let accepted = upto_requirements();

    let receipt = facilitator
        .settle(&request(&accepted, &payload, CEILING + 1))
        .await
        .unwrap();
    assert!(!receipt.success);
    assert_eq!(
        receipt.error_reason.as_deref(),
        Some(reason::UPTO_SETTLEMENT_EXCEEDS_AMOUNT)
    );
    assert_eq!(
        receipt.payer.as_deref(),
        Some(&*key.address().to_checksum(None))
    );
    assert_eq!(bal(&ledger, key.address()), U256::from(FUNDS));

    // The charge equal to the permit settles, once.
    let receipt = facilitator
        .settle(&request(&accepted, &payload, CEILING))
        .await
        .unwrap();
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(receipt.amount, Some(AtomicAmount::from(CEILING)));
    assert_eq!(bal(&ledger, key.address()), U256::from(FUNDS - CEILING));
}

#[tokio::test]
async fn insufficient_balance_is_refused() {
    let (ledger, facilitator) = dev();
    let key = payer();
    ledger.fund(NETWORK, TOKEN, key.address(), 500u64).unwrap();
    let payload = Permit::upto().sign(&key);
    let accepted = upto_requirements();

    // The ceiling is above the balance: invalid at verify.
    let verdict = facilitator
        .verify(&request(&accepted, &payload, CEILING))
        .await
        .unwrap();
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some(reason::PERMIT2_INSUFFICIENT_BALANCE)
    );
    // A charge above the balance is refused at settle; one within it settles.
    let receipt = facilitator
        .settle(&request(&accepted, &payload, 740))
        .await
        .unwrap();
    assert_eq!(
        receipt.error_reason.as_deref(),
        Some(reason::PERMIT2_INSUFFICIENT_BALANCE)
    );
    let receipt = facilitator
        .settle(&request(&accepted, &payload, 500))
        .await
        .unwrap();
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(bal(&ledger, key.address()), U256::ZERO);
    assert_eq!(bal(&ledger, PAYEE), U256::from(500u64));
}

#[tokio::test]
async fn request_shape_refusals() {
    let (ledger, facilitator) = dev();
    let key = funded(&ledger);
    let payload = Permit::upto().sign(&key);
    let accepted = upto_requirements();

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
    let with = |f: &dyn Fn(&mut v2::PaymentRequirements, &mut v2::PaymentPayload)| {
        let mut request = request(&accepted, &payload, CEILING);
        if let (PaymentRequirements::V2(r), PaymentPayload::V2(p)) = (
            std::sync::Arc::make_mut(&mut request.payment_requirements),
            &mut request.payment_payload,
        ) {
            f(r, p);
        }
        request
    };

    // The payment is exact against an upto requirement.
    check(
        with(&|_, p| p.accepted.scheme = "exact".into()),
        reason::UPTO_SCHEME,
    )
    .await;
    check(
        with(&|_, p| p.accepted.network = "eip155:1".into()),
        reason::UPTO_NETWORK_MISMATCH,
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
        with(&|_, p| p.payload = json!({"signature": "0x"})),
        reason::UPTO_PAYLOAD,
    )
    .await;
    check(
        with(&|_, p| p.payload["permit2Authorization"]["nonce"] = json!(5)),
        reason::UPTO_PAYLOAD,
    )
    .await;
    // An exact-style witness (no facilitator) on an upto requirement.
    check(
        with(&|_, p| {
            p.payload["permit2Authorization"]["witness"]
                .as_object_mut()
                .unwrap()
                .remove("facilitator");
        }),
        reason::UPTO_PAYLOAD,
    )
    .await;
    // An EIP-3009 payload: upto signs a ceiling, EIP-3009 an exact value.
    check(
        with(&|_, p| {
            p.payload = json!({
                "signature": format!("0x{}", "11".repeat(65)),
                "authorization": {
                    "from": key.address(), "to": PAYEE, "value": "2000",
                    "validAfter": "0", "validBefore": "99999999999",
                    "nonce": format!("0x{}", "ab".repeat(32)),
                }
            });
        }),
        reason::UPTO_PAYLOAD,
    )
    .await;
    check(
        with(&|r, _| r.pay_to = "nope".into()),
        reason::INVALID_REQUIREMENTS,
    )
    .await;
    assert_eq!(bal(&ledger, key.address()), U256::from(FUNDS));
}

#[tokio::test]
async fn concurrent_settles_of_one_permit_succeed_once() {
    let (ledger, facilitator) = dev();
    let key = funded(&ledger);
    let payload = Permit::upto().sign(&key);
    let request = Arc::new(request(&upto_requirements(), &payload, 740));
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (facilitator, request) = (facilitator.clone(), request.clone());
            tokio::spawn(async move { facilitator.settle(&request).await.unwrap() })
        })
        .collect();
    let mut successes = 0;
    for task in tasks {
        let receipt = task.await.unwrap();
        if receipt.success {
            successes += 1;
        } else {
            assert_eq!(
                receipt.error_reason.as_deref(),
                Some(reason::PERMIT2_INVALID_NONCE)
            );
        }
    }
    assert_eq!(successes, 1);
    assert_eq!(bal(&ledger, key.address()), U256::from(FUNDS - 740));
    assert_eq!(bal(&ledger, PAYEE), U256::from(740u64));
}

/// The v2 `exact` requirement of [`CEILING`] over Permit2.
fn exact_permit2_requirements() -> v2::PaymentRequirements {
    let mut r = upto_requirements();
    r.scheme = "exact".into();
    r.extra.remove("facilitatorAddress");
    r
}

#[tokio::test]
async fn exact_over_permit2_moves_exactly_the_price() {
    let (ledger, facilitator) = dev();
    let key = funded(&ledger);
    let accepted = exact_permit2_requirements();
    let permit = Permit {
        spender: EXACT_PERMIT2_PROXY,
        facilitator: None,
        ..Permit::upto()
    };
    let payload = permit.sign(&key);
    let paid = request_for(&accepted, &payload);

    let verdict = facilitator.verify(&paid).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    let receipt = facilitator.settle(&paid).await.unwrap();
    assert!(receipt.success, "{receipt:?}");
    assert_eq!(receipt.amount, Some(AtomicAmount::from(CEILING)));
    assert_eq!(bal(&ledger, key.address()), U256::from(FUNDS - CEILING));
    assert_eq!(bal(&ledger, PAYEE), U256::from(CEILING));
    let again = facilitator.settle(&paid).await.unwrap();
    assert_eq!(
        again.error_reason.as_deref(),
        Some(reason::PERMIT2_INVALID_NONCE)
    );

    // Refusals specific to exact: the upto proxy, an upto witness, a price
    // other than the permitted amount (also at settle time).
    for (name, permit, amount, expected) in [
        (
            "upto proxy",
            Permit {
                spender: UPTO_PERMIT2_PROXY,
                facilitator: None,
                ..Permit::upto()
            },
            CEILING,
            reason::PERMIT2_SPENDER,
        ),
        (
            "upto witness",
            Permit {
                spender: EXACT_PERMIT2_PROXY,
                ..Permit::upto()
            },
            CEILING,
            reason::PAYLOAD,
        ),
        (
            "less than permitted",
            Permit {
                spender: EXACT_PERMIT2_PROXY,
                facilitator: None,
                ..Permit::upto()
            },
            740,
            reason::PERMIT2_AMOUNT_MISMATCH,
        ),
    ] {
        let payload = permit.sign(&key);
        let request = request(&accepted, &payload, amount);
        let verdict = facilitator.verify(&request).await.unwrap();
        assert_eq!(verdict.invalid_reason.as_deref(), Some(expected), "{name}");
        let receipt = facilitator.settle(&request).await.unwrap();
        assert_eq!(receipt.error_reason.as_deref(), Some(expected), "{name}");
    }
    assert_eq!(bal(&ledger, key.address()), U256::from(FUNDS - CEILING));
}

#[tokio::test]
async fn supported_kinds_parse_as_json() {
    let (_, facilitator) = dev();
    let supported: Value = serde_json::to_value(facilitator.supported().await.unwrap()).unwrap();
    let upto = supported["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["scheme"] == "upto")
        .unwrap();
    assert_eq!(upto["x402Version"], 2);
    assert_eq!(upto["network"], NETWORK);
}

/// The same flows on a local anvil node, with our minimal Permit2 and x402
/// proxies (`tests/js/contracts/TestPermit2.sol`) placed at the canonical
/// addresses with `anvil_setCode`.
mod chain {
    use std::borrow::Cow;

    use alloy_network::TransactionBuilder;
    use alloy_primitives::{Bytes, B256};
    use alloy_provider::{DynProvider, Provider};
    use alloy_rpc_types_eth::TransactionRequest;
    use alloy_sol_types::SolCall;
    use x402_core::{evm::PERMIT2_ADDRESS, local::ChainLedger};

    use super::*;
    use x402_tests::{
        anvil::{self, Anvil},
        core_support::local::{DEPLOYER_KEY, FACILITATOR_KEY},
    };

    alloy_sol_types::sol! {
        function approve(address spender, uint256 value) external returns (bool);

        struct TokenPermissions {
            address token;
            uint256 amount;
        }

        struct PermitTransferFrom {
            TokenPermissions permitted;
            uint256 nonce;
            uint256 deadline;
        }

        struct UptoWitness {
            address to;
            address facilitator;
            uint256 validAfter;
        }

        function settle(
            PermitTransferFrom permit,
            uint256 amount,
            address owner,
            UptoWitness witness,
            bytes signature
        ) external;
    }

    /// `eth_call`s the upto proxy's `settle` for `payload` from `caller`,
    /// with `witness.to` replaced by `to`: the revert message, if any.
    async fn call_upto_proxy(
        provider: &DynProvider,
        caller: Address,
        payload: &Permit2Payload,
        amount: u64,
        to: Address,
    ) -> Option<String> {
        let auth = &payload.permit2_authorization;
        let call = settleCall {
            permit: PermitTransferFrom {
                permitted: TokenPermissions {
                    token: auth.permitted.token,
                    amount: auth.permitted.amount.get(),
                },
                nonce: auth.nonce,
                deadline: auth.deadline,
            },
            amount: U256::from(amount),
            owner: auth.from,
            witness: UptoWitness {
                to,
                facilitator: auth.witness.facilitator.unwrap(),
                validAfter: auth.witness.valid_after,
            },
            signature: payload.signature.clone(),
        };
        let request = TransactionRequest::default()
            .with_from(caller)
            .with_to(UPTO_PERMIT2_PROXY)
            .with_input(Bytes::from(call.abi_encode()));
        match provider.call(request).await {
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// The runtime code of a contract from its committed artifact.
    fn runtime_code(contract: &str) -> Bytes {
        let path = x402_tests::anvil::js_dir().join(format!("contracts/{contract}.json"));
        let artifact: Value = serde_json::from_slice(
            &std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display())),
        )
        .unwrap();
        artifact["deployedBytecode"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    async fn set_code(provider: &DynProvider, at: Address, code: Bytes) {
        provider
            .raw_request::<_, ()>(Cow::Borrowed("anvil_setCode"), (at, code))
            .await
            .unwrap();
    }

    struct Chain {
        anvil: Anvil,
        url: String,
        deployer: DynProvider,
        token: Address,
    }

    impl Chain {
        /// anvil with TestUSDC deployed; Permit2 and the proxies placed when
        /// `permit2` is set.
        async fn start(permit2: bool) -> Self {
            let anvil = Anvil::start();
            let deployer = anvil.provider(DEPLOYER_KEY).await;
            if permit2 {
                set_code(&deployer, PERMIT2_ADDRESS, runtime_code("TestPermit2")).await;
                set_code(
                    &deployer,
                    UPTO_PERMIT2_PROXY,
                    runtime_code("TestX402UptoPermit2Proxy"),
                )
                .await;
                set_code(
                    &deployer,
                    EXACT_PERMIT2_PROXY,
                    runtime_code("TestX402ExactPermit2Proxy"),
                )
                .await;
            }
            let token = anvil::deploy_test_usdc(&deployer, "USDC", "2").await;
            Self {
                url: anvil.url.clone(),
                anvil,
                deployer,
                token,
            }
        }

        async fn facilitator(&self) -> (Address, Arc<LocalFacilitator>) {
            let ledger = ChainLedger::new(&self.url, FACILITATOR_KEY).await.unwrap();
            let signer = x402_core::local::Ledger::signer(&ledger);
            let facilitator = LocalFacilitator::builder(ledger)
                .network(NETWORK)
                .build()
                .unwrap();
            (signer, Arc::new(facilitator))
        }

        /// A funded payer with gas; approves Permit2 when `approve` is set.
        async fn payer(&self, approve: bool) -> PrivateKeySigner {
            let key = payer();
            self.deployer
                .raw_request::<_, ()>(
                    Cow::Borrowed("anvil_setBalance"),
                    (key.address(), U256::from(10u64).pow(U256::from(18u8))),
                )
                .await
                .unwrap();
            anvil::mint(&self.deployer, self.token, key.address(), FUNDS).await;
            if approve {
                let provider = self.anvil.provider(&format!("{:#x}", key.to_bytes())).await;
                let call = approveCall {
                    spender: PERMIT2_ADDRESS,
                    value: U256::MAX,
                };
                let receipt = anvil::send(
                    &provider,
                    TransactionRequest::default()
                        .with_to(self.token)
                        .with_input(Bytes::from(call.abi_encode())),
                )
                .await;
                assert!(receipt.status(), "approve reverted");
            }
            key
        }

        async fn balance(&self, who: Address) -> U256 {
            anvil::balance_of(&self.deployer, self.token, who).await
        }
    }

    #[tokio::test]
    async fn anvil_upto_settles_the_metered_charge_through_the_proxy() {
        let chain = Chain::start(true).await;
        let (signer, facilitator) = chain.facilitator().await;
        let supported = facilitator.supported().await.unwrap();
        let kind = supported.kind(X402Version::V2, "upto", NETWORK).unwrap();
        assert_eq!(
            kind.extra.as_ref().unwrap()["facilitatorAddress"],
            json!(signer.to_checksum(None))
        );

        let engine = engine_for(facilitator.clone(), chain.token);
        let accepted = challenge(&engine).await;
        assert_eq!(
            accepted.extra["facilitatorAddress"],
            json!(signer.to_checksum(None))
        );
        let key = chain.payer(true).await;
        let permit = Permit {
            token: chain.token,
            facilitator: Some(signer),
            ..Permit::upto()
        };
        let payload = permit.sign(&key);

        let receipt = pay_metered(&engine, &accepted, &payload, Some(740)).await;
        assert!(receipt.success, "{receipt:?}");
        assert_eq!(receipt.amount, Some(AtomicAmount::from(740u64)));
        let hash: B256 = receipt.transaction.parse().unwrap();
        let mined = chain
            .deployer
            .get_transaction_receipt(hash)
            .await
            .unwrap()
            .unwrap();
        assert!(mined.status());
        assert_eq!(mined.to, Some(UPTO_PERMIT2_PROXY));
        assert_eq!(chain.balance(key.address()).await, U256::from(FUNDS - 740));
        assert_eq!(chain.balance(PAYEE).await, U256::from(740u64));

        // The nonce is spent on Permit2: a replay is refused, nothing moves.
        let verdict = facilitator
            .verify(&request(&accepted, &payload, CEILING))
            .await
            .unwrap();
        assert_eq!(
            verdict.invalid_reason.as_deref(),
            Some(reason::PERMIT2_INVALID_NONCE)
        );
        let replay = facilitator
            .settle(&request(&accepted, &payload, 740))
            .await
            .unwrap();
        assert_eq!(
            replay.error_reason.as_deref(),
            Some(reason::PERMIT2_INVALID_NONCE)
        );

        // Over the ceiling: charged the ceiling.
        let payload = Permit {
            token: chain.token,
            facilitator: Some(signer),
            ..Permit::upto()
        }
        .sign(&key);
        let receipt = pay_metered(&engine, &accepted, &payload, Some(CEILING * 2)).await;
        assert!(receipt.success, "{receipt:?}");
        assert_eq!(receipt.amount, Some(AtomicAmount::from(CEILING)));

        // Zero usage: no transaction, nothing moves.
        let payload = Permit {
            token: chain.token,
            facilitator: Some(signer),
            ..Permit::upto()
        }
        .sign(&key);
        let receipt = pay_metered(&engine, &accepted, &payload, Some(0)).await;
        assert!(receipt.success, "{receipt:?}");
        assert_eq!(receipt.transaction, "");

        // Above the permitted amount, directly: refused before any transaction.
        let receipt = facilitator
            .settle(&request(&accepted, &payload, CEILING + 1))
            .await
            .unwrap();
        assert_eq!(
            receipt.error_reason.as_deref(),
            Some(reason::UPTO_SETTLEMENT_EXCEEDS_AMOUNT)
        );

        // Another facilitator in the witness: refused.
        let other = Permit {
            token: chain.token,
            facilitator: Some(address!("1111111111111111111111111111111111111111")),
            ..Permit::upto()
        }
        .sign(&key);
        let verdict = facilitator
            .verify(&request(&accepted, &other, CEILING))
            .await
            .unwrap();
        assert_eq!(
            verdict.invalid_reason.as_deref(),
            Some(reason::UPTO_FACILITATOR_MISMATCH)
        );

        assert_eq!(
            chain.balance(key.address()).await,
            U256::from(FUNDS - 740 - CEILING)
        );
        assert_eq!(chain.balance(PAYEE).await, U256::from(740 + CEILING));
    }

    #[tokio::test]
    async fn anvil_permit2_refusals_and_exact_over_permit2() {
        let chain = Chain::start(true).await;
        let (signer, facilitator) = chain.facilitator().await;
        let mut accepted = upto_requirements();
        accepted.asset = chain.token.to_checksum(None);
        accepted
            .extra
            .insert("facilitatorAddress".into(), json!(signer.to_checksum(None)));

        // No approval to Permit2.
        let unapproved = chain.payer(false).await;
        let payload = Permit {
            token: chain.token,
            facilitator: Some(signer),
            ..Permit::upto()
        }
        .sign(&unapproved);
        let verdict = facilitator
            .verify(&request(&accepted, &payload, CEILING))
            .await
            .unwrap();
        assert_eq!(
            verdict.invalid_reason.as_deref(),
            Some(reason::PERMIT2_ALLOWANCE_REQUIRED)
        );

        // Exact over Permit2 moves exactly the price.
        let key = chain.payer(true).await;
        let mut exact = accepted.clone();
        exact.scheme = "exact".into();
        exact.extra.remove("facilitatorAddress");
        let payload = Permit {
            token: chain.token,
            spender: EXACT_PERMIT2_PROXY,
            facilitator: None,
            ..Permit::upto()
        }
        .sign(&key);
        let paid = request(&exact, &payload, CEILING);
        let verdict = facilitator.verify(&paid).await.unwrap();
        assert!(verdict.is_valid, "{verdict:?}");
        let receipt = facilitator.settle(&paid).await.unwrap();
        assert!(receipt.success, "{receipt:?}");
        assert_eq!(
            chain.balance(key.address()).await,
            U256::from(FUNDS - CEILING)
        );
        assert_eq!(chain.balance(PAYEE).await, U256::from(CEILING));
        assert_eq!(chain.balance(unapproved.address()).await, U256::from(FUNDS));
    }

    #[tokio::test]
    async fn anvil_contracts_enforce_the_permit() {
        let chain = Chain::start(true).await;
        let (signer, _) = chain.facilitator().await;
        let key = chain.payer(true).await;
        let payload = Permit {
            token: chain.token,
            facilitator: Some(signer),
            ..Permit::upto()
        }
        .sign(&key);
        let p = &chain.deployer;

        // The permit as signed, from the witness's facilitator: accepted.
        assert_eq!(call_upto_proxy(p, signer, &payload, 740, PAYEE).await, None);
        // From anyone else: refused by the proxy.
        let other = key.address();
        let err = call_upto_proxy(p, other, &payload, 740, PAYEE)
            .await
            .unwrap();
        assert!(err.contains("unauthorized facilitator"), "{err}");
        // Above the permitted amount: refused by the proxy.
        let err = call_upto_proxy(p, signer, &payload, CEILING + 1, PAYEE)
            .await
            .unwrap();
        assert!(err.contains("amount exceeds permitted"), "{err}");
        // Another recipient than signed: the witness hash differs, so Permit2
        // recovers another signer.
        let thief = address!("5555555555555555555555555555555555555555");
        let err = call_upto_proxy(p, signer, &payload, 740, thief)
            .await
            .unwrap();
        assert!(err.contains("invalid signer"), "{err}");
        assert_eq!(chain.balance(key.address()).await, U256::from(FUNDS));
    }

    #[tokio::test]
    async fn anvil_without_permit2_lists_no_upto() {
        let chain = Chain::start(false).await;
        let (_, facilitator) = chain.facilitator().await;
        let supported = facilitator.supported().await.unwrap();
        assert!(supported.kind(X402Version::V2, "upto", NETWORK).is_none());
        assert!(supported.kind(X402Version::V2, "exact", NETWORK).is_some());
    }
}
