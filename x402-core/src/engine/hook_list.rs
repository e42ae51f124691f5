//! An engine's hooks, each with the steps it takes part in.

use std::sync::Arc;

use crate::hooks::{HookSteps, PaymentHooks};

/// The hooks in their order, with the steps each named when the engine was
/// built ([`PaymentHooks::steps`]).
pub(super) struct HookList {
    hooks: Vec<(Arc<dyn PaymentHooks>, HookSteps)>,
}

impl HookList {
    pub(super) fn new(hooks: Vec<Arc<dyn PaymentHooks>>) -> Self {
        Self {
            hooks: hooks
                .into_iter()
                .map(|h| {
                    let steps = h.steps();
                    (h, steps)
                })
                .collect(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.hooks.len()
    }

    /// Whether some hook takes part in `step`.
    pub(super) fn any_at(&self, step: HookSteps) -> bool {
        self.hooks.iter().any(|(_, s)| s.contains(step))
    }

    /// The hooks that take part in `step`, in order.
    pub(super) fn at(&self, step: HookSteps) -> impl Iterator<Item = &Arc<dyn PaymentHooks>> {
        self.hooks
            .iter()
            .filter(move |(_, s)| s.contains(step))
            .map(|(h, _)| h)
    }

    /// As [`at`](Self::at), with each hook's place among all the hooks.
    pub(super) fn enumerate_at(
        &self,
        step: HookSteps,
    ) -> impl Iterator<Item = (usize, &Arc<dyn PaymentHooks>)> {
        self.hooks
            .iter()
            .enumerate()
            .filter(move |(_, (_, s))| s.contains(step))
            .map(|(i, (h, _))| (i, h))
    }

    /// The hooks before place `end` (see [`enumerate_at`](Self::enumerate_at))
    /// that take part in `step`, cloned.
    pub(super) fn before_at(&self, end: usize, step: HookSteps) -> Vec<Arc<dyn PaymentHooks>> {
        self.hooks
            .get(..end)
            .unwrap_or_default()
            .iter()
            .filter(|(_, s)| s.contains(step))
            .map(|(h, _)| Arc::clone(h))
            .collect()
    }
}
