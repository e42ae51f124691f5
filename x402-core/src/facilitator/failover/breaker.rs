//! One member's circuit breaker: closed (calls go through), open (no calls
//! until the cool-down has passed), half-open (one probe call decides).
//!
//! While closed, a member that has not answered yet, or whose last call
//! failed, takes one call at a time (its *trial*): a burst of requests
//! meeting a dead member costs at most one call per failure, not one per
//! request.

use std::{
    collections::VecDeque,
    sync::{Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use crate::facilitator::FacilitatorErrorKind;

/// When a breaker opens, and for how long.
#[derive(Debug, Clone, Copy)]
pub(super) struct Policy {
    /// Consecutive failures that open the breaker.
    pub(super) threshold: u32,
    /// Failures among the last `window` calls, in percent, that open the
    /// breaker once `window` calls were seen.
    pub(super) rate_percent: u8,
    /// How many recent calls the failure rate looks at.
    pub(super) rate_window: u16,
    /// How long an open breaker refuses calls before a probe.
    pub(super) cool_down: Duration,
}

/// A breaker's state, as [`MemberStatus`](super::MemberStatus) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BreakerState {
    /// Calls go through (one at a time while the member has not answered
    /// yet or its last call failed).
    Closed,
    /// No calls until the cool-down has passed.
    Open,
    /// The cool-down has passed: one probe call is (or may be) in flight;
    /// its outcome closes or reopens the breaker.
    HalfOpen,
}

/// A change of state worth logging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transition {
    /// Closed → open, after this many consecutive failures (or the rate).
    Opened { consecutive: u32 },
    /// Open → half-open: a probe is sent.
    HalfOpened,
    /// Half-open → closed: the probe was answered.
    Closed,
    /// Half-open → open: the probe failed.
    Reopened,
}

/// Whether a call may go to the member.
#[derive(Debug)]
pub(super) enum Admission {
    /// Yes, as this kind of call.
    Admitted(Ticket, Option<Transition>),
    /// Not now: its one trial call is in flight (another call may be
    /// admitted when it ends).
    Busy,
    /// No: the breaker is open (or half-open with its probe in flight).
    Refused,
}

/// The kind of an admitted call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ticket {
    /// A call to a member in good standing.
    Plain,
    /// The one call at a time of a member that has not answered yet or whose
    /// last call failed.
    Trial,
    /// The one call of a half-open breaker.
    Probe,
}

#[derive(Debug)]
enum Phase {
    Closed,
    Open { until: Instant },
    HalfOpen,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    consecutive: u32,
    /// Whether the member has answered since it was added or last closed.
    answered: bool,
    /// Whether a trial or probe call is in flight.
    trial: bool,
    /// The latest outcomes, newest last: `true` for a failure.
    recent: VecDeque<bool>,
    last_error: Option<FacilitatorErrorKind>,
}

/// One member's breaker.
#[derive(Debug)]
pub(super) struct Breaker {
    policy: Policy,
    state: Mutex<State>,
}

/// A snapshot of a breaker.
#[derive(Debug, Clone, Copy)]
pub(super) struct Snapshot {
    pub(super) state: BreakerState,
    pub(super) consecutive: u32,
    pub(super) last_error: Option<FacilitatorErrorKind>,
}

