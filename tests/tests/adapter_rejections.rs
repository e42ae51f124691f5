//! Every extractor rejection answers the same on axum and on actix-web: one
//! table of requests, sent over raw TCP to a real server of each framework
//! on 127.0.0.1, with the same status, `Content-Type` and body expected from
//! both (the values x402-core's `rejection` module defines).
//!
//! Raw TCP, so that the requests a client library would not send can be:
//! a `Content-Length` far above the webhook limit with no body following
//! (the server must answer at once, not wait for the body), a chunked body
//! that passes the limit, a body cut short.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    net::SocketAddr,
    thread,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::oneshot,
};
use x402_core::{
    rejection::{MissingPaywall, CONTENT_TYPE},
    webhook::{sign, WebhookSecret, WebhookVerifier},
};

/// The webhook body limit of both servers.
const LIMIT: usize = 512;

const EVENT: &str = r#"{"type":"payment.settled","timestamp":"2026-01-01T00:00:00Z","data":{"network":"eip155:84532","asset":"0xa","amount":"1000","payer":"0xb","payTo":"0xc","transaction":"0xd","resource":null,"route":"/paid","scheme":"exact","x402Version":2}}"#;

/// A shared secret, so the table (built once) signs for both servers.
fn secret() -> WebhookSecret {
    WebhookSecret::from_bytes(*b"adapter-rejections-secret-32byte").unwrap()
}

fn verifier() -> WebhookVerifier {
    WebhookVerifier::new([secret()]).max_body_bytes(LIMIT)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

// ---------------------------------------------------------------------------
// The two servers: the same routes, each framework's extractors.
//
// GET  /payment        `Payment` with no paywall: MissingPaywall
// GET  /meter          `UsageMeter` with no paywall: MissingPaywall
// POST /hook           `VerifiedWebhook`, verifier limited to LIMIT bytes
// POST /unconfigured   `VerifiedWebhook`, no verifier registered

async fn axum_server() -> SocketAddr {
    use axum::{
        routing::{get, post},
        Extension, Router,
    };
    use x402_axum::{Payment, UsageMeter, VerifiedWebhook};

    async fn receive(VerifiedWebhook(event): VerifiedWebhook) -> String {
        format!("{} {}", event.id, event.data.amount)
    }

    let app = Router::new()
        .route("/payment", get(|_: Payment| async { "paid" }))
        .route("/meter", get(|_: UsageMeter| async { "metered" }))
        .route("/hook", post(receive).layer(Extension(verifier())))
        .route("/unconfigured", post(receive));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// Stops the actix server (and its thread) when the test's runtime drops it.
struct StopOnDrop(actix_web::dev::ServerHandle);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        drop(self.0.stop(false));
    }
}

/// actix-web's `HttpServer` is `!Send` and brings its own runtime: it runs
/// on a thread of its own (as in `x402_tests::actix`).
async fn actix_server() -> SocketAddr {
    use actix_web::{web, App, HttpResponse, HttpServer};
    use x402_actix::{Payment, UsageMeter, VerifiedWebhook};

    async fn receive(VerifiedWebhook(event): VerifiedWebhook) -> HttpResponse {
        HttpResponse::Ok()
            .content_type(CONTENT_TYPE)
            .body(format!("{} {}", event.id, event.data.amount))
    }

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (started, handle) = oneshot::channel();
    thread::Builder::new()
        .name("actix-rejections".into())
        .spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = HttpServer::new(|| {
                    App::new()
                        .route(
                            "/payment",
                            web::get().to(|_: Payment| async { HttpResponse::Ok().body("paid") }),
                        )
                        .route(
                            "/meter",
                            web::get()
                                .to(|_: UsageMeter| async { HttpResponse::Ok().body("metered") }),
                        )
                        .service(
                            web::resource("/hook")
                                .app_data(web::Data::new(verifier()))
                                .route(web::post().to(receive)),
                        )
                        .route("/unconfigured", web::post().to(receive))
                })
                .workers(1)
                .disable_signals()
                .listen(listener)
                .unwrap()
                .run();
                let _ = started.send(server.handle());
                let _ = server.await;
            });
        })
        .unwrap();
    let guard = StopOnDrop(handle.await.unwrap());
    tokio::spawn(async move {
        let _guard = guard;
        std::future::pending::<()>().await;
    });
    addr
}

// ---------------------------------------------------------------------------
// Raw HTTP/1.1.

/// What a server answered: status, `Content-Type`, body.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

/// How a request's body goes out.
#[derive(Debug, Clone)]
enum Send {
    /// `Content-Length` and the body.
    Whole(String),
    /// `Transfer-Encoding: chunked`, in chunks of 100 bytes.
    Chunked(String),
    /// `Content-Length: n` and no body at all; the connection stays open.
    DeclaredOnly(u64),
    /// `Content-Length` of the whole body, half of it, then the client shuts
    /// its side.
    CutShort(String),
}

/// One request over a fresh connection; the answer within 5 s (headers and
/// a `Content-Length` body).
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    send: &Send,
) -> Answer {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let mut rest = Vec::new();
    match send {
        Send::Whole(body) => {
            head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
            rest.extend_from_slice(body.as_bytes());
        }
        Send::Chunked(body) => {
            head.push_str("Transfer-Encoding: chunked\r\n\r\n");
            for chunk in body.as_bytes().chunks(100) {
                rest.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                rest.extend_from_slice(chunk);
                rest.extend_from_slice(b"\r\n");
            }
            rest.extend_from_slice(b"0\r\n\r\n");
        }
        Send::DeclaredOnly(length) => head.push_str(&format!("Content-Length: {length}\r\n\r\n")),
        Send::CutShort(body) => {
            head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
            rest.extend_from_slice(&body.as_bytes()[..body.len() / 2]);
        }
    }
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&rest).await.unwrap();
    if matches!(send, Send::CutShort(_)) {
        stream.shutdown().await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(5), read_answer(&mut stream))
        .await
        .unwrap_or_else(|_| panic!("{method} {path} ({send:?}): no answer within 5 s"))
}

