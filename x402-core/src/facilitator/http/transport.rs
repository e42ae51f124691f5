//! The facilitator client's own HTTP/1.1 transport: pooled keep-alive
//! connections driven by the task that makes the call.
//!
//! A seller makes two facilitator calls per paid request, so their cost is
//! the paid path's. A general client (reqwest over hyper-util's pool) runs
//! each connection in a task of its own and hands every request and answer
//! across tasks, parses the URL into a URI on every call and allocates a
//! little at every layer. Here a call takes an idle connection from the pool
//! (or opens one), writes one pre-built request and reads the answer in the
//! caller's task, polling hyper's connection state machine itself, and puts
//! the connection back: no task switch, no channel, and the target and
//! headers built once per client.
//!
//! Used by [`HttpFacilitator`](super::HttpFacilitator) unless a
//! `reqwest::Client` is supplied or a proxy is configured in the
//! environment (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`), which reqwest
//! honours and this transport does not.

use std::{
    error::Error as StdError,
    fmt,
    future::{poll_fn, Future},
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};
use http_body::Body as _;
use http_body_util::Full;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use reqwest::Url;
use tokio::net::TcpStream;

/// Idle connections kept per facilitator.
const MAX_IDLE: usize = 64;

/// How long an idle connection is kept. Servers and load balancers close
/// idle keep-alive connections after a while (commonly 60 s or more); a
/// connection reused near that moment can be closed under the request, so
/// ours are dropped well before.
const IDLE_LIFETIME: Duration = Duration::from_secs(20);

/// A connection's state machine, boxed: plain TCP or TLS.
type Driver = Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>;

/// One keep-alive connection.
struct Connection {
    sender: SendRequest<Full<Bytes>>,
    driver: Driver,
    idle_since: Instant,
}

/// A failed exchange, and whether the request can have reached the server.
#[derive(Debug)]
pub(crate) struct TransportError {
    /// The request was never written: connecting (TCP, TLS) failed, or the
    /// connection refused it before sending.
    pub(crate) never_sent: bool,
    source: Box<dyn StdError + Send + Sync>,
}

impl TransportError {
    fn connect(source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self {
            never_sent: true,
            source: source.into(),
        }
    }

    fn exchange(source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self {
            never_sent: false,
            source: source.into(),
        }
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.never_sent {
            f.write_str("could not connect to the facilitator")
        } else {
            f.write_str("the exchange with the facilitator failed")
        }
    }
}

impl StdError for TransportError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

/// The answer: status, body cut at the cap, and `EXTENSION-RESPONSES`.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) body: Vec<u8>,
    pub(crate) truncated: bool,
    pub(crate) extension_responses: Option<http::HeaderValue>,
}

