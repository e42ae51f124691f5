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
//! - only a few unchecked payments per payer are in flight at a time: one
//!   until the payer has [`RECORD`] accepted payments, then up to
//!   [`MAX_UNCHECKED`] (a buyer that pays often also pays in parallel:
//!   an agent's concurrent calls from one wallet). The others are recovered
//!   here as before, so a burst of forgeries naming a known payer reaches
//!   the facilitator at most that many times;
//! - an unchecked payment that the facilitator does not accept (refused,
//!   failed, or abandoned by a client that hung up) makes the payer
//!   distrusted for [`DISTRUST`] and wipes its record: every payment naming
//!   it is recovered here, and an acceptance does not restore the trust
//!   before then;
//! - the table has a fixed size (sets of a few payers each, the least
//!   recently accepted one giving way to a newcomer); a payer it forgets is
//!   simply checked again.
//!
//! So a forger who knows a paying address gets at most [`MAX_UNCHECKED`]
//! facilitator calls out of it per [`DISTRUST`] (one if that payer has paid
//! fewer than [`RECORD`] times), and one who does not gets none.
//!
//! [`EngineBuilder::precheck_known_payers`]: super::EngineBuilder::precheck_known_payers

use std::sync::{Mutex, PoisonError};

use alloy_primitives::Address;

/// How long a payer stays distrusted after an unchecked payment naming it
/// was not accepted.
pub(crate) const DISTRUST: u64 = 600;

/// How many payments the facilitator must have accepted from a payer
/// before more than one of its payments may be unchecked at a time.
pub(crate) const RECORD: u16 = 16;

/// How many unchecked payments of a payer with a [`RECORD`] may be at the
/// facilitator at once.
pub(crate) const MAX_UNCHECKED: u8 = 4;

/// Shards (each behind its own lock), sets per shard and payers per set:
/// 1 024 payers in about 56 KB. A payer can only be in its set, so two
/// payers drawn to one place do not push each other out while the set has
/// room for both.
const SHARDS: usize = 16;
const SETS: usize = 16;
const WAYS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Empty,
    /// Accepted before; this many unchecked payments are at the
    /// facilitator.
    Known {
        in_flight: u8,
    },
    /// Not to be trusted before this Unix second.
    Distrusted(u64),
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    chain_id: u64,
    payer: Address,
    /// Payments the facilitator accepted from this payer since it was
    /// last trusted (saturating).
    record: u16,
    /// When the facilitator last accepted one of its payments (Unix
    /// seconds): the least recent gives way to a newcomer.
    last: u64,
    state: State,
}

impl Slot {
    fn is(&self, chain_id: u64, payer: &Address) -> bool {
        self.chain_id == chain_id && self.payer == *payer
    }

    /// Whether one more unchecked payment may be taken.
    fn may_take(&self) -> bool {
        let allowance = if self.record >= RECORD {
            MAX_UNCHECKED
        } else {
            1
        };
        matches!(self.state, State::Known { in_flight } if in_flight < allowance)
    }
}

const EMPTY: Slot = Slot {
    chain_id: 0,
    payer: Address::ZERO,
    record: 0,
    last: 0,
    state: State::Empty,
};

const _: () = assert!(std::mem::size_of::<Slot>() <= 56);

/// One set of a shard: the places a payer can be in.
type Set = [Slot; WAYS];

/// The payers the facilitator accepted recently, per chain.
#[derive(Debug)]
pub(crate) struct KnownPayers {
    shards: Box<[Mutex<[Set; SETS]>; SHARDS]>,
    /// Drawn at random per table, so that which payers share a set is not
    /// known outside the process. A payer pushed out of its set is only
    /// checked in full again.
    seed: u64,
}

impl Default for KnownPayers {
    fn default() -> Self {
        Self {
            shards: Box::new(std::array::from_fn(|_| Mutex::new([[EMPTY; WAYS]; SETS]))),
            seed: rand::random::<u64>() | 1,
        }
    }
}

