//! Translation between actix-web 4 (`http` 0.2 types) and x402-core (`http`
//! 1.x types). Nothing here decides anything about payments.
//!
//! Both `http` versions accept exactly the same methods, URIs, header names,
//! header values and status codes (the parsers are the same code), so every
//! conversion below succeeds for any request actix-web could parse. The
//! fallible paths exist because "cannot happen" is not a reason to panic on
//! attacker input; each says what it does instead.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use actix_web::{
    body::{BodySize, BoxBody, MessageBody},
    dev::ServiceRequest,
    http::{
        header::{HeaderMap, HeaderName, HeaderValue},
        StatusCode,
    },
    web::Bytes,
    HttpResponse,
};
use x402_core::{engine::EngineResponse, route::RequestView};

/// The parts of an actix request the engine reads, as `http` 1.x types.
#[derive(Debug)]
pub(crate) struct RequestHead {
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
    /// The resource pattern actix-web matched, scope prefixes included.
    pattern: Option<String>,
    /// The payment an outer paywall verified.
    paid_upstream: Option<x402_core::VerifiedPayment>,
}

/// Why a request could not be translated for the engine.
#[derive(Debug)]
pub(crate) enum Untranslatable {
    Method,
    Uri,
}

/// What the middleware reads of every request to learn whether the engine
/// protects it, read once and kept for the translation if it does: the
/// method as `http` 1.x (`None` when that cannot represent it) and the
/// resource pattern actix-web matched (`match_pattern()` matches the path
/// again and allocates the pattern).
#[derive(Debug)]
pub(crate) struct Routing {
    pub(crate) method: Option<http::Method>,
    pub(crate) pattern: Option<String>,
}

impl Routing {
    pub(crate) fn of(request: &ServiceRequest) -> Self {
        Self {
            method: http::Method::from_bytes(request.method().as_str().as_bytes()).ok(),
            pattern: request.match_pattern(),
        }
    }
}

impl RequestHead {
    /// Copies the method, URI and headers of `request`, whose method and
    /// pattern `routing` read.
    ///
    /// Headers that do not convert are skipped (logged at `debug`); the
    /// method and URI must convert, since the engine routes on them.
    pub(crate) fn from_request(
        request: &ServiceRequest,
        routing: Routing,
    ) -> Result<Self, Untranslatable> {
        let method = routing.method.ok_or(Untranslatable::Method)?;
        // `Display` writes the URI back in the form it was parsed from.
        let uri =
            http::Uri::try_from(request.uri().to_string()).map_err(|_| Untranslatable::Uri)?;
        Ok(Self {
            method,
            uri,
            headers: headers_to_http1(request.headers()),
            pattern: routing.pattern,
            paid_upstream: {
                use actix_web::HttpMessage as _;
                request
                    .extensions()
                    .get::<x402_core::VerifiedPayment>()
                    .cloned()
            },
        })
    }

    /// The engine's view of the request: actix-web never rewrites a
    /// request's URI for a scope, so it is the one the client sent.
    pub(crate) fn view(&self) -> RequestView<'_> {
        RequestView::new(&self.method, &self.uri, &self.headers)
            .route_template(self.pattern.as_deref())
            .paid_upstream(self.paid_upstream.as_ref())
    }
}

/// Copies actix headers into an `http` 1.x map, keeping order, repeated
/// values and the sensitive flag.
pub(crate) fn headers_to_http1(headers: &HeaderMap) -> http::HeaderMap {
    let mut out = http::HeaderMap::with_capacity(headers.len());
    for (name, value) in headers.iter() {
        let converted = (
            http::HeaderName::from_bytes(name.as_str().as_bytes()),
            http::HeaderValue::from_bytes(value.as_bytes()),
        );
        match converted {
            (Ok(name), Ok(mut converted)) => {
                converted.set_sensitive(value.is_sensitive());
                out.append(name, converted);
            }
            _ => {
                tracing::debug!(header = %name, "x402: header not representable as http 1.x; skipped");
            }
        }
    }
    out
}

