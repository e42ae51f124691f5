//! The total budget: what was spent, what is reserved for payments in
//! flight, and the reservations that hold it.

use std::sync::{Mutex, MutexGuard};

use alloy_primitives::U256;
use x402_core::money::AtomicAmount;

use crate::error::Refusal;

/// What a buyer (and its clones) may still pay.
#[derive(Debug)]
pub(crate) struct Budget {
    max_total: Option<AtomicAmount>,
    ledger: Mutex<Ledger>,
}

#[derive(Debug, Default)]
struct Ledger {
    spent: U256,
    reserved: U256,
}

impl Budget {
    /// A budget of `max_total` (`None`: no total limit).
    pub(crate) fn new(max_total: Option<AtomicAmount>) -> Self {
        Budget {
            max_total,
            ledger: Mutex::default(),
        }
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // The ledger holds two integers updated in one step each; a panic
        // elsewhere cannot leave it half-written.
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What was paid: the committed reservations.
    pub(crate) fn spent(&self) -> AtomicAmount {
        AtomicAmount::new(self.ledger().spent)
    }

    /// Reserves `amount`, or refuses with [`Refusal::OverBudget`] when less
    /// is left (counting payments in flight).
    pub(crate) fn reserve(&self, amount: AtomicAmount) -> Result<Reservation<'_>, Refusal> {
        let mut ledger = self.ledger();
        if let Some(total) = self.max_total {
            let committed = ledger.spent.saturating_add(ledger.reserved);
            let remaining = total.get().saturating_sub(committed);
            if amount.get() > remaining {
                return Err(Refusal::OverBudget {
                    amount,
                    remaining: AtomicAmount::new(remaining),
                });
            }
        }
        ledger.reserved = ledger.reserved.saturating_add(amount.get());
        Ok(Reservation {
            budget: self,
            amount: amount.get(),
            armed: true,
        })
    }

    fn release(&self, amount: U256) {
        let mut ledger = self.ledger();
        ledger.reserved = ledger.reserved.saturating_sub(amount);
    }

    fn commit(&self, amount: U256) {
        let mut ledger = self.ledger();
        ledger.reserved = ledger.reserved.saturating_sub(amount);
        ledger.spent = ledger.spent.saturating_add(amount);
    }
}

/// A budget reservation. Dropped while armed (before the payment left this
/// process), it is released; once disarmed, only an explicit
/// [`release`](Self::release) or [`commit`](Self::commit) resolves it, so a
/// payment whose fate is unknown stays counted against the budget.
#[derive(Debug)]
pub(crate) struct Reservation<'a> {
    budget: &'a Budget,
    amount: U256,
    armed: bool,
}

impl Reservation<'_> {
    /// From here the payment may reach the seller.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// The seller did not charge.
    pub(crate) fn release(mut self) {
        self.budget.release(self.amount);
        self.armed = false;
    }

    /// The seller charged.
    pub(crate) fn commit(mut self) {
        self.budget.commit(self.amount);
        self.armed = false;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.budget.release(self.amount);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_amount_over_what_is_left_is_refused() {
        let budget = Budget::new(Some(AtomicAmount::from(10u64)));
        let mut held = budget.reserve(AtomicAmount::from(6u64)).unwrap();
        assert_eq!(
            budget.reserve(AtomicAmount::from(5u64)).unwrap_err(),
            Refusal::OverBudget {
                amount: AtomicAmount::from(5u64),
                remaining: AtomicAmount::from(4u64),
            }
        );
        // A disarmed reservation dropped stays reserved (its fate unknown).
        held.disarm();
        drop(held);
        assert!(budget.reserve(AtomicAmount::from(5u64)).is_err());
        // An armed one dropped is released.
        drop(budget.reserve(AtomicAmount::from(4u64)).unwrap());
        budget.reserve(AtomicAmount::from(4u64)).unwrap().commit();
        assert_eq!(budget.spent(), AtomicAmount::from(4u64));
    }
}
