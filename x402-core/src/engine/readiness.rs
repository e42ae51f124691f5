//! [`Engine::readiness`]: the engine's probe of its facilitator, reported
//! as [`crate::readiness`] describes.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use super::Engine;
use crate::{
    facilitator::FacilitatorError,
    readiness::{self, Readiness, DEFAULT_PROBE_DEADLINE},
};

impl Engine {
    /// Whether the engine can take payments now (see the
    /// [module docs](crate::readiness)), asking the facilitator with a
    /// [deadline](DEFAULT_PROBE_DEADLINE) of 2 seconds.
    ///
    /// Each call asks the facilitator; to serve it to the public, use
    /// [`DiscoveryEndpoints::health`](crate::discovery::DiscoveryEndpoints::health),
    /// which asks at most once per interval.
    pub async fn readiness(&self) -> Readiness {
        self.readiness_within(DEFAULT_PROBE_DEADLINE).await
    }

    /// [`readiness`](Self::readiness) with the probe's deadline: past it,
    /// the facilitator counts as unreachable (`probeError: "timeout"`).
    pub async fn readiness_within(&self, deadline: Duration) -> Readiness {
        let health = tokio::time::timeout(deadline, self.facilitator().health()).await;
        let (supported, wallets) = match health {
            Ok(health) => (health.supported, health.wallets),
            Err(_elapsed) => (Err(FacilitatorError::Timeout), Vec::new()),
        };
        readiness::report(
            &supported,
            wallets,
            self.observed(),
            &self.protected_routes(),
        )
    }

    /// The last probe when it is younger than `max_age`, else a new one
    /// (callers meanwhile wait for it and share it): what the health
    /// endpoint serves, so that its requests never reach the facilitator
    /// more than once per `max_age`.
    pub(crate) async fn readiness_at_most_every(
        &self,
        max_age: Duration,
        deadline: Duration,
    ) -> Arc<Readiness> {
        let mut probe = self.observed().probe.lock().await;
        if let Some((at, readiness)) = probe.as_ref() {
            if at.elapsed() < max_age {
                return readiness.clone();
            }
        }
        let readiness = Arc::new(self.readiness_within(deadline).await);
        *probe = Some((Instant::now(), readiness.clone()));
        readiness
    }
}