impl KnownPayers {
    /// The shard and set of `payer` on `chain_id`.
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
        // Truncation intended: the high bits pick the shard, the next ones the set.
        #[allow(clippy::cast_possible_truncation)]
        let high = (mixed >> 32) as usize;
        (high % SHARDS, (high / SHARDS) % SETS)
    }

    fn with_set<T>(&self, chain_id: u64, payer: &Address, f: impl FnOnce(&mut Set) -> T) -> T {
        let (shard, set) = self.place(chain_id, payer);
        let mut shard = self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f(&mut shard[set])
    }

    /// `payer`'s slot on `chain_id`, if the table holds it.
    fn with_slot<T>(
        &self,
        chain_id: u64,
        payer: &Address,
        f: impl FnOnce(Option<&mut Slot>) -> T,
    ) -> T {
        self.with_set(chain_id, payer, |set| {
            f(set.iter_mut().find(|slot| slot.is(chain_id, payer)))
        })
    }

    /// Whether a payment from `payer` may go to the facilitator without its
    /// signer recovered here now (the payer is trusted and has fewer
    /// unchecked payments in flight than it is allowed). Nothing is taken:
    /// see [`take`](Self::take).
    pub(crate) fn is_trusted(&self, chain_id: u64, payer: &Address) -> bool {
        self.with_slot(chain_id, payer, |slot| slot.is_some_and(|s| s.may_take()))
    }

    /// Takes one of `payer`'s unchecked payments, if it is trusted and has
    /// fewer in flight than it is allowed. The voucher must be
    /// [`accepted`](Voucher::accepted) once the facilitator accepts the
    /// payment; dropped otherwise, it distrusts the payer.
    pub(crate) fn take(&self, chain_id: u64, payer: Address, now: u64) -> Option<Voucher<'_>> {
        let taken = self.with_slot(chain_id, &payer, |slot| match slot {
            Some(slot) if slot.may_take() => {
                if let State::Known { in_flight } = &mut slot.state {
                    *in_flight += 1;
                }
                true
            }
            _ => false,
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
        let fresh = Slot {
            chain_id,
            payer,
            record: 1,
            last: now,
            state: State::Known { in_flight: 0 },
        };
        self.with_set(chain_id, &payer, |set| {
            if let Some(slot) = set.iter_mut().find(|slot| slot.is(chain_id, &payer)) {
                match slot.state {
                    // Trusted: its record grows.
                    State::Known { .. } => {
                        slot.record = slot.record.saturating_add(1);
                        slot.last = slot.last.max(now);
                    }
                    // Distrusted until then.
                    State::Distrusted(until) if now < until => {}
                    // A distrust that ran out: trusted from scratch.
                    _ => *slot = fresh,
                }
                return;
            }
            // A newcomer takes an empty slot, or one whose distrust ran out,
            // or else the least recently accepted payer's with nothing in
            // flight. Unchecked payments in flight, and a distrust that has
            // not run out, keep their slots.
            let free = |slot: &Slot| match slot.state {
                State::Empty => Some(0),
                State::Distrusted(until) if until <= now => Some(0),
                State::Known { in_flight: 0 } => Some(slot.last.saturating_add(1)),
                _ => None,
            };
            if let Some(slot) = set
                .iter_mut()
                .filter_map(|slot| free(slot).map(|age| (age, slot)))
                .min_by_key(|(age, _)| *age)
                .map(|(_, slot)| slot)
            {
                *slot = fresh;
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
        let (chain_id, payer, accepted) = (self.chain_id, self.payer, self.accepted);
        let until = self.now.saturating_add(DISTRUST);
        let now = self.now;
        self.payers.with_slot(chain_id, &payer, |slot| {
            // Nothing replaces a slot with payments in flight, nor one
            // distrusted within a voucher's lifetime: the payer is still
            // there unless a distrust ran out meanwhile.
            let Some(slot) = slot else {
                return;
            };
            match (&mut slot.state, accepted) {
                (State::Known { in_flight }, true) => {
                    *in_flight = in_flight.saturating_sub(1);
                    slot.record = slot.record.saturating_add(1);
                    slot.last = slot.last.max(now);
                }
                // Distrusted by another of its payments: it stays so.
                (_, true) => {}
                (state, false) => {
                    let until = match *state {
                        State::Distrusted(before) => before.max(until),
                        _ => until,
                    };
                    *state = State::Distrusted(until);
                    slot.record = 0;
                }
            }
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

    /// `payer`'s record brought to `n` accepted payments.
    fn record(known: &KnownPayers, payer: Address, n: u16) {
        for _ in 0..n {
            known.accepted(1, payer, NOW);
        }
    }

    #[test]
    fn a_payer_with_a_record_has_a_few_unchecked_payments_at_a_time() {
        let known = KnownPayers::default();
        record(&known, payer(1), RECORD - 1);
        let first = known.take(1, payer(1), NOW).unwrap();
        // One short of the record: one at a time.
        assert!(known.take(1, payer(1), NOW).is_none());
        // Its acceptance completes the record.
        first.accepted();
        let taken: Vec<_> = (0..MAX_UNCHECKED)
            .map(|_| known.take(1, payer(1), NOW).unwrap())
            .collect();
        assert!(!known.is_trusted(1, &payer(1)));
        assert!(known.take(1, payer(1), NOW).is_none());
        // Each one accepted frees its place.
        for voucher in taken {
            voucher.accepted();
            assert!(known.is_trusted(1, &payer(1)));
        }
        let again: Vec<_> = (0..MAX_UNCHECKED)
            .map(|_| known.take(1, payer(1), NOW).unwrap())
            .collect();
        assert!(known.take(1, payer(1), NOW).is_none());
        drop(again);
    }

    #[test]
    fn one_unchecked_payment_not_accepted_distrusts_the_payer_and_wipes_its_record() {
        let known = KnownPayers::default();
        record(&known, payer(1), RECORD);
        let mut taken: Vec<_> = (0..MAX_UNCHECKED)
            .map(|_| known.take(1, payer(1), NOW).unwrap())
            .collect();
        // One refused: distrusted at once, whatever the others do.
        drop(taken.pop());
        assert!(!known.is_trusted(1, &payer(1)));
        for voucher in taken {
            voucher.accepted();
            assert!(!known.is_trusted(1, &payer(1)));
        }
        known.accepted(1, payer(1), NOW + DISTRUST - 1);
        assert!(!known.is_trusted(1, &payer(1)));
        // Trusted again after the distrust, one payment at a time, until
        // its record is made again.
        known.accepted(1, payer(1), NOW + DISTRUST);
        let voucher = known.take(1, payer(1), NOW + DISTRUST).unwrap();
        assert!(known.take(1, payer(1), NOW + DISTRUST).is_none());
        voucher.accepted();
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

    /// `n` payers that the table puts in one set.
    fn sharing_a_set(known: &KnownPayers, n: usize) -> Vec<Address> {
        let first = known.place(1, &Address::with_last_byte(0));
        (0..u32::MAX)
            .map(|i| Address::left_padding_from(&i.to_be_bytes()))
            .filter(|a| known.place(1, a) == first)
            .take(n)
            .collect()
    }

    #[test]
    fn payers_sharing_a_set_stay_until_it_is_full() {
        let known = KnownPayers::default();
        let payers = sharing_a_set(&known, WAYS + 2);
        for (i, p) in (0u64..).zip(&payers[..WAYS]) {
            known.accepted(1, *p, NOW + i);
        }
        assert!(payers[..WAYS].iter().all(|p| known.is_trusted(1, p)));
        // A newcomer pushes out the least recently accepted payer.
        known.accepted(1, payers[WAYS], NOW + 10);
        assert!(!known.is_trusted(1, &payers[0]));
        assert!(payers[1..=WAYS].iter().all(|p| known.is_trusted(1, p)));
        // One with an unchecked payment in flight is not pushed out: the
        // next least recent is.
        let voucher = known.take(1, payers[1], NOW + 11).unwrap();
        known.accepted(1, payers[WAYS + 1], NOW + 12);
        assert!(!known.is_trusted(1, &payers[2]));
        voucher.accepted();
        assert!(known.is_trusted(1, &payers[1]));
        assert!(known.is_trusted(1, &payers[WAYS + 1]));
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
        assert!(kept > 0 && kept <= SHARDS * SETS * WAYS, "{kept}");
    }
}