/// Where and how to connect, fixed per client.
pub(crate) struct Transport {
    host: String,
    port: u16,
    /// `Some` for `https`.
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls_pki_types::ServerName<'static>,
    )>,
    /// `Host`, `User-Agent` and `Accept`, sent with every request.
    headers: HeaderMap,
    connect_timeout: Option<Duration>,
    idle: Mutex<Vec<Connection>>,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// A transport for `base` (`http` or `https`, with a host), or `None`
    /// when reqwest must be used instead (a proxy is configured).
    pub(crate) fn new(
        base: &Url,
        user_agent: &'static str,
        connect_timeout: Option<Duration>,
    ) -> Result<Option<Self>, Box<dyn StdError + Send + Sync>> {
        if proxy_configured() {
            return Ok(None);
        }
        let host = base.host_str().ok_or("the URL has no host")?.to_owned();
        let port = base.port_or_known_default().ok_or("the URL has no port")?;
        // `[::1]` in the URL, `::1` to connect and to name the TLS server.
        let bare_host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let tls = match base.scheme() {
            "https" => {
                let name = rustls_pki_types::ServerName::try_from(bare_host.clone())?;
                Some((tokio_rustls::TlsConnector::from(tls_config()?), name))
            }
            _ => None,
        };
        let mut headers = HeaderMap::with_capacity(4);
        let authority = match base.port() {
            Some(port) => format!("{host}:{port}"),
            None => host,
        };
        headers.insert(header::HOST, HeaderValue::try_from(authority)?);
        headers.insert(header::USER_AGENT, HeaderValue::from_static(user_agent));
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        Ok(Some(Self {
            host: bare_host,
            port,
            tls,
            headers,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
        }))
    }

    /// The same transport trusting `config`'s roots instead (tests).
    #[cfg(test)]
    fn with_tls_config(mut self, config: rustls::ClientConfig) -> Self {
        if let Some((connector, _)) = &mut self.tls {
            *connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        }
        self
    }

    /// Sends one request (`POST` with a JSON `body`, or `GET`) to `target`
    /// (a path and query) and reads the answer, up to `max` body bytes.
    ///
    /// The request is built before the future, which then holds it once
    /// (an `async fn` would hold its arguments as well): the caller boxes
    /// this future, within 1 032 bytes (see `engine::BoxedDecision`).
    pub(crate) fn call(
        &self,
        target: &Uri,
        body: Option<Bytes>,
        extra_headers: Option<HeaderMap>,
        max: usize,
    ) -> impl Future<Output = Result<Answer, TransportError>> + Send + '_ {
        let post = body.is_some();
        let mut request = Request::new(Full::new(body.unwrap_or_default()));
        *request.uri_mut() = target.clone();
        if post {
            *request.method_mut() = Method::POST;
        }
        let headers = request.headers_mut();
        headers.clone_from(&self.headers);
        if post {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        if let Some(extra) = extra_headers {
            headers.extend(extra);
        }

        let mut request = Some(request);
        async move {
            // A pooled connection the server has closed refuses the request
            // unsent; then the next one (or a fresh one) is tried.
            loop {
                let (mut connection, fresh) = match self.checkout() {
                    Some(connection) => (connection, false),
                    // Boxed: connecting (TCP, TLS) is rare and its future is
                    // most of this one's size, which every call would carry.
                    None => (Box::pin(self.connect()).await?, true),
                };
                let Some(message) = request.take() else {
                    return Err(TransportError::connect("no request to send"));
                };
                match exchange(&mut connection, message, max).await {
                    Ok(answer) => {
                        self.checkin(connection);
                        return Ok(answer);
                    }
                    Err(Failure::Unsent(message, error)) => {
                        let message = *message;
                        if fresh {
                            return Err(TransportError::connect(error));
                        }
                        request = Some(message);
                    }
                    Err(Failure::Failed(error)) => return Err(TransportError::exchange(error)),
                }
            }
        }
    }

    /// An idle connection that is still open, if any.
    fn checkout(&self) -> Option<Connection> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(mut connection) = idle.pop() {
            if connection.idle_since.elapsed() < IDLE_LIFETIME && is_open(&mut connection) {
                return Some(connection);
            }
        }
        None
    }

    fn checkin(&self, mut connection: Connection) {
        if !is_open(&mut connection) {
            return;
        }
        connection.idle_since = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(connection);
        }
    }

    async fn connect(&self) -> Result<Connection, TransportError> {
        let open = async {
            let tcp = TcpStream::connect((self.host.as_str(), self.port))
                .await
                .map_err(TransportError::connect)?;
            tcp.set_nodelay(true).map_err(TransportError::connect)?;
            match &self.tls {
                None => handshake(tcp).await,
                Some((connector, name)) => {
                    let tls = connector
                        .connect(name.clone(), tcp)
                        .await
                        .map_err(TransportError::connect)?;
                    handshake(tls).await
                }
            }
        };
        match self.connect_timeout {
            Some(limit) => tokio::time::timeout(limit, open)
                .await
                .map_err(|_| TransportError::connect("connect timed out"))?,
            None => open.await,
        }
    }
}

async fn handshake<T>(io: T) -> Result<Connection, TransportError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(TransportError::connect)?;
    Ok(Connection {
        sender,
        driver: Box::pin(connection),
        idle_since: Instant::now(),
    })
}

/// Why an exchange failed.
enum Failure {
    /// The request was handed back unsent (the connection was closed).
    Unsent(Box<Request<Full<Bytes>>>, Box<dyn StdError + Send + Sync>),
    /// The request may have been sent.
    Failed(Box<dyn StdError + Send + Sync>),
}

