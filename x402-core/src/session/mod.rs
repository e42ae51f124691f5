//! Prepaid sessions: pay once, then make many calls with no further payment.
//!
//! This is this crate's own extension (upstream x402 has none). A route may
//! offer sessions ([`SessionOffer`]): the buyer pays once with a normal v2
//! payment for one of the offer's requirements, and gets a token good for
//! `calls` requests within `ttl`. Each later request sends
//! `X-PAYMENT-SESSION: <token>`; one call is redeemed atomically in a
//! [`SessionStore`], with no signature, no facilitator call and no chain
//! transaction. A call whose handler fails (status ≥ 400) is given back.
//!
//! Tokens are 256 random bits, shown to the buyer once, and stored only as a
//! SHA-256 hash: a dump of the store holds no usable token.

use std::{error::Error as StdError, fmt, future::Future, pin::Pin, time::Duration};

use async_trait::async_trait;
use http::{HeaderName, HeaderValue};
use rand::RngCore;
use sha2::{Digest, Sha256};

mod memory;
#[cfg(feature = "redis")]
mod redis;

pub use self::memory::MemorySessionStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::RedisSessionStore;
pub use crate::route::SessionOffer;

/// `X-PAYMENT-SESSION`: the session token, on requests (to redeem) and on the
/// response that opened the session.
pub const X_PAYMENT_SESSION: HeaderName = HeaderName::from_static("x-payment-session");
/// `X-PAYMENT-SESSION-REMAINING`: calls left, on every session response.
pub const X_PAYMENT_SESSION_REMAINING: HeaderName =
    HeaderName::from_static("x-payment-session-remaining");
/// `X-PAYMENT-SESSION-ERROR`: on a paid response whose session could not be
/// opened (`session_open_failed`): the call was served and paid for, and the
/// buyer holds no token. The seller is told (a `session.open_failed`
/// webhook event) and must make it good.
pub const X_PAYMENT_SESSION_ERROR: HeaderName = HeaderName::from_static("x-payment-session-error");

/// The decimal text of every count from 0 to 999, one after another
/// (`"0123…998999"`), for [`remaining_header`].
static SMALL_COUNTS: [u8; 2890] = small_counts();

const fn small_counts() -> [u8; 2890] {
    let mut out = [0u8; 2890];
    let (mut n, mut at) = (0usize, 0usize);
    while n < 1000 {
        if n >= 100 {
            out[at] = b'0' + (n / 100) as u8;
            at += 1;
        }
        if n >= 10 {
            out[at] = b'0' + (n / 10 % 10) as u8;
            at += 1;
        }
        out[at] = b'0' + (n % 10) as u8;
        at += 1;
        n += 1;
    }
    out
}

/// The value of `X-PAYMENT-SESSION-REMAINING` for `calls` left: under
/// 1 000 (a session's usual count) borrowed from a static table rather
/// than allocated, as it is written on every session call.
pub(crate) fn remaining_header(calls: u64) -> HeaderValue {
    let (start, len) = match calls {
        0..=9 => (calls, 1),
        10..=99 => (10 + 2 * (calls - 10), 2),
        100..=999 => (190 + 3 * (calls - 100), 3),
        _ => return HeaderValue::from(calls),
    };
    // Within the table (2 890 = 190 + 3 × 900 bytes), and digits.
    match SMALL_COUNTS
        .get(start as usize..(start + len) as usize)
        .and_then(|digits| std::str::from_utf8(digits).ok())
    {
        Some(text) => HeaderValue::from_static(text),
        None => HeaderValue::from(calls),
    }
}

/// A session token: 256 random bits, written as 64 lowercase hex digits.
/// Its `Debug` output never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionToken(String);

impl SessionToken {
    /// A fresh random token.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        Self(alloy_primitives::hex::encode(bytes))
    }

    /// Reads a token sent by a buyer; `None` unless it is 64 hex digits.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        Self::well_formed(s).then(|| Self(s.to_ascii_lowercase()))
    }

    /// 64 hex digits.
    fn well_formed(s: &str) -> bool {
        s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
    }

    /// The hash of a token sent by a buyer, as [`parse`](Self::parse) then
    /// [`hash`](Self::hash) give it, without copying the token: what a
    /// store is asked for when a buyer sends `X-PAYMENT-SESSION`. `None`
    /// unless it is 64 hex digits (surrounding whitespace aside).
    ///
    /// ```
    /// use x402_core::session::SessionToken;
    ///
    /// let token = SessionToken::generate();
    /// let sent = token.expose().to_uppercase();
    /// assert_eq!(SessionToken::hash_sent(&sent), Some(token.hash()));
    /// assert_eq!(SessionToken::hash_sent("not a token"), None);
    /// ```
    pub fn hash_sent(s: &str) -> Option<TokenHash> {
        let s = s.trim();
        if !Self::well_formed(s) {
            return None;
        }
        let mut lower = [0u8; 64];
        lower.copy_from_slice(s.as_bytes());
        lower.make_ascii_lowercase();
        Some(TokenHash(Sha256::digest(lower).into()))
    }

    /// The token as sent to the buyer.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The hash under which the token is stored.
    pub fn hash(&self) -> TokenHash {
        TokenHash(Sha256::digest(self.0.as_bytes()).into())
    }
}

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionToken(..)")
    }
}

