#![doc = include_str!("http/README.md")]

use std::{
    fmt,
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Uri};
use reqwest::{Client, Url};

use super::{Facilitator, FacilitatorError, FacilitatorHealth};
use crate::capped::read_capped;
use crate::proto::{
    FacilitatorRequest, PreparedRequest, SettleResponse, SupportedResponse, VerifyResponse,
};

/// The `User-Agent` of every call.
const USER_AGENT: &str = concat!("x402-core/", env!("CARGO_PKG_VERSION"));
/// The default deadline of one request.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default lifetime of a cached `/supported` answer.
const DEFAULT_SUPPORTED_TTL: Duration = Duration::from_secs(300);
/// After a failed `/supported` refresh, how long the stale value is served
/// before the next attempt (at most the TTL).
const FAILED_REFRESH_BACKOFF: Duration = Duration::from_secs(5);
/// The most of a reply body that is read.
const MAX_BODY_BYTES: usize = 1 << 20;
/// The longest `FacilitatorError::Status` message.
const MAX_LOG_MESSAGE_CHARS: usize = 200;
/// The longest reason code taken from an `error` field.
const MAX_REASON_CODE_LEN: usize = 100;
/// The facilitator's extension outcomes, base64 JSON keyed by extension.
const EXTENSION_RESPONSES: &str = "extension-responses";
/// The `extra` keys that name a facilitator-chosen signer.
const SIGNER_KEYS: [&str; 2] = ["feePayer", "facilitatorAddress"];

/// A facilitator endpoint, passed to [`AuthHeaders`] so a provider can scope
/// its credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Endpoint {
    /// `POST {base}/verify`.
    Verify,
    /// `POST {base}/settle`.
    Settle,
    /// `GET {base}/supported`.
    Supported,
}

impl Endpoint {
    /// The path segment after the base URL (`"verify"`, `"settle"`,
    /// `"supported"`).
    pub fn path(self) -> &'static str {
        match self {
            Self::Verify => "verify",
            Self::Settle => "settle",
            Self::Supported => "supported",
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path())
    }
}

/// Supplies the headers (usually `Authorization`) sent with each facilitator
/// request.
///
/// It is called once per request, inside the request's deadline, so hosted
/// facilitators that want a fresh token per call get one. An error aborts the
/// request with that error.
///
/// Closures `Fn(Endpoint) -> impl Future<Output = Result<HeaderMap,
/// FacilitatorError>>` implement it:
///
/// ```
/// use http::{header, HeaderMap, HeaderValue};
/// use x402_core::facilitator::{Endpoint, FacilitatorError, HttpFacilitator};
///
/// let facilitator = HttpFacilitator::builder("https://facilitator.example/api/")
///     .auth(|_endpoint: Endpoint| async move {
///         let mut headers = HeaderMap::new();
///         headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer token"));
///         Ok::<_, FacilitatorError>(headers)
///     })
///     .build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[async_trait]
pub trait AuthHeaders: Send + Sync + 'static {
    /// The headers for one request to `endpoint`.
    async fn headers(&self, endpoint: Endpoint) -> Result<HeaderMap, FacilitatorError>;
}

#[async_trait]
impl<F, Fut> AuthHeaders for F
where
    F: Fn(Endpoint) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<HeaderMap, FacilitatorError>> + Send,
{
    async fn headers(&self, endpoint: Endpoint) -> Result<HeaderMap, FacilitatorError> {
        self(endpoint).await
    }
}

/// Why an [`HttpFacilitator`] could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpFacilitatorConfigError {
    /// The base URL does not parse or cannot take a path.
    #[error("invalid facilitator URL: {0}")]
    InvalidUrl(String),
    /// The base URL is not `http` or `https`.
    #[error("unsupported facilitator URL scheme {0:?} (expected http or https)")]
    UnsupportedScheme(String),
    /// The base URL is plain `http://` to a host that is not loopback, and
    /// [`HttpFacilitatorBuilder::dangerous_allow_plain_http`] was not called.
    #[error(
        "refusing plain http:// to the facilitator at {host}: payment payloads, \
         verdicts and auth headers would travel unencrypted; use https://, or call \
         HttpFacilitatorBuilder::dangerous_allow_plain_http() if the network path \
         is trusted"
    )]
    PlainHttp {
        /// The URL's host (never its credentials, path or query).
        host: String,
    },
    /// The HTTP client could not be created.
    #[error("could not create the HTTP client")]
    Client(#[source] reqwest::Error),
}

