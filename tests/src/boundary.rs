//! The protection boundary, differentially: one app of paid and free
//! handlers, served by every adapter in every placement the docs describe
//! ([`Shape`]), each twice: bare (no paywall) and guarded. A raw request
//! target is written to both over TCP ([`send_raw`]; an HTTP client would
//! normalise the path first): whatever the bare twin dispatches to a paid
//! handler, the guarded one must answer 402 (with that handler's price) or
//! 400, and no paid handler may ever run unpaid.

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{Arc, Mutex},
    thread,
    time::Duration,
};

use actix_web::{
    middleware::Condition, web, App, HttpMessage as _, HttpRequest, HttpResponse, HttpServer,
};
use axum::{extract::State, routing::get, Router};
use base64::Engine as _;
use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::oneshot,
};
use tower::{Layer as _, ServiceExt as _};
use x402_actix::PaywallLayer;
use x402_core::{Engine, Offer, Route, VerifiedPayment};

use crate::{actix::StopOnDrop, adapters::bind, StandIn, PAY_TO};

/// A paid handler: its name, a path that reaches it, its price in atomic
/// units, and how the routers declare it (axum, actix-web).
#[derive(Debug, Clone, Copy)]
pub struct Paid {
    pub name: &'static str,
    pub example: &'static str,
    pub amount: &'static str,
}

/// Every paid handler of the app. `bound` is priced by a per-route layer
/// (`x402_axum::PaywallLayer::route`, `x402_actix::PaywallLayer::route`); the others by the
/// engine's table.
pub const PAID: [Paid; 6] = [
    Paid {
        name: "report",
        example: "/report",
        amount: "1000",
    },
    Paid {
        name: "weather",
        example: "/weather/paris",
        amount: "2000",
    },
    Paid {
        name: "profile",
        example: "/users/42/profile",
        amount: "3000",
    },
    Paid {
        name: "files",
        example: "/files/a/b.txt",
        amount: "4000",
    },
    Paid {
        name: "api-report",
        example: "/api/report",
        amount: "5000",
    },
    Paid {
        name: "bound",
        example: "/bound/7",
        amount: "6000",
    },
];

/// Paths of the free handlers.
pub const FREE: [&str; 3] = ["/health", "/free/x", "/api/status"];

/// The price of a paid handler, by name.
pub fn amount_of(name: &str) -> Option<&'static str> {
    PAID.iter().find(|p| p.name == name).map(|p| p.amount)
}

fn offer(amount: &str) -> Offer {
    Offer::exact("eip155:84532", amount, PAY_TO)
}

/// The engine's table: every paid handler, declared by the full path a
/// client sends; `bound` only where no per-route layer prices it (tower,
/// which has none).
pub fn table_engine(standin: &StandIn, origin: &str, with_bound: bool) -> Engine {
    let mut builder = Engine::builder(standin.facilitator())
        .route(Route::get("/report").offer(offer("1000")))
        .route(Route::get("/weather/:city").offer(offer("2000")))
        .route(Route::get("/users/{id}/profile").offer(offer("3000")))
        .route(Route::get("/files/{*path}").offer(offer("4000")))
        .route(Route::get("/api/report").offer(offer("5000")));
    if with_bound {
        builder = builder.route(bound_route());
    }
    builder.public_origin(origin).build().unwrap()
}

/// The route `bound` is priced by.
pub fn bound_route() -> Route {
    Route::get("/bound/{id}").offer(offer("6000"))
}

/// How many times each handler ran.
#[derive(Debug, Clone, Default)]
pub struct Runs(Arc<Mutex<HashMap<String, usize>>>);

impl Runs {
    fn record(&self, name: &str, paid: bool) {
        *self
            .0
            .lock()
            .unwrap()
            .entry(format!("{}{name}", if paid { "paid:" } else { "" }))
            .or_default() += 1;
    }

