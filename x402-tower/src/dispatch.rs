//! What a router tells the paywall about a request it dispatched.

use http::{Extensions, Uri};

/// What the router in front of a [`Paywall`](crate::Paywall) decided about a
/// request, read from its extensions by a [`ReadDispatch`] function.
///
/// ```
/// use http::Extensions;
/// use x402_tower::{Dispatch, PaywallLayer};
/// # use x402_core::Engine;
/// # use x402_core::testing::StandIn;
///
/// /// The template my router stores in each request it dispatches.
/// #[derive(Clone)]
/// struct MatchedTemplate(&'static str);
///
/// fn my_router(extensions: &Extensions) -> Dispatch<'_> {
///     Dispatch::default().route_template(extensions.get::<MatchedTemplate>().map(|t| t.0))
/// }
///
/// # let engine = Engine::builder(StandIn::new()).build()?;
/// let layer = PaywallLayer::new(engine).read_dispatch(my_router);
/// # let _ = layer;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct Dispatch<'a> {
    /// The URI the client sent, when the router rewrote the request's (a
    /// nested router stripping its prefix): routes are matched and resource
    /// URLs built on it.
    pub original_uri: Option<&'a Uri>,
    /// The route template the router matched, in its own syntax.
    pub route_template: Option<&'a str>,
}

impl<'a> Dispatch<'a> {
    /// Sets the URI the client sent.
    #[must_use]
    pub fn original_uri(mut self, uri: Option<&'a Uri>) -> Self {
        self.original_uri = uri;
        self
    }

    /// Sets the route template the router matched.
    #[must_use]
    pub fn route_template(mut self, template: Option<&'a str>) -> Self {
        self.route_template = template;
        self
    }
}

/// Reads a [`Dispatch`] from a request's extensions.
pub type ReadDispatch = for<'a> fn(&'a Extensions) -> Dispatch<'a>;

/// The default: the router said nothing.
pub(crate) fn nothing(_: &Extensions) -> Dispatch<'_> {
    Dispatch::default()
}