/// A client for a facilitator that speaks the x402 HTTP API.
///
/// Cheap to clone: clones share the connection pool and the `/supported`
/// cache.
///
/// ```
/// use std::time::Duration;
/// use x402_core::facilitator::HttpFacilitator;
///
/// let plain = HttpFacilitator::new("https://x402.org/facilitator")?;
/// let tuned = HttpFacilitator::builder("https://x402.org/facilitator/")
///     .timeout(Duration::from_secs(5))
///     .supported_ttl(Duration::from_secs(60))
///     .build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct HttpFacilitator {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    /// The transport calls go through, when reqwest is not needed (see
    /// [`transport`]).
    transport: Option<Transport>,
    /// The endpoints' paths and queries, for the transport.
    verify_target: Uri,
    settle_target: Uri,
    supported_target: Uri,
    /// The base URL with credentials, query and fragment left out, for logs.
    display_url: String,
    verify_url: Url,
    settle_url: Url,
    supported_url: Url,
    timeout: Duration,
    supported_ttl: Duration,
    auth: Option<Arc<dyn AuthHeaders>>,
    cache: tokio::sync::Mutex<Option<CachedSupported>>,
}

struct CachedSupported {
    value: SupportedResponse,
    /// When the value must be refreshed; `None` for never (a TTL too large to
    /// add to the clock).
    refresh_at: Option<Instant>,
}

impl fmt::Debug for HttpFacilitator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpFacilitator")
            .field("base_url", &self.inner.display_url)
            .field("timeout", &self.inner.timeout)
            .field("supported_ttl", &self.inner.supported_ttl)
            .field("auth", &self.inner.auth.is_some())
            .finish_non_exhaustive()
    }
}

impl HttpFacilitator {
    /// A client for the facilitator at `base_url` (trailing slashes are
    /// ignored) with the default settings.
    ///
    /// `https://` URLs, and `http://` to a loopback host, are accepted; plain
    /// `http://` to any other host is refused
    /// ([`HttpFacilitatorConfigError::PlainHttp`], see
    /// [`HttpFacilitatorBuilder::dangerous_allow_plain_http`]).
    pub fn new(base_url: impl AsRef<str>) -> Result<Self, HttpFacilitatorConfigError> {
        Self::builder(base_url).build()
    }

    /// A builder for a client of the facilitator at `base_url`.
    pub fn builder(base_url: impl AsRef<str>) -> HttpFacilitatorBuilder {
        HttpFacilitatorBuilder {
            base_url: base_url.as_ref().to_owned(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: None,
            supported_ttl: DEFAULT_SUPPORTED_TTL,
            client: None,
            auth: None,
            allow_plain_http: false,
        }
    }

    /// Sends one request and reads the reply (status and capped body) within
    /// the deadline.
    async fn call(
        &self,
        endpoint: Endpoint,
        body: Option<Bytes>,
    ) -> Result<Reply, FacilitatorError> {
        let inner = &*self.inner;
        if let Some(transport) = &inner.transport {
            let exchange = async {
                let target = match endpoint {
                    Endpoint::Verify => &inner.verify_target,
                    Endpoint::Settle => &inner.settle_target,
                    Endpoint::Supported => &inner.supported_target,
                };
                let extra = match &inner.auth {
                    Some(auth) => Some(auth.headers(endpoint).await?),
                    None => None,
                };
                // Boxed apart: inline, the exchange made the verify and
                // settle futures 1.9 kB; apart, each box is within 1 032
                // bytes (see `engine::BoxedDecision`).
                let answer =
                    crate::boxed::boxed(|| transport.call(target, body, extra, MAX_BODY_BYTES))
                        .await
                        .map_err(|e| FacilitatorError::Transport(Box::new(e)))?;
                Ok(Reply {
                    status: answer.status,
                    body: answer.body,
                    truncated: answer.truncated,
                    extension_responses: answer.extension_responses,
                })
            };
            return match tokio::time::timeout(inner.timeout, exchange).await {
                Ok(result) => result,
                Err(_elapsed) => Err(FacilitatorError::Timeout),
            };
        }
        let exchange = async {
            let url = match endpoint {
                Endpoint::Verify => &inner.verify_url,
                Endpoint::Settle => &inner.settle_url,
                Endpoint::Supported => &inner.supported_url,
            };
            let mut request = match body {
                Some(body) => inner
                    .client
                    .post(url.clone())
                    .header(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    )
                    .body(body),
                None => inner.client.get(url.clone()),
            };
            request = request.header(header::ACCEPT, HeaderValue::from_static("application/json"));
            if let Some(auth) = &inner.auth {
                request = request.headers(auth.headers(endpoint).await?);
            }
            let response = request.send().await.map_err(transport_error)?;
            let status = response.status();
            let extension_responses = response.headers().get(EXTENSION_RESPONSES).cloned();
            let body = read_capped(response, MAX_BODY_BYTES)
                .await
                .map_err(transport_error)?;
            Ok(Reply {
                status,
                body: body.0,
                truncated: body.1,
                extension_responses,
            })
        };
        match tokio::time::timeout(inner.timeout, exchange).await {
            Ok(result) => result,
            Err(_elapsed) => Err(FacilitatorError::Timeout),
        }
    }

    async fn fetch_supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        let reply = self.call(Endpoint::Supported, None).await?;
        supported_reply(&reply)
    }
}

