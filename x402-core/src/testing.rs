//! Test support (feature `test-util`): a facilitator stand-in, payments to
//! send, and a function that drives an engine the way an adapter does.
//!
//! For tests of code that sits behind a paywall: unit tests, doc examples,
//! benchmarks. The payments are signed by a test key ([`PAYER`]), so the
//! engine's local pre-check accepts them; the stand-in moves no money and
//! says valid to anything. Integration tests that need real settlement run
//! a real facilitator (the in-process `LocalFacilitator` on its dev ledger,
//! feature `local-facilitator`, or one over HTTP).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::sync::Arc;
//! use http::{Request, Response, StatusCode};
//! use x402_core::{testing::{self, StandIn}, Engine, Offer, Route, VerifiedPayment};
//!
//! let facilitator = Arc::new(StandIn::new());
//! let engine = Engine::builder_arc(facilitator.clone())
//!     .route(Route::get("/report").offer(Offer::exact("eip155:84532", "$0.01", testing::PAY_TO)))
//!     .build()
//!     .unwrap();
//! let handler = |request: Request<String>| async move {
//!     let paid = request.extensions().get::<VerifiedPayment>().is_some();
//!     Response::new(format!("paid: {paid}"))
//! };
//!
//! // Unpaid: a 402 whose challenge offers the route's price.
//! let challenge = testing::challenge(&engine, Request::get("/report").body(()).unwrap()).await;
//! assert_eq!(challenge.accepts[0].amount.to_string(), "10000");
//!
//! // Paid: the handler runs with the payment, the answer carries the receipt.
//! let request = Request::get("/report")
//!     .header("payment-signature", testing::payment(&challenge.accepts[0]))
//!     .body(String::new())
//!     .unwrap();
//! let response = testing::serve(&engine, request, handler).await;
//! assert_eq!(response.status(), StatusCode::OK);
//! assert_eq!(response.body(), "paid: true");
//! assert!(response.headers().contains_key("payment-response"));
//! facilitator.assert_calls(1, 1);
//! # }
//! ```

use std::{
    convert::Infallible,
    fmt,
    future::Future,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex, PoisonError,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use alloy_primitives::Address;
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use serde_json::{json, Value};

use crate::{
    codec,
    engine::{Decision, Engine, Reply},
    evm,
    facilitator::{Facilitator, FacilitatorError},
    proto::{
        v2::{PaymentRequired, PaymentRequirements, ResourceInfo},
        FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse,
    },
    route::RequestView,
};

/// The payer the [`StandIn`] reports and [`payment`] signs as (the address
/// of a test key, `keccak256("x402_core::testing payer")`).
pub const PAYER: &str = "0x8eBdE6ccD9d7C060D44f80D5036A4F72Ff39BF02";
/// A recipient for test offers.
pub const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// The address the [`StandIn`] advertises as its `upto` kind's
/// `facilitatorAddress` ([`StandIn::supporting`]).
pub const FACILITATOR: &str = "0xfac11174000000000000000000000000000000aa";
/// The transaction hash of the [`StandIn`]'s successful settlements.
pub const TRANSACTION: &str = "0x7e57000000000000000000000000000000000000000000000000000000007e57";

/// What [`StandIn::verify`](Facilitator::verify) answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerifyAnswer {
    /// Valid, paid by [`PAYER`].
    Valid,
    /// Invalid with this reason code.
    Invalid(String),
    /// No answer: [`FacilitatorError::Timeout`].
    Unavailable,
}

/// What [`StandIn::settle`](Facilitator::settle) answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SettleAnswer {
    /// Settled by [`TRANSACTION`], for the amount asked.
    Success,
    /// Refused with this reason code.
    Refused(String),
    /// No answer: [`FacilitatorError::Timeout`].
    Unavailable,
}

