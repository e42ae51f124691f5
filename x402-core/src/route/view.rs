//! The parts of a request the engine reads.

use std::net::IpAddr;

use http::{HeaderMap, HeaderValue, Method, Uri};

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

/// The headers a payment, a session call and a sign-in come in, found in
/// one pass over the request's headers: a lookup by name hashes the name,
/// and a request carries a handful of headers. Each is the first value sent
/// under its name, as [`HeaderMap::get`] would give it.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Sent<'a> {
    signature: Option<&'a HeaderValue>,
    x_payment: Option<&'a HeaderValue>,
    pub(crate) session: Option<&'a HeaderValue>,
    pub(crate) sign_in: Option<&'a HeaderValue>,
}

impl<'a> Sent<'a> {
    pub(crate) fn of(headers: &'a HeaderMap) -> Self {
        let mut sent = Self::default();
        for (name, value) in headers {
            let slot = if *name == crate::codec::PAYMENT_SIGNATURE {
                &mut sent.signature
            } else if *name == crate::codec::X_PAYMENT {
                &mut sent.x_payment
            } else if *name == crate::session::X_PAYMENT_SESSION {
                &mut sent.session
            } else if *name == crate::siwx::SIGN_IN_WITH_X_HEADER {
                &mut sent.sign_in
            } else {
                continue;
            };
            slot.get_or_insert(value);
        }
        sent
    }

    /// The payment header: `PAYMENT-SIGNATURE` wins when both are sent (the
    /// version inside decides).
    pub(crate) fn payment(&self) -> Option<&'a HeaderValue> {
        self.signature.or(self.x_payment)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderName;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    /// One pass finds what a lookup of each name finds: the first value of
    /// each name, whatever its case or its place among other headers.
    #[test]
    fn sent_headers_are_what_lookups_find() {
        let cases = [
            headers(&[]),
            headers(&[("host", "a"), ("accept", "*/*")]),
            headers(&[("Payment-Signature", "v2"), ("X-PAYMENT", "v1")]),
            headers(&[("x-payment", "v1"), ("payment-signature", "v2")]),
            headers(&[("x-payment", "first"), ("x-payment", "second")]),
            headers(&[
                ("user-agent", "t"),
                ("X-Payment-Session", "token"),
                ("Sign-In-With-X", "proof"),
                ("x-payment-session", "later"),
            ]),
        ];
        for map in &cases {
            let sent = Sent::of(map);
            let looked_up = map
                .get(crate::codec::PAYMENT_SIGNATURE)
                .or_else(|| map.get(crate::codec::X_PAYMENT));
            assert_eq!(sent.payment(), looked_up, "{map:?}");
            assert_eq!(
                sent.session,
                map.get(crate::session::X_PAYMENT_SESSION),
                "{map:?}"
            );
            assert_eq!(
                sent.sign_in,
                map.get(crate::siwx::SIGN_IN_WITH_X_HEADER),
                "{map:?}"
            );
        }
        assert_eq!(
            Sent::of(&cases[3]).payment().unwrap(),
            "v2",
            "PAYMENT-SIGNATURE wins over X-PAYMENT"
        );
    }
}