/// `request`'s JSON body.
fn body(request: &FacilitatorRequest) -> Result<Bytes, FacilitatorError> {
    crate::proto::json_body(request).map_err(|e| FacilitatorError::Transport(Box::new(e)))
}

/// `request`'s JSON body, written once.
fn prepared_body(request: &PreparedRequest) -> Result<Bytes, FacilitatorError> {
    request
        .body()
        .map_err(|e| FacilitatorError::Transport(Box::new(e)))
}

impl HttpFacilitator {
    async fn verify_body(&self, body: Bytes) -> Result<VerifyResponse, FacilitatorError> {
        let reply = self.call(Endpoint::Verify, Some(body)).await?;
        let verdict = verify_reply(&reply)?;
        // A verdict's sidechannel is logged only; the settlement's reaches
        // the hooks (`SettleResponse::extension_responses`).
        let _ = sidechannel::read(Endpoint::Verify, &reply);
        Ok(verdict)
    }

    async fn settle_body(
        &self,
        body: Bytes,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        let reply = self.call(Endpoint::Settle, Some(body)).await?;
        let mut answer = settle_reply(&reply, request.payment_requirements.network())?;
        answer.extension_responses = sidechannel::read(Endpoint::Settle, &reply);
        Ok(answer)
    }
}

#[async_trait]
impl Facilitator for HttpFacilitator {
    async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        self.verify_body(body(request)?).await
    }

    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        self.settle_body(body(request)?, request).await
    }

    /// As [`verify`](Facilitator::verify), with the request's body written
    /// once for `/verify` and `/settle`.
    async fn verify_prepared(
        &self,
        request: &PreparedRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        self.verify_body(prepared_body(request)?).await
    }

    /// As [`settle`](Facilitator::settle), with the body
    /// [`verify_prepared`](Facilitator::verify_prepared) wrote.
    async fn settle_prepared(
        &self,
        request: &PreparedRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        self.settle_body(prepared_body(request)?, request).await
    }

    /// The facilitator's `/supported` answer, cached for the TTL.
    ///
    /// - Concurrent callers during a refresh wait for one shared fetch.
    /// - If a refresh fails while an older answer exists, the older answer is
    ///   returned (and a warning logged); the next attempt is made after
    ///   5 seconds or the TTL, whichever is shorter. With no older answer, the
    ///   error is returned and nothing is cached.
    /// - Stable `extra` (pitfall P14): some facilitators pick `feePayer` /
    ///   `facilitatorAddress` at random among their signers on each call. When
    ///   a refreshed kind (same version, scheme, network) names different
    ///   signers than the cached one, the cached signer values are kept as
    ///   long as every one of them is still listed in the refreshed answer's
    ///   `signers` (any family); the other `extra` fields come from the
    ///   refreshed answer. Otherwise the refreshed `extra` is taken as is.
    ///   Answers without `signers` therefore always replace the cached values.
    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        let inner = &*self.inner;
        let mut cache = inner.cache.lock().await;
        if let Some(cached) = cache.as_ref() {
            if cached.refresh_at.is_none_or(|at| Instant::now() < at) {
                return Ok(cached.value.clone());
            }
        }
        match self.fetch_supported().await {
            Ok(mut fresh) => {
                if let Some(cached) = cache.as_ref() {
                    stabilize_extras(&mut fresh, &cached.value);
                }
                *cache = Some(CachedSupported {
                    value: fresh.clone(),
                    refresh_at: Instant::now().checked_add(inner.supported_ttl),
                });
                Ok(fresh)
            }
            Err(error) => match cache.as_mut() {
                Some(cached) => {
                    tracing::warn!(
                        facilitator = %inner.display_url,
                        %error,
                        "refreshing /supported failed; serving the previous answer"
                    );
                    cached.refresh_at =
                        Instant::now().checked_add(inner.supported_ttl.min(FAILED_REFRESH_BACKOFF));
                    Ok(cached.value.clone())
                }
                None => Err(error),
            },
        }
    }

    /// `GET /supported` now, past the cache: the cache is neither read nor
    /// written (a failed probe never replaces the answer payments use).
    async fn health(&self) -> FacilitatorHealth {
        FacilitatorHealth::new(self.fetch_supported().await)
    }
}