    /// Runs of paid handlers that had no verified payment.
    pub fn unpaid(&self) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| PAID.iter().any(|p| p.name == k.as_str()))
            .map(|(_, v)| v)
            .sum()
    }

    /// Runs of `name` with a verified payment.
    pub fn paid(&self, name: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .get(&format!("paid:{name}"))
            .copied()
            .unwrap_or_default()
    }
}

/// One placement of the paywall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// axum: `Router::layer` over every route (nested ones too), `bound`
    /// layered on its `MethodRouter`.
    AxumRouterLayer,
    /// axum: `Router::route_layer`.
    AxumRouteLayer,
    /// axum: a layer on each `MethodRouter`, and one inside the nested
    /// router (which sees its path stripped).
    AxumPerRoute,
    /// axum: the nested part served by `nest_service` around a layered
    /// router.
    AxumNestService,
    /// x402-tower around a whole axum router, served by hyper: the paywall
    /// knows nothing of the router's decisions.
    TowerOverAxum,
    /// x402-tower around a router that cleans paths before matching
    /// (decodes everything, reads `\` as `/`, resolves dots, drops empty
    /// segments, ignores case).
    TowerOverCleaningRouter,
    /// actix-web: `App::wrap`, with a `/api` scope.
    ActixApp,
    /// actix-web: `Scope::wrap` on a prefixed scope, `Resource::wrap` on
    /// the rest.
    ActixScopes,
}

impl Shape {
    pub const ALL: [Shape; 8] = [
        Shape::AxumRouterLayer,
        Shape::AxumRouteLayer,
        Shape::AxumPerRoute,
        Shape::AxumNestService,
        Shape::TowerOverAxum,
        Shape::TowerOverCleaningRouter,
        Shape::ActixApp,
        Shape::ActixScopes,
    ];
}

/// A bare twin and a guarded server of one shape.
#[derive(Debug)]
pub struct Twins {
    pub shape: Shape,
    pub bare: String,
    pub guarded: String,
    pub runs: Runs,
    pub standin: StandIn,
    _servers: Vec<StopOnDrop>,
}

impl Twins {
    pub async fn start(shape: Shape) -> Self {
        let standin = StandIn::start(crate::EventLog::default()).await;
        let runs = Runs::default();
        let (bare_listener, bare) = bind().await;
        let (guarded_listener, guarded) = bind().await;
        let tower = matches!(shape, Shape::TowerOverAxum | Shape::TowerOverCleaningRouter);
        let engine = table_engine(&standin, &guarded, tower);
        let mut servers = Vec::new();
        for (listener, guard) in [(bare_listener, false), (guarded_listener, true)] {
            let tag = Tag {
                runs: runs.clone(),
                guarded: guard,
            };
            if let Some(stop) = serve(shape, listener, engine.clone(), tag).await {
                servers.push(stop);
            }
        }
        Self {
            shape,
            bare,
            guarded,
            runs,
            standin,
            _servers: servers,
        }
    }
}

/// Serves `shape` on `listener`, guarded by `engine` when `tag` says so.
async fn serve(
    shape: Shape,
    listener: TcpListener,
    engine: Engine,
    tag: Tag,
) -> Option<StopOnDrop> {
    let guarded = tag.guarded;
    match shape {
        Shape::ActixApp | Shape::ActixScopes => {
            Some(serve_actix(shape, listener, engine, tag).await)
        }
        Shape::TowerOverAxum | Shape::TowerOverCleaningRouter => {
            let inner = if shape == Shape::TowerOverAxum {
                tower::util::BoxCloneSyncService::new(
                    <Router as tower::ServiceExt<AxumRequest>>::map_response(
                        axum_router(shape, None, tag),
                        axum::response::IntoResponse::into_response,
                    ),
                )
            } else {
                tower::util::BoxCloneSyncService::new(
                    cleaning_router(tag).map_response(axum::response::IntoResponse::into_response),
                )
            };
            if guarded {
                serve_hyper(listener, x402_tower::PaywallLayer::new(engine).layer(inner));
            } else {
                serve_hyper(listener, inner);
            }
            None
        }
        _ => {
            let paywall = guarded.then(|| x402_axum::PaywallLayer::new(engine));
            let app = axum_router(shape, paywall.as_ref(), tag);
            tokio::spawn(async move { axum::serve(listener, app).await });
            None
        }
    }
}

