//! Per-network minimum prices: routes under their network's floor are refused
//! at build, and dynamic prices under it per request.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use http::{Request, Response, StatusCode};
use serde_json::Value;
use x402_core::{
    engine::ConfigError,
    floor::PriceFloors,
    money::AtomicAmount,
    route::RequestInfo,
    session::SessionOffer,
    testing::{self, StandIn, PAY_TO},
    Asset, Engine, Offer, Route,
};

const BASE: &str = "eip155:8453";
const BASE_SEPOLIA: &str = "eip155:84532";
const ARBITRUM: &str = "eip155:42161";
const ETHEREUM: &str = "eip155:1";
/// MegaETH, whose default stablecoin (MegaUSD) has 18 decimals.
const MEGAETH: &str = "eip155:4326";
/// USDC on Base.
const USDC_BASE: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
/// Another token on Base (WETH): no dollar value known.
const WETH_BASE: &str = "0x4200000000000000000000000000000000000006";

fn route(offer: Offer) -> Route {
    Route::get("/cheap").offer(offer)
}

fn build(route: Route) -> Result<Engine, ConfigError> {
    Engine::builder(StandIn::new()).route(route).build()
}

fn build_with(floors: PriceFloors, route: Route) -> Result<Engine, ConfigError> {
    Engine::builder(StandIn::new())
        .price_floors(floors)
        .route(route)
        .build()
}