/// Polls the connection's state machine once; whether it can still carry a
/// request. A server's close is seen here, before a request is risked on it.
fn is_open(connection: &mut Connection) -> bool {
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    match connection.driver.as_mut().poll(&mut cx) {
        Poll::Ready(_) => false,
        Poll::Pending => !connection.sender.is_closed(),
    }
}

/// Drives `future` and the connection together until `future` is done; an
/// error if the connection ends first.
async fn drive<F: Future + Unpin>(
    driver: &mut Driver,
    future: &mut F,
) -> Result<F::Output, Box<dyn StdError + Send + Sync>> {
    let mut ended = false;
    poll_fn(|cx| {
        if let Poll::Ready(output) = Pin::new(&mut *future).poll(cx) {
            return Poll::Ready(Ok(output));
        }
        if ended {
            return Poll::Pending;
        }
        match driver.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(result) => {
                ended = true;
                // The last answer may have completed with the connection.
                if let Poll::Ready(output) = Pin::new(&mut *future).poll(cx) {
                    return Poll::Ready(Ok(output));
                }
                Poll::Ready(Err(match result {
                    Err(error) => error.into(),
                    Ok(()) => "the facilitator closed the connection".into(),
                }))
            }
        }
    })
    .await
}

/// One request and its answer on `connection`.
async fn exchange(
    connection: &mut Connection,
    request: Request<Full<Bytes>>,
    max: usize,
) -> Result<Answer, Failure> {
    let Connection { sender, driver, .. } = connection;
    let mut ready = poll_fn(|cx| sender.poll_ready(cx));
    // Nothing is written before the connection is ready: a failure here
    // leaves the request unsent.
    match drive(driver, &mut ready).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => return Err(Failure::Unsent(Box::new(request), error.into())),
        Err(error) => return Err(Failure::Unsent(Box::new(request), error)),
    }
    let mut sending = Box::pin(sender.try_send_request(request));
    let response = match drive(driver, &mut sending).await {
        Ok(Ok(response)) => response,
        Ok(Err(mut error)) => {
            return Err(match error.take_message() {
                Some(request) => Failure::Unsent(Box::new(request), error.into_error().into()),
                None => Failure::Failed(error.into_error().into()),
            })
        }
        Err(error) => return Err(Failure::Failed(error)),
    };
    let status = response.status();
    let extension_responses = response.headers().get(super::EXTENSION_RESPONSES).cloned();
    let mut body = response.into_body();
    let mut out = Vec::with_capacity(
        body.size_hint()
            .exact()
            .map_or(1024, |n| usize::try_from(n).unwrap_or(max).min(max)),
    );
    loop {
        let mut frame = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
        match drive(driver, &mut frame).await {
            Ok(None) => break,
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    let room = max.saturating_sub(out.len());
                    if data.len() > room {
                        out.extend_from_slice(data.get(..room).unwrap_or_default());
                        // The rest is not read: the connection is not reused.
                        sender_close(connection);
                        return Ok(Answer {
                            status,
                            body: out,
                            truncated: true,
                            extension_responses,
                        });
                    }
                    out.extend_from_slice(&data);
                }
            }
            Ok(Some(Err(error))) => return Err(Failure::Failed(error.into())),
            Err(error) => return Err(Failure::Failed(error)),
        }
    }
    Ok(Answer {
        status,
        body: out,
        truncated: false,
        extension_responses,
    })
}

/// Marks a connection unfit for reuse (its answer was not read to the end).
fn sender_close(connection: &mut Connection) {
    connection.driver = Box::pin(std::future::ready(Ok(())));
}