/// What a handler records its runs with.
#[derive(Debug, Clone)]
struct Tag {
    runs: Runs,
    guarded: bool,
}

impl Tag {
    fn run(&self, name: &str, payment: Option<&VerifiedPayment>) -> http::Response<String> {
        if self.guarded {
            self.runs.record(name, payment.is_some());
        }
        http::Response::builder()
            .header("x-handler", name)
            .body(format!("handler:{name}"))
            .unwrap()
    }
}

type AxumRequest = axum::extract::Request;

async fn axum_handler(
    name: &'static str,
    tag: Tag,
    request: AxumRequest,
) -> http::Response<String> {
    tag.run(name, request.extensions().get::<VerifiedPayment>())
}

fn handler(name: &'static str) -> axum::routing::MethodRouter<Tag> {
    get(move |State(tag): State<Tag>, request: AxumRequest| axum_handler(name, tag, request))
}

fn axum_router(shape: Shape, paywall: Option<&x402_axum::PaywallLayer>, tag: Tag) -> Router {
    let per_route = shape == Shape::AxumPerRoute;
    let paid = |name: &'static str| match paywall {
        Some(p) if per_route => handler(name).layer(p.clone()),
        _ => handler(name),
    };
    let bound = match paywall {
        Some(p) => handler("bound").layer(p.route(bound_route()).unwrap()),
        None => handler("bound"),
    };
    let mut api = Router::new()
        .route("/report", paid("api-report"))
        .route("/status", handler("api-status"));
    if let (Some(p), Shape::AxumPerRoute | Shape::AxumNestService) = (paywall, shape) {
        api = api.layer(p.clone());
    }
    let mut router = Router::new()
        .route("/report", paid("report"))
        .route("/weather/{city}", paid("weather"))
        .route("/users/{id}/profile", paid("profile"))
        .route("/files/{*path}", paid("files"))
        .route("/bound/{id}", bound)
        .route("/health", handler("health"))
        .route("/free/{x}", handler("free"));
    router = if shape == Shape::AxumNestService {
        // Only the routes so far: the nested service wears its own.
        if let Some(p) = paywall {
            router = router.route_layer(p.clone());
        }
        router.nest_service("/api", api.with_state(tag.clone()))
    } else {
        router.nest("/api", api)
    };
    if let Some(p) = paywall {
        router = match shape {
            Shape::AxumRouterLayer => router.layer(p.clone()),
            Shape::AxumRouteLayer => router.route_layer(p.clone()),
            _ => router,
        };
    }
    router
        .fallback(move |State(tag): State<Tag>, request: AxumRequest| {
            axum_handler("fallback", tag, request)
        })
        .with_state(tag)
}

