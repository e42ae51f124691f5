//! Server-issued nonces that need no store to be recognised.
//!
//! A nonce is 32 lowercase hex digits (alphanumeric, as EIP-4361 requires,
//! and the length the x402 extension specifies): 8 random bytes (64 bits of
//! entropy) and the first 8 bytes of an HMAC-SHA256, under the engine's
//! [`NonceKey`], of those, the route the challenge was for and the
//! challenge's `issuedAt` exactly as written. The client echoes `issuedAt`
//! (and signs it), so the nonce's age, and with it its expiry, comes from
//! a value the server wrote and authenticated. Checking a nonce costs a
//! hash and no I/O: a 402 writes nothing anywhere. Only nonces that were
//! used are remembered (the [`SignInStore`](super::SignInStore)), until
//! they could no longer be used anyway.

use std::fmt;

use hmac::{digest::KeyInit, Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

const RANDOM: usize = 8;
const TAG: usize = 8;
const LEN: usize = RANDOM + TAG;

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

    fn tag(&self, random: &[u8], route: &str, issued_at: &str) -> [u8; TAG] {
        // HMAC pads a key shorter than the hash's 64-byte block with zeros:
        // padded here, the key has the block's fixed size.
        let mut block = [0u8; 64];
        block[..32].copy_from_slice(&self.0);
        let mut mac = <Hmac<Sha256> as KeyInit>::new(&block.into());
        mac.update(CONTEXT);
        mac.update(random);
        for field in [route, issued_at] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field.as_bytes());
        }
        let full = mac.finalize().into_bytes();
        let mut tag = [0u8; TAG];
        tag.copy_from_slice(&full[..TAG]);
        tag
    }

    /// A fresh nonce for a challenge on `route` issued at `issued_at` (the
    /// challenge's `issuedAt`, as written).
    pub(crate) fn issue(&self, route: &str, issued_at: &str) -> String {
        let mut raw = [0u8; LEN];
        rand::rngs::OsRng.fill_bytes(&mut raw[..RANDOM]);
        let tag = self.tag(&raw[..RANDOM], route, issued_at);
        raw[RANDOM..].copy_from_slice(&tag);
        alloy_primitives::hex::encode(raw)
    }

    /// Whether `nonce` is one this key issued for `route` in a challenge
    /// issued at `issued_at`.
    pub(crate) fn issued(&self, nonce: &str, route: &str, issued_at: &str) -> bool {
        if nonce.len() != 2 * LEN
            || !nonce
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return false;
        }
        let Ok(raw) = alloy_primitives::hex::decode(nonce) else {
            return false;
        };
        let (random, tag) = raw.split_at(RANDOM);
        let expected = self.tag(random, route, issued_at);
        // Constant time: a timing oracle would help forge tags.
        let diff = expected
            .iter()
            .zip(tag)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        diff == 0
    }
}

impl fmt::Debug for NonceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NonceKey(..)")
    }
}
