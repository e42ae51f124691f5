use tower_layer::Layer;
use x402_core::{
    engine::{ConfigError, Guard},
    Engine, Route,
};

use crate::{dispatch::ReadDispatch, Paywall};

/// Applies the x402 paywall to a service. See the [crate docs](crate).
#[derive(Debug, Clone)]
#[must_use]
pub struct PaywallLayer {
    guard: Guard,
    read_dispatch: ReadDispatch,
}

impl PaywallLayer {
    /// A layer driven by `engine`'s route table: a request is protected when
    /// one of its routes covers it (see [`x402_core::boundary`]).
    pub fn new(engine: Engine) -> Self {
        Self {
            guard: Guard::Table(engine),
            read_dispatch: crate::dispatch::nothing,
        }
    }

    /// A layer for one handler, priced by `route`: every request that
    /// reaches the layer is `route`'s (for its method), whatever its path,
    /// so the price sits where the handler is declared and no path matching
    /// is involved (see [`Engine::bind`]). The route is checked now.
    ///
    /// ```
    /// use x402_core::{Engine, Offer, Route};
    /// use x402_tower::PaywallLayer;
    /// # use x402_core::testing::StandIn;
    ///
    /// let paywall = PaywallLayer::new(Engine::builder(StandIn::new()).build()?);
    /// let weather = paywall.route(Route::get("/weather/{city}").offer(Offer::exact(
    ///     "eip155:84532",
    ///     "$0.001",
    ///     "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
    /// )))?;
    /// # let _ = weather;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn route(&self, route: Route) -> Result<Self, ConfigError> {
        Ok(Self {
            guard: Guard::Route(self.engine().bind(route)?),
            read_dispatch: self.read_dispatch,
        })
    }

    /// Tells the paywall how to read what the router in front of it decided,
    /// from the request's extensions: the URI before a nested router
    /// stripped its prefix, and the route template that matched (see
    /// [`Dispatch`](crate::Dispatch)). Framework adapters set this
    /// (`x402-axum` reads axum's `OriginalUri` and `MatchedPath`); without
    /// it the paywall sees the request as the inner service gets it.
    pub fn read_dispatch(mut self, read: ReadDispatch) -> Self {
        self.read_dispatch = read;
        self
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        self.guard.engine()
    }
}

impl<S> Layer<S> for PaywallLayer {
    type Service = Paywall<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Paywall::with_parts(inner, self.guard.clone(), self.read_dispatch)
    }
}
