//! The parts of a request the engine reads.

use std::net::IpAddr;

use http::{HeaderMap, Method, Uri};

/// The parts of a request the engine reads. Built by adapters; cheap to
/// create from borrowed parts.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI as the client sent it: the whole path, before any router
    /// stripped a prefix (axum's `OriginalUri` inside `nest`), with the
    /// query.
    pub uri: &'a Uri,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The route template the router dispatched the request on, when the
    /// framework says (axum's `MatchedPath`, actix-web's `match_pattern()`),
    /// in the router's own syntax (`/weather/{city}`). A protected route
    /// whose pattern covers it protects the request, whatever its path
    /// reads as; see [`boundary`](crate::boundary).
    pub route_template: Option<&'a str>,
    /// The payment an outer paywall already verified for this request
    /// (found in its extensions): the request passes, since one request
    /// pays once, however many paywalls it crosses.
    pub paid_upstream: Option<&'a crate::payment::VerifiedPayment>,
    /// The IP address of the peer that sent the request (the TCP
    /// connection's remote end: a reverse proxy's, behind one), when the
    /// adapter knows it. [Abuse limits](crate::limit) key clients by it.
    pub peer: Option<IpAddr>,
}

impl<'a> RequestView<'a> {
    /// A view of a request's parts.
    pub fn new(method: &'a Method, uri: &'a Uri, headers: &'a HeaderMap) -> Self {
        Self {
            method,
            uri,
            headers,
            route_template: None,
            paid_upstream: None,
            peer: None,
        }
    }

    /// Sets the route template the router dispatched the request on.
    #[must_use]
    pub fn route_template(mut self, template: Option<&'a str>) -> Self {
        self.route_template = template;
        self
    }

    /// Sets the payment an outer paywall verified for this request.
    #[must_use]
    pub fn paid_upstream(mut self, payment: Option<&'a crate::payment::VerifiedPayment>) -> Self {
        self.paid_upstream = payment;
        self
    }

    /// Sets the IP address of the peer that sent the request (actix-web's
    /// `peer_addr()`, axum's `ConnectInfo<SocketAddr>`).
    #[must_use]
    pub fn peer(mut self, peer: Option<IpAddr>) -> Self {
        self.peer = peer;
        self
    }

    /// A view of `http::request::Parts`.
    pub fn from_parts(parts: &'a http::request::Parts) -> Self {
        Self::new(&parts.method, &parts.uri, &parts.headers)
    }

    pub(crate) fn to_owned_info(self) -> RequestInfo {
        RequestInfo {
            method: self.method.clone(),
            uri: self.uri.clone(),
            headers: self.headers.clone(),
        }
    }
}

/// An owned copy of a request's method, URI and headers, given to dynamic
/// pricing functions.
#[derive(Debug, Clone)]
pub struct RequestInfo {
    /// The method.
    pub method: Method,
    /// The URI.
    pub uri: Uri,
    /// The headers.
    pub headers: HeaderMap,
}
