//! A webhook receiver on 127.0.0.1 that keeps every request it gets and
//! answers each as its behaviour says: for the webhook sender's tests
//! (`core_webhooks`, `core_webhook_outbox_crash`), which look at the raw
//! requests (headers, body, how often each arrived).

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{body::Bytes, extract::State, http::HeaderMap, routing::post, Router};

/// A request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body.
    pub body: Bytes,
}

impl Received {
    /// The value of header `name` (panics when it is missing).
    pub fn header(&self, name: &str) -> &str {
        self.headers[name].to_str().unwrap()
    }
}

/// How the receiver answers a request.
#[derive(Debug, Clone, Copy)]
pub enum Reply {
    /// At once, with this status.
    Status(u16),
    /// With 200, after this long.
    Hang(Duration),
}

type Behaviour = Arc<dyn Fn(usize) -> Reply + Send + Sync>;

#[derive(Debug, Default)]
struct Log {
    arrived: Vec<Received>,
    answered: Vec<(Received, u16)>,
}

/// A running receiver on `POST /hook`; stopped when dropped.
#[derive(Debug)]
pub struct Receiver {
    /// `http://127.0.0.1:PORT/hook`.
    pub url: String,
    log: Arc<Mutex<Log>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn handle(
    State((log, behaviour)): State<(Arc<Mutex<Log>>, Behaviour)>,
    headers: HeaderMap,
    body: Bytes,
) -> http::StatusCode {
    let received = Received { headers, body };
    let n = {
        let mut log = log.lock().unwrap();
        log.arrived.push(received.clone());
        log.arrived.len() - 1
    };
    let status = match behaviour(n) {
        Reply::Status(status) => status,
        Reply::Hang(delay) => {
            tokio::time::sleep(delay).await;
            200
        }
    };
    log.lock().unwrap().answered.push((received, status));
    http::StatusCode::from_u16(status).unwrap()
}

impl Receiver {
    /// Starts a receiver that answers its `n`-th request (0 for the first)
    /// with `behaviour(n)`.
    pub async fn start(behaviour: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Self {
        let log = Arc::new(Mutex::new(Log::default()));
        let behaviour: Behaviour = Arc::new(behaviour);
        let app = Router::new()
            .route("/hook", post(handle))
            .with_state((Arc::clone(&log), behaviour));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, log, server }
    }

    /// Every request that arrived so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.log.lock().unwrap().arrived.clone()
    }

    /// Every request answered so far, with its status, in the order of the
    /// answers (a hanging request is answered once its delay is over).
    pub fn answered(&self) -> Vec<(Received, u16)> {
        self.log.lock().unwrap().answered.clone()
    }

    /// Waits until `n` requests arrived (failing after `within`); returns
    /// them all.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let deadline = Instant::now() + within;
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "receiver got {} of {n}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
