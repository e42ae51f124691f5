//! A closed-loop HTTP/1.1 load generator for the bench server, bounded in
//! time and in count, loopback only.
//!
//! ```text
//! loadgen --addr 127.0.0.1:PORT --path /exact/evm/eip3009 --mode MODE
//!         [--duration 10] [--connections 32] [--max-requests N] [--rate R]
//!         [--payers 64] [--seed 402] [--sessions 400] [--tokens-from PATH
//!         [--tokens-skip N] [--tokens-take N]] [--expect 200]
//!         [--valid-for SECS]
//!         [--label NAME] [--server-pid PID [--sample-every SECS]]
//!         [--facilitator-pid PID]
//!
//! With `--server-pid`, the server's CPU time over the timed phase (from
//! `/proc/PID/stat`, in all and split into user space and kernel), its
//! peak RSS (`VmHWM`) and, every `--sample-every` seconds, its RSS
//! (`VmRSS`) are reported too. Against the bench server, its heap
//! allocations per request over the timed phase too. With
//! `--facilitator-pid`, that process's CPU time per request over the timed
//! phase; and always this process's own: the three processes share the
//! machine's cores, so a server that costs its peers more shows there.
//! ```
//!
//! Modes (the untimed set-up happens before the clock starts):
//! - `plain`: a bare `GET` (the baseline, and the 402 challenge path);
//! - `paid`: every request carries a fresh `PAYMENT-SIGNATURE`. Set-up reads
//!   the route's 402 challenge and pre-signs `--max-requests` EIP-3009
//!   authorizations (payers derived from `--seed`, as the server funds them);
//!   with `--valid-for SECS`, each is signed instead as it is sent, valid
//!   for that many seconds from then (as a real buyer's would be), so that
//!   the server's state for it can expire during a long run;
//! - `session`: set-up buys `--sessions` prepaid sessions (each a paid
//!   request for the session offer in the challenge's `extensions.session`),
//!   then every request redeems one call with `X-PAYMENT-SESSION`; with
//!   `--tokens-from PATH`, the sessions are the ones the server lists at
//!   `PATH` instead (one token a line, the calls each has in
//!   `X-PAYMENT-SESSION-REMAINING`), as the session floor opens its own;
//!   `--tokens-skip N` leaves the first N listed sessions alone and
//!   `--tokens-take N` uses at most N of the rest (so that runs one after
//!   another against the same server redeem disjoint sessions: a session's
//!   calls are redeemed in order, and the listing gives every session the
//!   calls it was opened with);
//! - `batch`: one batch-settlement channel per connection: set-up opens each
//!   with its deposit call and pre-signs `--max-requests / --connections`
//!   cumulative vouchers per channel; then each connection sends its
//!   channel's vouchers in order (one per call, no facilitator call on the
//!   seller's side).
//!
//! The run stops after `--duration` seconds or `--max-requests` requests
//! (or when the pre-signed payments or session calls run out), whichever is
//! first. `--rate` (requests per second, 0 = as fast as possible) paces an
//! open schedule. Prints one JSON line of results on stdout.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use alloy_primitives::{Address, U256};
use alloy_signer::SignerSync;
use bytes::Bytes;
use http::{header::HOST, HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{json, Map, Value};
use x402_core::{
    codec,
    evm::{eip3009_domain, Eip3009Authorization, ExactEvmPayload},
    network,
    proto::{v2, Version},
    session::{X_PAYMENT_SESSION, X_PAYMENT_SESSION_REMAINING},
};
use x402_loadgen::payer;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone)]
struct Args {
    addr: SocketAddr,
    path: String,
    mode: String,
    label: String,
    duration: Duration,
    connections: usize,
    max_requests: usize,
    rate: f64,
    payers: u64,
    seed: u64,
    sessions: usize,
    tokens_from: Option<String>,
    tokens_skip: usize,
    tokens_take: usize,
    expect: u16,
    server_pid: Option<u32>,
    facilitator_pid: Option<u32>,
    sample_every: f64,
    valid_for: u64,
}

