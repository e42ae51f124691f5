use tower_layer::Layer;
use x402_core::Engine;

use crate::Paywall;

/// Applies the x402 paywall to a service. See the [crate docs](crate).
#[derive(Debug, Clone)]
pub struct PaywallLayer {
    engine: Engine,
}

impl PaywallLayer {
    /// A layer driven by `engine`.
    pub fn new(engine: Engine) -> Self {
        Self { engine }
    }
}

impl<S> Layer<S> for PaywallLayer {
    type Service = Paywall<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Paywall::new(inner, self.engine.clone())
    }
}