/// Applies to `target` what changed between `before` (the translation of
/// `target`) and `after` (the same map once the engine added to it).
///
/// Only the names whose values changed are rewritten, so a header that could
/// not be translated in the first place is left exactly as it was.
pub(crate) fn write_back(
    target: &mut HeaderMap,
    before: &http::HeaderMap,
    after: &http::HeaderMap,
) {
    let changed = before
        .keys()
        .chain(after.keys().filter(|name| !before.contains_key(*name)))
        .filter(|name| !before.get_all(*name).iter().eq(after.get_all(*name).iter()));
    for name in changed {
        let Ok(actix_name) = HeaderName::from_bytes(name.as_str().as_bytes()) else {
            tracing::debug!(header = %name, "x402: header not representable in actix-web; skipped");
            continue;
        };
        target.remove(&actix_name);
        for value in after.get_all(name) {
            match HeaderValue::from_bytes(value.as_bytes()) {
                Ok(mut converted) => {
                    converted.set_sensitive(value.is_sensitive());
                    target.append(actix_name.clone(), converted);
                }
                Err(_) => {
                    tracing::debug!(header = %name, "x402: header value not representable in actix-web; skipped");
                }
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// An actix-web body as an [`http_body::Body`], so that the engine can
    /// hold or stream it.
    pub(crate) struct HandlerBody<B> {
        #[pin]
        body: B,
    }
}

impl<B> HandlerBody<B> {
    pub(crate) fn new(body: B) -> Self {
        Self { body }
    }

    pub(crate) fn into_inner(self) -> B {
        self.body
    }
}

impl<B: MessageBody> http_body::Body for HandlerBody<B> {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.project()
            .body
            .poll_next(cx)
            .map(|chunk| chunk.map(|c| c.map(http_body::Frame::data).map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.body.size(), BodySize::None | BodySize::Sized(0))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self.body.size() {
            BodySize::None => http_body::SizeHint::with_exact(0),
            BodySize::Sized(n) => http_body::SizeHint::with_exact(n),
            BodySize::Stream => http_body::SizeHint::default(),
        }
    }
}

/// An actix status as an `http` 1.x status.
pub(crate) fn status_to_http1(status: StatusCode) -> http::StatusCode {
    // Both crates accept exactly 100..=999, so this never falls back; if it
    // did, a 500 makes the engine release the payment and charge nothing.
    http::StatusCode::from_u16(status.as_u16()).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR)
}

/// An engine response (402 challenge, 5xx, settlement failure, ...) as an
/// actix response: status, headers (in order, repeated values kept) and body.
pub(crate) fn response(response: EngineResponse) -> HttpResponse<BoxBody> {
    let (parts, body) = response.into_parts();
    // Same range in both crates (see `status_to_http1`).
    let status =
        StatusCode::from_u16(parts.status.as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut out = HttpResponse::with_body(status, body);
    write_back(out.headers_mut(), &http::HeaderMap::new(), &parts.headers);
    out.map_into_boxed_body()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use actix_web::{test::TestRequest, web::Bytes};

    use super::*;

    #[test]
    fn request_head_keeps_method_uri_and_every_header_value() {
        let request = TestRequest::default()
            .method(actix_web::http::Method::from_bytes(b"PURGE").unwrap())
            .uri("http://example.com:8080/pa%69d?x=1&y")
            .append_header(("x-many", "one"))
            .append_header(("x-many", "two"))
            .insert_header(("payment-signature", "abc"))
            .to_srv_request();
        let head = RequestHead::from_request(&request, Routing::of(&request)).unwrap();
        let view = head.view();
        assert_eq!(view.method.as_str(), "PURGE");
        assert_eq!(view.uri.to_string(), "http://example.com:8080/pa%69d?x=1&y");
        assert_eq!(view.uri.path(), "/pa%69d");
        let many: Vec<_> = view.headers.get_all("x-many").iter().collect();
        assert_eq!(many, ["one", "two"]);
        assert_eq!(view.headers["payment-signature"], "abc");
    }

    #[test]
    fn origin_form_uri_stays_origin_form() {
        let request = TestRequest::get().uri("//paid/?q").to_srv_request();
        let head = RequestHead::from_request(&request, Routing::of(&request)).unwrap();
        assert_eq!(
            head.view().uri.path_and_query().unwrap().as_str(),
            "//paid/?q"
        );
        assert!(head.view().uri.scheme().is_none());
    }

    #[test]
    fn write_back_touches_only_changed_names() {
        let mut target = HeaderMap::new();
        target.append(
            HeaderName::from_static("x-keep"),
            HeaderValue::from_static("1"),
        );
        target.append(
            HeaderName::from_static("x-multi"),
            HeaderValue::from_static("a"),
        );
        target.append(
            HeaderName::from_static("x-multi"),
            HeaderValue::from_static("b"),
        );
        target.append(
            HeaderName::from_static("x-gone"),
            HeaderValue::from_static("1"),
        );
        let before = headers_to_http1(&target);
        let mut after = before.clone();
        after.remove("x-gone");
        after.insert("x-new", http::HeaderValue::from_static("n"));
        after.append("x-multi", http::HeaderValue::from_static("c"));

        write_back(&mut target, &before, &after);

        assert_eq!(headers_to_http1(&target), after);
        let multi: Vec<_> = target.get_all("x-multi").collect();
        assert_eq!(multi, ["a", "b", "c"]);
        assert!(!target.contains_key("x-gone"));
    }

    #[test]
    fn engine_response_converts_status_headers_and_body() {
        let engine = http::Response::builder()
            .status(402)
            .header("payment-required", "e30=")
            .header("vary", "accept")
            .header("vary", "user-agent")
            .body(Bytes::from_static(b"{}"))
            .unwrap();
        let response = response(engine);
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
        assert_eq!(response.headers().get("payment-required").unwrap(), "e30=");
        let vary: Vec<_> = response.headers().get_all("vary").collect();
        assert_eq!(vary, ["accept", "user-agent"]);
        let body = actix_web::body::MessageBody::try_into_bytes(response.into_body()).unwrap();
        assert_eq!(body, "{}");
    }

    #[test]
    fn statuses_convert_both_ways() {
        for code in [100, 200, 204, 402, 418, 500, 502, 599, 999] {
            let actix = StatusCode::from_u16(code).unwrap();
            assert_eq!(status_to_http1(actix).as_u16(), code);
        }
    }
}
