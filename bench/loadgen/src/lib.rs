//! Shared by the bench server and the load generator: the payers both sides
//! derive from one seed (the server funds them on its dev ledger, the
//! generator signs with them), and where the server says it listens.

use alloy_primitives::{keccak256, B256};
use alloy_signer_local::PrivateKeySigner;

pub mod batch;
pub mod counting;

/// What any seller builds from a payment header before calling a
/// facilitator, with no engine: the header decoded and paired with the
/// requirement it says it accepted (version 2 only). The floors of the
/// bench server and of `engine-cost` both start here.
pub fn floor_request(
    header: &[u8],
) -> Result<x402_core::proto::FacilitatorRequest, Box<dyn std::error::Error + Send + Sync>> {
    use x402_core::{
        codec,
        proto::{FacilitatorRequest, PaymentPayload, PaymentRequirements},
    };
    let payload = codec::decode_payment(header, codec::DEFAULT_MAX_HEADER_BYTES)?;
    let PaymentPayload::V2(v2) = &payload else {
        return Err("not a version 2 payment".into());
    };
    let requirements = PaymentRequirements::V2(v2.accepted.clone());
    Ok(FacilitatorRequest::new(payload, requirements).ok_or("version mismatch")?)
}

/// Where the bench server answers its allocation counts.
pub const ALLOCATIONS_PATH: &str = "/__bench/allocations";

/// Where the session floor lists the sessions it opened (one token a line,
/// the calls each has in `X-PAYMENT-SESSION-REMAINING`).
pub const SESSIONS_PATH: &str = "/__bench/sessions";

/// The line prefix the bench server prints once it listens.
pub const LISTENING: &str = "listening on http://";

/// The `i`th payer for `seed`: the key is `keccak256("x402-bench" ‖ seed ‖ i)`.
pub fn payer(seed: u64, i: u64) -> PrivateKeySigner {
    let mut bytes = Vec::with_capacity(26);
    bytes.extend_from_slice(b"x402-bench");
    bytes.extend_from_slice(&seed.to_be_bytes());
    bytes.extend_from_slice(&i.to_be_bytes());
    let mut key: B256 = keccak256(&bytes);
    // A keccak output is a valid secp256k1 key with overwhelming probability;
    // rehash in the astronomically unlikely other case.
    loop {
        if let Ok(signer) = PrivateKeySigner::from_bytes(&key) {
            return signer;
        }
        key = keccak256(key);
    }
}

/// Reads a numeric environment variable, with a default.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Resolves on SIGTERM or ctrl-c: the servers' graceful shutdown.
pub async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
