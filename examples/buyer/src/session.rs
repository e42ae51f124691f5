//! Prepaid sessions, the buyer side: reading a challenge's session offers and
//! holding the tokens bought.
//!
//! A seller may advertise, in the v2 challenge's `extensions["session"]`,
//! offers of `calls` requests within `ttlSeconds` for one payment. The buyer
//! keeps each token it bought per (origin, scope), in memory only, with the
//! remaining count the seller last reported and the local expiry. Tokens are
//! bearer credentials: they are never logged and no `Debug` output shows them.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use http::{HeaderMap, HeaderValue};
use x402_core::{
    proto::v2,
    session::{X_PAYMENT_SESSION, X_PAYMENT_SESSION_REMAINING},
};

/// The most (origin, path) → scope entries remembered; the map is cleared
/// when it fills (it is only a hint for which token to send).
const MAX_KNOWN_ROUTES: usize = 4096;

/// How a purchase used a prepaid session.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionUse {
    /// This call paid for a new session (its payment is in
    /// [`Purchase::payment`](crate::Purchase::payment)); the opening call
    /// counts as the session's first.
    Opened {
        /// The seller's id of the offer bought.
        offer: String,
        /// The scope the session was sold for.
        scope: String,
        /// Calls left after this one, as the seller reported.
        remaining: u64,
        /// How long the session lasts from its purchase (the offer's
        /// `ttlSeconds`).
        ttl: Duration,
    },
    /// This call was redeemed from a held session: nothing was signed and
    /// nothing was charged to the budget.
    Redeemed {
        /// The scope of the session redeemed.
        scope: String,
        /// Calls left after this one, as the seller reported.
        remaining: u64,
    },
}

/// One session offer of a v2 challenge.
#[derive(Debug, Clone)]
pub(crate) struct OfferDecl {
    pub(crate) id: String,
    pub(crate) calls: u64,
    pub(crate) ttl: Duration,
    pub(crate) scope: String,
    pub(crate) accepts: Vec<v2::PaymentRequirements>,
}

/// The session offers of a v2 challenge. Malformed offers, and rows that do
/// not parse as v2 requirements, are skipped: they can only be declined.
pub(crate) fn offers(challenge: &v2::PaymentRequired) -> Vec<OfferDecl> {
    let Some(list) = challenge
        .extensions
        .get("session")
        .and_then(|s| s.get("info"))
        .and_then(|i| i.get("offers"))
        .and_then(serde_json::Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|offer| {
            let id = offer.get("id")?.as_str()?.to_owned();
            let calls = offer.get("calls")?.as_u64()?;
            let ttl = Duration::from_secs(offer.get("ttlSeconds")?.as_u64()?);
            let scope = offer.get("scope")?.as_str()?.to_owned();
            let accepts = offer
                .get("accepts")?
                .as_array()?
                .iter()
                .filter_map(|row| serde_json::from_value(row.clone()).ok())
                .collect();
            (calls > 0).then_some(OfferDecl {
                id,
                calls,
                ttl,
                scope,
                accepts,
            })
        })
        .collect()
}

/// `X-PAYMENT-SESSION-REMAINING`, if present and a number.
pub(crate) fn remaining_of(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(X_PAYMENT_SESSION_REMAINING)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The `X-PAYMENT-SESSION` token of a response, marked sensitive.
pub(crate) fn token_of(headers: &HeaderMap) -> Option<HeaderValue> {
    let mut token = headers.get(X_PAYMENT_SESSION)?.clone();
    token.set_sensitive(true);
    (!token.is_empty()).then_some(token)
}

/// Response headers as handed to the caller: the session token, if any, is
/// marked sensitive so that `Debug` does not show it.
pub(crate) fn scrub(headers: &HeaderMap) -> HeaderMap {
    let mut headers = headers.clone();
    if let Some(token) = headers.get_mut(X_PAYMENT_SESSION) {
        token.set_sensitive(true);
    }
    headers
}

/// (origin, scope).
pub(crate) type Key = (String, String);

/// A held token taken for one request.
#[derive(Clone)]
pub(crate) struct Ticket {
    pub(crate) key: Key,
    pub(crate) token: HeaderValue,
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

struct Held {
    token: HeaderValue,
    /// Advisory: the seller is the authority.
    remaining: u64,
    expires: Instant,
    /// Purchase order, to prefer the newest token of an origin.
    bought: u64,
}

#[derive(Default)]
struct State {
    held: HashMap<Key, Held>,
    /// (origin, path) → the scope its challenge offered sessions for, or
    /// `None` when it offered none.
    routes: HashMap<(String, String), Option<String>>,
    /// One purchase lock per (origin, scope), so concurrent calls do not each
    /// buy a session.
    locks: HashMap<Key, Arc<tokio::sync::Mutex<()>>>,
    bought: u64,
}

/// The tokens a buyer holds.
#[derive(Default)]
pub(crate) struct Wallet {
    state: Mutex<State>,
}

impl fmt::Debug for Wallet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Scopes and counts only: never a token.
        let state = self.state();
        let held: Vec<_> = state
            .held
            .iter()
            .map(|((origin, scope), h)| (origin.as_str(), scope.as_str(), h.remaining))
            .collect();
        f.debug_struct("Wallet").field("held", &held).finish()
    }
}