/// A path as a lenient router reads it: fully decoded, `\` as `/`, dot
/// segments resolved, empty segments dropped, lower-cased.
pub fn clean_segments(path: &str) -> Vec<String> {
    let decoded = percent_decode(path).replace('\\', "/").to_ascii_lowercase();
    let mut out: Vec<String> = Vec::new();
    for s in decoded.split('/') {
        match s {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            _ => out.push(s.to_owned()),
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escape = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match escape {
            Some(b) if bytes[i] == b'%' => {
                out.push(b);
                i += 3;
            }
            _ => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A router that cleans the path, then dispatches on the segments.
fn cleaning_router(
    tag: Tag,
) -> impl tower::Service<
    AxumRequest,
    Response = http::Response<String>,
    Error = Infallible,
    Future = std::future::Ready<Result<http::Response<String>, Infallible>>,
> + Clone
       + Send
       + Sync
       + 'static {
    tower::service_fn(move |request: AxumRequest| {
        let segments = clean_segments(request.uri().path());
        let s: Vec<&str> = segments.iter().map(String::as_str).collect();
        let name = match s.as_slice() {
            ["report"] => "report",
            ["weather", _] => "weather",
            ["users", _, "profile"] => "profile",
            ["files", ..] => "files",
            ["bound", _] => "bound",
            ["api", "report"] => "api-report",
            ["api", "status"] => "api-status",
            ["health"] => "health",
            ["free", _] => "free",
            _ => "fallback",
        };
        std::future::ready(Ok(
            tag.run(name, request.extensions().get::<VerifiedPayment>())
        ))
    })
}

fn serve_hyper<S, B>(listener: TcpListener, service: S)
where
    S: tower::Service<AxumRequest, Response = http::Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = service.map_request(|request: http::Request<hyper::body::Incoming>| {
        request.map(axum::body::Body::new)
    });
    crate::adapters::serve_hyper(listener, service);
}

async fn serve_actix(shape: Shape, listener: TcpListener, engine: Engine, tag: Tag) -> StopOnDrop {
    let listener = listener.into_std().unwrap();
    let (tx, rx) = oneshot::channel();
    thread::Builder::new()
        .name("actix-boundary".into())
        .spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = HttpServer::new(move || {
                    let paywall = PaywallLayer::new(engine.clone());
                    let guarded = tag.guarded;
                    let whole_app = guarded && shape == Shape::ActixApp;
                    let (tag, routes_paywall) = (tag.clone(), paywall.clone());
                    App::new()
                        .wrap(Condition::new(whole_app, paywall))
                        .app_data(web::Data::new(tag))
                        .configure(move |cfg| actix_routes(cfg, shape, guarded, &routes_paywall))
                        .default_service(web::to(|tag: web::Data<Tag>, request: HttpRequest| {
                            actix_handler("fallback", tag, request)
                        }))
                })
                .workers(1)
                .disable_signals()
                .listen(listener)
                .unwrap()
                .run();
                let _ = tx.send(server.handle());
                let _ = server.await;
            });
        })
        .unwrap();
    StopOnDrop(rx.await.unwrap())
}

async fn actix_handler(
    name: &'static str,
    tag: web::Data<Tag>,
    request: HttpRequest,
) -> HttpResponse {
    let payment = request.extensions().get::<VerifiedPayment>().cloned();
    let response = tag.run(name, payment.as_ref());
    HttpResponse::Ok()
        .insert_header(("x-handler", name))
        .body(response.into_body())
}

fn actix_route(name: &'static str) -> actix_web::Route {
    web::get()
        .to(move |tag: web::Data<Tag>, request: HttpRequest| actix_handler(name, tag, request))
}

/// The routes; with `ActixScopes` each paid resource and the `/api` scope
/// wear the paywall themselves.
fn actix_routes(cfg: &mut web::ServiceConfig, shape: Shape, guarded: bool, paywall: &PaywallLayer) {
    let own = guarded && shape == Shape::ActixScopes;
    let resource = |path: &str, name: &'static str| {
        web::resource(path)
            .wrap(Condition::new(own, paywall.clone()))
            .route(actix_route(name))
    };
    cfg.service(resource("/report", "report"))
        .service(resource("/weather/{city}", "weather"))
        .service(resource("/users/{id}/profile", "profile"))
        .service(resource("/files/{path:.*}", "files"))
        .service(
            web::resource("/bound/{id}")
                .wrap(Condition::new(
                    guarded,
                    paywall.route(bound_route()).unwrap(),
                ))
                .route(actix_route("bound")),
        )
        .service(
            web::scope("/api")
                .wrap(Condition::new(own, paywall.clone()))
                .route("/report", actix_route("api-report"))
                .route("/status", actix_route("api-status")),
        )
        .route("/health", actix_route("health"))
        .route("/free/{x}", actix_route("free"));
}

/// One raw HTTP/1.1 exchange's answer.
#[derive(Debug)]
pub struct RawReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The handler that answered, if one did.
    pub fn handler(&self) -> Option<&str> {
        self.header("x-handler")
    }

    /// The decoded `PAYMENT-REQUIRED` challenge.
    pub fn challenge(&self) -> Option<Value> {
        let header = self.header("payment-required")?;
        let json = base64::engine::general_purpose::STANDARD
            .decode(header)
            .ok()?;
        serde_json::from_slice(&json).ok()
    }
}

