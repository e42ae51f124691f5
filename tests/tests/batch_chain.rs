//! The `batch-settlement` scheme end to end on anvil (issue #21), before any
//! Rust seller: the OFFICIAL `@x402/evm` batch-settlement client
//! (`tests/js/batch/pay.mjs`) pays the OFFICIAL server
//! (`tests/js/batch/reference-server.mjs`), which verifies and settles
//! through the OFFICIAL facilitator (`tests/js/batch/facilitator.mjs`) on our
//! own escrow contract (`tests/js/contracts/TestBatchSettlement.sol`) at the
//! address the official code expects.
//!
//! - 50 calls, one deposit: after the official claimer runs, the seller's
//!   balance rose by exactly the sum charged, the channel's on-chain
//!   `totalClaimed` equals it, the buyer paid exactly that, the escrow keeps
//!   only the unclaimed rest, and the facilitator saw one deposit, one claim
//!   and one settle.
//! - A seller that signs its own claims (a receiverAuthorizer the
//!   facilitator does not know), dynamic pricing below the ceiling, and a
//!   cooperative refund of the rest: claim + refund in one transaction.
//! - Permit2 deposits (`extra.assetTransferMethod: "permit2"`): refused
//!   until the buyer approved Permit2, then the same one deposit and exact
//!   claim.
//! - A timed withdrawal: only the payer starts it, the seller still claims
//!   during the delay, and only the unclaimed rest leaves after it.
//! - The receiver claims and refunds directly (no authorizer signature);
//!   nobody else may; claims are cumulative and refunds capped.
//! - What the contract refuses, through the official facilitator: a claim
//!   above the voucher's ceiling, a voucher signature of another amount, a
//!   claim signed by the wrong authorizer, a replayed deposit; none moves a
//!   token.
//!
//! Needs `tests/js/node_modules` (`bash scripts/test-all.sh`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use alloy_primitives::{Bytes, U256};
use serde_json::{json, Value};
use x402_tests::batch_chain::{
    BatchChain, RefServerOptions, NETWORK, PRICE, SELLER_AUTHORIZER_KEY, WITHDRAW_DELAY,
};

/// The seller's (receiver's) key: anvil account 2.
const SELLER_KEY: &str = x402_tests::anvil::accounts::KEY_2;

/// The calls of the main run; at [`PRICE`] each, a deposit of `PRICE * CALLS`
/// pays them all.
const CALLS: usize = 50;