fn parse_args() -> Result<Args, Error> {
    let mut map = BTreeMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let k = k
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument {k:?}"))?
            .to_owned();
        let v = it.next().ok_or_else(|| format!("--{k} needs a value"))?;
        map.insert(k, v);
    }
    let get = |k: &str, d: &str| map.get(k).cloned().unwrap_or_else(|| d.to_owned());
    let addr: SocketAddr = get("addr", "127.0.0.1:4021").parse()?;
    if !addr.ip().is_loopback() {
        return Err("loadgen only targets loopback addresses".into());
    }
    let mode = get("mode", "plain");
    Ok(Args {
        addr,
        path: get("path", "/exact/evm/eip3009"),
        label: get("label", &mode),
        mode,
        duration: Duration::from_secs_f64(get("duration", "10").parse()?),
        connections: get("connections", "32").parse::<usize>()?.max(1),
        max_requests: get("max-requests", "1000000").parse()?,
        rate: get("rate", "0").parse()?,
        payers: get("payers", "64").parse::<u64>()?.max(1),
        seed: get("seed", "402").parse()?,
        sessions: get("sessions", "400").parse()?,
        tokens_from: map.get("tokens-from").cloned(),
        tokens_skip: get("tokens-skip", "0").parse()?,
        tokens_take: match map.get("tokens-take") {
            Some(n) => n.parse()?,
            None => usize::MAX,
        },
        expect: get("expect", "200").parse()?,
        server_pid: map.get("server-pid").map(|v| v.parse()).transpose()?,
        facilitator_pid: map.get("facilitator-pid").map(|v| v.parse()).transpose()?,
        sample_every: get("sample-every", "0").parse()?,
        valid_for: get("valid-for", "0").parse()?,
    })
}