/// The SHA-256 of a session token: the only form a store keeps.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenHash(pub [u8; 32]);

impl TokenHash {
    /// Lowercase hex, for store keys.
    pub fn to_hex(&self) -> String {
        alloy_primitives::hex::encode(self.0)
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenHash({}…)", &self.to_hex()[..8])
    }
}

/// A session as a store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The scope it was sold for (a session only redeems on routes of this scope).
    pub scope: String,
    /// Calls left.
    pub remaining: u64,
    /// Unix seconds after which it is void.
    pub expires_at: u64,
}

/// The result of a redemption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Redemption {
    /// One call redeemed; this many are left.
    Redeemed {
        /// Calls left after this one.
        remaining: u64,
    },
    /// No such session.
    Unknown,
    /// The session has expired.
    Expired,
    /// No calls left.
    Exhausted,
    /// The session was sold for another scope.
    OutOfScope,
}

/// Where sessions live. Implementations must make [`redeem`](Self::redeem)
/// atomic: concurrent redemptions of one session, from any number of
/// processes sharing the store, never redeem more calls than it holds.
#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// Stores a new session under its token's hash.
    async fn open(&self, token: &TokenHash, record: SessionRecord)
        -> Result<(), SessionStoreError>;

    /// Redeems one call if the session exists, has not expired (`now` in unix
    /// seconds), has calls left and was sold for `scope`.
    async fn redeem(
        &self,
        token: &TokenHash,
        scope: &str,
        now: u64,
    ) -> Result<Redemption, SessionStoreError>;

    /// Redeems as [`redeem`](Self::redeem) does, answering within
    /// `deadline`, for a store that keeps the deadline itself; `None` (the
    /// default) for one that does not. The engine redeems through this
    /// method, and bounds a `redeem` itself when it answers `None`: a timer
    /// per call, and a task for each call it stops waiting for, which waits
    /// on and gives back what lands late.
    ///
    /// A store that answers `Some` takes that on: the future it returns
    /// answers [`SessionStoreError::Timeout`] once `deadline` has passed
    /// (counted from this call) with no answer, and a redemption whose
    /// answer is not taken, because the deadline passed or the future was
    /// dropped, is either never made or given back once it lands. Both
    /// built-in stores do: [`MemorySessionStore`] answers at once, and
    /// `RedisSessionStore` (feature `redis`) keeps the deadlines of the
    /// redemptions it batches with one timer for all of them.
    fn redeem_within<'a>(
        &'a self,
        token: &'a TokenHash,
        scope: &'a str,
        now: u64,
        deadline: Duration,
    ) -> Option<BoundedRedemption<'a>> {
        let _ = (token, scope, now, deadline);
        None
    }

    /// Gives one call back (its handler failed). Never raises the count above
    /// what was sold; a session that expired meanwhile stays expired.
    async fn give_back(&self, token: &TokenHash) -> Result<(), SessionStoreError>;

    /// Deletes a session. The engine calls it when storing a paid session
    /// failed and the buyer was told so: an [`open`](Self::open) that timed
    /// out may still land, and nobody holds its token. The default does
    /// nothing (such a record cannot be redeemed, and goes at its expiry).
    async fn close(&self, token: &TokenHash) -> Result<(), SessionStoreError> {
        let _ = token;
        Ok(())
    }
}

/// The answer of [`SessionStore::redeem_within`], on its way.
pub type BoundedRedemption<'a> =
    Pin<Box<dyn Future<Output = Result<Redemption, SessionStoreError>> + Send + 'a>>;

/// A session store could not answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionStoreError {
    /// The backend failed.
    #[error("session store backend failed")]
    Backend(#[source] Box<dyn StdError + Send + Sync>),
    /// The backend did not answer in time.
    #[error("session store timed out")]
    Timeout,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_counts_are_written_as_http_writes_them() {
        for calls in (0..=1500).chain([9_999, u64::MAX]) {
            assert_eq!(
                remaining_header(calls),
                HeaderValue::from(calls),
                "{calls} calls"
            );
        }
    }

    #[test]
    fn tokens_are_random_hex_and_hidden() {
        let a = SessionToken::generate();
        let b = SessionToken::generate();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 64);
        assert_eq!(SessionToken::parse(a.expose()), Some(a.clone()));
        assert_eq!(
            SessionToken::parse(&a.expose().to_uppercase()),
            Some(a.clone())
        );
        assert!(SessionToken::parse("abc").is_none());
        assert!(SessionToken::parse(&"g".repeat(64)).is_none());
        assert!(!format!("{a:?}").contains(a.expose()));
        assert_ne!(a.hash().to_hex(), a.expose());
    }

    #[test]
    fn a_sent_token_hashes_as_its_parsed_copy() {
        let token = SessionToken::generate();
        let sent = [
            token.expose().to_owned(),
            token.expose().to_uppercase(),
            format!("  {} ", token.expose()),
            String::new(),
            "abc".into(),
            "g".repeat(64),
            "a".repeat(65),
            format!("{}é", &token.expose()[..62]),
        ];
        for s in sent {
            assert_eq!(
                SessionToken::hash_sent(&s),
                SessionToken::parse(&s).map(|t| t.hash()),
                "{s:?}"
            );
        }
        assert_eq!(SessionToken::hash_sent(token.expose()), Some(token.hash()));
    }
}
