//! Where the engine's absolute URLs take their scheme and authority from.

use super::*;

/// Where the engine's absolute URLs (the challenge's `resource.url`,
/// discovery) take their scheme and authority from.
#[derive(Debug, Clone)]
pub(super) enum Origin {
    /// Not configured: `http://localhost`, logged once.
    Unset,
    /// [`EngineBuilder::public_origin`]: `scheme://authority`.
    Fixed { scheme: String, authority: String },
    /// [`EngineBuilder::trust_proxy_headers`].
    FromProxy,
}

impl Origin {
    pub(super) fn parse(origin: &str) -> Result<Self, ConfigError> {
        let err = |reason| ConfigError::PublicOrigin {
            origin: origin.to_owned(),
            reason,
        };
        let uri: http::Uri = origin.parse().map_err(|_| err("not an absolute URL"))?;
        let scheme = match uri.scheme_str() {
            Some(s @ ("http" | "https")) => s.to_owned(),
            _ => return Err(err("the scheme must be http or https")),
        };
        let authority = uri.authority().ok_or_else(|| err("no host"))?;
        if authority.host().is_empty() || authority.as_str().contains('@') {
            return Err(err("the authority must be a host and optional port"));
        }
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(err("an origin has no path or query"));
        }
        Ok(Self::Fixed {
            scheme,
            authority: authority.as_str().to_ascii_lowercase(),
        })
    }
}

/// The request's absolute URL, in pieces: the engine's public origin (see
/// [`EngineBuilder::public_origin`]) and the request's path and query.
#[derive(Debug, Clone, Copy)]
pub(super) struct RequestUrl<'a> {
    pub(super) scheme: &'a str,
    pub(super) authority: &'a str,
    pub(super) path: &'a str,
}

impl<'a> RequestUrl<'a> {
    pub(super) fn of(origin: &'a Origin, request: &RequestView<'a>) -> Self {
        let uri = request.uri;
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let (scheme, authority) = origin.parts(request.headers);
        Self {
            scheme,
            authority,
            path,
        }
    }

    /// Whether `url` is this URL, compared without building it.
    pub(super) fn is(&self, url: &str) -> bool {
        url.strip_prefix(self.scheme)
            .and_then(|rest| rest.strip_prefix("://"))
            .and_then(|rest| rest.strip_prefix(self.authority))
            == Some(self.path)
    }

    /// The URL as one string, allocated once at its final length
    /// (`to_string` would grow it piece by piece).
    pub(super) fn to_url(self) -> String {
        let mut url = String::with_capacity(
            self.scheme.len() + "://".len() + self.authority.len() + self.path.len(),
        );
        url.push_str(self.scheme);
        url.push_str("://");
        url.push_str(self.authority);
        url.push_str(self.path);
        url
    }
}

impl Origin {
    /// The scheme and authority of URLs written for a request with these
    /// headers.
    pub(super) fn parts<'a>(&'a self, headers: &'a HeaderMap) -> (&'a str, &'a str) {
        match self {
            Self::Fixed { scheme, authority } => (scheme, authority),
            Self::FromProxy => {
                static X_FORWARDED_PROTO: http::HeaderName =
                    http::HeaderName::from_static("x-forwarded-proto");
                static X_FORWARDED_HOST: http::HeaderName =
                    http::HeaderName::from_static("x-forwarded-host");
                // The first value of a list: the one the outermost proxy set.
                let header = |name: &http::HeaderName| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.split(',').next())
                        .map(str::trim)
                        .filter(|v| is_authority(v))
                };
                let scheme = match header(&X_FORWARDED_PROTO) {
                    Some(p) if p.eq_ignore_ascii_case("https") => "https",
                    _ => "http",
                };
                let authority = header(&X_FORWARDED_HOST)
                    .or_else(|| header(&http::header::HOST))
                    .unwrap_or("localhost");
                (scheme, authority)
            }
            Self::Unset => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(
                        "x402: no public origin configured; resource URLs name http://localhost \
                         (set EngineBuilder::public_origin)"
                    );
                });
                ("http", "localhost")
            }
        }
    }
}

/// Whether a header value can stand as a URL's authority: a host name or
/// address and an optional port, nothing that would change the URL's shape.
pub(super) fn is_authority(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 255
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
}
