//! The facilitator client's own HTTP/1.1 transport: pooled keep-alive
//! connections driven by the task that makes the call.
//!
//! A seller makes two facilitator calls per paid request, so their cost is
//! the paid path's. A general client (reqwest over hyper-util's pool) runs
//! each connection in a task of its own and hands every request and answer
//! across tasks, parses the URL into a URI on every call and allocates a
//! little at every layer; hyper's own connection, driven in place, still
//! takes a fresh 8 kB read buffer for every answer (it reads ahead while the
//! answer's body still shares the last one), a channel for the answer and
//! one for its body. Here a call takes an idle connection from the pool (or
//! opens one), writes its request head and body in one vectored write, and
//! reads the answer in the caller's task with `httparse` into the
//! connection's own buffer, which the next call reuses; then the connection
//! goes back to the pool. Of the transport's own, an ordinary call
//! allocates the answer's body alone (its caller boxes the call's future).
//!
//! What it reads is what a facilitator can answer: a status line and
//! headers (at most [`MAX_HEAD`] bytes and [`MAX_HEADERS`] fields, `1xx`
//! heads skipped), then a body framed by `Transfer-Encoding: chunked`,
//! `Content-Length`, or the end of the connection. A connection is reused
//! only when its answer was read to its exact end, with nothing after it,
//! in HTTP/1.1 without `Connection: close`, and framed one way only.
//!
//! Used by [`HttpFacilitator`](super::HttpFacilitator) unless a
//! `reqwest::Client` is supplied or a proxy is configured in the
//! environment (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`), which reqwest
//! honours and this transport does not.

use std::{
    error::Error as StdError,
    fmt,
    future::Future,
    io::{self, IoSlice, Write as _},
    ops::Range,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use reqwest::Url;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf},
    net::TcpStream,
};

/// Idle connections kept per facilitator.
const MAX_IDLE: usize = 64;

/// How long an idle connection is kept. Servers and load balancers close
/// idle keep-alive connections after a while (commonly 60 s or more); a
/// connection reused near that moment can be closed under the request, so
/// ours are dropped well before.
const IDLE_LIFETIME: Duration = Duration::from_secs(20);

/// The largest answer head read (status line, headers, and a chunked
/// body's size lines and trailers): hyper's default limit.
const MAX_HEAD: usize = 64 * 1024;

/// The most header fields an answer head may have (hyper's default).
const MAX_HEADERS: usize = 100;

/// What a connection's buffer starts with and is cut back to between
/// calls: room for a request head and a usual answer.
const BUFFER: usize = 2048;

/// A connection's byte stream: plain TCP or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// One keep-alive connection and its buffer: each call writes its request
/// head there, then reads the answer into it.
struct Connection {
    stream: Stream,
    buffer: Vec<u8>,
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
    /// `Host`, `User-Agent` and `Accept` lines, sent with every request.
    fixed: Vec<u8>,
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
        let authority = match base.port() {
            Some(port) => format!("{host}:{port}"),
            None => host,
        };
        // Checked as header values: no line breaks can reach the head.
        let mut fixed = Vec::with_capacity(64 + authority.len() + user_agent.len());
        for (name, value) in [
            (header::HOST, HeaderValue::try_from(authority)?),
            (header::USER_AGENT, HeaderValue::try_from(user_agent)?),
            (header::ACCEPT, HeaderValue::from_static("application/json")),
        ] {
            write_field(&mut fixed, name.as_str(), &value);
        }
        Ok(Some(Self {
            host: bare_host,
            port,
            tls,
            fixed,
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
    pub(crate) fn call<'a>(
        &'a self,
        target: &'a Uri,
        body: Option<Bytes>,
        extra_headers: Option<HeaderMap>,
        max: usize,
    ) -> impl Future<Output = Result<Answer, TransportError>> + Send + 'a {
        let request = Request {
            target,
            body,
            extra_headers,
        };
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
                match exchange(&mut connection, &self.fixed, &request, max).await {
                    Ok((answer, reusable)) => {
                        if reusable {
                            self.checkin(connection);
                        }
                        return Ok(answer);
                    }
                    Err(Failure::Unsent(error)) if !fresh => {
                        tracing::debug!(%error, "x402: a pooled facilitator connection was closed; retrying on another");
                    }
                    Err(Failure::Unsent(error)) => return Err(TransportError::connect(error)),
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
            let stream = match &self.tls {
                None => Stream::Plain(tcp),
                Some((connector, name)) => Stream::Tls(Box::new(
                    connector
                        .connect(name.clone(), tcp)
                        .await
                        .map_err(TransportError::connect)?,
                )),
            };
            Ok(Connection {
                stream,
                buffer: Vec::with_capacity(BUFFER),
                idle_since: Instant::now(),
            })
        };
        match self.connect_timeout {
            Some(limit) => tokio::time::timeout(limit, open)
                .await
                .map_err(|_| TransportError::connect("connect timed out"))?,
            None => open.await,
        }
    }
}

/// One request: `POST` when it has a body, else `GET`.
struct Request<'a> {
    target: &'a Uri,
    body: Option<Bytes>,
    extra_headers: Option<HeaderMap>,
}