/// Builds an [`HttpFacilitator`].
#[must_use]
pub struct HttpFacilitatorBuilder {
    base_url: String,
    timeout: Duration,
    connect_timeout: Option<Duration>,
    supported_ttl: Duration,
    client: Option<Client>,
    auth: Option<Arc<dyn AuthHeaders>>,
    allow_plain_http: bool,
}

impl fmt::Debug for HttpFacilitatorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpFacilitatorBuilder")
            .field("base_url", &redacted_url_text(&self.base_url))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("supported_ttl", &self.supported_ttl)
            .field("client", &self.client.is_some())
            .field("auth", &self.auth.is_some())
            .field("allow_plain_http", &self.allow_plain_http)
            .finish()
    }
}

impl HttpFacilitatorBuilder {
    /// The deadline of each request, from sending (including the
    /// [`AuthHeaders`] call) to the last byte of the reply. Default: 10 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The deadline for opening a connection. Default: none beyond
    /// [`timeout`](Self::timeout). Ignored when a [`client`](Self::client) is
    /// given (configure it on that client).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// How long a `/supported` answer is cached. Default: 5 minutes.
    pub fn supported_ttl(mut self, ttl: Duration) -> Self {
        self.supported_ttl = ttl;
        self
    }

    /// The HTTP client to use, for proxies, custom TLS roots or a shared pool.
    ///
    /// The default client does not follow redirects (a `3xx` is reported as
    /// [`FacilitatorError::Status`]), so a `POST` is never replayed as a `GET`
    /// nor credentials sent to another host.
    pub fn client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    /// The provider of per-request headers (credentials).
    pub fn auth(mut self, provider: impl AuthHeaders) -> Self {
        self.auth = Some(Arc::new(provider));
        self
    }

    /// Accepts a plain `http://` base URL whose host is not loopback.
    ///
    /// Without it, [`build`](Self::build) refuses `http://` to any host but
    /// `localhost`, `127.0.0.0/8` and `[::1]`
    /// ([`HttpFacilitatorConfigError::PlainHttp`]); `https://` is always
    /// accepted. Over plain HTTP everything travels in clear text and
    /// unauthenticated: the buyers' signed payment payloads, the
    /// [`auth`](Self::auth) headers and any API key in the URL can be read by
    /// anyone on the path, and the facilitator's answers can be forged, so a
    /// man in the middle can approve unpaid requests. Call this only when the
    /// network path to the facilitator is trusted end to end (a private
    /// network you control, a sidecar on another interface).
    pub fn dangerous_allow_plain_http(mut self) -> Self {
        self.allow_plain_http = true;
        self
    }

    /// Checks the URL and creates the client.
    ///
    /// Fails on a URL that does not parse, has no host or has a fragment, on
    /// a scheme other than `http`/`https`, and on plain `http://` to a host
    /// that is not loopback (see
    /// [`dangerous_allow_plain_http`](Self::dangerous_allow_plain_http)).
    pub fn build(self) -> Result<HttpFacilitator, HttpFacilitatorConfigError> {
        let base = parse_base_url(&self.base_url)?;
        if base.scheme() == "http" && !self.allow_plain_http && !is_loopback_host(&base) {
            return Err(HttpFacilitatorConfigError::PlainHttp {
                host: base.host_str().unwrap_or_default().to_owned(),
            });
        }
        let transport = match &self.client {
            // A caller's own client is used as given; a URL with credentials
            // needs reqwest's basic authentication.
            Some(_) => None,
            None if !base.username().is_empty() || base.password().is_some() => None,
            None => Transport::new(&base, USER_AGENT, self.connect_timeout)
                .map_err(|e| HttpFacilitatorConfigError::InvalidUrl(e.to_string()))?,
        };
        let client = match self.client {
            Some(client) => client,
            None => {
                let mut builder = Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .user_agent(USER_AGENT);
                if let Some(connect_timeout) = self.connect_timeout {
                    builder = builder.connect_timeout(connect_timeout);
                }
                builder
                    .build()
                    .map_err(HttpFacilitatorConfigError::Client)?
            }
        };
        Ok(HttpFacilitator {
            inner: Arc::new(Inner {
                client,
                transport,
                verify_target: endpoint_target(&base, Endpoint::Verify)?,
                settle_target: endpoint_target(&base, Endpoint::Settle)?,
                supported_target: endpoint_target(&base, Endpoint::Supported)?,
                display_url: redacted_url(&base),
                verify_url: endpoint_url(&base, Endpoint::Verify),
                settle_url: endpoint_url(&base, Endpoint::Settle),
                supported_url: endpoint_url(&base, Endpoint::Supported),
                timeout: self.timeout,
                supported_ttl: self.supported_ttl,
                auth: self.auth,
                cache: tokio::sync::Mutex::new(None),
            }),
        })
    }
}