/// A facilitator stand-in: answers what the test sets (valid and settled
/// unless told otherwise), counts its calls and keeps every request.
///
/// Share it with the engine through an `Arc` to change answers and read the
/// counts while the engine runs:
/// `Engine::builder_arc(stand_in.clone())`.
#[derive(Default)]
pub struct StandIn {
    verify: Mutex<Option<VerifyAnswer>>,
    settle: Mutex<Option<SettleAnswer>>,
    delay: Mutex<Option<(Duration, Duration)>>,
    supported: SupportedResponse,
    supported_down: bool,
    unrecorded: bool,
    verify_requests: Mutex<Vec<FacilitatorRequest>>,
    settle_requests: Mutex<Vec<FacilitatorRequest>>,
    verify_calls: AtomicUsize,
    settle_calls: AtomicUsize,
    supported_calls: AtomicUsize,
}

impl StandIn {
    /// Verifies every payment as valid and settles it; supports nothing in
    /// `/supported` (see [`with_supported`](Self::with_supported)).
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers `/supported` with `supported`.
    #[must_use]
    pub fn with_supported(mut self, supported: SupportedResponse) -> Self {
        self.supported = supported;
        self
    }

    /// Answers `/supported` with the `exact` and `upto` kinds on `network`
    /// (v2), the upto kind's `facilitatorAddress` being [`FACILITATOR`].
    #[must_use]
    pub fn supporting(self, network: &str) -> Self {
        let supported = serde_json::from_value(json!({
            "kinds": [
                {"x402Version": 2, "scheme": "exact", "network": network},
                {"x402Version": 2, "scheme": "upto", "network": network,
                 "extra": {"facilitatorAddress": FACILITATOR}},
            ],
            "extensions": [],
            "signers": {},
        }));
        match supported {
            Ok(supported) => self.with_supported(supported),
            Err(_) => self,
        }
    }

    /// Gives no answer to `/supported` ([`FacilitatorError::Timeout`]), as
    /// a facilitator that is down does.
    #[must_use]
    pub fn supported_down(mut self) -> Self {
        self.supported_down = true;
        self
    }

    /// Keeps no copy of the requests (the counts still run): for benchmarks
    /// and long runs, where the copies would cost time and memory.
    #[must_use]
    pub fn without_records(mut self) -> Self {
        self.unrecorded = true;
        self
    }

    /// Changes what `verify` answers from now on.
    pub fn set_verify(&self, answer: VerifyAnswer) {
        *lock(&self.verify) = Some(answer);
    }

    /// Changes what `settle` answers from now on.
    pub fn set_settle(&self, answer: SettleAnswer) {
        *lock(&self.settle) = Some(answer);
    }

    /// Waits this long before each `verify` and `settle` answer from now on.
    pub fn set_delays(&self, verify: Duration, settle: Duration) {
        *lock(&self.delay) = Some((verify, settle));
    }

    /// How many times `verify` was called.
    pub fn verify_calls(&self) -> usize {
        self.verify_calls.load(Ordering::SeqCst)
    }

    /// How many times `settle` was called.
    pub fn settle_calls(&self) -> usize {
        self.settle_calls.load(Ordering::SeqCst)
    }

    /// How many times `supported` was called.
    pub fn supported_calls(&self) -> usize {
        self.supported_calls.load(Ordering::SeqCst)
    }

    /// Every `verify` request, oldest first (none after
    /// [`without_records`](Self::without_records)).
    pub fn verify_requests(&self) -> Vec<FacilitatorRequest> {
        lock(&self.verify_requests).clone()
    }

    /// Every `settle` request, oldest first (none after
    /// [`without_records`](Self::without_records)).
    pub fn settle_requests(&self) -> Vec<FacilitatorRequest> {
        lock(&self.settle_requests).clone()
    }

    /// Asserts the `(verify, settle)` call counts.
    ///
    /// # Panics
    ///
    /// When they differ (this is for tests).
    #[track_caller]
    #[allow(clippy::panic)]
    pub fn assert_calls(&self, verify: usize, settle: usize) {
        let seen = (self.verify_calls(), self.settle_calls());
        if seen != (verify, settle) {
            panic!(
                "(verify, settle) calls: expected {:?}, got {seen:?}",
                (verify, settle)
            );
        }
    }

    fn record(&self, into: &Mutex<Vec<FacilitatorRequest>>, request: &FacilitatorRequest) {
        if !self.unrecorded {
            lock(into).push(request.clone());
        }
    }