/// `name: value\r\n`.
fn write_field(head: &mut Vec<u8>, name: &str, value: &HeaderValue) {
    head.extend_from_slice(name.as_bytes());
    head.extend_from_slice(b": ");
    head.extend_from_slice(value.as_bytes());
    head.extend_from_slice(b"\r\n");
}

/// Why an exchange failed.
enum Failure {
    /// Nothing of the request was written (the connection was closed).
    Unsent(Box<dyn StdError + Send + Sync>),
    /// The request may have been sent.
    Failed(Box<dyn StdError + Send + Sync>),
}

/// Whether an idle connection can still carry a request: neither closed
/// nor holding bytes nobody asked for. A server's close is seen here,
/// before a request is risked on it. (A TLS connection's own records,
/// such as session tickets, are read here and hold no data.)
fn is_open(connection: &mut Connection) -> bool {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut probe = [0u8; 1];
    let mut probe = ReadBuf::new(&mut probe);
    matches!(
        Pin::new(&mut connection.stream).poll_read(&mut cx, &mut probe),
        Poll::Pending
    )
}

/// A malformed or refused answer.
fn malformed(what: &'static str) -> Failure {
    Failure::Failed(what.into())
}

/// One request and its answer on `connection`; the answer, and whether the
/// connection can carry another.
async fn exchange(
    connection: &mut Connection,
    fixed: &[u8],
    request: &Request<'_>,
    max: usize,
) -> Result<(Answer, bool), Failure> {
    let Connection { stream, buffer, .. } = connection;
    // The head, written into the connection's buffer.
    buffer.clear();
    let body = request.body.as_deref().unwrap_or_default();
    buffer.extend_from_slice(if request.body.is_some() {
        b"POST "
    } else {
        b"GET "
    });
    let target = request
        .target
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    buffer.extend_from_slice(target.as_bytes());
    buffer.extend_from_slice(b" HTTP/1.1\r\n");
    buffer.extend_from_slice(fixed);
    if request.body.is_some() {
        buffer.extend_from_slice(b"content-type: application/json\r\ncontent-length: ");
        // Writing to a vector cannot fail.
        let _ = write!(buffer, "{}\r\n", body.len());
    }
    if let Some(extra) = &request.extra_headers {
        for (name, value) in extra {
            write_field(buffer, name.as_str(), value);
        }
    }
    buffer.extend_from_slice(b"\r\n");
    write_request(stream, buffer, body).await?;

    // The answer's head, past any `1xx`.
    buffer.clear();
    let head = loop {
        if let Some(head) = read_head(buffer)? {
            if head.informational {
                buffer.drain(..head.length);
                continue;
            }
            break head;
        }
        if buffer.len() >= MAX_HEAD {
            return Err(malformed("the facilitator's answer head is too large"));
        }
        if fill(stream, buffer).await? == 0 {
            return Err(malformed(
                "the facilitator closed the connection without answering",
            ));
        }
    };
    let status = head.status;
    let extension_responses = head.extension_responses;
    let mut reusable = head.keep_alive;
    let mut reader = Reader {
        stream,
        buffer,
        at: head.length,
    };
    let mut out = Vec::new();
    let truncated = match head.framing {
        Framing::Empty => false,
        Framing::Length(length) => reader.length(length, max, &mut out).await?,
        Framing::Chunked => reader.chunked(max, &mut out).await?,
        Framing::UntilClose => {
            reusable = false;
            reader.until_close(max, &mut out).await?
        }
    };
    // Reused only when the answer ended exactly where its bytes did.
    reusable &= !truncated && reader.at == reader.buffer.len();
    reader.buffer.clear();
    if reader.buffer.capacity() > 8 * BUFFER {
        reader.buffer.shrink_to(BUFFER);
    }
    Ok((
        Answer {
            status,
            body: out,
            truncated,
            extension_responses,
        },
        reusable,
    ))
}

