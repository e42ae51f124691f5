//! The batch-settlement seller over Redis channel stores.

use super::*;
use crate::batch::RedisChannelStore;

async fn store(prefix: &str) -> Option<RedisChannelStore> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let unique = format!("test:batch:{prefix}:{}:", rand::random::<u64>());
    match RedisChannelStore::connect(&url).await {
        Ok(s) => Some(s.prefix(unique)),
        Err(e) => panic!("these tests need Redis at {url}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_on_one_channel_are_serialised_in_redis() {
    let store = store("concurrent").await.unwrap();
    let s = seller_with(
        Arc::new(SimChain::default()),
        BatchSettlement::new(store).authorizer(authorizer()),
    );
    concurrent_calls_are_serialised(s, b"concurrent-redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_over_one_redis_serialise_a_channel() {
    let store = store("instances").await.unwrap();
    let chain = Arc::new(SimChain::default());
    let batch = || BatchSettlement::new(store.clone()).authorizer(authorizer());
    let a = seller_with(chain.clone(), batch());
    // The second instance counts into the same handler counters.
    let b = Seller {
        runs: a.runs.clone(),
        inside: a.inside.clone(),
        most_inside: a.most_inside.clone(),
        delay: Duration::from_millis(40),
        ..seller_with(chain.clone(), batch())
    };
    let a = Arc::new(Seller {
        delay: Duration::from_millis(40),
        ..a
    });
    let b = Arc::new(b);
    let buyer = Buyer::new(b"two instances", &a.accepted().await);
    assert_eq!(
        a.call(&buyer.deposit(100_000, PRICE)).await.status(),
        StatusCode::OK
    );
    // Eight calls with the next voucher, alternating between instances.
    let next = buyer.voucher(2 * PRICE);
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            let h = next.clone();
            tokio::spawn(async move { s.call(&h).await.status() })
        })
        .collect();
    let mut ok = 0;
    for c in calls {
        if c.await.unwrap() == StatusCode::OK {
            ok += 1;
        }
    }
    assert_eq!(
        ok, 1,
        "one call charged the cumulative 2000, on either instance"
    );
    assert_eq!(
        a.most_inside.load(Ordering::SeqCst),
        1,
        "never two handlers at once"
    );
    assert_eq!(a.runs(), 2);
    // The next voucher works on the other instance.
    assert_eq!(
        b.call(&buyer.voucher(3 * PRICE)).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        a.call(&buyer.voucher(4 * PRICE)).await.status(),
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loses_no_charged_amount() {
    let store = store("restart").await.unwrap();
    let chain = Arc::new(SimChain::default());
    let first = seller_with(
        chain.clone(),
        BatchSettlement::new(store.clone()).authorizer(authorizer()),
    );
    let b = Buyer::new(b"restart", &first.accepted().await);
    assert_eq!(
        first.call(&b.deposit(50_000, PRICE)).await.status(),
        StatusCode::OK
    );
    for i in 2..=5u64 {
        assert_eq!(
            first.call(&b.voucher(i * PRICE)).await.status(),
            StatusCode::OK
        );
    }
    drop(first);
    // A new engine over the same Redis: the count goes on.
    let second = seller_with(
        chain.clone(),
        BatchSettlement::new(store.clone()).authorizer(authorizer()),
    );
    refused_with(
        &second.call(&b.voucher(5 * PRICE)).await,
        reason::CUMULATIVE_AMOUNT_MISMATCH,
    );
    for i in 6..=8u64 {
        assert_eq!(
            second.call(&b.voucher(i * PRICE)).await.status(),
            StatusCode::OK
        );
    }
    let claimer = Claimer::new(
        chain.clone(),
        second.engine.batch_settlement(),
        NETWORK,
        PAY_TO,
        TOKEN,
    );
    let report = claimer.claim_and_settle().await.unwrap();
    assert_eq!(report.claimed, U256::from(8_000));
    assert_eq!(*chain.receiver_balance.lock().unwrap(), U256::from(8_000));
    // A claimer on another instance finds nothing left to claim.
    let third = Claimer::new(
        chain.clone(),
        &BatchSettlement::new(store),
        NETWORK,
        PAY_TO,
        TOKEN,
    );
    assert_eq!(third.claim().await.unwrap().vouchers, 0);
    assert_eq!(chain.double_claims.load(Ordering::SeqCst), 0);
}
