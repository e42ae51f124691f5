//! Payers the facilitator has accepted, whose next payment the pre-check
//! does not recover the signer of ([`EngineBuilder::precheck_known_payers`]).
//!
//! The pre-check's signer recovery is most of a paid request's CPU, and it
//! exists so that forged payloads cannot be turned into facilitator calls.
//! A payer the facilitator has just accepted a payment from has shown it
//! holds its key; for it the pre-check keeps every other check (window,
//! amount, recipient, token) and lets the facilitator judge the signature.
//! That trust is spent carefully:
//!
//! - only one unchecked payment per payer is in flight at a time; the
//!   others are recovered here as before, so a burst of forgeries naming a
//!   known payer reaches the facilitator at most once;
//! - an unchecked payment that the facilitator does not accept (refused,
//!   failed, or abandoned by a client that hung up) makes the payer
//!   distrusted for [`DISTRUST`]: every payment naming it is recovered here,
//!   and an acceptance does not restore the trust before then;
//! - the table has a fixed size; a payer it forgets is simply checked again.
//!
//! So a forger who knows a paying address gets at most one facilitator call
//! out of it per [`DISTRUST`], and one who does not gets none.
//!
//! [`EngineBuilder::precheck_known_payers`]: super::EngineBuilder::precheck_known_payers

use std::sync::{Mutex, PoisonError};

use alloy_primitives::Address;

/// How long a payer stays distrusted after an unchecked payment naming it
/// was not accepted.
pub(crate) const DISTRUST: u64 = 600;

/// Shards (each behind its own lock) and slots per shard: 1 024 payers in
/// about 50 KB.
const SHARDS: usize = 16;
const SLOTS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Empty,
    /// Accepted before; no unchecked payment in flight.
    Trusted,
    /// Accepted before; one unchecked payment is at the facilitator.
    Vouching,
    /// Not to be trusted before this Unix second.
    Distrusted(u64),
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    chain_id: u64,
    payer: Address,
    state: State,
}

const EMPTY: Slot = Slot {
    chain_id: 0,
    payer: Address::ZERO,
    state: State::Empty,
};

/// The payers the facilitator accepted recently, per chain.
#[derive(Debug)]
pub(crate) struct KnownPayers {
    shards: Box<[Mutex<[Slot; SLOTS]>; SHARDS]>,
    /// Drawn at random per table, so that which payers share a slot is not
    /// known outside the process. A payer pushed out of its slot is only
    /// checked in full again.
    seed: u64,
}

impl Default for KnownPayers {
    fn default() -> Self {
        Self {
            shards: Box::new(std::array::from_fn(|_| Mutex::new([EMPTY; SLOTS]))),
            seed: rand::random::<u64>() | 1,
        }
    }
}

impl KnownPayers {
    /// The shard and slot of `payer` on `chain_id`.
    fn place(&self, chain_id: u64, payer: &Address) -> (usize, usize) {
        let bytes = payer.as_slice();
        let mut head = [0u8; 8];
        head.copy_from_slice(&bytes[..8]);
        let mut tail = [0u8; 8];
        tail.copy_from_slice(&bytes[12..]);
        let mixed =
            (u64::from_le_bytes(head) ^ u64::from_le_bytes(tail).rotate_left(29) ^ chain_id)
                .wrapping_mul(self.seed)
                .wrapping_add(self.seed.rotate_left(17));
        let mixed = (mixed ^ (mixed >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // Truncation intended: the high bits pick the shard, the next ones the slot.
        #[allow(clippy::cast_possible_truncation)]
        let high = (mixed >> 32) as usize;
        (high % SHARDS, (high / SHARDS) % SLOTS)
    }

    fn with_slot<T>(&self, chain_id: u64, payer: &Address, f: impl FnOnce(&mut Slot) -> T) -> T {
        let (shard, slot) = self.place(chain_id, payer);
        let mut shard = self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f(&mut shard[slot])
    }

    /// Whether a payment from `payer` may go to the facilitator without its
    /// signer recovered here now (the payer is trusted and has no unchecked
    /// payment in flight). Nothing is taken: see [`take`](Self::take).
    pub(crate) fn is_trusted(&self, chain_id: u64, payer: &Address) -> bool {
        self.with_slot(chain_id, payer, |slot| {
            slot.chain_id == chain_id && slot.payer == *payer && slot.state == State::Trusted
        })
    }

    /// Takes `payer`'s one unchecked payment, if it is trusted and none is
    /// in flight. The voucher must be [`accepted`](Voucher::accepted) once the
    /// facilitator accepts the payment; dropped otherwise, it distrusts the
    /// payer.
    pub(crate) fn take(&self, chain_id: u64, payer: Address, now: u64) -> Option<Voucher<'_>> {
        let taken = self.with_slot(chain_id, &payer, |slot| {
            let mine = slot.chain_id == chain_id && slot.payer == payer;
            if mine && slot.state == State::Trusted {
                slot.state = State::Vouching;
                true
            } else {
                false
            }
        });
        // Built only when taken: a voucher dropped distrusts its payer.
        taken.then(|| Voucher {
            payers: self,
            chain_id,
            payer,
            now,
            accepted: false,
        })
    }

    /// The facilitator accepted a payment from `payer`, whose signer was
    /// recovered here: it is trusted from now on, unless it is distrusted.
    pub(crate) fn accepted(&self, chain_id: u64, payer: Address, now: u64) {
        self.with_slot(chain_id, &payer, |slot| {
            match slot.state {
                // An unchecked payment in flight, and a distrust that has
                // not run out, keep the slot, whoever's they are.
                State::Vouching => {}
                State::Distrusted(until) if now < until => {}
                // Empty, trusted (this payer again, or another one pushed
                // out), or a distrust that ran out.
                _ => {
                    *slot = Slot {
                        chain_id,
                        payer,
                        state: State::Trusted,
                    }
                }
            }
        });
    }
}

/// One unchecked payment of a trusted payer, at the facilitator.
#[derive(Debug)]
pub(crate) struct Voucher<'a> {
    payers: &'a KnownPayers,
    chain_id: u64,
    payer: Address,
    now: u64,
    accepted: bool,
}

