//! [`FailoverFacilitatorBuilder`] and what it refuses.

use super::*;

/// Why a [`FailoverFacilitator`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FailoverConfigError {
    /// No member was added.
    #[error("a failover facilitator needs at least one member")]
    NoMembers,
    /// A member's name is empty.
    #[error("a failover member's name is empty")]
    EmptyName,
    /// Two members have this name.
    #[error("two failover members are named {0:?}")]
    DuplicateName(String),
    /// The failure threshold is 0.
    #[error("the failure threshold must be at least 1")]
    ZeroThreshold,
    /// The failure rate is not 1 to 100 percent, or its window not 1 to
    /// [`MAX_FAILURE_RATE_WINDOW`] calls.
    #[error(
        "the failure rate must be 1 to 100 percent of 1 to {MAX_FAILURE_RATE_WINDOW} calls \
         (got {percent}% of {window})"
    )]
    InvalidFailureRate {
        /// The percent given.
        percent: u8,
        /// The window given.
        window: u16,
    },
}

/// Builds a [`FailoverFacilitator`].
#[must_use]
pub struct FailoverFacilitatorBuilder {
    pub(super) members: Vec<(String, Arc<dyn Facilitator>)>,
    pub(super) policy: Policy,
    pub(super) clock: Option<Clock>,
}

impl fmt::Debug for FailoverFacilitatorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailoverFacilitatorBuilder")
            .field(
                "members",
                &self.members.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("policy", &self.policy)
            .field("clock", &self.clock.as_ref().map(|_| "custom"))
            .finish()
    }
}

impl FailoverFacilitatorBuilder {
    /// Adds a member, after those added before (the first is the primary).
    /// `name` appears in logs, metrics and [`members`](FailoverFacilitator::members):
    /// pick a short label, never a URL with credentials.
    pub fn member(mut self, name: impl Into<String>, facilitator: impl Facilitator) -> Self {
        self.members.push((name.into(), Arc::new(facilitator)));
        self
    }

    /// Consecutive failures that open a member's breaker. Default:
    /// [`DEFAULT_FAILURE_THRESHOLD`] (5).
    pub fn failure_threshold(mut self, failures: u32) -> Self {
        self.policy.threshold = failures;
        self
    }

    /// Opens a member's breaker when at least `percent` of its last
    /// `window` calls failed (looked at once `window` calls were seen).
    /// Default: 50 % of 20.
    pub fn failure_rate(mut self, percent: u8, window: u16) -> Self {
        self.policy.rate_percent = percent;
        self.policy.rate_window = window;
        self
    }

    /// How long an open breaker keeps calls away before a probe. Default:
    /// [`DEFAULT_COOL_DOWN`] (30 s).
    pub fn cool_down(mut self, cool_down: Duration) -> Self {
        self.policy.cool_down = cool_down;
        self
    }

    /// The clock of the breakers and of the settlement preference: a
    /// function returning the current [`Instant`]. Default:
    /// [`Instant::now`]. For tests that move time by hand.
    pub fn clock(mut self, clock: impl Fn() -> Instant + Send + Sync + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<FailoverFacilitator, FailoverConfigError> {
        if self.members.is_empty() {
            return Err(FailoverConfigError::NoMembers);
        }
        for (i, (name, _)) in self.members.iter().enumerate() {
            if name.trim().is_empty() {
                return Err(FailoverConfigError::EmptyName);
            }
            if self.members[..i].iter().any(|(other, _)| other == name) {
                return Err(FailoverConfigError::DuplicateName(name.clone()));
            }
        }
        let policy = self.policy;
        if policy.threshold == 0 {
            return Err(FailoverConfigError::ZeroThreshold);
        }
        if !(1..=100).contains(&policy.rate_percent)
            || !(1..=MAX_FAILURE_RATE_WINDOW).contains(&policy.rate_window)
        {
            return Err(FailoverConfigError::InvalidFailureRate {
                percent: policy.rate_percent,
                window: policy.rate_window,
            });
        }
        let members = self
            .members
            .into_iter()
            .map(|(name, facilitator)| Member {
                name,
                facilitator,
                breaker: Breaker::new(policy),
            })
            .collect();
        Ok(FailoverFacilitator {
            inner: Arc::new(Inner {
                members,
                clock: self.clock.unwrap_or_else(|| Arc::new(Instant::now)),
                sticky: Mutex::default(),
                trial_ended: Notify::new(),
            }),
        })
    }
}