    async fn pause(&self, pick: fn((Duration, Duration)) -> Duration) {
        let delay = lock(&self.delay).map(pick);
        if let Some(delay) = delay.filter(|d| !d.is_zero()) {
            tokio::time::sleep(delay).await;
        }
    }
}

impl fmt::Debug for StandIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StandIn")
            .field("verify", &*lock(&self.verify))
            .field("settle", &*lock(&self.settle))
            .field("verify_calls", &self.verify_calls())
            .field("settle_calls", &self.settle_calls())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Facilitator for StandIn {
    async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        self.verify_calls.fetch_add(1, Ordering::SeqCst);
        self.record(&self.verify_requests, request);
        self.pause(|(verify, _)| verify).await;
        let answer = lock(&self.verify).clone().unwrap_or(VerifyAnswer::Valid);
        match answer {
            VerifyAnswer::Valid => Ok(VerifyResponse::valid(PAYER)),
            VerifyAnswer::Invalid(reason) => {
                Ok(VerifyResponse::invalid(reason, Some(PAYER.into())))
            }
            VerifyAnswer::Unavailable => Err(FacilitatorError::Timeout),
        }
    }

    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        self.settle_calls.fetch_add(1, Ordering::SeqCst);
        self.record(&self.settle_requests, request);
        self.pause(|(_, settle)| settle).await;
        let network = request.payment_requirements.network();
        let answer = lock(&self.settle).clone().unwrap_or(SettleAnswer::Success);
        match answer {
            SettleAnswer::Success => Ok(SettleResponse {
                success: true,
                payer: Some(PAYER.into()),
                transaction: TRANSACTION.into(),
                network: network.into(),
                amount: Some(request.payment_requirements.amount()),
                ..SettleResponse::default()
            }),
            SettleAnswer::Refused(reason) => Ok(SettleResponse::failure(network, reason)),
            SettleAnswer::Unavailable => Err(FacilitatorError::Timeout),
        }
    }

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        self.supported_calls.fetch_add(1, Ordering::SeqCst);
        if self.supported_down {
            return Err(FacilitatorError::Timeout);
        }
        Ok(self.supported.clone())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn checksum(address: Address) -> String {
    address.to_checksum(None)
}

/// A v2 `PAYMENT-SIGNATURE` header value paying `requirement` from
/// [`PAYER`]: a fresh nonce each call, valid for ten minutes, in the transfer
/// method the requirement asks for (EIP-3009, or Permit2 for `upto` and
/// `assetTransferMethod: "permit2"`), signed with [`PAYER`]'s test key (so
/// the engine's pre-check accepts it) when the requirement says enough to
/// sign, else with random bytes. Nothing pays it but a stand-in
/// facilitator: [`PAYER`] has no funds anywhere.
pub fn payment(requirement: &PaymentRequirements) -> String {
    header(requirement, None)
}

/// [`payment`] for the first offer of `challenge`, carrying the
/// challenge's `resource` as the official clients do (webhook events and
/// hooks read it from the payment). An empty string when the challenge
/// offers nothing.
pub fn pay(challenge: &PaymentRequired) -> String {
    match challenge.accepts.first() {
        Some(requirement) => header(requirement, Some(&challenge.resource)),
        None => String::new(),
    }
}

fn header(requirement: &PaymentRequirements, resource: Option<&ResourceInfo>) -> String {
    let deadline = (unix_now() + 600).to_string();
    let permit2 = requirement.scheme == "upto"
        || requirement
            .extra
            .get("assetTransferMethod")
            .and_then(Value::as_str)
            == Some("permit2");
    let mut payload = if permit2 {
        let spender = if requirement.scheme == "upto" {
            evm::UPTO_PERMIT2_PROXY
        } else {
            evm::EXACT_PERMIT2_PROXY
        };
        // An upto witness names the facilitator the requirement names.
        let mut witness = json!({"to": requirement.pay_to, "validAfter": "0"});
        if requirement.scheme == "upto" {
            witness["facilitator"] = requirement
                .extra
                .get("facilitatorAddress")
                .cloned()
                .unwrap_or_else(|| json!(FACILITATOR));
        }
        json!({
            "permit2Authorization": {
                "from": PAYER,
                "permitted": {"token": requirement.asset, "amount": requirement.amount},
                "spender": checksum(spender),
                "nonce": alloy_primitives::U256::from_be_bytes(rand::random::<[u8; 32]>()).to_string(),
                "deadline": deadline,
                "witness": witness,
            }
        })
    } else {
        json!({
            "authorization": {
                "from": PAYER,
                "to": requirement.pay_to,
                "value": requirement.amount,
                "validAfter": "0",
                "validBefore": deadline,
                "nonce": random_hex(32),
            }
        })
    };
    payload["signature"] = json!(sign(requirement, &payload).unwrap_or_else(|| random_hex(65)));
    let mut header = json!({"x402Version": 2, "accepted": requirement, "payload": payload});
    if let Some(resource) = resource {
        header["resource"] = json!(resource);
    }
    codec::encode(&header).unwrap_or_default()
}