impl Voucher<'_> {
    /// The facilitator accepted the payment: the payer stays trusted.
    pub(crate) fn accepted(mut self) {
        self.accepted = true;
    }
}

impl Drop for Voucher<'_> {
    fn drop(&mut self) {
        let (chain_id, payer) = (self.chain_id, self.payer);
        let state = if self.accepted {
            State::Trusted
        } else {
            State::Distrusted(self.now.saturating_add(DISTRUST))
        };
        // The slot is still this payer's: nothing replaces a vouching one.
        self.payers.with_slot(chain_id, &payer, |slot| {
            *slot = Slot {
                chain_id,
                payer,
                state,
            };
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000_000;

    fn payer(n: u8) -> Address {
        Address::repeat_byte(n)
    }

    #[test]
    fn a_payer_is_trusted_once_accepted() {
        let known = KnownPayers::default();
        assert!(!known.is_trusted(1, &payer(1)));
        assert!(known.take(1, payer(1), NOW).is_none());
        known.accepted(1, payer(1), NOW);
        assert!(known.is_trusted(1, &payer(1)));
        // On that chain only.
        assert!(!known.is_trusted(2, &payer(1)));
    }

    #[test]
    fn one_unchecked_payment_at_a_time() {
        let known = KnownPayers::default();
        known.accepted(1, payer(1), NOW);
        let voucher = known.take(1, payer(1), NOW).unwrap();
        assert!(!known.is_trusted(1, &payer(1)));
        assert!(known.take(1, payer(1), NOW).is_none());
        // An acceptance meanwhile (a recovered payment) changes nothing.
        known.accepted(1, payer(1), NOW);
        assert!(known.take(1, payer(1), NOW).is_none());
        voucher.accepted();
        assert!(known.take(1, payer(1), NOW).is_some());
    }

    #[test]
    fn an_unchecked_payment_not_accepted_distrusts_its_payer() {
        let known = KnownPayers::default();
        known.accepted(1, payer(1), NOW);
        drop(known.take(1, payer(1), NOW).unwrap());
        assert!(!known.is_trusted(1, &payer(1)));
        // Accepted again within the distrust: still distrusted.
        known.accepted(1, payer(1), NOW + DISTRUST - 1);
        assert!(!known.is_trusted(1, &payer(1)));
        // After it, trusted again.
        known.accepted(1, payer(1), NOW + DISTRUST);
        assert!(known.is_trusted(1, &payer(1)));
    }

    #[test]
    fn the_table_forgets_without_growing() {
        let known = KnownPayers::default();
        for n in 0..=u8::MAX {
            for chain in 0..20 {
                known.accepted(chain, payer(n), NOW);
            }
        }
        let kept = (0..=u8::MAX)
            .flat_map(|n| (0..20).map(move |chain| (chain, n)))
            .filter(|(chain, n)| known.is_trusted(*chain, &payer(*n)))
            .count();
        assert!(kept > 0 && kept <= SHARDS * SLOTS, "{kept}");
    }
}
