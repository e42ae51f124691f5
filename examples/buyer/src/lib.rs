//! A careful x402 paying client: the buyer side of HTTP 402 payments.
//!
//! [`Buyer`] requests a URL; when the server answers `402 Payment Required`
//! it reads the challenge (the v2 `PAYMENT-REQUIRED` header first, else a v1
//! JSON body), picks the first `exact` EVM EIP-3009 offer that passes every
//! limit it was given, signs a `TransferWithAuthorization` and retries the
//! request with `PAYMENT-SIGNATURE` (v2) or `X-PAYMENT` (v1).
//!
//! It is built to be safe by default:
//!
//! * **Allow-lists start empty, and an empty allow-list allows nothing.** A
//!   buyer that was not told which networks, assets, recipients and origins
//!   it may pay refuses every challenge. The `dangerous_allow_any_*` setters
//!   lift one list at a time.
//! * A per-call cap ([`BuyerBuilder::max_per_call`]) is required, and an
//!   optional total budget ([`BuyerBuilder::max_total`]) is reserved *before*
//!   signing, so concurrent calls cannot overrun it; a reservation is released
//!   when the seller did not charge.
//! * Nothing is signed unless an offer passed every check: a refusal never
//!   moves [`Buyer::signatures_made`].
//! * Redirects are never followed, neither before nor after paying.
//! * The private key is never logged: `Debug` shows only the address.
//!
//! # Prepaid sessions
//!
//! A seller may also sell sessions (this workspace's own extension, in the v2
//! challenge's `extensions["session"]`): one payment buys `calls` requests
//! within `ttlSeconds`. Told how many calls it plans
//! ([`BuyerBuilder::planned_calls`], [`Buyer::get_planned`]), the buyer
//! compares the cheapest acceptable per-call offer × the planned calls (at
//! most the session's `calls`) with each session's price, and buys the
//! session only when it is strictly cheaper. A session's payment row passes
//! exactly the checks of a per-call payment — network, asset, recipient,
//! origin, **the per-call cap (which therefore caps the session price too)**,
//! and a budget reservation — so a session never buys what a single call
//! could not.
//!
//! Tokens bought are held in memory per (origin, scope), never logged (no
//! `Debug` output, including [`Purchase::headers`], shows them). Later calls
//! to that origin send `X-PAYMENT-SESSION` first: no signature, no budget. A
//! 402 answering a token with a `session_*` error drops the token (except
//! `session_out_of_scope`: the token is still good for its own scope) and the
//! call falls back to buying, which may buy a new session. The remaining
//! counts held are advisory: the seller is the authority, so a token is sent
//! until the seller refuses it.
//!
//! # Paying for a URL
//!
//! ```no_run
//! use x402_buyer::{Buyer, PrivateKeySigner};
//! use x402_core::money::AtomicAmount;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let signer: PrivateKeySigner = std::env::var("BUYER_PRIVATE_KEY")?.parse()?;
//! let buyer = Buyer::builder(signer)
//!     .allow_network("eip155:84532")
//!     .allow_asset("0x036CbD53842c5426634e7929541eC2318f3dCF7e".parse()?)
//!     .allow_recipient("0x209693Bc6afc0C5328bA36FaF03C514EF312287C".parse()?)
//!     .allow_origin("http://127.0.0.1:4021")
//!     .max_per_call(AtomicAmount::from(10_000u64)) // 0.01 USDC
//!     .max_total(AtomicAmount::from(100_000u64))
//!     .build()?;
//! let purchase = buyer.get("http://127.0.0.1:4021/weather").await?;
//! println!("{} paid {:?}", purchase.status, purchase.paid);
//! # Ok(()) }
//! ```
//!
//! # Errors
//!
//! Every failure is a [`BuyerError`] a caller can match on; causes (a
//! `reqwest` error, a header that does not decode) are its
//! [`source`](std::error::Error::source), not part of its message. A
//! malformed header or body from a server is an error, never a panic.
//!
//! ```no_run
//! use x402_buyer::{Buyer, BuyerError, Refusal};
//!
//! # async fn run(buyer: Buyer) {
//! match buyer.get("http://127.0.0.1:4021/weather").await {
//!     Ok(purchase) => println!("HTTP {}, paid {:?}", purchase.status, purchase.paid),
//!     Err(BuyerError::Refused(Refusal::OverPerCallCap { amount, cap })) => {
//!         println!("asked {amount}, the cap is {cap}: nothing was signed");
//!     }
//!     Err(BuyerError::PaymentRefused { status, reason, .. }) => {
//!         println!("the seller refused the payment (HTTP {status}): {reason:?}");
//!     }
//!     Err(e) => {
//!         let mut cause: Option<&dyn std::error::Error> = Some(&e);
//!         while let Some(e) = cause {
//!             println!("{e}");
//!             cause = e.source();
//!         }
//!     }
//! }
//! # }
//! ```
//!
//! # Layout
//!
//! `builder.rs` configures a buyer; `client.rs` is the request loop;
//! `challenge.rs` reads a 402 (both protocol versions); `select.rs` checks
//! offers against the limits and chooses one (or a session); `budget.rs`
//! reserves the total budget; `sign.rs` signs EIP-3009; `receipt.rs` reads
//! the answer to the paid request; `session.rs` holds prepaid sessions;
//! `error.rs` is [`BuyerError`] and its kinds.

mod budget;
mod builder;
mod challenge;
mod client;
mod error;
mod purchase;
mod receipt;
mod select;
mod session;
mod sign;

pub use alloy_primitives::Address;
pub use alloy_signer_local::PrivateKeySigner;
pub use x402_core::{
    money::AtomicAmount,
    proto::{PaymentPayload, SettleResponse},
};

pub use builder::{BuyerBuilder, DEFAULT_TIMEOUT};
pub use challenge::{Challenge, MAX_CHALLENGE_BODY_BYTES, MAX_HEADER_BYTES};
pub use client::Buyer;
pub use error::{
    BuyerError, ChallengeError, ConfigError, DeclinedOffer, EncodeError, Refusal, UnsupportedOffer,
};
pub use purchase::Purchase;
pub use session::SessionUse;
pub use sign::{MAX_VALIDITY_SECONDS, VALID_AFTER_SKEW_SECONDS};