/// [`PAYER`]'s signature (`0x` hex) over a payment's `payload` for
/// `requirement`: EIP-3009 in the token's EIP-712 domain, or Permit2's.
/// `None` when the requirement does not say enough to sign (not an EVM
/// network, no EIP-712 name and version, an asset that is not an address)
/// or the payload is neither. For tests that change a [`payment`] and sign
/// it again.
pub fn sign(requirement: &PaymentRequirements, payload: &Value) -> Option<String> {
    let chain_id = crate::network::evm_chain_id(&requirement.network)?;
    let digest = if let Some(auth) = payload.get("permit2Authorization") {
        let auth: evm::Permit2Authorization = serde_json::from_value(auth.clone()).ok()?;
        auth.signing_hash(chain_id)
    } else {
        let auth: evm::Eip3009Authorization =
            serde_json::from_value(payload.get("authorization")?.clone()).ok()?;
        let name = requirement.extra.get("name")?.as_str()?;
        let version = requirement.extra.get("version")?.as_str()?;
        let asset: Address = requirement.asset.parse().ok()?;
        auth.signing_hash(&evm::eip3009_domain(name, version, chain_id, asset))
    };
    let signature = payer_key().sign_hash_sync(&digest).ok()?;
    Some(format!(
        "0x{}",
        alloy_primitives::hex::encode(signature.as_bytes())
    ))
}

/// [`PAYER`]'s key: `keccak256("x402_core::testing payer")`. A test key,
/// public by construction: never fund it on a real network.
fn payer_key() -> &'static PrivateKeySigner {
    static KEY: std::sync::OnceLock<PrivateKeySigner> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let secret = alloy_primitives::keccak256(b"x402_core::testing payer");
        PrivateKeySigner::from_bytes(&secret).unwrap_or_else(|_| PrivateKeySigner::random())
    })
}

/// `payment` with its signature replaced by random bytes: a well-formed
/// payment that no facilitator (and no pre-check) accepts, for abuse tests.
/// The header as it is when it does not decode.
pub fn forge(payment: &str) -> String {
    let Ok(mut header) = codec::decode::<Value>(payment.as_bytes(), 1 << 20) else {
        return payment.to_owned();
    };
    header["payload"]["signature"] = json!(random_hex(65));
    codec::encode(&header).unwrap_or_default()
}

/// `payment` (a v2 payment header) carrying the payment id `id` in its
/// extensions, as the official client's
/// `appendPaymentIdentifierToExtensions` leaves it: the route's
/// `payment-identifier` declaration ([`declaration`](crate::payment_id::declaration)
/// of `required`) with `info.id` added. The header as it is when it does
/// not decode.
pub fn with_payment_id(payment: &str, id: &str, required: bool) -> String {
    let Ok(mut header) = codec::decode::<Value>(payment.as_bytes(), 1 << 20) else {
        return payment.to_owned();
    };
    let mut extension = crate::payment_id::declaration(required);
    extension["info"]["id"] = json!(id);
    header["extensions"] = json!({ crate::payment_id::PAYMENT_IDENTIFIER: extension });
    codec::encode(&header).unwrap_or_default()
}

