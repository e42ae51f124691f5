//! Which steps of a paid request a hook takes part in.

use std::fmt;

/// The steps a hook takes part in, from [`PaymentHooks::steps`]: the engine
/// calls a hook only at the steps it names, so that a hook with one job (a
/// replay claim, say) costs nothing at the others.
///
/// ```
/// use x402_core::hooks::HookSteps;
///
/// let steps = HookSteps::AFTER_VERIFY | HookSteps::PAYMENT_CANCELED;
/// assert!(steps.contains(HookSteps::AFTER_VERIFY));
/// assert!(!steps.contains(HookSteps::BEFORE_SETTLE));
/// assert!(HookSteps::ALL.contains(steps));
/// ```
///
/// [`PaymentHooks::steps`]: super::PaymentHooks::steps
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HookSteps(u16);

impl HookSteps {
    /// [`on_protected_request`](super::PaymentHooks::on_protected_request).
    pub const PROTECTED_REQUEST: Self = Self(1);
    /// [`before_verify`](super::PaymentHooks::before_verify).
    pub const BEFORE_VERIFY: Self = Self(1 << 1);
    /// [`after_verify`](super::PaymentHooks::after_verify).
    pub const AFTER_VERIFY: Self = Self(1 << 2);
    /// [`on_verify_failure`](super::PaymentHooks::on_verify_failure).
    pub const VERIFY_FAILURE: Self = Self(1 << 3);
    /// [`before_settle`](super::PaymentHooks::before_settle).
    pub const BEFORE_SETTLE: Self = Self(1 << 4);
    /// [`after_settle`](super::PaymentHooks::after_settle).
    pub const AFTER_SETTLE: Self = Self(1 << 5);
    /// [`on_settle_failure`](super::PaymentHooks::on_settle_failure).
    pub const SETTLE_FAILURE: Self = Self(1 << 6);
    /// [`on_payment_canceled`](super::PaymentHooks::on_payment_canceled).
    pub const PAYMENT_CANCELED: Self = Self(1 << 7);
    /// [`on_session_opened`](super::PaymentHooks::on_session_opened).
    pub const SESSION_OPENED: Self = Self(1 << 8);
    /// [`on_session_open_failed`](super::PaymentHooks::on_session_open_failed).
    pub const SESSION_OPEN_FAILED: Self = Self(1 << 9);
    /// No step.
    pub const NONE: Self = Self(0);
    /// Every step: the default, always correct.
    pub const ALL: Self = Self((1 << 10) - 1);

    /// Whether every step of `other` is in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The steps of both.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

impl std::ops::BitOr for HookSteps {
    type Output = Self;

    fn bitor(self, other: Self) -> Self {
        self.union(other)
    }
}

impl fmt::Debug for HookSteps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 10] = [
            "PROTECTED_REQUEST",
            "BEFORE_VERIFY",
            "AFTER_VERIFY",
            "VERIFY_FAILURE",
            "BEFORE_SETTLE",
            "AFTER_SETTLE",
            "SETTLE_FAILURE",
            "PAYMENT_CANCELED",
            "SESSION_OPENED",
            "SESSION_OPEN_FAILED",
        ];
        let mut set = f.debug_set();
        for (i, name) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                set.entry(&format_args!("{name}"));
            }
        }
        set.finish()
    }
}