/// Writes `METHOD target HTTP/1.1` to `base` (`http://127.0.0.1:port`) as
/// is, and reads the answer. `None` when the server closed without one.
pub async fn send_raw(
    base: &str,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> Option<RawReply> {
    let address = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).await.unwrap();
    let mut request = format!("{method} {target} HTTP/1.1\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str(&format!("Host: {address}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("the server answers within 10 s")
        .ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Some(RawReply {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    })
}

/// Raw request targets: every paid and free example path, spelled every way
/// a client can send it.
pub fn corpus() -> Vec<String> {
    let mut out = Vec::new();
    let bases: Vec<&str> = PAID.iter().map(|p| p.example).chain(FREE).collect();
    const TAILS: [&str; 22] = [
        "..",
        ".",
        "%2e%2e",
        "%2E%2E",
        "%2e",
        "%2E",
        ".%2e",
        "%2e.",
        "a%2Fb",
        "a%2fb",
        "a%5Cb",
        "a%5cb",
        "a\\b",
        "",
        "x;y=1",
        "%2F",
        "..%2F..",
        "..%2f",
        "%2e%2e%2f",
        "a\\..",
        "..\\",
        "%00",
    ];
    const INSERTS: [&str; 10] = [
        ".", "..", "%2e", "%2E", "%2e%2e", "%2E%2e", ".%2E", "", "x/..", "x/%2e%2e",
    ];
    for base in bases {
        let segments: Vec<&str> = base.split('/').skip(1).collect();
        let join = |s: &[String]| format!("/{}", s.join("/"));
        let owned: Vec<String> = segments.iter().map(|s| (*s).to_owned()).collect();
        out.push(base.to_owned());
        out.push(base.to_uppercase());
        out.push(format!("{base}/"));
        out.push(format!("{base}//"));
        out.push(format!("/{base}"));
        out.push(format!("{base}?q=1"));
        out.push(format!("{base}/."));
        out.push(format!("{base}/.."));
        out.push(format!("/x/..{base}"));
        out.push(format!("/%2e%2e{base}"));
        out.push(format!("/.{base}"));
        for i in 0..owned.len() {
            // One segment's case changed, a letter encoded, `;` appended.
            let mut s = owned.clone();
            let mut chars: Vec<char> = s[i].chars().collect();
            if let Some(c) = chars.first_mut() {
                *c = c.to_ascii_uppercase();
            }
            s[i] = chars.into_iter().collect();
            out.push(join(&s));
            let mut s = owned.clone();
            if let Some(c) = s[i].chars().next() {
                s[i] = format!("%{:02x}{}", c as u32, &s[i][c.len_utf8()..]);
                out.push(join(&s));
                let mut upper = owned.clone();
                upper[i] = format!("%{:02X}{}", c as u32, &owned[i][c.len_utf8()..]);
                out.push(join(&upper));
            }
            let mut s = owned.clone();
            s[i] = format!("{};x=1", s[i]);
            out.push(join(&s));
            // The segment replaced.
            for tail in TAILS {
                let mut s = owned.clone();
                s[i] = tail.to_owned();
                out.push(join(&s));
            }
            // Something inserted before it.
            for insert in INSERTS {
                let mut s = owned.clone();
                s.insert(i, insert.to_owned());
                out.push(join(&s));
            }
            // Its separator spelled otherwise.
            if i > 0 {
                for separator in ["\\", "%2F", "%2f", "%5C", "%5c", "//", "/./", "/%2e/"] {
                    let (left, right) = owned.split_at(i);
                    out.push(format!("/{}{separator}{}", left.join("/"), right.join("/")));
                }
            }
        }
        // Extra segments: a parameter's or a wildcard's room.
        for tail in TAILS {
            out.push(format!("{base}/{tail}"));
        }
    }
    out.sort();
    out.dedup();
    out
}
