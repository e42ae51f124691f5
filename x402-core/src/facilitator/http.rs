#![doc = include_str!("http/README.md")]

use std::{
    collections::BTreeMap,
    fmt,
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use async_trait::async_trait;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use reqwest::{Client, Url};
use serde::Deserialize;
use serde_json::Value;

use super::{Facilitator, FacilitatorError, FacilitatorHealth};
use crate::capped::{read_capped, truncate_chars};
use crate::proto::{
    FacilitatorRequest, JsonObject, SettleResponse, SupportedKind, SupportedResponse,
    VerifyResponse,
};

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
        body: Option<&FacilitatorRequest>,
    ) -> Result<Reply, FacilitatorError> {
        let inner = &*self.inner;
        let exchange = async {
            let url = match endpoint {
                Endpoint::Verify => &inner.verify_url,
                Endpoint::Settle => &inner.settle_url,
                Endpoint::Supported => &inner.supported_url,
            };
            let mut request = match body {
                Some(body) => inner.client.post(url.clone()).json(body),
                None => inner.client.get(url.clone()),
            };
            request = request.header(header::ACCEPT, HeaderValue::from_static("application/json"));
            if let Some(auth) = &inner.auth {
                request = request.headers(auth.headers(endpoint).await?);
            }
            let response = request.send().await.map_err(transport_error)?;
            let status = response.status();
            let body = read_capped(response, MAX_BODY_BYTES)
                .await
                .map_err(transport_error)?;
            Ok(Reply {
                status,
                body: body.0,
                truncated: body.1,
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

#[async_trait]
impl Facilitator for HttpFacilitator {
    async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        let reply = self.call(Endpoint::Verify, Some(request)).await?;
        verify_reply(&reply)
    }

    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        let reply = self.call(Endpoint::Settle, Some(request)).await?;
        settle_reply(&reply, request.payment_requirements.network())
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
        let client = match self.client {
            Some(client) => client,
            None => {
                let mut builder = Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .user_agent(concat!("x402-core/", env!("CARGO_PKG_VERSION")));
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

/// A facilitator's reply.
struct Reply {
    status: StatusCode,
    body: Vec<u8>,
    /// The body was longer than [`MAX_BODY_BYTES`] and was cut.
    truncated: bool,
}

impl Reply {
    /// The body as a JSON object, if it is one (and was read whole).
    fn json_object(&self) -> Option<JsonObject> {
        if self.truncated {
            return None;
        }
        match serde_json::from_slice(&self.body) {
            Ok(Value::Object(object)) => Some(object),
            _ => None,
        }
    }

    /// A success reply's body as JSON.
    fn success_json(&self, endpoint: Endpoint) -> Result<Value, FacilitatorError> {
        if self.truncated {
            return Err(FacilitatorError::Malformed(format!(
                "/{endpoint} reply is larger than {MAX_BODY_BYTES} bytes"
            )));
        }
        serde_json::from_slice(&self.body).map_err(|e| malformed(endpoint, &e))
    }

    /// The error for a non-success reply without a usable verdict.
    fn status_error(&self, object: Option<&JsonObject>) -> FacilitatorError {
        let from_json = object.and_then(|o| {
            ["error", "message", "errorMessage"]
                .iter()
                .find_map(|key| o.get(*key).and_then(Value::as_str))
                .map(str::to_owned)
        });
        let text = from_json.unwrap_or_else(|| String::from_utf8_lossy(&self.body).into_owned());
        let text = text.trim();
        FacilitatorError::Status {
            status: self.status.as_u16(),
            message: (!text.is_empty()).then(|| truncate_chars(text, MAX_LOG_MESSAGE_CHARS)),
        }
    }
}

fn malformed(endpoint: Endpoint, error: &serde_json::Error) -> FacilitatorError {
    FacilitatorError::Malformed(format!("/{endpoint} reply: {error}"))
}

fn transport_error(error: reqwest::Error) -> FacilitatorError {
    if error.is_timeout() {
        FacilitatorError::Timeout
    } else {
        // The URL may carry an API key in its query: keep it out of logs.
        FacilitatorError::Transport(Box::new(error.without_url()))
    }
}

/// The reason code of an `error` text `"<code>: <message>"` (or `"<code>"`),
/// if it is snake_case (`^[a-z][a-z0-9_]*$`).
fn reason_code(error: &str) -> Option<&str> {
    let code = error.split_once(": ").map_or(error, |(code, _)| code);
    let mut bytes = code.bytes();
    let starts_lower = bytes.next().is_some_and(|b| b.is_ascii_lowercase());
    let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    (starts_lower && rest_ok && code.len() <= MAX_REASON_CODE_LEN).then_some(code)
}

/// Statuses that say something about the facilitator or the seller's access
/// to it, not about the payment: their `error` codes are never verdicts
/// (unless the code starts with `invalid_`).
fn is_access_status(status: StatusCode) -> bool {
    matches!(status.as_u16(), 401 | 403 | 404 | 405 | 407 | 408 | 429)
}

fn verify_reply(reply: &Reply) -> Result<VerifyResponse, FacilitatorError> {
    if reply.status.is_success() {
        let json = reply.success_json(Endpoint::Verify)?;
        return serde_json::from_value(json).map_err(|e| malformed(Endpoint::Verify, &e));
    }
    let object = reply.json_object();
    if let Some(object) = &object {
        if object.get("isValid") == Some(&Value::Bool(false)) {
            if let Ok(verdict) = serde_json::from_value(Value::Object(object.clone())) {
                return Ok(verdict);
            }
        }
        if let Some(code) = object
            .get("error")
            .and_then(Value::as_str)
            .and_then(reason_code)
        {
            let request_problem = reply.status.is_client_error() && !is_access_status(reply.status);
            if request_problem || code.starts_with("invalid_") {
                return Ok(VerifyResponse::invalid(code, None));
            }
        }
    }
    Err(reply.status_error(object.as_ref()))
}

/// Fixes harmless variations before reading a settle answer: `amount` as a
/// JSON number, `null` for `transaction` or `amount`.
fn normalize_settle(object: &mut JsonObject) {
    match object.get("amount") {
        Some(Value::Number(n)) => {
            let text = n.to_string();
            object.insert("amount".to_owned(), Value::String(text));
        }
        Some(Value::Null) => {
            object.remove("amount");
        }
        _ => {}
    }
    if object.get("transaction").is_some_and(Value::is_null) {
        object.remove("transaction");
    }
}

fn settle_reply(reply: &Reply, network: &str) -> Result<SettleResponse, FacilitatorError> {
    if reply.status.is_success() {
        let mut json = reply.success_json(Endpoint::Settle)?;
        if let Value::Object(object) = &mut json {
            normalize_settle(object);
        }
        return serde_json::from_value(json).map_err(|e| malformed(Endpoint::Settle, &e));
    }
    let object = reply.json_object();
    if let Some(object) = &object {
        if object.get("success") == Some(&Value::Bool(false)) {
            let mut object = object.clone();
            normalize_settle(&mut object);
            if !object.get("network").is_some_and(Value::is_string) {
                object.insert("network".to_owned(), Value::String(network.to_owned()));
            }
            if let Ok(answer) = serde_json::from_value(Value::Object(object)) {
                return Ok(answer);
            }
        }
    }
    Err(reply.status_error(object.as_ref()))
}

fn supported_reply(reply: &Reply) -> Result<SupportedResponse, FacilitatorError> {
    #[derive(Deserialize)]
    struct Wire {
        kinds: Vec<Value>,
        #[serde(default)]
        extensions: Option<Vec<String>>,
        #[serde(default)]
        signers: Option<BTreeMap<String, Vec<String>>>,
    }

    if !reply.status.is_success() {
        return Err(reply.status_error(reply.json_object().as_ref()));
    }
    let json = reply.success_json(Endpoint::Supported)?;
    let wire: Wire =
        serde_json::from_value(json).map_err(|e| malformed(Endpoint::Supported, &e))?;
    let mut kinds = Vec::with_capacity(wire.kinds.len());
    for kind in wire.kinds {
        // Kinds of protocol versions this crate does not speak are skipped.
        let version = kind.get("x402Version").and_then(Value::as_u64);
        if version.is_some_and(|v| crate::proto::X402Version::from_number(v).is_none()) {
            continue;
        }
        kinds.push(
            serde_json::from_value::<SupportedKind>(kind)
                .map_err(|e| malformed(Endpoint::Supported, &e))?,
        );
    }
    Ok(SupportedResponse {
        kinds,
        extensions: wire.extensions.unwrap_or_default(),
        signers: wire.signers.unwrap_or_default(),
    })
}

fn same_address(a: &str, b: &str) -> bool {
    if a.starts_with("0x") && b.starts_with("0x") {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

/// Keeps the cached signer values of each kind while the facilitator still
/// lists them (see [`HttpFacilitator`]'s `supported`).
fn stabilize_extras(fresh: &mut SupportedResponse, cached: &SupportedResponse) {
    let listed: Vec<&str> = fresh
        .signers
        .values()
        .flatten()
        .map(String::as_str)
        .collect();
    for kind in &mut fresh.kinds {
        let Some(old) = cached.kinds.iter().find(|old| {
            old.x402_version == kind.x402_version
                && old.scheme == kind.scheme
                && old.network == kind.network
        }) else {
            continue;
        };
        let Some(old_extra) = old.extra.as_ref() else {
            continue;
        };
        if kind.extra.as_ref() == Some(old_extra) {
            continue;
        }
        let old_signers: Vec<(&str, &str)> = SIGNER_KEYS
            .iter()
            .filter_map(|key| Some((*key, old_extra.get(*key)?.as_str()?)))
            .collect();
        let still_listed = !old_signers.is_empty()
            && old_signers
                .iter()
                .all(|(_, signer)| listed.iter().any(|l| same_address(signer, l)));
        if still_listed {
            let extra = kind.extra.get_or_insert_with(JsonObject::new);
            for (key, signer) in old_signers {
                extra.insert(key.to_owned(), Value::String(signer.to_owned()));
            }
        }
    }
}

#[cfg(test)]
mod tests;