/// Writes `head` then `body`, in one vectored write where the stream takes
/// it; [`Failure::Unsent`] if the stream refused the first byte.
async fn write_request(stream: &mut Stream, head: &[u8], body: &[u8]) -> Result<(), Failure> {
    let total = head.len() + body.len();
    let mut written = 0;
    while written < total {
        let (first, second) = if written < head.len() {
            (&head[written..], body)
        } else {
            (&body[written - head.len()..], &[][..])
        };
        let slices = [IoSlice::new(first), IoSlice::new(second)];
        match stream.write_vectored(&slices).await {
            Ok(0) => {
                let error = io::Error::from(io::ErrorKind::WriteZero);
                return Err(if written == 0 {
                    Failure::Unsent(error.into())
                } else {
                    Failure::Failed(error.into())
                });
            }
            Ok(n) => written += n,
            Err(error) if written == 0 => return Err(Failure::Unsent(error.into())),
            Err(error) => return Err(Failure::Failed(error.into())),
        }
    }
    stream
        .flush()
        .await
        .map_err(|error| Failure::Failed(error.into()))
}

/// Reads what the stream has into `buffer`'s spare room (made if there is
/// little); how many bytes, `0` at its end.
async fn fill(stream: &mut Stream, buffer: &mut Vec<u8>) -> Result<usize, Failure> {
    if buffer.capacity() - buffer.len() < 512 {
        buffer.reserve(buffer.capacity().max(BUFFER));
    }
    stream
        .read_buf(buffer)
        .await
        .map_err(|error| Failure::Failed(error.into()))
}

/// How an answer's body is delimited.
enum Framing {
    /// No body (`204`, `304`).
    Empty,
    Length(u64),
    Chunked,
    /// Until the server closes the connection.
    UntilClose,
}

/// An answer's head, read.
struct Head {
    /// Its length in bytes.
    length: usize,
    status: StatusCode,
    /// A `1xx`, to skip.
    informational: bool,
    framing: Framing,
    /// HTTP/1.1 without `Connection: close`.
    keep_alive: bool,
    extension_responses: Option<HeaderValue>,
}