/// Parses the base URL: `http`/`https`, with a host; trailing slashes of the
/// path are dropped later.
fn parse_base_url(text: &str) -> Result<Url, HttpFacilitatorConfigError> {
    let url = Url::parse(text.trim())
        .map_err(|e| HttpFacilitatorConfigError::InvalidUrl(e.to_string()))?;
    match url.scheme() {
        "http" | "https" => {}
        other => {
            return Err(HttpFacilitatorConfigError::UnsupportedScheme(
                other.to_owned(),
            ))
        }
    }
    if url.cannot_be_a_base() || url.host_str().is_none_or(str::is_empty) {
        return Err(HttpFacilitatorConfigError::InvalidUrl(
            "the URL has no host".to_owned(),
        ));
    }
    if url.fragment().is_some() {
        return Err(HttpFacilitatorConfigError::InvalidUrl(
            "the URL has a fragment".to_owned(),
        ));
    }
    Ok(url)
}

/// Whether the URL's host is loopback: `localhost` (exactly: `localhost.` or
/// `*.localhost` may be sent to a DNS resolver), an IPv4 address in
/// `127.0.0.0/8`, `::1`, or `::ffff:127.x.y.z`. The URL parser has already
/// lowercased names and normalised IP literals (`0x7f.1` is `127.0.0.1`), and
/// userinfo (`http://127.0.0.1@evil.example`) is not part of the host.
fn is_loopback_host(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse::<std::net::Ipv6Addr>().is_ok_and(|ip| {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        });
    }
    match host.parse::<std::net::Ipv4Addr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

/// `{base}/{endpoint}`, keeping the base's query (some hosted facilitators
/// take an API key there).
/// An endpoint's path and query, as the transport sends it.
fn endpoint_target(base: &Url, endpoint: Endpoint) -> Result<Uri, HttpFacilitatorConfigError> {
    let url = endpoint_url(base, endpoint);
    let target = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    };
    Uri::try_from(target).map_err(|e| HttpFacilitatorConfigError::InvalidUrl(e.to_string()))
}

fn endpoint_url(base: &Url, endpoint: Endpoint) -> Url {
    let mut url = base.clone();
    let path = format!("{}/{}", base.path().trim_end_matches('/'), endpoint.path());
    url.set_path(&path);
    url
}

/// `scheme://host[:port]/path`, without credentials, query or fragment.
fn redacted_url(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!(
            "{}://{host}:{port}{}",
            url.scheme(),
            url.path().trim_end_matches('/')
        ),
        None => format!(
            "{}://{host}{}",
            url.scheme(),
            url.path().trim_end_matches('/')
        ),
    }
}

fn redacted_url_text(text: &str) -> String {
    Url::parse(text.trim()).map_or_else(|_| "<invalid URL>".to_owned(), |url| redacted_url(&url))
}

fn transport_error(error: reqwest::Error) -> FacilitatorError {
    // A connect timeout is a connection that never opened, not an exchange
    // whose outcome is unknown.
    if error.is_timeout() && !error.is_connect() {
        FacilitatorError::Timeout
    } else {
        // The URL may carry an API key in its query: keep it out of logs.
        FacilitatorError::Transport(Box::new(error.without_url()))
    }
}

mod reply;
mod sidechannel;
mod transport;
use reply::{settle_reply, stabilize_extras, supported_reply, verify_reply, Reply};
use transport::Transport;
pub(crate) use transport::TransportError;

#[cfg(test)]
mod tests;