fn random_hex(bytes: usize) -> String {
    let mut hex = String::with_capacity(2 + 2 * bytes);
    hex.push_str("0x");
    for _ in 0..bytes {
        let byte: u8 = rand::random();
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The decoded `PAYMENT-REQUIRED` challenge `engine` answers `request` with.
///
/// # Panics
///
/// When the engine does not answer with a v2 challenge (this is for tests).
#[allow(clippy::panic)]
pub async fn challenge<B>(engine: &Engine, request: Request<B>) -> PaymentRequired {
    let (parts, _) = request.into_parts();
    let Decision::Respond(response) = engine.process(RequestView::from_parts(&parts)).await else {
        panic!(
            "{} {}: no challenge from the engine",
            parts.method, parts.uri
        );
    };
    let Some(header) = response.headers().get(codec::PAYMENT_REQUIRED) else {
        panic!(
            "{} {}: {} without a PAYMENT-REQUIRED header",
            parts.method,
            parts.uri,
            response.status()
        );
    };
    match codec::decode(header.as_bytes(), 1 << 20) {
        Ok(challenge) => challenge,
        Err(error) => panic!(
            "{} {}: PAYMENT-REQUIRED does not decode: {error}",
            parts.method, parts.uri
        ),
    }
}

/// The adapters' benches' fixture: an engine selling `GET /paid` for
/// $0.001 (`exact`, Base Sepolia, to [`PAY_TO`]) through a [`StandIn`]
/// that keeps no records (a bench calls it millions of times), and the
/// requirement its 402 offers, for [`payment`] to pay.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use x402_core::testing::{paid_route, payment, PAY_TO};
///
/// let (engine, offer) = paid_route().await;
/// assert_eq!((offer.scheme.as_str(), offer.pay_to.as_str()), ("exact", PAY_TO));
/// let header = payment(&offer); // a fresh signed payment for each call
/// # let _ = (engine, header);
/// # }
/// ```
///
/// # Panics
///
/// If the engine cannot be built (it always can).
#[allow(clippy::expect_used)]
pub async fn paid_route() -> (Engine, PaymentRequirements) {
    let engine = Engine::builder(StandIn::new().without_records())
        .route(crate::Route::get("/paid").offer(crate::Offer::exact(
            "eip155:84532",
            "$0.001",
            PAY_TO,
        )))
        .build()
        .expect("one static route builds");
    let offer = challenge(&engine, Request::get("/paid").body(()).expect("a GET"))
        .await
        .accepts
        .remove(0);
    (engine, offer)
}

/// Sends `request` through `engine` and `handler` as an adapter would, and
/// collects the response.
///
/// The engine decides first: a pass-through goes to `handler`, a 402 (or any
/// engine answer) comes back as it is. A paid request reaches `handler` with
/// the [`VerifiedPayment`](crate::VerifiedPayment) in its extensions, then
/// the engine settles and adds the receipt (or replaces the response, when
/// the settlement fails).
///
/// A body that fails while being read ends the collected body there.
pub async fn serve<B, H, Fut, R>(
    engine: &Engine,
    mut request: Request<B>,
    handler: H,
) -> Response<Bytes>
where
    H: FnOnce(Request<B>) -> Fut,
    Fut: Future<Output = Response<R>>,
    R: Body,
    R::Error: fmt::Display,
{
    let decision = {
        let (method, uri, headers) = (request.method(), request.uri(), request.headers());
        engine.process(RequestView::new(method, uri, headers)).await
    };
    match decision {
        Decision::Pass => collect(handler(request).await).await,
        Decision::Respond(response) => response,
        Decision::Paid(paid) => {
            request.extensions_mut().insert(paid.payment().clone());
            let response = handler(request).await;
            match paid.finish(Ok::<_, Infallible>(response)).await {
                Ok(Reply::Handler(response)) => collect(response).await,
                Ok(Reply::Engine(response)) => response,
                Err(never) => match never {},
            }
        }
    }
}

async fn collect<R>(response: Response<R>) -> Response<Bytes>
where
    R: Body,
{
    let (parts, body) = response.into_parts();
    let mut data = bytes::BytesMut::new();
    let mut body = std::pin::pin!(body);
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(mut chunk) = frame.into_data() {
            use bytes::Buf;
            while chunk.has_remaining() {
                let piece = chunk.chunk();
                data.extend_from_slice(piece);
                let n = piece.len();
                chunk.advance(n);
            }
        }
    }
    Response::from_parts(parts, data.freeze())
}