/// The head at the start of `buffer`, or `None` if it is not all there yet.
fn read_head(buffer: &[u8]) -> Result<Option<Head>, Failure> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut answer = httparse::Response::new(&mut fields);
    let length = match answer.parse(buffer) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => return Err(Failure::Failed(error.into())),
    };
    let code = answer.code.unwrap_or_default();
    let status =
        StatusCode::from_u16(code).map_err(|_| malformed("the facilitator's status is invalid"))?;
    if code == 101 {
        return Err(malformed("the facilitator switched protocols"));
    }
    let mut keep_alive = answer.version == Some(1);
    let mut length_field: Option<u64> = None;
    let mut chunked = None;
    let mut extension_responses = None;
    for field in answer.headers.iter() {
        let name = field.name;
        if name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(field.value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| malformed("the facilitator's Content-Length is invalid"))?;
            if length_field.is_some_and(|seen| seen != value) {
                return Err(malformed("the facilitator sent two Content-Lengths"));
            }
            length_field = Some(value);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked only when it is the last coding applied.
            let last = field
                .value
                .rsplit(|b| *b == b',')
                .next()
                .unwrap_or_default();
            chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case("connection") {
            if field
                .value
                .split(|b| *b == b',')
                .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
            {
                keep_alive = false;
            }
        } else if name.eq_ignore_ascii_case(super::EXTENSION_RESPONSES) {
            extension_responses = HeaderValue::from_bytes(field.value).ok();
        }
    }
    let informational = (100..200).contains(&code);
    let framing = if informational || code == 204 || code == 304 {
        Framing::Empty
    } else {
        match (chunked, length_field) {
            (Some(true), _) => Framing::Chunked,
            // Another coding last: the body runs to the connection's end.
            (Some(false), _) => Framing::UntilClose,
            (None, Some(length)) => Framing::Length(length),
            (None, None) => Framing::UntilClose,
        }
    };
    if chunked.is_some() && length_field.is_some() {
        // Both framings named: the chunked one is read, and the
        // connection, which a go-between may read otherwise, is not reused.
        keep_alive = false;
    }
    Ok(Some(Head {
        length,
        status,
        informational,
        framing,
        keep_alive,
        extension_responses,
    }))
}

/// An answer's body, read from `buffer` at `at`, refilled from `stream`.
struct Reader<'a> {
    stream: &'a mut Stream,
    buffer: &'a mut Vec<u8>,
    at: usize,
}