async fn connect(addr: SocketAddr) -> Result<SendRequest<Empty<Bytes>>, Error> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Sends one GET and reads the whole body.
async fn get(
    sender: &mut SendRequest<Empty<Bytes>>,
    host: &HeaderValue,
    path: &str,
    header: Option<(&HeaderName, &HeaderValue)>,
) -> Result<(StatusCode, http::HeaderMap), Error> {
    let mut req = Request::get(path).header(HOST, host.clone());
    if let Some((name, value)) = header {
        req = req.header(name, value.clone());
    }
    let req = req.body(Empty::<Bytes>::new())?;
    sender.ready().await?;
    let res = sender.send_request(req).await?;
    let (parts, body) = res.into_parts();
    body.collect().await?;
    Ok((parts.status, parts.headers))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// The route's challenge, read from an unpaid request.
async fn challenge(args: &Args, host: &HeaderValue) -> Result<v2::PaymentRequired, Error> {
    let mut sender = connect(args.addr).await?;
    let (status, headers) = get(&mut sender, host, &args.path, None).await?;
    if status != StatusCode::PAYMENT_REQUIRED {
        return Err(format!("{} answered {status}, not 402", args.path).into());
    }
    let header = headers
        .get(codec::PAYMENT_REQUIRED)
        .ok_or("the 402 has no PAYMENT-REQUIRED header")?;
    Ok(codec::decode(
        header.as_bytes(),
        codec::DEFAULT_MAX_HEADER_BYTES,
    )?)
}

/// Signs EIP-3009 payments for one requirement, round-robin over the payers.
struct Signer {
    keys: Vec<alloy_signer_local::PrivateKeySigner>,
    domain: alloy_sol_types::Eip712Domain,
    resource: v2::ResourceInfo,
    req: v2::PaymentRequirements,
    pay_to: Address,
}

impl Signer {
    fn new(
        args: &Args,
        resource: &v2::ResourceInfo,
        req: &v2::PaymentRequirements,
    ) -> Result<Self, Error> {
        let chain_id = network::evm_chain_id(&req.network).ok_or("not an EVM network")?;
        let extra = |k: &str| req.extra.get(k).and_then(Value::as_str).unwrap_or("");
        let asset: Address = req.asset.parse()?;
        Ok(Self {
            keys: (0..args.payers).map(|i| payer(args.seed, i)).collect(),
            domain: eip3009_domain(extra("name"), extra("version"), chain_id, asset),
            resource: resource.clone(),
            req: req.clone(),
            pay_to: req.pay_to.parse()?,
        })
    }

    /// The `i`th payment, valid from `valid_after` until `valid_before`,
    /// with a random nonce.
    fn sign(&self, i: usize, valid_after: u64, valid_before: u64) -> Result<HeaderValue, Error> {
        let key = &self.keys[i % self.keys.len()];
        let authorization = Eip3009Authorization {
            from: key.address(),
            to: self.pay_to,
            value: self.req.amount,
            valid_after: U256::from(valid_after),
            valid_before: U256::from(valid_before),
            nonce: rand::random::<[u8; 32]>().into(),
        };
        let signature = key.sign_hash_sync(&authorization.signing_hash(&self.domain))?;
        let payload = ExactEvmPayload {
            signature: signature.as_bytes().to_vec().into(),
            authorization,
        };
        let payment = v2::PaymentPayload {
            x402_version: Version::<2>,
            resource: Some(self.resource.clone()),
            accepted: self.req.clone(),
            payload: serde_json::to_value(&payload)?,
            extensions: None,
            other: Map::new(),
        };
        Ok(HeaderValue::try_from(codec::encode(&payment)?)?)
    }

    /// The `i`th payment, signed now, valid for `secs` from now.
    fn sign_now(&self, i: usize, secs: u64) -> Result<HeaderValue, Error> {
        let now = unix_now();
        self.sign(i, now.saturating_sub(600), now + secs)
    }
}

/// Signs `count` fresh EIP-3009 payments for `req`, on every core.
fn presign(
    args: &Args,
    resource: &v2::ResourceInfo,
    req: &v2::PaymentRequirements,
    count: usize,
) -> Result<Vec<HeaderValue>, Error> {
    let signer = Signer::new(args, resource, req)?;
    let now = unix_now();
    // Valid from ten minutes ago until the claim horizon, so that pre-signed
    // payments stay valid for any run length up to 15 minutes.
    let (valid_after, valid_before) = (now.saturating_sub(600), now + 900);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = count.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let signer = &signer;
                s.spawn(move || {
                    (t * chunk..((t + 1) * chunk).min(count))
                        .map(|i| signer.sign(i, valid_after, valid_before))
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(count);
        for h in handles {
            out.extend(h.join().map_err(|_| "a signing thread panicked")??);
        }
        Ok(out)
    })
}

static PAYMENT_SIGNATURE: HeaderName = codec::PAYMENT_SIGNATURE;
static SESSION: HeaderName = X_PAYMENT_SESSION;

/// What each request carries.
enum Work {
    Plain,
    Paid(Vec<HeaderValue>),
    /// Payments signed as they are sent, valid for `secs`.
    PaidLive {
        signer: Box<Signer>,
        secs: u64,
    },
    /// Session tokens, each good for `calls` redemptions.
    Session {
        tokens: Vec<HeaderValue>,
        calls: usize,
    },
    /// Each connection's channel's vouchers, in order.
    Batch(Vec<Vec<HeaderValue>>),
}

impl Work {
    fn capacity(&self) -> usize {
        match self {
            Self::Plain => usize::MAX,
            Self::Paid(h) => h.len(),
            Self::PaidLive { .. } => usize::MAX,
            Self::Session { tokens, calls } => tokens.len() * calls,
            Self::Batch(channels) => channels.iter().map(Vec::len).sum(),
        }
    }

    fn header(&self, i: usize) -> Result<Option<(&'static HeaderName, HeaderValue)>, Error> {
        Ok(match self {
            Self::Plain => None,
            Self::Paid(h) => h.get(i).map(|v| (&PAYMENT_SIGNATURE, v.clone())),
            Self::PaidLive { signer, secs } => {
                Some((&PAYMENT_SIGNATURE, signer.sign_now(i, *secs)?))
            }
            Self::Session { tokens, calls } => tokens.get(i / calls).map(|v| (&SESSION, v.clone())),
            // Taken per connection, in `worker`.
            Self::Batch(_) => None,
        })
    }
}

/// The sessions a floor server opened itself, listed at `path` (one token a
/// line, the calls each has in `X-PAYMENT-SESSION-REMAINING`): the same
/// redemptions as bought sessions, with no purchase.
async fn opened_sessions(
    args: &Args,
    host: &HeaderValue,
    path: &str,
) -> Result<(Vec<HeaderValue>, usize), Error> {
    let mut sender = connect(args.addr).await?;
    let request = Request::get(path)
        .header(HOST, host)
        .body(Empty::<Bytes>::new())?;
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let calls = response
        .headers()
        .get(X_PAYMENT_SESSION_REMAINING)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .ok_or("the session list says no call count")?;
    let body = response.into_body().collect().await?.to_bytes();
    let tokens = std::str::from_utf8(&body)?
        .lines()
        .map(HeaderValue::from_str)
        .collect::<Result<Vec<_>, _>>()?;
    if tokens.is_empty() || calls == 0 {
        return Err(format!("no session listed at {path}").into());
    }
    Ok((tokens, calls))
}

/// Buys `count` sessions on the route; returns the tokens and the calls each
/// has left.
async fn buy_sessions(
    args: &Args,
    host: &HeaderValue,
    count: usize,
) -> Result<(Vec<HeaderValue>, usize), Error> {
    let challenge = challenge(args, host).await?;
    let offer = challenge
        .extensions
        .get("session")
        .and_then(|s| s.pointer("/info/offers/0/accepts/0"))
        .ok_or("the challenge offers no session")?;
    let req: v2::PaymentRequirements = serde_json::from_value(offer.clone())?;
    let payments = Arc::new(presign(args, &challenge.resource, &req, count)?);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.connections.min(count.max(1)) {
        let (payments, next, host, args) = (
            Arc::clone(&payments),
            Arc::clone(&next),
            host.clone(),
            args.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut sender = connect(args.addr).await?;
            let mut got = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(p) = payments.get(i) else { break };
                let (status, headers) = get(
                    &mut sender,
                    &host,
                    &args.path,
                    Some((&codec::PAYMENT_SIGNATURE, p)),
                )
                .await?;
                let token = headers.get(X_PAYMENT_SESSION);
                let remaining = headers
                    .get(X_PAYMENT_SESSION_REMAINING)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<usize>().ok());
                match (status, token, remaining) {
                    (StatusCode::OK, Some(t), Some(r)) => got.push((t.clone(), r)),
                    _ => return Err(Error::from(format!("buying a session: {status}"))),
                }
            }
            Ok::<_, Error>(got)
        }));
    }
    let mut tokens = Vec::with_capacity(count);
    let mut calls = usize::MAX;
    for t in tasks {
        for (token, remaining) in t.await?? {
            calls = calls.min(remaining);
            tokens.push(token);
        }
    }
    if tokens.is_empty() || calls == 0 {
        return Err("no session bought".into());
    }
    Ok((tokens, calls))
}

