//! The chain ledger's JSON-RPC transport over HTTP: it keeps the node URL,
//! whose path, query or userinfo often holds an API key, out of `tracing`
//! and out of every error it returns.
//!
//! alloy's own HTTP transport records the full URL in a DEBUG span on each
//! request; this one names the node by `scheme://host[:port]` only.

use std::{fmt, sync::Arc, task, time::Duration};

use alloy_json_rpc::{RequestPacket, ResponsePacket};
use alloy_transport::{
    utils::guess_local_url, TransportError, TransportErrorKind, TransportFut, TransportResult,
};
use reqwest::{header::RETRY_AFTER, Url};
use tracing::Instrument;

use super::chain::redact;

/// A JSON-RPC transport that POSTs each request packet to one node URL with
/// `reqwest`, and logs and reports the node as `scheme://host[:port]` only.
///
/// Its answers follow alloy's HTTP transport: a failed request is a custom
/// transport error; a non-2xx status is a JSON-RPC error answer when the body
/// is one, else an HTTP error with the status, the body and the delay of a
/// `Retry-After` header in seconds; a 2xx body that is not a JSON-RPC answer
/// is a deserialization error.
///
/// Userinfo in the URL is sent as HTTP basic authentication (`reqwest` moves
/// it into a sensitive `Authorization` header).
#[derive(Clone)]
pub(crate) struct HttpTransport {
    client: reqwest::Client,
    url: Arc<Url>,
    /// `scheme://host[:port]` of `url`: all that logs and errors show.
    endpoint: Arc<str>,
}

impl fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTransport")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Why a request to the node failed before a response body was read: the
/// endpoint by scheme and host, and `reqwest`'s error with its URL dropped.
#[derive(Debug, thiserror::Error)]
#[error("the JSON-RPC request to {endpoint} failed")]
struct RequestFailed {
    endpoint: Arc<str>,
    #[source]
    source: reqwest::Error,
}

/// A 2xx response whose body could not be read.
#[derive(Debug, thiserror::Error)]
#[error("the response body from {endpoint} could not be read")]
struct BodyFailed {
    endpoint: Arc<str>,
    #[source]
    source: reqwest::Error,
}