/// The build error, which must be a floor's.
fn below_floor(result: Result<Engine, ConfigError>) -> (ConfigError, String) {
    let Err(error) = result else {
        panic!("built under the floor");
    };
    assert!(
        matches!(error, ConfigError::PriceBelowFloor { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    (error, text)
}

#[test]
fn a_base_route_under_the_floor_is_refused_at_build() {
    let (error, text) = below_floor(build(route(Offer::exact(BASE, "$0.001", PAY_TO))));
    for part in ["/cheap", BASE, "$0.001", "$0.01"] {
        assert!(text.contains(part), "{part} missing from: {text}");
    }
    let ConfigError::PriceBelowFloor {
        route,
        network,
        price,
        floor,
    } = error
    else {
        unreachable!()
    };
    assert_eq!(route, "/cheap");
    assert_eq!(network, BASE);
    assert_eq!(price, "$0.001");
    assert_eq!(floor, "$0.01");
}

#[test]
fn a_base_route_at_the_floor_builds() {
    build(route(Offer::exact(BASE, "$0.01", PAY_TO))).unwrap();
    build(route(Offer::exact(BASE, "$0.010", PAY_TO))).unwrap();
    build(route(Offer::exact(BASE, "$1", PAY_TO))).unwrap();
}

#[test]
fn floors_can_be_lowered_or_removed() {
    let cheap = || route(Offer::exact(BASE, "$0.001", PAY_TO));
    build_with(PriceFloors::none(), cheap()).unwrap();
    build_with(PriceFloors::default().set(BASE, "$0.0001"), cheap()).unwrap();
    build_with(PriceFloors::default().remove(BASE), cheap()).unwrap();
    // By the network's version 1 name too.
    build_with(PriceFloors::default().set("base", "$0.001"), cheap()).unwrap();
    // Raised: refused.
    let (_, text) = below_floor(build_with(
        PriceFloors::none().set(BASE_SEPOLIA, "$0.01"),
        Route::get("/cheap").offer(Offer::exact(BASE_SEPOLIA, "$0.001", PAY_TO)),
    ));
    assert!(text.contains(BASE_SEPOLIA), "{text}");
}

#[test]
fn a_floor_that_is_not_a_dollar_amount_is_refused_at_build() {
    let error = build_with(
        PriceFloors::default().set(BASE, "1e-2"),
        route(Offer::exact(BASE_SEPOLIA, "$0.01", PAY_TO)),
    )
    .unwrap_err();
    assert!(
        matches!(&error, ConfigError::PriceFloor { network, .. } if network == BASE),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("price floor for eip155:8453"),
        "{error}"
    );
}

#[test]
fn the_arbitrum_and_ethereum_floors() {
    let (_, text) = below_floor(build(route(Offer::exact(ARBITRUM, "$0.019999", PAY_TO))));
    assert!(text.contains("$0.02") && text.contains(ARBITRUM), "{text}");
    build(route(Offer::exact(ARBITRUM, "$0.02", PAY_TO))).unwrap();
    // Ethereum has no default stablecoin (a `$` price there names its
    // asset): its USDC is still valued in dollars, and floored.
    let usdc_eth =
        Asset::new("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", 6).eip712("USD Coin", "2");
    let (_, text) = below_floor(build(route(
        Offer::exact(ETHEREUM, "$0.001", PAY_TO).asset(usdc_eth.clone()),
    )));
    assert!(text.contains("$0.05") && text.contains(ETHEREUM), "{text}");
    build(route(
        Offer::exact(ETHEREUM, "$0.05", PAY_TO).asset(usdc_eth),
    ))
    .unwrap();
    assert_eq!(
        PriceFloors::default().get(ETHEREUM).unwrap().to_string(),
        "$0.05"
    );
}

#[test]
fn an_atomic_usdc_price_is_valued_with_its_decimals() {
    // 9999 base units of 6-decimal USDC: $0.009999.
    let (_, text) = below_floor(build(route(Offer::exact(BASE, "9999", PAY_TO))));
    assert!(text.contains("$0.009999"), "{text}");
    below_floor(build(route(Offer::exact(
        BASE,
        AtomicAmount::from(1000u64),
        PAY_TO,
    ))));
    build(route(Offer::exact(BASE, "10000", PAY_TO))).unwrap();
    // The default stablecoin named as an asset is still dollars.
    let usdc = Asset::new(USDC_BASE.to_lowercase(), 6).eip712("USD Coin", "2");
    below_floor(build(route(
        Offer::exact(BASE, "1000", PAY_TO).asset(usdc.clone()),
    )));
    below_floor(build(route(
        Offer::exact(BASE, "$0.005", PAY_TO).asset(usdc),
    )));
}

#[test]
fn a_price_in_an_asset_of_unknown_value_is_not_checked() {
    let weth = Asset::new(WETH_BASE, 18).eip712("Wrapped Ether", "1");
    build(route(
        Offer::exact(BASE, "1000", PAY_TO).asset(weth.clone()),
    ))
    .unwrap();
    build(route(Offer::exact(BASE, "$0.000001", PAY_TO).asset(weth))).unwrap();
}

#[test]
fn an_upto_ceiling_under_the_floor_is_refused() {
    let (_, text) = below_floor(build(route(Offer::upto(BASE, "$0.005", PAY_TO))));
    assert!(text.contains("$0.005") && text.contains("$0.01"), "{text}");
    below_floor(build(route(Offer::upto(
        BASE,
        AtomicAmount::from(2000u64),
        PAY_TO,
    ))));
    // At the floor it builds (the facilitator is asked on first use).
    build(route(Offer::upto(BASE, "$0.01", PAY_TO))).unwrap();
}

#[test]
fn a_session_offer_under_the_floor_is_refused() {
    let session = |price: &str| {
        SessionOffer::new("ten", 10, Duration::from_secs(60), "s")
            .offer(Offer::exact(BASE, price, PAY_TO))
    };
    let priced = |price: &str| {
        Route::get("/cheap")
            .offer(Offer::exact(BASE_SEPOLIA, "$0.001", PAY_TO))
            .session(session(price))
    };
    let (_, text) = below_floor(build(priced("$0.005")));
    assert!(text.contains("$0.005"), "{text}");
    build(priced("$0.05")).unwrap();
    // A route priced per request sells its sessions at a fixed price,
    // checked at build.
    let dynamic = Route::get("/cheap")
        .dynamic_pricing(|_: RequestInfo| async { None })
        .session(session("$0.005"));
    below_floor(build(dynamic));
}

#[test]
fn a_testnet_route_has_no_floor() {
    build(route(Offer::exact(BASE_SEPOLIA, "$0.000001", PAY_TO))).unwrap();
    build(route(Offer::exact(BASE_SEPOLIA, "1", PAY_TO))).unwrap();
    build(route(Offer::exact("eip155:421614", "$0.000001", PAY_TO))).unwrap();
}

#[test]
fn an_18_decimal_stablecoin_is_compared_exactly() {
    let floors = || PriceFloors::none().set(MEGAETH, "$0.01");
    let (_, text) = below_floor(build_with(
        floors(),
        route(Offer::exact(MEGAETH, "$0.00999999", PAY_TO)),
    ));
    assert!(text.contains("$0.00999999"), "{text}");
    below_floor(build_with(
        floors(),
        route(Offer::exact(MEGAETH, "9999999999999999", PAY_TO)),
    ));
    build_with(floors(), route(Offer::exact(MEGAETH, "$0.01", PAY_TO))).unwrap();
    build_with(
        floors(),
        route(Offer::exact(MEGAETH, "10000000000000000", PAY_TO)),
    )
    .unwrap();
}

#[test]
fn a_bound_route_is_checked_against_the_engine_floors() {
    let engine = Engine::builder(StandIn::new()).build().unwrap();
    let error = engine
        .bind(route(Offer::exact(BASE, "$0.001", PAY_TO)))
        .unwrap_err();
    assert!(
        matches!(error, ConfigError::PriceBelowFloor { .. }),
        "{error:?}"
    );
    let lenient = Engine::builder(StandIn::new())
        .price_floors(PriceFloors::none())
        .build()
        .unwrap();
    lenient
        .bind(route(Offer::exact(BASE, "$0.001", PAY_TO)))
        .unwrap();
}

/// An engine whose one route is priced per request with `offers`, and a
/// count of the handler's runs.
fn dynamic(offers: Vec<Offer>) -> (Engine, Arc<StandIn>) {
    let facilitator = Arc::new(StandIn::new());
    let engine = Engine::builder_arc(facilitator.clone())
        .route(
            Route::get("/priced").dynamic_pricing(move |_: RequestInfo| {
                let offers = offers.clone();
                async move { Some(offers) }
            }),
        )
        .build()
        .unwrap();
    (engine, facilitator)
}

async fn serve(
    engine: &Engine,
    request: Request<()>,
    runs: &Arc<AtomicUsize>,
) -> Response<bytes::Bytes> {
    let runs = runs.clone();
    testing::serve(engine, request, move |_| async move {
        runs.fetch_add(1, Ordering::SeqCst);
        Response::new(String::from("paid"))
    })
    .await
}

fn get() -> Request<()> {
    Request::get("/priced").body(()).unwrap()
}

#[tokio::test]
async fn a_dynamic_price_under_the_floor_is_left_out_of_the_challenge() {
    let (engine, _) = dynamic(vec![
        Offer::exact(BASE, "$0.001", PAY_TO),
        Offer::exact(BASE_SEPOLIA, "$0.001", PAY_TO),
    ]);
    let challenge = testing::challenge(&engine, get()).await;
    assert_eq!(challenge.accepts.len(), 1, "{:?}", challenge.accepts);
    assert_eq!(challenge.accepts[0].network, BASE_SEPOLIA);
    assert_eq!(challenge.accepts[0].amount.to_string(), "1000");
}

#[tokio::test]
async fn a_dynamic_price_with_every_offer_under_the_floor_is_refused() {
    let (engine, facilitator) = dynamic(vec![
        Offer::exact(BASE, "$0.001", PAY_TO),
        Offer::upto(BASE, "9999", PAY_TO),
    ]);
    let runs = Arc::new(AtomicUsize::new(0));
    let response = serve(&engine, get(), &runs).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(!response.headers().contains_key("payment-required"));
    let body: Value = serde_json::from_slice(response.body()).unwrap();
    assert_eq!(body["error"], "price_below_floor");

    // A payment for the offer left out is not taken either.
    let cheap = Engine::builder(StandIn::new())
        .price_floors(PriceFloors::none())
        .route(Route::get("/priced").offer(Offer::exact(BASE, "$0.001", PAY_TO)))
        .build()
        .unwrap();
    let row = testing::challenge(&cheap, get()).await.accepts.remove(0);
    let paid = Request::get("/priced")
        .header("payment-signature", testing::payment(&row))
        .body(())
        .unwrap();
    let response = serve(&engine, paid, &runs).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the handler ran");
    facilitator.assert_calls(0, 0);
}

#[tokio::test]
async fn a_payment_for_a_dynamic_offer_left_out_matches_nothing() {
    let (engine, facilitator) = dynamic(vec![
        Offer::exact(BASE, "$0.001", PAY_TO),
        Offer::exact(BASE_SEPOLIA, "$0.001", PAY_TO),
    ]);
    let cheap = Engine::builder(StandIn::new())
        .price_floors(PriceFloors::none())
        .route(Route::get("/priced").offer(Offer::exact(BASE, "$0.001", PAY_TO)))
        .build()
        .unwrap();
    let row = testing::challenge(&cheap, get()).await.accepts.remove(0);
    let paid = Request::get("/priced")
        .header("payment-signature", testing::payment(&row))
        .body(())
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let response = serve(&engine, paid, &runs).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    let header = response.headers()["payment-required"].as_bytes();
    let challenge: x402_core::proto::v2::PaymentRequired =
        x402_core::codec::decode(header, 1 << 16).unwrap();
    assert_eq!(challenge.error.as_deref(), Some("no_matching_requirements"));
    assert!(challenge.accepts.iter().all(|r| r.network != BASE));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the handler ran");
    facilitator.assert_calls(0, 0);
}

#[tokio::test]
async fn a_dynamic_price_at_or_above_the_floor_is_offered_and_paid() {
    let (engine, facilitator) = dynamic(vec![Offer::exact(BASE, "$0.01", PAY_TO)]);
    let challenge = testing::challenge(&engine, get()).await;
    assert_eq!(challenge.accepts.len(), 1);
    assert_eq!(challenge.accepts[0].network, BASE);
    assert_eq!(challenge.accepts[0].amount.to_string(), "10000");

    let paid = Request::get("/priced")
        .header("payment-signature", testing::payment(&challenge.accepts[0]))
        .body(())
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let response = serve(&engine, paid, &runs).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    facilitator.assert_calls(1, 1);

    // Under lowered floors, the cheap price is offered too.
    let facilitator = Arc::new(StandIn::new());
    let engine = Engine::builder_arc(facilitator)
        .price_floors(PriceFloors::default().set(BASE, "$0.001"))
        .route(
            Route::get("/priced").dynamic_pricing(|_: RequestInfo| async {
                Some(vec![Offer::exact(BASE, "$0.001", PAY_TO)])
            }),
        )
        .build()
        .unwrap();
    let challenge = testing::challenge(&engine, get()).await;
    assert_eq!(challenge.accepts[0].amount.to_string(), "1000");
}