async fn read_answer(stream: &mut TcpStream) -> Answer {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed before the response headers");
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buffer[..header_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let header = |wanted: &str| {
        head.split("\r\n")
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
            .map(|(_, value)| value.trim().to_owned())
    };
    let length: usize = header("content-length")
        .unwrap_or_else(|| panic!("no content-length in {head}"))
        .parse()
        .unwrap();
    while buffer.len() < header_end + length {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed in the response body");
        buffer.extend_from_slice(&chunk[..n]);
    }
    Answer {
        status,
        content_type: header("content-type").unwrap_or_default(),
        body: String::from_utf8(buffer[header_end..header_end + length].to_vec()).unwrap(),
    }
}

// ---------------------------------------------------------------------------
// The table.

struct Case {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    headers: Vec<(String, String)>,
    send: Send,
    expected: Answer,
}

/// `webhook-*` headers signing `body` with `secret`, stamped `at`.
fn signed(secret: &WebhookSecret, body: &str, at: u64) -> Vec<(String, String)> {
    vec![
        ("webhook-id".into(), "msg_1".into()),
        ("webhook-timestamp".into(), at.to_string()),
        (
            "webhook-signature".into(),
            sign(std::slice::from_ref(secret), "msg_1", at, body.as_bytes()),
        ),
    ]
}

fn text(status: u16, body: &str) -> Answer {
    Answer {
        status,
        content_type: CONTENT_TYPE.to_owned(),
        body: body.to_owned(),
    }
}

fn cases() -> Vec<Case> {
    let now = now();
    let secret = secret();
    let ok = signed(&secret, EVENT, now);
    // Larger than LIMIT, validly signed: only the size can refuse it.
    let big = format!("{EVENT}{}", " ".repeat(LIMIT));
    let big_signed = signed(&secret, &big, now);
    let missing_paywall = text(500, &MissingPaywall::new().to_string());
    let invalid = text(401, "invalid_webhook");
    let too_large = text(413, "body_too_large");
    let get = |name, path| Case {
        name,
        method: "GET",
        path,
        headers: Vec::new(),
        send: Send::Whole(String::new()),
        expected: missing_paywall.clone(),
    };
    let hook = |name, headers, send, expected| Case {
        name,
        method: "POST",
        path: "/hook",
        headers,
        send,
        expected,
    };
    vec![
        get("payment without a paywall", "/payment"),
        get("usage meter without a paywall", "/meter"),
        Case {
            name: "no verifier registered",
            method: "POST",
            path: "/unconfigured",
            headers: ok.clone(),
            send: Send::Whole(EVENT.into()),
            expected: text(500, "webhook_misconfigured"),
        },
        hook(
            "a valid event (control)",
            ok.clone(),
            Send::Whole(EVENT.into()),
            Answer {
                status: 200,
                content_type: CONTENT_TYPE.to_owned(),
                body: "msg_1 1000".into(),
            },
        ),
        hook(
            "tampered body",
            ok.clone(),
            Send::Whole(EVENT.replace("1000", "9000")),
            invalid.clone(),
        ),
        hook(
            "signed by another secret",
            signed(&WebhookSecret::generate(), EVENT, now),
            Send::Whole(EVENT.into()),
            invalid.clone(),
        ),
        hook(
            "no signature headers",
            Vec::new(),
            Send::Whole(EVENT.into()),
            invalid.clone(),
        ),
        hook(
            "timestamp not a number",
            vec![
                ("webhook-id".into(), "msg_1".into()),
                ("webhook-timestamp".into(), "soon".into()),
                ok[2].clone(),
            ],
            Send::Whole(EVENT.into()),
            invalid.clone(),
        ),
        hook(
            "timestamp outside the tolerance",
            signed(&secret, EVENT, now - 3600),
            Send::Whole(EVENT.into()),
            invalid.clone(),
        ),
        hook(
            "signed, but not an event",
            signed(&secret, "{}", now),
            Send::Whole("{}".into()),
            invalid,
        ),
        hook(
            "body over the limit, declared",
            big_signed.clone(),
            Send::Whole(big.clone()),
            too_large.clone(),
        ),
        hook(
            "body over the limit, chunked (found by reading)",
            big_signed,
            Send::Chunked(big),
            too_large.clone(),
        ),
        hook(
            "a huge Content-Length and no body: answered without waiting",
            ok.clone(),
            Send::DeclaredOnly(1 << 40),
            too_large,
        ),
        hook(
            "body cut short",
            ok,
            Send::CutShort(EVENT.into()),
            text(400, "body_unreadable"),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rejection_is_the_same_on_axum_and_actix() {
    let servers = [
        ("axum", axum_server().await),
        ("actix", actix_server().await),
    ];
    let mut failures = Vec::new();
    for case in cases() {
        let mut answers = Vec::new();
        for (framework, addr) in servers {
            let answer = request(addr, case.method, case.path, &case.headers, &case.send).await;
            if answer != case.expected {
                failures.push(format!(
                    "{framework}, {}: expected {:?}, got {answer:?}",
                    case.name, case.expected
                ));
            }
            answers.push(answer);
        }
        assert_eq!(
            answers[0], answers[1],
            "{}: axum and actix differ",
            case.name
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
