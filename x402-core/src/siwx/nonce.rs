//! Server-issued nonces that need no store to be recognised.
//!
//! A nonce is 64 lowercase hex digits (alphanumeric, as EIP-4361 requires):
//! 8 random bytes, the nonce's expiry (Unix seconds, 8 bytes big-endian) and
//! the first 16 bytes of an HMAC-SHA256, under the engine's [`NonceKey`],
//! of those and the route the challenge was for. Checking one costs a hash
//! and no I/O: a 402 writes nothing anywhere. Only a nonce that was used is
//! remembered (the [`SignInStore`](super::SignInStore)), until its expiry.

use std::fmt;

use hmac::{digest::KeyInit, Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

const RANDOM: usize = 8;
const EXPIRY: usize = 8;
const TAG: usize = 16;
const LEN: usize = RANDOM + EXPIRY + TAG;

/// The domain separator of the nonce HMAC.
const CONTEXT: &[u8] = b"x402-siwx-nonce-v1\0";

/// The secret that signs the engine's sign-in-with-x nonces. Every instance
/// that serves the same routes must share one, or a challenge issued by one
/// instance is refused by the next; the default is random per process.
/// Its `Debug` output never shows it.
#[derive(Clone)]
pub struct NonceKey([u8; 32]);

impl NonceKey {
    /// A fresh random key (the default: one per process).
    pub fn random() -> Self {
        let mut key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        Self(key)
    }

    /// A key from 32 secret bytes (shared by every instance).
    pub fn from_bytes(key: [u8; 32]) -> Self {
        Self(key)
    }

    /// A key from 64 hex digits (`openssl rand -hex 32`); `None` otherwise.
    pub fn from_hex(hex: &str) -> Option<Self> {
        let bytes = alloy_primitives::hex::decode(hex.trim()).ok()?;
        <[u8; 32]>::try_from(bytes.as_slice()).ok().map(Self)
    }

    fn tag(&self, route: &str, body: &[u8]) -> [u8; TAG] {
        // HMAC pads a key shorter than the hash's 64-byte block with zeros:
        // padded here, the key has the block's fixed size.
        let mut block = [0u8; 64];
        block[..32].copy_from_slice(&self.0);
        let mut mac = <Hmac<Sha256> as KeyInit>::new(&block.into());
        mac.update(CONTEXT);
        mac.update(&(route.len() as u64).to_be_bytes());
        mac.update(route.as_bytes());
        mac.update(body);
        let full = mac.finalize().into_bytes();
        let mut tag = [0u8; TAG];
        tag.copy_from_slice(&full[..TAG]);
        tag
    }

    /// A fresh nonce for a challenge on `route`, good until `expires_at`
    /// (Unix seconds).
    pub(crate) fn issue(&self, route: &str, expires_at: u64) -> String {
        let mut raw = [0u8; LEN];
        rand::rngs::OsRng.fill_bytes(&mut raw[..RANDOM]);
        raw[RANDOM..RANDOM + EXPIRY].copy_from_slice(&expires_at.to_be_bytes());
        let tag = self.tag(route, &raw[..RANDOM + EXPIRY]);
        raw[RANDOM + EXPIRY..].copy_from_slice(&tag);
        alloy_primitives::hex::encode(raw)
    }

    /// Checks that `nonce` was issued by this key for `route` and has not
    /// expired at `now`; its expiry when so.
    pub(crate) fn check(&self, nonce: &str, route: &str, now: u64) -> Result<u64, NonceError> {
        if nonce.len() != 2 * LEN
            || !nonce
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(NonceError::NotIssued);
        }
        let raw = alloy_primitives::hex::decode(nonce).map_err(|_| NonceError::NotIssued)?;
        let (body, tag) = raw.split_at(RANDOM + EXPIRY);
        let expected = self.tag(route, body);
        // Constant time: a timing oracle would let a client forge tags.
        let diff = expected
            .iter()
            .zip(tag)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if diff != 0 {
            return Err(NonceError::NotIssued);
        }
        let mut expiry = [0u8; EXPIRY];
        expiry.copy_from_slice(&body[RANDOM..]);
        let expires_at = u64::from_be_bytes(expiry);
        if now > expires_at {
            return Err(NonceError::Expired);
        }
        Ok(expires_at)
    }
}

impl fmt::Debug for NonceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NonceKey(..)")
    }
}

/// Why a nonce is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NonceError {
    /// Not one this key issued for this route (or not a nonce at all).
    NotIssued,
    /// Issued, and expired.
    Expired,
}
