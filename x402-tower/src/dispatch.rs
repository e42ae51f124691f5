//! What a router tells the paywall about a request it dispatched.

use std::net::IpAddr;

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
///
/// # The peer's address
///
/// [Abuse limits](x402_core::limit) key clients by the peer's IP address,
/// which the paywall knows only from [`peer`](Self::peer). hyper (and
/// hyper-util's server) do not put the connection's remote address in a
/// request's extensions; an accept loop that knows it can insert it into
/// each request (a `tower::util::MapRequest` per connection, say) for a
/// `ReadDispatch` to read back:
///
/// ```
/// use std::net::SocketAddr;
/// use http::Extensions;
/// use x402_tower::Dispatch;
///
/// /// Inserted by my accept loop into every request of a connection.
/// #[derive(Clone, Copy)]
/// struct RemoteAddr(SocketAddr);
///
/// fn with_peer(extensions: &Extensions) -> Dispatch<'_> {
///     Dispatch::default().peer(extensions.get::<RemoteAddr>().map(|a| a.0.ip()))
/// }
/// # let _ = with_peer;
/// ```
///
/// Without it, requests have no address and are not limited, unless the
/// limit keys clients by a function of the request instead
/// ([`RateLimit::key_by`](x402_core::limit::RateLimit::key_by)).
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct Dispatch<'a> {
    /// The URI the client sent, when the router rewrote the request's (a
    /// nested router stripping its prefix): routes are matched and resource
    /// URLs built on it.
    pub original_uri: Option<&'a Uri>,
    /// The route template the router matched, in its own syntax.
    pub route_template: Option<&'a str>,
    /// The IP address of the peer that sent the request, when the server
    /// says (see [the peer's address](#the-peers-address)).
    pub peer: Option<IpAddr>,
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

    /// Sets the IP address of the peer that sent the request.
    #[must_use]
    pub fn peer(mut self, peer: Option<IpAddr>) -> Self {
        self.peer = peer;
        self
    }
}

/// Reads a [`Dispatch`] from a request's extensions.
pub type ReadDispatch = for<'a> fn(&'a Extensions) -> Dispatch<'a>;

/// The default: the router said nothing.
pub(crate) fn nothing(_: &Extensions) -> Dispatch<'_> {
    Dispatch::default()
}