/// Whether the environment names a proxy (which reqwest would use).
fn proxy_configured() -> bool {
    [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ]
    .iter()
    .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

/// TLS 1.2 and 1.3 with the Mozilla root store (the same roots as the
/// reqwest client this crate builds otherwise), HTTP/1.1 by ALPN.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    if let Some(config) = CONFIG.get() {
        return Ok(Arc::clone(config));
    }
    let roots = rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::clone(CONFIG.get_or_init(|| Arc::new(config))))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpListener,
    };

    use super::*;

    /// How a test server answers each request on a connection.
    #[derive(Clone, Copy)]
    enum Answer {
        /// `200` with `{}`, keeping the connection.
        Json,
        /// `200` with `{}` and `Connection: close`, then closes.
        JsonThenClose,
        /// `200` with `{}`, then closes a moment later without saying so.
        JsonThenDrop,
        /// A chunked `200`.
        Chunked,
        /// `200` with 2000 bytes.
        Large,
        /// Reads the request and closes without answering.
        Hangup,
    }

    /// A raw HTTP/1.1 server on loopback; counts the connections it accepts.
    async fn server(answer: Answer) -> (Url, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url: Url = format!("http://{}/", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buffer = Vec::new();
                    loop {
                        // One request: the head, then Content-Length bytes.
                        let head_end = loop {
                            if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                                break at + 4;
                            }
                            let mut chunk = [0u8; 4096];
                            match socket.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                            }
                        };
                        let head = String::from_utf8_lossy(&buffer[..head_end]).to_lowercase();
                        let length: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        while buffer.len() < head_end + length {
                            let mut chunk = [0u8; 4096];
                            match socket.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                            }
                        }
                        buffer.drain(..head_end + length);
                        let reply: Vec<u8> = match answer {
                            Answer::Json | Answer::JsonThenDrop => {
                                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec()
                            }
                            Answer::JsonThenClose => {
                                b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}"
                                    .to_vec()
                            }
                            Answer::Chunked => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\n{\r\n1\r\n}\r\n0\r\n\r\n"
                                .to_vec(),
                            Answer::Large => {
                                let mut r = b"HTTP/1.1 200 OK\r\ncontent-length: 2000\r\n\r\n".to_vec();
                                r.extend_from_slice(&[b'x'; 2000]);
                                r
                            }
                            Answer::Hangup => return,
                        };
                        if socket.write_all(&reply).await.is_err() {
                            return;
                        }
                        match answer {
                            Answer::JsonThenClose => return,
                            Answer::JsonThenDrop => {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                return;
                            }
                            _ => {}
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    fn transport(url: &Url) -> Transport {
        Transport::new(url, "x402-core-test", None)
            .unwrap()
            .unwrap()
    }

    async fn post(t: &Transport, max: usize) -> Result<Answer2, TransportError> {
        let target = Uri::from_static("/verify");
        t.call(&target, Some(Bytes::from_static(b"{\"a\":1}")), None, max)
            .await
            .map(|a| Answer2 {
                status: a.status,
                body: a.body,
                truncated: a.truncated,
            })
    }

    #[derive(Debug)]
    struct Answer2 {
        status: StatusCode,
        body: Vec<u8>,
        truncated: bool,
    }

    #[tokio::test]
    async fn one_connection_carries_every_call() {
        let (url, accepted) = server(Answer::Json).await;
        let t = transport(&url);
        for _ in 0..10 {
            let answer = post(&t, 1024).await.unwrap();
            assert_eq!(answer.status, StatusCode::OK);
            assert_eq!(answer.body, b"{}");
            assert!(!answer.truncated);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn concurrent_calls_open_connections_and_keep_them() {
        let (url, accepted) = server(Answer::Json).await;
        let t = Arc::new(transport(&url));
        for _ in 0..3 {
            let calls: Vec<_> = (0..8)
                .map(|_| {
                    let t = Arc::clone(&t);
                    tokio::spawn(async move { post(&t, 1024).await.map(|a| a.status) })
                })
                .collect();
            for call in calls {
                assert_eq!(call.await.unwrap().unwrap(), StatusCode::OK);
            }
        }
        // At most one connection per call in flight, reused afterwards.
        assert!(accepted.load(Ordering::SeqCst) <= 8, "{accepted:?}");
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_not_reused() {
        for answer in [Answer::JsonThenClose, Answer::JsonThenDrop] {
            let (url, accepted) = server(answer).await;
            let t = transport(&url);
            for _ in 0..3 {
                assert_eq!(post(&t, 1024).await.unwrap().status, StatusCode::OK);
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
            assert_eq!(accepted.load(Ordering::SeqCst), 3);
        }
    }

    #[tokio::test]
    async fn chunked_answers_are_read_whole() {
        let (url, _) = server(Answer::Chunked).await;
        let t = transport(&url);
        for _ in 0..2 {
            assert_eq!(post(&t, 1024).await.unwrap().body, b"{}");
        }
    }

    #[tokio::test]
    async fn an_answer_over_the_cap_is_cut_and_its_connection_dropped() {
        let (url, accepted) = server(Answer::Large).await;
        let t = transport(&url);
        let answer = post(&t, 100).await.unwrap();
        assert!(answer.truncated);
        assert_eq!(answer.body.len(), 100);
        let answer = post(&t, 4096).await.unwrap();
        assert!(!answer.truncated);
        assert_eq!(answer.body.len(), 2000);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn errors_say_whether_the_request_can_have_left() {
        // Nothing listens: never sent.
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url: Url = format!("http://{}/", closed.local_addr().unwrap())
            .parse()
            .unwrap();
        drop(closed);
        let error = post(&transport(&url), 1024).await.unwrap_err();
        assert!(error.never_sent, "{error}");

        // The server read the request and hung up: it may have acted on it.
        let (url, _) = server(Answer::Hangup).await;
        let error = post(&transport(&url), 1024).await.unwrap_err();
        assert!(!error.never_sent, "{error}");

        // `https` to a server that answers plain text: the TLS handshake
        // fails, nothing sent.
        let plain = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let https: Url = format!("https://{}/", plain.local_addr().unwrap())
            .parse()
            .unwrap();
        tokio::spawn(async move {
            if let Ok((mut socket, _)) = plain.accept().await {
                let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            }
        });
        let error = post(&transport(&https), 1024).await.unwrap_err();
        assert!(error.never_sent, "{error}");
    }

    /// A certificate for 127.0.0.1 made by the `openssl` command, and its key.
    fn self_signed() -> (
        rustls_pki_types::CertificateDer<'static>,
        rustls_pki_types::PrivateKeyDer<'static>,
    ) {
        use rustls_pki_types::pem::PemObject as _;
        let dir = std::env::temp_dir().join(format!("x402-transport-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let status = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
            ])
            .args(["-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"])
            .args(["-addext", "subjectAltName=IP:127.0.0.1"])
            .args(["-addext", "basicConstraints=critical,CA:FALSE"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("the openssl command makes the test certificate");
        assert!(status.success());
        let pair = (
            rustls_pki_types::CertificateDer::from_pem_file(&cert).unwrap(),
            rustls_pki_types::PrivateKeyDer::from_pem_file(&key).unwrap(),
        );
        let _ = std::fs::remove_dir_all(&dir);
        pair
    }

    #[tokio::test]
    async fn https_calls_are_encrypted_and_reuse_their_connection() {
        let (cert, key) = self_signed();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url: Url = format!("https://{}/", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut seen = Vec::new();
                    loop {
                        let mut chunk = [0u8; 4096];
                        match tls.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&chunk[..n]),
                        }
                        // Each request here is one POST with a 7-byte body.
                        while let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            if seen.len() < at + 4 + 7 {
                                break;
                            }
                            seen.drain(..at + 4 + 7);
                            let reply =
                                b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n{\"tls\":true}";
                            if tls.write_all(reply).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });

        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let t = transport(&url).with_tls_config(client);
        for _ in 0..3 {
            let answer = post(&t, 1024).await.unwrap();
            assert_eq!(answer.status, StatusCode::OK);
            assert_eq!(answer.body, br#"{"tls":true}"#);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);

        // The default roots do not know this certificate: refused, unsent.
        let error = post(&transport(&url), 1024).await.unwrap_err();
        assert!(error.never_sent, "{error}");
    }

    #[test]
    fn a_proxy_in_the_environment_is_left_to_reqwest() {
        // Read, not set: the variables are process-wide. Whatever they are,
        // `new` agrees with `proxy_configured`.
        let url: Url = "http://127.0.0.1:9/".parse().unwrap();
        let made = Transport::new(&url, "t", None).unwrap();
        assert_eq!(made.is_none(), proxy_configured());
    }
}