impl Wallet {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is a single map operation; a panic elsewhere cannot
        // leave the state half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many sessions are held (expired ones may be counted until the
    /// next call drops them).
    pub(crate) fn len(&self) -> usize {
        self.state().held.len()
    }

    /// The token to send to `origin` + `path`: the one held for the path's
    /// scope when the path's challenge was seen, else the newest token held
    /// for the origin; none when the path is known to sell no session.
    /// Expired tokens are dropped on the way.
    pub(crate) fn pick(&self, origin: &str, path: &str) -> Option<Ticket> {
        let mut state = self.state();
        let now = Instant::now();
        state.held.retain(|_, h| h.expires > now);
        let key = match state.routes.get(&(origin.to_owned(), path.to_owned())) {
            Some(Some(scope)) => (origin.to_owned(), scope.clone()),
            Some(None) => return None,
            None => state
                .held
                .iter()
                .filter(|((o, _), _)| o == origin)
                .max_by_key(|(_, h)| h.bought)
                .map(|(k, _)| k.clone())?,
        };
        let token = state.held.get(&key)?.token.clone();
        Some(Ticket { key, token })
    }

    /// Remembers which scope (if any) a path's challenge sold sessions for.
    pub(crate) fn learn(&self, origin: &str, path: &str, scope: Option<String>) {
        let mut state = self.state();
        if state.routes.len() >= MAX_KNOWN_ROUTES {
            state.routes.clear();
        }
        state
            .routes
            .insert((origin.to_owned(), path.to_owned()), scope);
    }

    /// Whether a usable token is held for `key`.
    pub(crate) fn holds(&self, key: &Key) -> bool {
        self.state()
            .held
            .get(key)
            .is_some_and(|h| h.expires > Instant::now())
    }

    /// Drops the ticket's token, unless it was replaced meanwhile.
    pub(crate) fn forget(&self, ticket: &Ticket) {
        let mut state = self.state();
        if state
            .held
            .get(&ticket.key)
            .is_some_and(|h| h.token == ticket.token)
        {
            state.held.remove(&ticket.key);
        }
    }

    /// Records the count the seller reported for the ticket's session.
    pub(crate) fn update(&self, ticket: &Ticket, remaining: u64) {
        if let Some(held) = self.state().held.get_mut(&ticket.key) {
            if held.token == ticket.token {
                held.remaining = remaining;
            }
        }
    }

    /// Keeps a newly bought token.
    pub(crate) fn keep(&self, key: Key, token: HeaderValue, remaining: u64, ttl: Duration) {
        let mut state = self.state();
        state.bought += 1;
        let bought = state.bought;
        let now = Instant::now();
        // An absurd ttl is capped at a year rather than overflowing.
        let expires = now
            .checked_add(ttl)
            .or_else(|| now.checked_add(Duration::from_secs(365 * 24 * 3600)))
            .unwrap_or(now);
        state.held.insert(
            key,
            Held {
                token,
                remaining,
                expires,
                bought,
            },
        );
    }

    /// The purchase lock of `key`.
    pub(crate) fn lock(&self, key: &Key) -> Arc<tokio::sync::Mutex<()>> {
        self.state().locks.entry(key.clone()).or_default().clone()
    }
}