#[tokio::test(flavor = "multi_thread")]
async fn fifty_calls_with_one_deposit_are_claimed_and_settled_exactly() {
    let chain = BatchChain::start().await;
    let server = chain.reference_server(RefServerOptions::default()).await;
    let deposit = PRICE * CALLS as u64;
    // The facilitator offers batch-settlement (with its receiverAuthorizer)
    // and exact on the chain.
    let supported: Value = reqwest::get(format!("{}/supported", chain.facilitator_url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        supported["kinds"][0],
        json!({ "x402Version": 2, "scheme": "batch-settlement", "network": NETWORK,
                "extra": { "receiverAuthorizer": chain.receiver_authorizer.to_string() } }),
        "{supported}"
    );
    assert_eq!(supported["kinds"][1]["scheme"], "exact", "{supported}");
    assert_eq!(
        supported["signers"]["eip155:*"],
        json!([chain.relayer.to_string()]),
        "{supported}"
    );
    let seller_before = chain.balance_of(chain.seller).await;
    let buyer_before = chain.balance_of(chain.buyer).await;
    assert_eq!(seller_before, U256::ZERO);

    let pay = chain
        .pay(&server.route(), CALLS, &["--deposit", &deposit.to_string()])
        .await;
    pay.assert_ran();
    assert_eq!(pay.statuses(), vec![200; CALLS], "{}", pay.json);
    assert_eq!(pay.deposits(), 1);
    let types = pay.sent_types();
    assert_eq!(types.len(), CALLS, "one paid request per call: {types:?}");
    assert_eq!(types[0], "deposit");
    assert!(types[1..].iter().all(|t| t == "voucher"), "{types:?}");
    // Every call charged the price and the cumulative grew by it.
    for (i, call) in pay.calls().iter().enumerate() {
        let extra = &call["paymentResponse"]["extra"];
        assert_eq!(extra["chargedAmount"], json!(PRICE.to_string()), "call {i}");
        assert_eq!(
            extra["channelState"]["chargedCumulativeAmount"],
            json!((PRICE * (i as u64 + 1)).to_string()),
            "call {i}"
        );
    }
    let charged = pay.charged_total();
    assert_eq!(charged, u128::from(PRICE) * CALLS as u128);
    assert_eq!(server.handler_runs().await, CALLS as u64);

    // The deposit is on chain; nothing is claimed or paid out yet.
    let channel_id = pay.channel_id();
    let channel = chain.channel(channel_id).await;
    assert_eq!(channel.balance, u128::from(deposit));
    assert_eq!(channel.total_claimed, 0);
    assert_eq!(chain.balance_of(chain.escrow).await, U256::from(deposit));
    assert_eq!(
        chain.balance_of(chain.buyer).await,
        buyer_before - U256::from(deposit)
    );
    assert_eq!(chain.balance_of(chain.seller).await, U256::ZERO);

    // The official claimer: one claim of the one channel, then settle.
    let run = server.claim_and_settle().await;
    assert_eq!(run["claims"].as_array().unwrap().len(), 1, "{run}");
    assert_eq!(run["claims"][0]["vouchers"], 1, "{run}");
    assert!(run["settle"]["transaction"]
        .as_str()
        .unwrap()
        .starts_with("0x"));

    let channel = chain.channel(channel_id).await;
    assert_eq!(channel.total_claimed, charged, "on-chain totalClaimed");
    assert_eq!(channel.balance, u128::from(deposit));
    assert_eq!(
        chain.balance_of(chain.seller).await,
        seller_before + U256::from(charged),
        "the seller got exactly the sum charged"
    );
    assert_eq!(
        chain.receiver_totals(chain.seller).await,
        (charged, charged)
    );
    assert_eq!(
        chain.balance_of(chain.escrow).await,
        U256::from(u128::from(deposit) - charged)
    );
    assert_eq!(
        chain.balance_of(chain.buyer).await,
        buyer_before - U256::from(deposit)
    );
    assert_eq!(chain.refund_nonce(channel_id).await, U256::ZERO);

    // The facilitator: the deposit verified and settled once, one claim, one
    // settle; the 49 vouchers never reached it (checked by the official
    // server locally).
    assert_eq!(
        chain.facilitator_calls("verify batch-settlement/deposit"),
        1
    );
    assert_eq!(
        chain.facilitator_calls("settle batch-settlement/deposit"),
        1
    );
    assert_eq!(chain.facilitator_calls("settle batch-settlement/claim"), 1);
    assert_eq!(chain.facilitator_calls("settle batch-settlement/settle"), 1);
    assert_eq!(
        chain.facilitator_calls("verify batch-settlement/voucher"),
        0
    );

    // A second run has nothing to claim.
    let again = server.claim_and_settle().await;
    assert_eq!(again["claims"], json!([]), "{again}");
    assert_eq!(chain.balance_of(chain.seller).await, U256::from(charged));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_seller_signed_claim_with_dynamic_price_and_a_cooperative_refund() {
    let chain = BatchChain::start().await;
    let charge = 400_u64;
    let server = chain
        .reference_server(RefServerOptions {
            charge: Some(charge),
            authorizer_key: Some(SELLER_AUTHORIZER_KEY),
            ..RefServerOptions::default()
        })
        .await;
    let buyer_before = chain.balance_of(chain.buyer).await;
    let deposit = 10_000_u64;

    let pay = chain
        .pay(
            &server.route(),
            5,
            &["--deposit", &deposit.to_string(), "--refund", "all"],
        )
        .await;
    pay.assert_ran();
    assert_eq!(pay.statuses(), vec![200; 5], "{}", pay.json);
    assert_eq!(pay.deposits(), 1);
    let charged = pay.charged_total();
    assert_eq!(charged, 5 * u128::from(charge));

    // The refund claimed the outstanding voucher and returned the rest, in
    // one transaction signed by the seller's own authorizer.
    let refund = &pay.json["refund"];
    assert_eq!(refund["success"], true, "{refund}");
    let refunded = u128::from(deposit) - charged;
    assert_eq!(refund["amount"], json!(refunded.to_string()), "{refund}");
    let channel_id = pay.channel_id();
    let channel = chain.channel(channel_id).await;
    assert_eq!(channel.total_claimed, charged);
    assert_eq!(channel.balance, charged, "deposit minus the refund");
    assert_eq!(chain.refund_nonce(channel_id).await, U256::from(1));
    assert_eq!(
        chain.balance_of(chain.buyer).await,
        buyer_before - U256::from(charged),
        "the buyer paid exactly what was charged"
    );
    assert_eq!(chain.receiver_totals(chain.seller).await, (charged, 0));

    // Settling moves the claimed amount to the seller.
    let run = server.claim_and_settle().await;
    assert_eq!(
        run["claims"],
        json!([]),
        "already claimed by the refund: {run}"
    );
    let settle = settle_seller(&chain).await;
    assert_eq!(settle["success"], true, "{settle}");
    assert_eq!(settle["amount"], json!(charged.to_string()));
    assert_eq!(chain.balance_of(chain.seller).await, U256::from(charged));
    assert_eq!(chain.balance_of(chain.escrow).await, U256::ZERO);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_contract_refuses_bad_claims_and_a_replayed_deposit() {
    let chain = BatchChain::start().await;
    let server = chain.reference_server(RefServerOptions::default()).await;
    let pay = chain
        .pay(
            &server.route(),
            3,
            &["--deposit", "5000", "--record-headers"],
        )
        .await;
    pay.assert_ran();
    assert_eq!(pay.statuses(), vec![200; 3], "{}", pay.json);
    let channel_id = pay.channel_id();

    // The latest voucher, as the official server stored it.
    let channels = server.channels().await;
    let record = channels
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["channelId"]
                .as_str()
                .unwrap()
                .eq_ignore_ascii_case(&format!("{channel_id:#x}"))
        })
        .unwrap_or_else(|| panic!("no record of {channel_id:#x}: {channels}"))
        .clone();
    let config = record["channelConfig"].clone();
    let signed_max = record["signedMaxClaimable"].as_str().unwrap().to_owned();
    assert_eq!(signed_max, (3 * PRICE).to_string());
    let signature = record["signature"].as_str().unwrap().to_owned();

    let row = |max: &str, total: &str, signature: &str| {
        json!({ "voucher": { "channel": config, "maxClaimableAmount": max },
                "signature": signature, "totalClaimed": total })
    };
    // Above the voucher's ceiling.
    let above = facilitator_settle(
        &chain,
        json!({ "type": "claim", "claims": [row(&signed_max, "3001", &signature)] }),
    )
    .await;
    refused_by_contract(&above, "BatchSettlement: claim exceeds voucher ceiling");
    // The signature of 3000 presented as a voucher for 4000.
    let other = facilitator_settle(
        &chain,
        json!({ "type": "claim", "claims": [row("4000", "4000", &signature)] }),
    )
    .await;
    refused_by_contract(&other, "BatchSettlement: invalid voucher signature");
    // A ClaimBatch signature by someone who is not the receiverAuthorizer
    // (the buyer's voucher signature is a valid 65-byte signature of
    // something else).
    let forged = facilitator_settle(
        &chain,
        json!({ "type": "claim",
            "claims": [row(&signed_max, &signed_max, &signature)],
            "claimAuthorizerSignature": signature }),
    )
    .await;
    refused_by_contract(&forged, "BatchSettlement: invalid claim authorization");
    assert_eq!(chain.channel(channel_id).await.total_claimed, 0);

    // The deposit's PAYMENT-SIGNATURE again: its ERC-3009 authorization is
    // spent, the contract refuses, the balance stays.
    let payloads = pay.sent_payloads();
    assert_eq!(payloads.len(), 3);
    let deposit = &payloads[0];
    assert_eq!(deposit["payload"]["type"], "deposit");
    let replay = facilitator_request(&chain, "settle", deposit, &deposit["accepted"]).await;
    assert_eq!(replay["success"], false, "{replay}");
    assert_eq!(
        replay["errorReason"], "invalid_batch_settlement_evm_deposit_simulation_failed",
        "{replay}"
    );
    assert!(
        replay["errorMessage"]
            .as_str()
            .unwrap_or_default()
            .contains("TestUSDC: authorization is used or canceled"),
        "{replay}"
    );
    assert_eq!(chain.channel(channel_id).await.balance, 5000);
    assert_eq!(
        chain.facilitator_calls("settle batch-settlement/deposit"),
        2
    );

    // The facilitator's HTTP surface: a body that is not a request is a 400.
    let http = reqwest::Client::new();
    for (path, body) in [
        ("verify", "not json"),
        ("settle", "{}"),
        ("verify", r#"{"paymentPayload":1}"#),
    ] {
        let response = http
            .post(format!("{}/{path}", chain.facilitator_url))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{path} {body}");
    }

    // The real claim still goes through, for exactly what was charged.
    let run = server.claim_and_settle().await;
    assert_eq!(run["claims"][0]["vouchers"], 1, "{run}");
    assert_eq!(chain.channel(channel_id).await.total_claimed, 3000);
    assert_eq!(chain.balance_of(chain.seller).await, U256::from(3000));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_withdrawal_waits_for_the_delay_and_leaves_what_was_claimed_meanwhile() {
    let chain = BatchChain::start().await;
    let server = chain.reference_server(RefServerOptions::default()).await;
    let buyer_before = chain.balance_of(chain.buyer).await;
    let pay = chain.pay(&server.route(), 4, &["--deposit", "10000"]).await;
    pay.assert_ran();
    assert_eq!(pay.statuses(), vec![200; 4], "{}", pay.json);
    let channel_id = pay.channel_id();
    // The channel id as the contract computes it from the config the
    // official client builds.
    let config = chain.buyer_channel_config(chain.seller, chain.receiver_authorizer, None);
    assert_eq!(chain.channel_id_of(config.clone()).await, channel_id);

    // Only the payer may start a withdrawal, of at most the unclaimed escrow.
    assert!(
        !chain
            .initiate_withdraw(SELLER_AUTHORIZER_KEY, config.clone(), 10_000)
            .await
    );
    assert!(
        !chain
            .initiate_withdraw(chain.buyer_key, config.clone(), 10_001)
            .await
    );
    assert!(
        chain
            .initiate_withdraw(chain.buyer_key, config.clone(), 10_000)
            .await
    );
    let (amount, initiated_at) = chain.pending_withdrawal(channel_id).await;
    assert_eq!(amount, 10_000);
    assert!(initiated_at > 0);

    // During the delay the seller still claims what it earned.
    let run = server.claim_and_settle().await;
    assert_eq!(run["claims"][0]["vouchers"], 1, "{run}");
    assert_eq!(
        chain.channel(channel_id).await.total_claimed,
        4 * u128::from(PRICE)
    );

    // Not before the delay; after it, only the unclaimed rest leaves.
    assert!(
        !chain
            .finalize_withdraw(chain.buyer_key, config.clone())
            .await
    );
    chain.increase_time(WITHDRAW_DELAY).await;
    assert!(
        chain
            .finalize_withdraw(chain.buyer_key, config.clone())
            .await
    );
    let channel = chain.channel(channel_id).await;
    assert_eq!(channel.balance, 4 * u128::from(PRICE));
    assert_eq!(channel.total_claimed, 4 * u128::from(PRICE));
    assert_eq!(chain.pending_withdrawal(channel_id).await, (0, 0));
    assert_eq!(
        chain.balance_of(chain.buyer).await,
        buyer_before - U256::from(4 * PRICE)
    );
    assert_eq!(chain.balance_of(chain.seller).await, U256::from(4 * PRICE));
    assert_eq!(chain.balance_of(chain.escrow).await, U256::ZERO);
    // Nothing is pending any more.
    assert!(!chain.finalize_withdraw(chain.buyer_key, config).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn permit2_deposits_work_once_the_buyer_approved_permit2() {
    let chain = BatchChain::start().await;
    let server = chain
        .reference_server(RefServerOptions {
            transfer_method: Some("permit2"),
            ..RefServerOptions::default()
        })
        .await;
    let buyer_before = chain.balance_of(chain.buyer).await;

    // Without an allowance for Permit2 the deposit is refused before anything moves.
    let refused = chain.pay(&server.route(), 1, &["--deposit", "10000"]).await;
    refused.assert_ran();
    assert_eq!(refused.statuses(), vec![402], "{}", refused.json);
    assert_eq!(refused.sent_types(), vec!["deposit"]);
    assert!(
        chain.facilitator_log().iter().any(|l| l.contains(
            "verify batch-settlement/deposit -> isValid=false (invalid_batch_settlement_evm_permit2_allowance_required)"
        )),
        "{:?}",
        chain.facilitator_log()
    );
    assert_eq!(chain.balance_of(chain.buyer).await, buyer_before);
    assert_eq!(server.handler_runs().await, 0);

    chain.approve_permit2(chain.buyer_key).await;
    let pay = chain.pay(&server.route(), 5, &["--deposit", "10000"]).await;
    pay.assert_ran();
    assert_eq!(pay.statuses(), vec![200; 5], "{}", pay.json);
    assert_eq!(pay.deposits(), 1);
    let channel_id = pay.channel_id();
    assert_eq!(chain.channel(channel_id).await.balance, 10_000);
    assert_eq!(chain.balance_of(chain.escrow).await, U256::from(10_000));

    let run = server.claim_and_settle().await;
    assert_eq!(run["claims"][0]["vouchers"], 1, "{run}");
    let charged = pay.charged_total();
    assert_eq!(charged, 5 * u128::from(PRICE));
    assert_eq!(chain.channel(channel_id).await.total_claimed, charged);
    assert_eq!(chain.balance_of(chain.seller).await, U256::from(charged));
    assert_eq!(
        chain.balance_of(chain.buyer).await,
        buyer_before - U256::from(10_000)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_receiver_claims_and_refunds_directly_and_nobody_else_may() {
    let chain = BatchChain::start().await;
    let server = chain.reference_server(RefServerOptions::default()).await;
    let buyer_before = chain.balance_of(chain.buyer).await;
    let pay = chain
        .pay(
            &server.route(),
            2,
            &["--deposit", "6000", "--record-headers"],
        )
        .await;
    pay.assert_ran();
    assert_eq!(pay.statuses(), vec![200; 2], "{}", pay.json);
    let channel_id = pay.channel_id();
    let config = chain.buyer_channel_config(chain.seller, chain.receiver_authorizer, None);
    // The last voucher the client signed: 2000.
    let payloads = pay.sent_payloads();
    let last = &payloads[1]["payload"]["voucher"];
    assert_eq!(last["maxClaimableAmount"], "2000");
    let signature: Bytes = last["signature"].as_str().unwrap().parse().unwrap();

    // Only the receiver (or its authorizer) may claim without a ClaimBatch
    // signature, and not above the voucher.
    let stranger = SELLER_AUTHORIZER_KEY;
    assert!(
        !chain
            .claim_directly(stranger, config.clone(), 2000, signature.clone(), 2000)
            .await
    );
    assert!(
        !chain
            .claim_directly(SELLER_KEY, config.clone(), 2000, signature.clone(), 2001)
            .await
    );
    assert!(
        chain
            .claim_directly(SELLER_KEY, config.clone(), 2000, signature.clone(), 1500)
            .await
    );
    assert_eq!(chain.channel(channel_id).await.total_claimed, 1500);
    // Cumulative: the same voucher claims the rest, a lower total changes nothing.
    assert!(
        chain
            .claim_directly(SELLER_KEY, config.clone(), 2000, signature.clone(), 2000)
            .await
    );
    assert!(
        chain
            .claim_directly(SELLER_KEY, config.clone(), 2000, signature, 1000)
            .await
    );
    assert_eq!(chain.channel(channel_id).await.total_claimed, 2000);
    assert_eq!(chain.receiver_totals(chain.seller).await, (2000, 0));

    // Refunds: not by a stranger; the receiver's is capped at the unclaimed
    // rest, and each one moves the refund nonce.
    assert!(!chain.refund_directly(stranger, config.clone(), 1000).await);
    assert!(
        chain
            .refund_directly(SELLER_KEY, config.clone(), 1000)
            .await
    );
    assert_eq!(chain.refund_nonce(channel_id).await, U256::from(1));
    assert!(
        chain
            .refund_directly(SELLER_KEY, config.clone(), 1_000_000)
            .await
    );
    assert_eq!(chain.refund_nonce(channel_id).await, U256::from(2));
    let channel = chain.channel(channel_id).await;
    assert_eq!((channel.balance, channel.total_claimed), (2000, 2000));
    // Nothing left to refund: the nonce still moves, no token does.
    assert!(chain.refund_directly(SELLER_KEY, config, 1).await);
    assert_eq!(chain.refund_nonce(channel_id).await, U256::from(3));
    assert_eq!(
        chain.balance_of(chain.buyer).await,
        buyer_before - U256::from(2000)
    );
    assert_eq!(chain.balance_of(chain.escrow).await, U256::from(2000));
    assert_eq!(settle_seller(&chain).await["amount"], "2000");
    assert_eq!(chain.balance_of(chain.seller).await, U256::from(2000));
    assert_eq!(chain.balance_of(chain.escrow).await, U256::ZERO);
}

/// A `/settle` answer refused at the facilitator's simulation with the
/// contract's revert `reason`.
#[track_caller]
fn refused_by_contract(answer: &Value, reason: &str) {
    assert_eq!(answer["success"], false, "{answer}");
    assert_eq!(
        answer["errorReason"], "invalid_batch_settlement_evm_claim_simulation_failed",
        "{answer}"
    );
    let message = answer["errorMessage"].as_str().unwrap_or_default();
    assert!(message.contains(reason), "expected {reason:?} in {message}");
}

/// POSTs `{x402Version: 2, paymentPayload, paymentRequirements}` to the
/// facilitator's `/{path}`; its answer (always 200).
async fn facilitator_request(
    chain: &BatchChain,
    path: &str,
    payment: &Value,
    requirements: &Value,
) -> Value {
    let response = reqwest::Client::new()
        .post(format!("{}/{path}", chain.facilitator_url))
        .json(&json!({ "x402Version": 2, "paymentPayload": payment, "paymentRequirements": requirements }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// `/settle` of a server-authored payload (`claim`, `settle`) with the
/// requirements the official channel manager sends.
async fn facilitator_settle(chain: &BatchChain, payload: Value) -> Value {
    let requirements = json!({
        "scheme": "batch-settlement", "network": NETWORK,
        "asset": format!("{:#x}", chain.token), "amount": "0",
        "payTo": format!("{:#x}", chain.seller), "maxTimeoutSeconds": 0, "extra": {}
    });
    let payment = json!({ "x402Version": 2, "accepted": requirements, "payload": payload });
    facilitator_request(chain, "settle", &payment, &requirements).await
}

/// `/settle` of `{type: "settle", receiver: seller, token}`.
async fn settle_seller(chain: &BatchChain) -> Value {
    facilitator_settle(
        chain,
        json!({
            "type": "settle",
            "receiver": format!("{:#x}", chain.seller),
            "token": format!("{:#x}", chain.token),
        }),
    )
    .await
}