impl Breaker {
    pub(super) fn new(policy: Policy) -> Self {
        Self {
            policy,
            state: Mutex::new(State {
                phase: Phase::Closed,
                consecutive: 0,
                answered: false,
                trial: false,
                recent: VecDeque::with_capacity(usize::from(policy.rate_window)),
                last_error: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a call may go to the member now. `busy_ok`: a member whose
    /// trial is in flight takes this call too (a settlement for the member
    /// that verified the payment).
    pub(super) fn admit(&self, now: Instant, busy_ok: bool) -> Admission {
        let mut state = self.lock();
        match state.phase {
            Phase::Open { until } if now < until => Admission::Refused,
            Phase::Open { .. } => {
                state.phase = Phase::HalfOpen;
                state.trial = true;
                Admission::Admitted(Ticket::Probe, Some(Transition::HalfOpened))
            }
            Phase::HalfOpen if state.trial => Admission::Refused,
            Phase::HalfOpen => {
                state.trial = true;
                Admission::Admitted(Ticket::Probe, None)
            }
            Phase::Closed if state.answered && state.consecutive == 0 => {
                Admission::Admitted(Ticket::Plain, None)
            }
            Phase::Closed if !state.trial => {
                state.trial = true;
                Admission::Admitted(Ticket::Trial, None)
            }
            Phase::Closed if busy_ok => Admission::Admitted(Ticket::Plain, None),
            Phase::Closed => Admission::Busy,
        }
    }

    /// Whether the breaker keeps calls away now (open within its cool-down,
    /// or half-open), without changing it.
    pub(super) fn is_open(&self, now: Instant) -> bool {
        match self.lock().phase {
            Phase::Open { until } => now < until,
            Phase::HalfOpen => true,
            Phase::Closed => false,
        }
    }

    /// The member answered.
    pub(super) fn succeeded(&self, ticket: Ticket) -> Option<Transition> {
        let mut state = self.lock();
        if ticket != Ticket::Plain {
            state.trial = false;
        }
        match state.phase {
            // A late answer to a call sent before the breaker opened: only a
            // probe closes an open breaker.
            Phase::Open { .. } => None,
            Phase::HalfOpen if ticket == Ticket::Probe => {
                state.phase = Phase::Closed;
                state.consecutive = 0;
                state.answered = true;
                state.recent.clear();
                Some(Transition::Closed)
            }
            Phase::HalfOpen => None,
            Phase::Closed => {
                state.consecutive = 0;
                state.answered = true;
                self.push(&mut state, false);
                None
            }
        }
    }

    /// The member gave no answer (`kind` of failure).
    pub(super) fn failed(
        &self,
        ticket: Ticket,
        kind: FacilitatorErrorKind,
        now: Instant,
    ) -> Option<Transition> {
        let mut state = self.lock();
        if ticket != Ticket::Plain {
            state.trial = false;
        }
        state.last_error = Some(kind);
        let until = now.checked_add(self.policy.cool_down).unwrap_or(now);
        match state.phase {
            Phase::Open { .. } => None,
            Phase::HalfOpen if ticket == Ticket::Probe => {
                state.phase = Phase::Open { until };
                Some(Transition::Reopened)
            }
            Phase::HalfOpen => None,
            Phase::Closed => {
                state.consecutive = state.consecutive.saturating_add(1);
                self.push(&mut state, true);
                if state.consecutive >= self.policy.threshold || self.rate_exceeded(&state) {
                    let consecutive = state.consecutive;
                    state.phase = Phase::Open { until };
                    state.recent.clear();
                    Some(Transition::Opened { consecutive })
                } else {
                    None
                }
            }
        }
    }

    /// The call ended without saying anything about the member's health
    /// (it does not handle the request, or the caller went away).
    pub(super) fn released(&self, ticket: Ticket) {
        if ticket != Ticket::Plain {
            self.lock().trial = false;
        }
    }

    pub(super) fn snapshot(&self, now: Instant) -> Snapshot {
        let state = self.lock();
        let state_now = match state.phase {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { until } if now < until => BreakerState::Open,
            Phase::Open { .. } | Phase::HalfOpen => BreakerState::HalfOpen,
        };
        Snapshot {
            state: state_now,
            consecutive: state.consecutive,
            last_error: state.last_error,
        }
    }

    fn push(&self, state: &mut State, failure: bool) {
        let window = usize::from(self.policy.rate_window);
        while state.recent.len() >= window {
            state.recent.pop_front();
        }
        state.recent.push_back(failure);
    }

    fn rate_exceeded(&self, state: &State) -> bool {
        let window = usize::from(self.policy.rate_window);
        if state.recent.len() < window {
            return false;
        }
        let failures = state.recent.iter().filter(|f| **f).count();
        // Integers only: failures / window >= percent / 100.
        failures * 100 >= usize::from(self.policy.rate_percent) * window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIND: FacilitatorErrorKind = FacilitatorErrorKind::Status;

    fn policy() -> Policy {
        Policy {
            threshold: 3,
            rate_percent: 50,
            rate_window: 10,
            cool_down: Duration::from_secs(30),
        }
    }

    fn ticket(admission: Admission) -> Ticket {
        match admission {
            Admission::Admitted(ticket, _) => ticket,
            other => panic!("not admitted: {other:?}"),
        }
    }

    #[test]
    fn a_new_member_takes_one_trial_then_everything() {
        let breaker = Breaker::new(policy());
        let now = Instant::now();
        assert_eq!(ticket(breaker.admit(now, false)), Ticket::Trial);
        assert!(matches!(breaker.admit(now, false), Admission::Busy));
        assert_eq!(ticket(breaker.admit(now, true)), Ticket::Plain);
        assert_eq!(breaker.succeeded(Ticket::Trial), None);
        assert_eq!(ticket(breaker.admit(now, false)), Ticket::Plain);
        assert_eq!(ticket(breaker.admit(now, false)), Ticket::Plain);
    }

    #[test]
    fn opens_after_consecutive_failures_and_recovers_through_a_probe() {
        let breaker = Breaker::new(policy());
        let now = Instant::now();
        breaker.succeeded(ticket(breaker.admit(now, false)));
        assert_eq!(breaker.failed(Ticket::Plain, KIND, now), None);
        // After a failure, one call at a time.
        assert_eq!(ticket(breaker.admit(now, false)), Ticket::Trial);
        assert!(matches!(breaker.admit(now, false), Admission::Busy));
        assert_eq!(breaker.failed(Ticket::Trial, KIND, now), None);
        let trial = ticket(breaker.admit(now, false));
        assert_eq!(
            breaker.failed(trial, KIND, now),
            Some(Transition::Opened { consecutive: 3 })
        );
        assert!(matches!(breaker.admit(now, true), Admission::Refused));
        let later = now + Duration::from_secs(29);
        assert!(matches!(breaker.admit(later, false), Admission::Refused));
        assert_eq!(breaker.snapshot(later).state, BreakerState::Open);

        let after = now + Duration::from_secs(30);
        assert_eq!(breaker.snapshot(after).state, BreakerState::HalfOpen);
        let Admission::Admitted(Ticket::Probe, Some(Transition::HalfOpened)) =
            breaker.admit(after, false)
        else {
            panic!("no probe");
        };
        assert!(matches!(breaker.admit(after, true), Admission::Refused));
        assert_eq!(
            breaker.failed(Ticket::Probe, KIND, after),
            Some(Transition::Reopened)
        );
        assert!(matches!(breaker.admit(after, false), Admission::Refused));

        let again = after + Duration::from_secs(30);
        assert_eq!(ticket(breaker.admit(again, false)), Ticket::Probe);
        assert_eq!(breaker.succeeded(Ticket::Probe), Some(Transition::Closed));
        assert_eq!(breaker.snapshot(again).state, BreakerState::Closed);
        assert_eq!(ticket(breaker.admit(again, false)), Ticket::Plain);
    }

    #[test]
    fn a_dropped_probe_lets_the_next_call_probe() {
        let breaker = Breaker::new(Policy {
            threshold: 1,
            ..policy()
        });
        let now = Instant::now();
        let trial = ticket(breaker.admit(now, false));
        breaker.failed(trial, KIND, now);
        let after = now + Duration::from_secs(31);
        let probe = ticket(breaker.admit(after, false));
        breaker.released(probe);
        assert_eq!(ticket(breaker.admit(after, false)), Ticket::Probe);
    }

    #[test]
    fn opens_on_the_failure_rate() {
        let breaker = Breaker::new(Policy {
            threshold: 100,
            ..policy()
        });
        let now = Instant::now();
        // Alternating outcomes: never 3 failures in a row, but half of 10.
        let mut opened = None;
        for i in 0..10 {
            let ticket = ticket(breaker.admit(now, true));
            if i % 2 == 0 {
                opened = breaker.failed(ticket, KIND, now);
            } else {
                breaker.succeeded(ticket);
            }
        }
        assert_eq!(opened, None, "the 10th call succeeded");
        let ticket = ticket(breaker.admit(now, true));
        assert_eq!(
            breaker.failed(ticket, KIND, now),
            Some(Transition::Opened { consecutive: 1 })
        );
    }
}