impl HttpTransport {
    /// A transport to `url` (`http` or `https`) with a new `reqwest` client.
    pub(crate) fn new(url: Url) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder().build()?;
        Ok(Self::with_client(client, url))
    }

    /// A transport to `url` over `client`.
    pub(crate) fn with_client(client: reqwest::Client, url: Url) -> Self {
        let endpoint = redact(url.as_str()).into();
        Self {
            client,
            url: Arc::new(url),
            endpoint,
        }
    }

    /// Whether the node looks local (loopback host names), which makes alloy
    /// poll faster.
    pub(crate) fn is_local(&self) -> bool {
        guess_local_url(self.url.as_str())
    }

    /// Sends one packet and reads its answer.
    async fn send(self, packet: RequestPacket) -> TransportResult<ResponsePacket> {
        let response = self
            .client
            .post(Url::clone(&self.url))
            .json(&packet)
            .headers(packet.headers())
            .send()
            .await
            .map_err(|e| self.request_failed(e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        tracing::debug!(status = status.as_u16(), "JSON-RPC response");
        let body = match response.bytes().await {
            Ok(body) => body,
            Err(e) if status.is_success() => {
                return Err(TransportErrorKind::custom(BodyFailed {
                    endpoint: self.endpoint.clone(),
                    source: e.without_url(),
                }))
            }
            Err(e) => {
                return Err(TransportErrorKind::http_error_with_retry_after(
                    status.as_u16(),
                    format!("(the response body could not be read: {})", e.without_url()),
                    retry_after,
                ))
            }
        };
        tracing::trace!(bytes = body.len(), "JSON-RPC response body");
        if !status.is_success() {
            // A node may answer a JSON-RPC error with an error status.
            return match serde_json::from_slice::<ResponsePacket>(&body) {
                Ok(answer) if answer.is_error() => Ok(answer),
                _ => Err(TransportErrorKind::http_error_with_retry_after(
                    status.as_u16(),
                    String::from_utf8_lossy(&body).into_owned(),
                    retry_after,
                )),
            };
        }
        serde_json::from_slice(&body)
            .map_err(|e| TransportError::deser_err(e, String::from_utf8_lossy(&body)))
    }

    fn request_failed(&self, error: reqwest::Error) -> TransportError {
        TransportErrorKind::custom(RequestFailed {
            endpoint: self.endpoint.clone(),
            source: error.without_url(),
        })
    }
}

impl tower_service::Service<RequestPacket> for HttpTransport {
    type Response = ResponsePacket;
    type Error = TransportError;
    type Future = TransportFut<'static>;

    fn poll_ready(&mut self, _: &mut task::Context<'_>) -> task::Poll<Result<(), Self::Error>> {
        // A `reqwest` client is always ready.
        task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, packet: RequestPacket) -> Self::Future {
        let span = tracing::debug_span!(
            "x402 chain rpc",
            endpoint = %self.endpoint,
            requests = packet.len(),
        );
        Box::pin(self.clone().send(packet).instrument(span))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use std::error::Error as _;

    use alloy_json_rpc::{Id, Request};
    use serde_json::{json, Value};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tower_service::Service as _;

    use super::*;

    /// A JSON-RPC error answer, as some nodes send it with an error status.
    const RPC_ERROR: &str =
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"filter not found"}}"#;

    /// One HTTP/1.1 request read off a socket: its head and its body.
    struct Received {
        path: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    }

    impl Received {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    /// Reads a request head (up to the blank line) and its `Content-Length`
    /// body.
    async fn read_request(socket: &mut tokio::net::TcpStream) -> Received {
        let mut data = Vec::new();
        let mut chunk = [0; 4096];
        let head_end = loop {
            if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                break at;
            }
            let n = socket.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the client hung up before the request head ended");
            data.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8(data[..head_end].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        let path = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .unwrap()
            .to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
            .collect();
        let length: usize = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = data[head_end + 4..].to_vec();
        while body.len() < length {
            let n = socket.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the client hung up before the request body ended");
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(length);
        Received {
            path,
            headers,
            body,
        }
    }

    /// The answer for one route: status line, extra headers, body.
    fn answer(request: &Received) -> (&'static str, Vec<(&'static str, &'static str)>, String) {
        let json = ("content-type", "application/json");
        match request.path.as_str() {
            // Answers the request's `id` with `result` set to its
            // `Authorization` header (or `null`).
            path if path.starts_with("/ok/") => {
                let rpc: Value = serde_json::from_slice(&request.body).unwrap();
                let auth = request.header("authorization");
                let body = json!({"jsonrpc": "2.0", "id": rpc["id"], "result": auth});
                ("200 OK", vec![json], body.to_string())
            }
            "/status500" => (
                "500 Internal Server Error",
                vec![("content-type", "text/plain")],
                "upstream exploded".into(),
            ),
            "/limited" => (
                "429 Too Many Requests",
                vec![("retry-after", "7"), ("content-type", "text/plain")],
                "slow down".into(),
            ),
            "/rpc-error-status" => ("400 Bad Request", vec![json], RPC_ERROR.into()),
            "/garbage" => (
                "200 OK",
                vec![("content-type", "text/plain")],
                "<html>not json</html>".into(),
            ),
            _ => ("404 Not Found", vec![], String::new()),
        }
    }

    /// A node on 127.0.0.1 with one route per kind of answer: a plain
    /// `TcpListener` speaking just enough HTTP/1.1 (one request per
    /// connection).
    async fn node() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let request = read_request(&mut socket).await;
                    let (status, headers, body) = answer(&request);
                    let mut response = format!("HTTP/1.1 {status}\r\n");
                    for (name, value) in headers {
                        response.push_str(&format!("{name}: {value}\r\n"));
                    }
                    response.push_str(&format!(
                        "content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    ));
                    socket.write_all(response.as_bytes()).await.unwrap();
                    socket.shutdown().await.unwrap();
                });
            }
        });
        addr
    }

    fn transport(url: &str) -> HttpTransport {
        HttpTransport::new(url.parse().unwrap()).unwrap()
    }

    fn packet() -> RequestPacket {
        Request::new("eth_chainId", Id::Number(1), ())
            .serialize()
            .unwrap()
            .into()
    }

    /// An error, its sources and their `Debug`, as one text.
    fn everything(error: &TransportError) -> String {
        let mut text = format!("{error} {error:?}");
        let mut source = error.source();
        while let Some(e) = source {
            text.push_str(&format!(" {e} {e:?}"));
            source = e.source();
        }
        text
    }

    #[tokio::test]
    async fn a_json_rpc_answer_is_returned_and_userinfo_is_basic_auth() {
        let addr = node().await;
        let mut t = transport(&format!(
            "http://user:pw@{addr}/ok/SECRETPATH?k=SECRETQUERY"
        ));
        let answer = t.call(packet()).await.unwrap();
        let single = answer.as_single().unwrap();
        assert_eq!(single.id, Id::Number(1));
        let result = single.payload.as_success().unwrap().get();
        // "user:pw" in base64.
        assert_eq!(result, r#""Basic dXNlcjpwdw==""#);
        assert!(t.is_local());
    }

    #[tokio::test]
    async fn an_error_status_is_an_http_error_with_its_body() {
        let addr = node().await;
        let error = transport(&format!("http://{addr}/status500"))
            .call(packet())
            .await
            .unwrap_err();
        let http = error.as_transport_err().unwrap().as_http_error().unwrap();
        assert_eq!(http.status, 500);
        assert_eq!(http.body, "upstream exploded");
        assert_eq!(error.as_transport_err().unwrap().retry_after(), None);
    }

    #[tokio::test]
    async fn retry_after_seconds_are_kept() {
        let addr = node().await;
        let error = transport(&format!("http://{addr}/limited"))
            .call(packet())
            .await
            .unwrap_err();
        let kind = error.as_transport_err().unwrap();
        assert_eq!(kind.as_http_error().unwrap().status, 429);
        assert_eq!(kind.retry_after(), Some(Duration::from_secs(7)));
        assert!(kind.is_retry_err());
    }

    #[tokio::test]
    async fn a_json_rpc_error_under_an_error_status_is_an_answer() {
        let addr = node().await;
        let answer = transport(&format!("http://{addr}/rpc-error-status"))
            .call(packet())
            .await
            .unwrap();
        assert!(answer.is_error());
        assert_eq!(answer.first_error_code(), Some(-32000));
        assert_eq!(answer.first_error_message(), Some("filter not found"));
    }

    #[tokio::test]
    async fn a_body_that_is_not_json_rpc_is_a_deserialization_error() {
        let addr = node().await;
        let error = transport(&format!("http://{addr}/garbage"))
            .call(packet())
            .await
            .unwrap_err();
        let alloy_json_rpc::RpcError::DeserError { text, .. } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(text, "<html>not json</html>");
    }

    /// A node that answers `status` with a body cut short: it promises 100
    /// bytes, sends 5 and hangs up.
    async fn cut_short(status: &'static str) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0; 4096];
            let _ = socket.read(&mut request).await.unwrap();
            let head = format!("HTTP/1.1 {status}\r\ncontent-length: 100\r\n\r\nshort");
            socket.write_all(head.as_bytes()).await.unwrap();
        });
        addr
    }

    #[tokio::test]
    async fn a_body_cut_short_is_an_http_error_under_an_error_status_else_custom() {
        let addr = cut_short("502 Bad Gateway").await;
        let error = transport(&format!("http://{addr}/SECRETPATH"))
            .call(packet())
            .await
            .unwrap_err();
        let http = error.as_transport_err().unwrap().as_http_error().unwrap();
        assert_eq!(http.status, 502);
        assert!(http.body.contains("could not be read"), "{}", http.body);
        assert!(!everything(&error).contains("SECRET"));

        let addr = cut_short("200 OK").await;
        let error = transport(&format!("http://{addr}/SECRETPATH"))
            .call(packet())
            .await
            .unwrap_err();
        let custom = error.as_transport_err().unwrap().as_custom().unwrap();
        assert!(custom.is::<BodyFailed>(), "{custom:?}");
        let text = everything(&error);
        assert!(!text.contains("SECRET"), "{text}");
        assert!(text.contains(&format!("http://{addr}")), "{text}");
    }

    #[tokio::test]
    async fn a_failed_request_names_the_endpoint_by_scheme_and_host_only() {
        let url = "http://user:SECRETPASS@127.0.0.1:1/v2/SECRETPATH?key=SECRETQUERY";
        let t = transport(url);
        assert_eq!(
            format!("{t:?}"),
            r#"HttpTransport { endpoint: "http://127.0.0.1:1", .. }"#
        );
        // Nothing listens on port 1.
        let error = t.clone().call(packet()).await.unwrap_err();
        assert!(error.as_transport_err().unwrap().as_custom().is_some());
        let text = everything(&error);
        assert!(!text.contains("SECRET"), "{text}");
        assert!(text.contains("http://127.0.0.1:1"), "{text}");
    }
}