/// The bench server's allocation counts (`GET /__bench/allocations`), if it
/// serves them.
async fn allocations(args: &Args, host: &HeaderValue) -> Option<Value> {
    let stream = tokio::net::TcpStream::connect(args.addr).await.ok()?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = Request::get(x402_loadgen::ALLOCATIONS_PATH)
        .header(HOST, host.clone())
        .body(Empty::<Bytes>::new())
        .ok()?;
    let res = sender.send_request(req).await.ok()?;
    if res.status() != StatusCode::OK {
        return None;
    }
    let body = res.into_body().collect().await.ok()?.to_bytes();
    serde_json::from_slice(&body).ok()
}

/// CPU time of a process in clock ticks: in user space and in the kernel.
#[derive(Debug, Clone, Copy)]
struct Ticks {
    user: u64,
    system: u64,
}

impl Ticks {
    /// `utime` and `stime` of `pid` (`"self"` for this process).
    fn of(pid: &str) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name may hold spaces: fields start after the last ')'.
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the whole line, 11 and 12 here.
        Some(Self {
            user: fields.get(11)?.parse().ok()?,
            system: fields.get(12)?.parse().ok()?,
        })
    }

    fn of_pid(pid: u32) -> Option<Self> {
        Self::of(&pid.to_string())
    }

    /// What was spent between `before` and `self`, in seconds: user,
    /// kernel.
    fn since(self, before: Self, ticks_per_second: f64) -> (f64, f64) {
        (
            self.user.saturating_sub(before.user) as f64 / ticks_per_second,
            self.system.saturating_sub(before.system) as f64 / ticks_per_second,
        )
    }
}

