//! Which member verified a payment, so that its settlement goes there first.

use std::{
    collections::{HashMap, VecDeque},
    time::{Duration, Instant},
};

use sha2::{Digest as _, Sha256};

use crate::proto::FacilitatorRequest;

/// How long a verification is remembered: longer than any handler a seller
/// lets a buyer wait for.
pub(super) const STICKY_TTL: Duration = Duration::from_secs(15 * 60);
/// The most verifications remembered at once; the oldest are forgotten
/// first (their settlements then go in member order).
pub(super) const STICKY_CAPACITY: usize = 10_000;

/// A payment's name: the SHA-256 of its signed `payload` (the same in the
/// `/verify` and the `/settle` request, whatever amount an `upto` charge
/// settles).
pub(super) type PaymentId = [u8; 32];

pub(super) fn payment_id(request: &FacilitatorRequest) -> PaymentId {
    let mut hasher = Sha256::new();
    // Serialising a `Value` cannot fail (its keys are strings); an empty
    // input would only make the preference useless, never wrong.
    let bytes = serde_json::to_vec(request.payment_payload.payload()).unwrap_or_default();
    hasher.update(request.payment_payload.scheme().as_bytes());
    hasher.update([0]);
    hasher.update(&bytes);
    hasher.finalize().into()
}

/// Payments and the member that verified them, forgotten after
/// [`STICKY_TTL`] or when [`STICKY_CAPACITY`] is reached.
#[derive(Debug, Default)]
pub(super) struct Sticky {
    members: HashMap<PaymentId, (usize, Instant)>,
    /// Insertion order with each entry's expiry, oldest first (an entry
    /// replaced later is skipped when its old expiry comes up).
    order: VecDeque<(PaymentId, Instant)>,
}

impl Sticky {
    pub(super) fn remember(&mut self, id: PaymentId, member: usize, now: Instant) {
        let expires = now.checked_add(STICKY_TTL).unwrap_or(now);
        self.members.insert(id, (member, expires));
        self.order.push_back((id, expires));
        while let Some(&(oldest, at)) = self.order.front() {
            let full = self.members.len() > STICKY_CAPACITY;
            if !full && at > now && self.order.len() <= 2 * STICKY_CAPACITY {
                break;
            }
            self.order.pop_front();
            if self.members.get(&oldest).is_some_and(|(_, e)| *e == at) {
                self.members.remove(&oldest);
            }
        }
    }

    /// The member that verified `id`, if remembered and not expired.
    pub(super) fn member(&self, id: &PaymentId, now: Instant) -> Option<usize> {
        self.members
            .get(id)
            .filter(|(_, expires)| now < *expires)
            .map(|(member, _)| *member)
    }

    pub(super) fn forget(&mut self, id: &PaymentId) {
        self.members.remove(id);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.members.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u32) -> PaymentId {
        let mut id = [0; 32];
        id[..4].copy_from_slice(&n.to_be_bytes());
        id
    }

    #[test]
    fn remembers_until_the_ttl_and_the_capacity() {
        let mut sticky = Sticky::default();
        let now = Instant::now();
        sticky.remember(id(1), 1, now);
        assert_eq!(sticky.member(&id(1), now), Some(1));
        assert_eq!(sticky.member(&id(1), now + STICKY_TTL), None);
        sticky.forget(&id(1));
        assert_eq!(sticky.member(&id(1), now), None);

        for n in 0..(STICKY_CAPACITY as u32 + 10) {
            sticky.remember(id(n), 0, now);
        }
        assert_eq!(sticky.len(), STICKY_CAPACITY);
        assert_eq!(sticky.member(&id(0), now), None, "the oldest went first");
        assert_eq!(sticky.member(&id(STICKY_CAPACITY as u32 + 9), now), Some(0));

        // Expired entries go as new ones come.
        let later = now + STICKY_TTL + Duration::from_secs(1);
        sticky.remember(id(u32::MAX), 1, later);
        assert_eq!(sticky.len(), 1);
    }
}
