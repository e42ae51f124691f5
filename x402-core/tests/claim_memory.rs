//! The in-memory claim store's cost per live claim, read from its own
//! accounting and from the process's resident memory, over a million claims.
//! (One test in its own binary, so that nothing else moves the RSS.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, SystemTime};

use x402_core::claim::{ClaimStore, Claimed, MemoryClaimStore};

/// `VmRSS` of this process, in bytes.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[tokio::test(flavor = "current_thread")]
async fn a_million_claims_take_at_most_64_bytes_each() {
    const CLAIMS: usize = 1_000_000;
    let store = MemoryClaimStore::new();
    let until = SystemTime::now() + Duration::from_secs(900);
    // Keys as long as real ones: x402:{network}:{asset}:{from}:{nonce}.
    let prefix = format!(
        "x402:eip155:8453:0x{}:0x{}:",
        "83".repeat(20),
        "8e".repeat(20)
    );
    // The nonce: 64 hex digits, the last 16 counting (written by hand: a
    // `format!` per claim would dominate the run in a debug build).
    let mut key = format!("{prefix}{}", "0".repeat(64)).into_bytes();
    let nonce_end = key.len();
    let before = rss_bytes();
    for i in 0..CLAIMS {
        let mut n = i as u64;
        for slot in key[nonce_end - 16..nonce_end].iter_mut().rev() {
            *slot = b"0123456789abcdef"[(n & 0xf) as usize];
            n >>= 4;
        }
        let text = std::str::from_utf8(&key).unwrap();
        assert_eq!(store.claim(text, until).await.unwrap(), Claimed::Claimed);
    }
    let key = String::from_utf8(key).unwrap();
    let after = rss_bytes();
    assert_eq!(store.len(), CLAIMS);
    // A copy is still refused: the digest names the key.
    assert_eq!(
        store.claim(&key, until).await.unwrap(),
        Claimed::AlreadyClaimed
    );

    let accounted = store.heap_bytes() as f64 / CLAIMS as f64;
    println!("accounting: {accounted:.1} bytes per claim");
    assert!(accounted <= 64.0, "{accounted:.1} bytes per claim");
    if let (Some(before), Some(after)) = (before, after) {
        let grown = after.saturating_sub(before) as f64 / CLAIMS as f64;
        println!("resident memory grew {grown:.1} bytes per claim");
        assert!(grown <= 64.0, "RSS grew {grown:.1} bytes per claim");
    }
}