/// A `/proc/PID/status` value in kB (`VmRSS`, `VmHWM`).
fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn clock_ticks_per_second() -> f64 {
    // CLK_TCK is 100 on every Linux this runs on; `getconf` would say so.
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    statuses: BTreeMap<u16, u64>,
    errors: u64,
}

async fn worker(
    args: Arc<Args>,
    work: Arc<Work>,
    host: HeaderValue,
    next: Arc<AtomicUsize>,
    start: Instant,
    limit: usize,
    slot: usize,
) -> Tally {
    let mut tally = Tally::default();
    // Batch mode: this connection's channel, and its next voucher.
    let mut sent_on_channel = 0;
    let deadline = start + args.duration;
    let mut sender = None;
    loop {
        if Instant::now() >= deadline {
            break;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= limit {
            break;
        }
        if args.rate > 0.0 {
            let at = start + Duration::from_secs_f64(i as f64 / args.rate);
            if at >= deadline {
                break;
            }
            tokio::time::sleep_until(at.into()).await;
        }
        if sender.is_none() {
            match connect(args.addr).await {
                Ok(s) => sender = Some(s),
                Err(_) => {
                    tally.errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let Some(s) = sender.as_mut() else { continue };
        let header = match &*work {
            Work::Batch(channels) => {
                let Some(h) = channels.get(slot).and_then(|c| c.get(sent_on_channel)) else {
                    break;
                };
                sent_on_channel += 1;
                Ok(Some((&PAYMENT_SIGNATURE, h.clone())))
            }
            other => other.header(i),
        };
        let Ok(header) = header else {
            tally.errors += 1;
            continue;
        };
        let sent = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            get(s, &host, &args.path, header.as_ref().map(|(k, v)| (*k, v))),
        )
        .await;
        let took = sent.elapsed();
        match answer {
            Ok(Ok((status, _))) => {
                tally
                    .latencies_us
                    .push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
                *tally.statuses.entry(status.as_u16()).or_default() += 1;
            }
            _ => {
                tally.errors += 1;
                sender = None;
            }
        }
    }
    tally
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64)).ceil() as usize;
    f64::from(sorted[rank.clamp(1, sorted.len()) - 1]) / 1000.0
}

async fn run(args: Args) -> Result<Value, Error> {
    let host = HeaderValue::try_from(args.addr.to_string())?;
    let setup = Instant::now();
    let work = match args.mode.as_str() {
        "plain" => Work::Plain,
        "paid" => {
            let challenge = challenge(&args, &host).await?;
            let req = challenge.accepts.first().ok_or("empty challenge")?;
            if args.valid_for > 0 {
                Work::PaidLive {
                    signer: Box::new(Signer::new(&args, &challenge.resource, req)?),
                    secs: args.valid_for,
                }
            } else {
                Work::Paid(presign(&args, &challenge.resource, req, args.max_requests)?)
            }
        }
        "session" => {
            let (tokens, calls) = match &args.tokens_from {
                Some(path) => {
                    let (mut tokens, calls) = opened_sessions(&args, &host, path).await?;
                    if args.tokens_skip >= tokens.len() {
                        return Err(format!(
                            "--tokens-skip {} leaves none of the {} sessions listed",
                            args.tokens_skip,
                            tokens.len()
                        )
                        .into());
                    }
                    tokens.drain(..args.tokens_skip);
                    tokens.truncate(args.tokens_take);
                    (tokens, calls)
                }
                None => buy_sessions(&args, &host, args.sessions).await?,
            };
            Work::Session { tokens, calls }
        }
        "batch" => {
            let challenge = challenge(&args, &host).await?;
            let req = challenge
                .accepts
                .iter()
                .find(|r| r.scheme == x402_core::batch::BATCH_SETTLEMENT)
                .ok_or("the challenge offers no batch-settlement")?;
            let per_channel = (args.max_requests / args.connections).max(1);
            let channels = x402_loadgen::batch::presign(
                req,
                &challenge.resource,
                args.connections,
                per_channel,
                args.seed,
            )?;
            // Open every channel (its deposit call) before the clock starts.
            let mut sender = connect(args.addr).await?;
            for channel in &channels {
                let (status, _) = get(
                    &mut sender,
                    &host,
                    &args.path,
                    Some((&PAYMENT_SIGNATURE, &channel.deposit)),
                )
                .await?;
                if status != StatusCode::OK {
                    return Err(format!("a batch deposit call answered {status}").into());
                }
            }
            Work::Batch(channels.into_iter().map(|c| c.vouchers).collect())
        }
        other => return Err(format!("unknown mode {other:?}").into()),
    };
    let setup = setup.elapsed();
    let limit = args.max_requests.min(work.capacity());
    eprintln!(
        "loadgen {}: set-up {:.1} s; running {} connections for {:?} (at most {limit} requests{})",
        args.label,
        setup.as_secs_f64(),
        args.connections,
        args.duration,
        if args.rate > 0.0 {
            format!(", {} req/s", args.rate)
        } else {
            String::new()
        }
    );

    let args = Arc::new(args);
    let work = Arc::new(work);
    let next = Arc::new(AtomicUsize::new(0));
    let pid = args.server_pid;
    let allocations_before = allocations(&args, &host).await;
    let cpu_before = pid.and_then(Ticks::of_pid);
    let facilitator_before = args.facilitator_pid.and_then(Ticks::of_pid);
    let own_before = Ticks::of("self");
    let start = Instant::now();
    let samples = Arc::new(std::sync::Mutex::new(Vec::<(f64, u64)>::new()));
    let sample = {
        let samples = Arc::clone(&samples);
        move || {
            if let Some(kb) = pid.and_then(|p| status_kb(p, "VmRSS")) {
                let t = (start.elapsed().as_secs_f64() * 10.0).round() / 10.0;
                if let Ok(mut v) = samples.lock() {
                    v.push((t, kb));
                }
            }
        }
    };
    let sampler = (pid.is_some() && args.sample_every > 0.0).then(|| {
        let every = Duration::from_secs_f64(args.sample_every);
        let sample = sample.clone();
        sample();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at((start + every).into(), every);
            loop {
                tick.tick().await;
                sample();
            }
        })
    });
    let tasks: Vec<_> = (0..args.connections)
        .map(|slot| {
            tokio::spawn(worker(
                Arc::clone(&args),
                Arc::clone(&work),
                host.clone(),
                Arc::clone(&next),
                start,
                limit,
                slot,
            ))
        })
        .collect();
    let mut all = Tally::default();
    for t in tasks {
        let t = t.await?;
        all.latencies_us.extend(t.latencies_us);
        for (k, v) in t.statuses {
            *all.statuses.entry(k).or_default() += v;
        }
        all.errors += t.errors;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu_after = pid.and_then(Ticks::of_pid);
    let facilitator_after = args.facilitator_pid.and_then(Ticks::of_pid);
    let own_after = Ticks::of("self");
    let allocations_after = allocations(&args, &host).await;
    if let Some(task) = sampler {
        task.abort();
        sample();
    }
    let samples: Vec<(f64, u64)> = samples.lock().map(|v| v.clone()).unwrap_or_default();
    let tck = clock_ticks_per_second();
    let spent = |before: Option<Ticks>, after: Option<Ticks>| match (before, after) {
        (Some(a), Some(b)) => Some(b.since(a, tck)),
        _ => None,
    };
    let server = spent(cpu_before, cpu_after);
    let server_cpu_s = server.map(|(user, system)| user + system);
    let facilitator_cpu_s = spent(facilitator_before, facilitator_after).map(|(u, s)| u + s);
    let own_cpu_s = spent(own_before, own_after).map(|(u, s)| u + s);
    let hwm_kb = pid.and_then(|p| status_kb(p, "VmHWM"));
    // Per request served; the two counter reads' own allocations are noise.
    let per_request = |field: &str| match (&allocations_before, &allocations_after) {
        (Some(a), Some(b)) if !all.latencies_us.is_empty() => {
            let (a, b) = (a.get(field)?.as_f64()?, b.get(field)?.as_f64()?);
            Some(((b - a) / all.latencies_us.len() as f64 * 10.0).round() / 10.0)
        }
        _ => None,
    };
    let allocations_per_req = per_request("allocations");
    let allocated_bytes_per_req = per_request("bytes");
    all.latencies_us.sort_unstable();
    let done = all.latencies_us.len();
    let ok = all.statuses.get(&args.expect).copied().unwrap_or(0);
    let l = &all.latencies_us;
    // Microseconds of `seconds` per request served.
    let per_req = |seconds: Option<f64>| {
        seconds
            .filter(|_| done > 0)
            .map(|c| (c * 1e7 / done as f64).round() / 10.0)
    };
    Ok(json!({
        "label": args.label,
        "mode": args.mode,
        "path": args.path,
        "connections": args.connections,
        "rate": args.rate,
        "setup_s": (setup.as_secs_f64() * 100.0).round() / 100.0,
        "elapsed_s": (elapsed * 1000.0).round() / 1000.0,
        "requests": done,
        "expect": args.expect,
        "ok": ok,
        "statuses": all.statuses,
        "errors": all.errors,
        "rps": ((done as f64) / elapsed * 10.0).round() / 10.0,
        "p50_ms": percentile(l, 50.0),
        "p90_ms": percentile(l, 90.0),
        "p99_ms": percentile(l, 99.0),
        "max_ms": percentile(l, 100.0),
        "server_cpu_s": server_cpu_s,
        "server_cpu_us_per_req": server_cpu_s
            .filter(|_| done > 0)
            .map(|c| (c * 1e6 / done as f64).round()),
        // The same, split: in user space and in the kernel.
        "server_user_us_per_req": per_req(server.map(|(user, _)| user)),
        "server_system_us_per_req": per_req(server.map(|(_, system)| system)),
        // The facilitator's (`--facilitator-pid`) and this process's own,
        // over the timed phase: the other two processes on the same cores.
        "facilitator_cpu_us_per_req": per_req(facilitator_cpu_s),
        "loadgen_cpu_us_per_req": per_req(own_cpu_s),
        "server_hwm_kb": hwm_kb,
        "allocations_per_req": allocations_per_req,
        "allocated_bytes_per_req": allocated_bytes_per_req,
        "rss_samples_kb": samples,
    }))
}

fn main() -> Result<(), Error> {
    let args = parse_args()?;
    let threads = x402_loadgen::env_or("LOADGEN_THREADS", 1usize).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    let out = rt.block_on(run(args))?;
    println!("{out}");
    Ok(())
}