impl Reader<'_> {
    /// The bytes after `at` so far.
    fn unread(&self) -> &[u8] {
        self.buffer.get(self.at..).unwrap_or_default()
    }

    /// Reads more into the buffer, first dropping what is read if all of it
    /// is; how many bytes, `0` at the stream's end.
    async fn read_more(&mut self) -> Result<usize, Failure> {
        if self.at > 0 && self.at == self.buffer.len() {
            self.buffer.clear();
            self.at = 0;
        }
        fill(self.stream, self.buffer).await
    }

    /// More bytes; an error at the stream's end.
    async fn more(&mut self) -> Result<(), Failure> {
        if self.read_more().await? == 0 {
            return Err(malformed(
                "the facilitator closed the connection mid-answer",
            ));
        }
        Ok(())
    }

    /// Up to `n` unread bytes into `out`, up to `max` in all; whether it
    /// stopped at `max`.
    fn take(&mut self, n: usize, max: usize, out: &mut Vec<u8>) -> bool {
        let unread = self.unread();
        let n = n.min(unread.len());
        let room = max.saturating_sub(out.len());
        let kept = n.min(room);
        out.extend_from_slice(unread.get(..kept).unwrap_or_default());
        self.at += n;
        kept < n
    }

    /// `n` body bytes into `out`, read as they come, kept up to `max` bytes
    /// of `out` in all; whether it stopped at `max`.
    async fn copy(&mut self, mut n: u64, max: usize, out: &mut Vec<u8>) -> Result<bool, Failure> {
        while n > 0 {
            if self.unread().is_empty() {
                self.more().await?;
            }
            let step = n.min(self.unread().len() as u64) as usize;
            if self.take(step, max, out) {
                return Ok(true);
            }
            n -= step as u64;
        }
        Ok(false)
    }

    /// A `Content-Length` body, up to `max` bytes; whether it was longer.
    async fn length(
        &mut self,
        length: u64,
        max: usize,
        out: &mut Vec<u8>,
    ) -> Result<bool, Failure> {
        let wanted = length.min(max as u64);
        out.reserve_exact(wanted as usize);
        self.copy(wanted, usize::MAX, out).await?;
        Ok(length > wanted)
    }

    /// A chunked body: each chunk's size line, its data and its line end,
    /// then the trailer fields after the last one.
    async fn chunked(&mut self, max: usize, out: &mut Vec<u8>) -> Result<bool, Failure> {
        let mut lines = 0usize;
        loop {
            let line = self.line(&mut lines).await?;
            let line = self.buffer.get(line).unwrap_or_default();
            let digits = line.split(|b| *b == b';').next().unwrap_or_default();
            let size = std::str::from_utf8(digits.trim_ascii())
                .ok()
                .filter(|d| !d.is_empty())
                .and_then(|d| u64::from_str_radix(d, 16).ok())
                .ok_or_else(|| malformed("the facilitator's chunk size is invalid"))?;
            if size == 0 {
                // Trailer fields, up to the empty line.
                while !self.line(&mut lines).await?.is_empty() {}
                return Ok(false);
            }
            if self.copy(size, max, out).await? {
                return Ok(true);
            }
            if !self.line(&mut lines).await?.is_empty() {
                return Err(malformed("the facilitator's chunk is longer than it said"));
            }
        }
    }

    /// Where in the buffer the next line is (without its `\r\n`), until the
    /// next read; counted in `lines`' bytes against [`MAX_HEAD`].
    async fn line(&mut self, read: &mut usize) -> Result<Range<usize>, Failure> {
        loop {
            if let Some(end) = self.unread().windows(2).position(|w| w == b"\r\n") {
                let line = self.at..self.at + end;
                self.at += end + 2;
                *read += end + 2;
                return Ok(line);
            }
            if *read + self.unread().len() >= MAX_HEAD {
                return Err(malformed("the facilitator's chunk lines are too long"));
            }
            self.more().await?;
        }
    }

    /// A body that ends with the connection.
    async fn until_close(&mut self, max: usize, out: &mut Vec<u8>) -> Result<bool, Failure> {
        loop {
            let left = self.unread().len();
            if self.take(left, max, out) {
                return Ok(true);
            }
            if self.read_more().await? == 0 {
                return Ok(false);
            }
        }
    }
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

    /// A raw HTTP/1.1 server on loopback that answers every request with
    /// `answer`; counts the connections it accepts.
    async fn server(answer: Answer) -> (Url, Arc<AtomicUsize>) {
        const JSON: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        let (reply, after) = match answer {
            Answer::Json => (JSON.to_vec(), After::Keep),
            Answer::JsonThenDrop => (JSON.to_vec(), After::Linger(Duration::from_millis(20))),
            Answer::JsonThenClose => (
                b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
                After::Close,
            ),
            Answer::Chunked => (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\n{\r\n1\r\n}\r\n0\r\n\r\n"
                    .to_vec(),
                After::Keep,
            ),
            Answer::Large => {
                let mut r = b"HTTP/1.1 200 OK\r\ncontent-length: 2000\r\n\r\n".to_vec();
                r.extend_from_slice(&[b'x'; 2000]);
                (r, After::Keep)
            }
            Answer::Hangup => return pieces_server(Vec::new(), After::Close).await,
        };
        pieces_server(vec![reply], after).await
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
        let (closed, url) = listener("http").await;
        drop(closed);
        let error = post(&transport(&url), 1024).await.unwrap_err();
        assert!(error.never_sent, "{error}");

        // The server read the request and hung up: it may have acted on it.
        let (url, _) = server(Answer::Hangup).await;
        let error = post(&transport(&url), 1024).await.unwrap_err();
        assert!(!error.never_sent, "{error}");

        // `https` to a server that answers plain text: the TLS handshake
        // fails, nothing sent.
        let (plain, https) = listener("https").await;
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
        let (listener, url) = listener("https").await;
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

    /// A listener on a free loopback port, and its URL with `scheme`.
    async fn listener(scheme: &str) -> (TcpListener, Url) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("{scheme}://{}/", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        (listener, url)
    }

    /// What a test server does after an answer.
    #[derive(Clone, Copy)]
    enum After {
        /// Waits for the next request.
        Keep,
        /// Closes the connection.
        Close,
        /// Closes it a moment later, without saying so.
        Linger(Duration),
    }

    /// A raw HTTP/1.1 server on loopback that answers every request on a
    /// connection (a POST with a 7-byte body, as [`post`] sends) with
    /// `pieces`, each written and flushed apart (so that the client reads
    /// the answer in as many reads), then does what `after` says; counts
    /// the connections it accepts.
    async fn pieces_server(pieces: Vec<Vec<u8>>, after: After) -> (Url, Arc<AtomicUsize>) {
        let (listener, url) = listener("http").await;
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                socket.set_nodelay(true).unwrap();
                let pieces = pieces.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    loop {
                        while seen
                            .windows(4)
                            .position(|w| w == b"\r\n\r\n")
                            .is_none_or(|at| seen.len() < at + 4 + 7)
                        {
                            let mut chunk = [0u8; 4096];
                            match socket.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => seen.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let at = seen.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
                        seen.drain(..at + 4 + 7);
                        for piece in &pieces {
                            if socket.write_all(piece).await.is_err() {
                                return;
                            }
                            socket.flush().await.unwrap();
                            if pieces.len() > 1 {
                                tokio::time::sleep(Duration::from_millis(2)).await;
                            }
                        }
                        match after {
                            After::Keep => {}
                            After::Close => return,
                            After::Linger(wait) => {
                                tokio::time::sleep(wait).await;
                                return;
                            }
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    /// `text` split into pieces of `size` bytes.
    fn split(text: &[u8], size: usize) -> Vec<Vec<u8>> {
        text.chunks(size).map(<[u8]>::to_vec).collect()
    }

    #[tokio::test]
    async fn answers_read_a_byte_at_a_time_are_whole_and_reuse_their_connection() {
        let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
            extension-responses: e30=\r\ncontent-length: 12\r\n\r\n{\"ok\":true}\n";
        let (url, accepted) = pieces_server(split(answer, 1), After::Keep).await;
        let t = transport(&url);
        for _ in 0..2 {
            let target = Uri::from_static("/verify");
            let answer = t
                .call(&target, Some(Bytes::from_static(b"{\"a\":1}")), None, 1024)
                .await
                .unwrap();
            assert_eq!(answer.status, StatusCode::OK);
            assert_eq!(answer.body, b"{\"ok\":true}\n");
            assert_eq!(answer.extension_responses.unwrap(), "e30=");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn informational_heads_are_skipped_and_chunks_read_across_reads() {
        let answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n\
            HTTP/1.1 402 Payment Required\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
            5;name=value\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nx-trailer: 1\r\n\r\n";
        for size in [1, 7, answer.len()] {
            let (url, accepted) = pieces_server(split(answer, size), After::Keep).await;
            let t = transport(&url);
            for _ in 0..2 {
                let answer = post(&t, 1024).await.unwrap();
                assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED);
                assert_eq!(answer.body, b"hello 0123456789", "pieces of {size}");
                assert!(!answer.truncated);
            }
            assert_eq!(accepted.load(Ordering::SeqCst), 1, "pieces of {size}");
            // Cut at the cap: the rest is not read, the connection dropped.
            let answer = post(&t, 7).await.unwrap();
            assert!(answer.truncated);
            assert_eq!(answer.body, b"hello 0");
            assert_eq!(post(&t, 1024).await.unwrap().body, b"hello 0123456789");
            assert_eq!(accepted.load(Ordering::SeqCst), 2, "pieces of {size}");
        }
    }

    #[tokio::test]
    async fn answers_that_cannot_be_framed_again_close_their_connection() {
        // HTTP/1.0, no length: the body runs to the connection's end.
        let (url, accepted) = pieces_server(
            vec![b"HTTP/1.0 200 OK\r\n\r\n{\"a\"".to_vec(), b":1}".to_vec()],
            After::Close,
        )
        .await;
        let t = transport(&url);
        for _ in 0..2 {
            assert_eq!(post(&t, 1024).await.unwrap().body, br#"{"a":1}"#);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2);

        // Bytes after the answer that nobody asked for; a `Connection:
        // close` among other tokens; both framings at once.
        for answer in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}HTTP/1.1 200 OK\r\n"[..],
            b"HTTP/1.1 200 OK\r\nConnection: upgrade, Close\r\ncontent-length: 2\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        ] {
            let (url, accepted) = pieces_server(vec![answer.to_vec()], After::Keep).await;
            let t = transport(&url);
            for _ in 0..2 {
                assert_eq!(post(&t, 1024).await.unwrap().body, b"{}");
            }
            assert_eq!(
                accepted.load(Ordering::SeqCst),
                2,
                "{}",
                String::from_utf8_lossy(answer)
            );
        }

        // No body, and the connection kept.
        let (url, accepted) = pieces_server(
            vec![b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()],
            After::Keep,
        )
        .await;
        let t = transport(&url);
        for _ in 0..2 {
            let answer = post(&t, 1024).await.unwrap();
            assert_eq!(answer.status, StatusCode::NO_CONTENT);
            assert!(answer.body.is_empty());
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn malformed_answers_are_errors_that_may_have_been_sent() {
        let huge_head = {
            let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
            while head.len() <= MAX_HEAD {
                head.extend_from_slice(b"x-padding: 0123456789abcdef0123456789abcdef\r\n");
            }
            head
        };
        let many_fields = {
            let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
            for i in 0..=MAX_HEADERS {
                head.extend_from_slice(format!("x-{i}: 1\r\n").as_bytes());
            }
            head.extend_from_slice(b"content-length: 0\r\n\r\n");
            head
        };
        for answer in [
            b"HTTP/1.1 200 OK\r\ncontent-length: twelve\r\n\r\n".to_vec(),
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}".to_vec(),
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n".to_vec(),
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\nabc\r\n0\r\n\r\n".to_vec(),
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n".to_vec(),
            b"NOT HTTP\r\n\r\n".to_vec(),
            // The connection ends mid-body.
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}".to_vec(),
            huge_head,
            many_fields,
        ] {
            let (url, _) = pieces_server(vec![answer.clone()], After::Close).await;
            let error = post(&transport(&url), 1024).await.unwrap_err();
            assert!(
                !error.never_sent,
                "{}",
                String::from_utf8_lossy(answer.get(..40).unwrap_or(&answer))
            );
        }
    }

    #[tokio::test]
    async fn a_request_carries_its_target_headers_and_body_exactly() {
        let (listener, url) = listener("http").await;
        let seen = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            while !seen.ends_with(b"{\"a\":1}") {
                let mut chunk = [0u8; 4096];
                let n = socket.read(&mut chunk).await.unwrap();
                assert!(n > 0);
                seen.extend_from_slice(&chunk[..n]);
            }
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            seen
        });
        let t = transport(&url);
        let target = Uri::from_static("/x402/settle?tenant=a");
        let mut extra = HeaderMap::new();
        extra.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t"));
        let answer = t
            .call(
                &target,
                Some(Bytes::from_static(b"{\"a\":1}")),
                Some(extra),
                1024,
            )
            .await
            .unwrap();
        assert_eq!(answer.status, StatusCode::OK);
        let port = url.port().unwrap();
        assert_eq!(
            String::from_utf8(seen.await.unwrap()).unwrap(),
            format!(
                "POST /x402/settle?tenant=a HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\
                 user-agent: x402-core-test\r\naccept: application/json\r\n\
                 content-type: application/json\r\ncontent-length: 7\r\n\
                 authorization: Bearer t\r\n\r\n{{\"a\":1}}"
            )
        );
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
