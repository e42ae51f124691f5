//! Discovery: the typed bazaar extension (enriched per request in the 402),
//! the discovery document and the OpenAPI document, checked by real
//! validators (ajv with the committed JSON Schema, swagger-parser for
//! OpenAPI 3.1; both from `tests/js/node_modules`, installed by
//! `bash scripts/test-all.sh`).
//!
//! Moved from x402-core's tests (Node).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::{path::PathBuf, time::Duration};

use http::{Method, Response, StatusCode};
use serde_json::{json, Value};
use x402_core::{
    codec,
    discovery::{Bazaar, OpenApiInfo, PricingKind},
    route::RequestView,
    session::SessionOffer,
    testing::{self, SettleAnswer, StandIn},
    Decision, Engine, Offer, Route,
};
use x402_tests::require;

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// The `facilitatorAddress` the stand-in advertises for `upto`.
const UPTO_FACILITATOR: &str = testing::FACILITATOR;
const NETWORK: &str = "eip155:84532";

/// Verifies every payment and refuses every settlement
/// (`insufficient_funds`); supports `exact` and `upto` on [`NETWORK`].
fn facilitator() -> StandIn {
    let facilitator = StandIn::new().supporting(NETWORK);
    facilitator.set_settle(SettleAnswer::Refused("insufficient_funds".into()));
    facilitator
}

/// The example server's routes, plus a parameterised route with bazaar.
fn engine() -> Engine {
    Engine::builder(facilitator())
        .route(
            Route::get("/exact/evm/eip3009")
                .offer(Offer::exact(NETWORK, "$0.001", PAY_TO))
                .description("exact payment, EIP-3009")
                .mime_type("application/json"),
        )
        .route(
            Route::get("/upto/evm/permit2")
                .offer(Offer::upto(NETWORK, "2000", PAY_TO))
                .description("metered: up to 2000 atomic units")
                .mime_type("application/json"),
        )
        .route(
            Route::get("/session/demo")
                .offer(Offer::exact(NETWORK, "$0.001", PAY_TO))
                .session(
                    SessionOffer::new("demo-100", 100, Duration::from_secs(3600), "demo")
                        .offer(Offer::exact(NETWORK, "$0.05", PAY_TO)),
                )
                .description("per call, or 100 calls for $0.05"),
        )
        .route(
            Route::get("/weather/:city")
                .offer(Offer::exact(NETWORK, "$0.001", PAY_TO))
                .description("Today's weather in a city")
                .mime_type("application/json")
                .bazaar(
                    Bazaar::http()
                        .query_param("units", "metric")
                        .header("accept-language", "en")
                        .output_example(json!({ "city": "paris", "celsius": 21, "sky": "clear" })),
                ),
        )
        .route(
            Route::post("/forecast/{city}/*")
                .offer(Offer::exact(NETWORK, "$0.01", PAY_TO))
                .resource_url("https://api.example.com/forecast")
                .bazaar(
                    Bazaar::json_body(json!({ "days": 3 })).output_example(json!({ "days": [] })),
                ),
        )
        .build()
        .unwrap()
}

fn request(method: Method, path: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut builder = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "api.example.com");
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    builder.body(()).unwrap().into_parts().0
}

/// The decoded `PAYMENT-REQUIRED` of a 402 for `method path`.
async fn challenge(engine: &Engine, method: Method, path: &str) -> Value {
    let parts = request(method, path, &[]);
    let Decision::Respond(r) = engine.process(RequestView::from_parts(&parts)).await else {
        panic!("expected a 402");
    };
    assert_eq!(r.status(), StatusCode::PAYMENT_REQUIRED);
    codec::decode(r.headers()["payment-required"].as_bytes(), 1 << 16).unwrap()
}

#[tokio::test]
async fn the_402_of_a_parameterised_route_carries_the_enriched_bazaar() {
    let e = engine();
    let required = challenge(&e, Method::GET, "/weather/paris").await;
    let bazaar = &required["extensions"]["bazaar"];
    assert_eq!(bazaar["routeTemplate"], "/weather/:city");
    assert_eq!(bazaar["info"]["input"]["type"], "http");
    assert_eq!(bazaar["info"]["input"]["method"], "GET");
    assert_eq!(
        bazaar["info"]["input"]["pathParams"],
        json!({ "city": "paris" })
    );
    assert_eq!(
        bazaar["info"]["input"]["queryParams"],
        json!({ "units": "metric" })
    );
    assert_eq!(bazaar["info"]["output"]["example"]["celsius"], 21);
    let input_schema = &bazaar["schema"]["properties"]["input"];
    assert_eq!(input_schema["additionalProperties"], false);
    assert_eq!(input_schema["properties"]["method"]["enum"], json!(["GET"]));
    assert_eq!(
        input_schema["properties"]["pathParams"],
        json!({
            "type": "object",
            "properties": { "city": { "type": "string" } },
            "required": ["city"],
            "additionalProperties": false
        })
    );
    assert_eq!(
        bazaar["schema"]["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );

    // Per request: another city, another verb.
    let required = challenge(&e, Method::HEAD, "/weather/Lyon").await;
    let bazaar = &required["extensions"]["bazaar"];
    assert_eq!(bazaar["info"]["input"]["method"], "HEAD");
    assert_eq!(
        bazaar["schema"]["properties"]["input"]["properties"]["method"]["enum"],
        json!(["HEAD"])
    );
    assert_eq!(
        bazaar["info"]["input"]["pathParams"]["city"], "lyon",
        "paths are matched lower-cased"
    );
}

#[tokio::test]
async fn a_fixed_resource_url_does_not_freeze_the_bazaar() {
    let e = engine();
    // `*` becomes `:var1`; the route's resource URL is fixed (pre-encodable),
    // but its bazaar still follows the request.
    let required = challenge(&e, Method::POST, "/forecast/oslo/week").await;
    assert_eq!(
        required["resource"]["url"],
        "https://api.example.com/forecast"
    );
    let bazaar = &required["extensions"]["bazaar"];
    assert_eq!(bazaar["routeTemplate"], "/forecast/:city/:var1");
    assert_eq!(
        bazaar["info"]["input"]["pathParams"],
        json!({ "city": "oslo", "var1": "week" })
    );
    assert_eq!(bazaar["info"]["input"]["method"], "POST");
    assert_eq!(bazaar["info"]["input"]["bodyType"], "json");
    assert_eq!(bazaar["info"]["input"]["body"], json!({ "days": 3 }));
    let required = challenge(&e, Method::POST, "/forecast/rome/day").await;
    assert_eq!(
        required["extensions"]["bazaar"]["info"]["input"]["pathParams"]["city"],
        "rome"
    );
}

#[tokio::test]
async fn routes_without_bazaar_have_no_bazaar_and_keep_their_challenge() {
    let e = engine();
    let a = challenge(&e, Method::GET, "/exact/evm/eip3009").await;
    assert!(a
        .get("extensions")
        .is_none_or(|x| x.get("bazaar").is_none()));
    let s = challenge(&e, Method::GET, "/session/demo").await;
    assert!(s["extensions"].get("bazaar").is_none());
    assert_eq!(
        s["extensions"]["session"]["info"]["offers"][0]["id"],
        "demo-100"
    );
}

#[tokio::test]
async fn a_settlement_failure_402_carries_the_enriched_bazaar() {
    let e = engine();
    let required = testing::challenge(&e, get_with_host("/weather/paris")).await;
    let mut request = get_with_host("/weather/nice");
    request.headers_mut().insert(
        "payment-signature",
        testing::payment(&required.accepts[0]).parse().unwrap(),
    );
    let r = testing::serve(&e, request, |_| async {
        Response::new("the handler's answer".to_owned())
    })
    .await;
    // The stand-in refuses settlement: the engine's 402 replaces the answer.
    assert_eq!(r.status(), 402);
    assert!(!String::from_utf8_lossy(r.body()).contains("the handler's answer"));
    let v: Value = codec::decode(r.headers()["payment-required"].as_bytes(), 1 << 16).unwrap();
    assert_eq!(v["error"], "insufficient_funds");
    assert_eq!(
        v["extensions"]["bazaar"]["info"]["input"]["pathParams"]["city"],
        "nice"
    );
}

/// `GET path` on `api.example.com`.
fn get_with_host(path: &str) -> http::Request<()> {
    http::Request::get(path)
        .header("host", "api.example.com")
        .body(())
        .unwrap()
}

/// The committed JSON Schema of the discovery document.
fn schema() -> PathBuf {
    require::workspace_root().join("x402-core/tests/data/discovery.schema.json")
}

/// Runs the validators of `tests/js/validate-discovery.mjs`. Fails (never
/// skips, in one line) when Node or the pinned packages are missing.
fn validate(document: &Value, openapi: &Value, declarations: &[&Value]) {
    let mut node = require::node("validate-discovery.mjs");
    let dir = std::env::temp_dir().join(format!(
        "x402-discovery-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, v: &Value| {
        let p = dir.join(name);
        std::fs::write(&p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
        p
    };
    let mut args = vec![
        schema(),
        write("discovery.json", document),
        write("openapi.json", openapi),
    ];
    for (i, d) in declarations.iter().enumerate() {
        args.push(write(&format!("bazaar-{i}.json"), d));
    }
    let out = node
        .args(&args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run node (install Node.js >= 20): {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "validation failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        .into()
}

#[tokio::test]
async fn discovery_and_openapi_documents_validate() {
    let e = engine();
    let described = e.describe().await;
    assert_eq!(described.len(), 5);
    assert!(described.iter().all(|d| d.pricing == PricingKind::Static));

    let doc = e.discovery_document("https://api.example.com/").await;
    assert_eq!(doc["baseUrl"], "https://api.example.com");
    let resources = doc["resources"].as_array().unwrap();
    assert_eq!(resources.len(), 5);
    let exact = &resources[0];
    assert_eq!(
        exact["resource"],
        "https://api.example.com/exact/evm/eip3009"
    );
    assert_eq!(exact["method"], "GET");
    assert_eq!(exact["accepts"][0]["amount"], "1000");
    assert_eq!(exact["accepts"][0]["scheme"], "exact");
    let upto = &resources[1];
    assert_eq!(upto["accepts"][0]["scheme"], "upto");
    assert_eq!(upto["accepts"][0]["amount"], "2000");
    assert_eq!(
        upto["accepts"][0]["extra"]["facilitatorAddress"],
        UPTO_FACILITATOR
    );
    let session = &resources[2];
    assert_eq!(session["accepts"][0]["amount"], "1000");
    assert_eq!(session["sessions"][0]["id"], "demo-100");
    assert_eq!(session["sessions"][0]["calls"], 100);
    assert_eq!(session["sessions"][0]["ttlSeconds"], 3600);
    assert_eq!(session["sessions"][0]["accepts"][0]["amount"], "50000");
    assert!(
        session["extensions"].get("session").is_none(),
        "sessions are listed once"
    );
    let weather = &resources[3];
    assert_eq!(weather["resource"], "https://api.example.com/weather/:city");
    assert_eq!(weather["routeTemplate"], "/weather/:city");
    assert_eq!(weather["pathParams"], json!(["city"]));
    assert_eq!(
        weather["extensions"]["bazaar"]["info"]["input"]["method"],
        "GET"
    );
    assert_eq!(resources[4]["resource"], "https://api.example.com/forecast");
    assert_eq!(resources[4]["method"], "POST");

    let api = e
        .openapi(
            &OpenApiInfo::new("Paid API", "1.0.0").description("x402 example"),
            Some("https://api.example.com"),
        )
        .await;
    assert_eq!(api["openapi"], "3.1.0");
    let op = &api["paths"]["/weather/{city}"]["get"];
    assert_eq!(op["x-payment-info"]["accepts"][0]["amount"], "1000");
    assert!(op["responses"].get("402").is_some());
    let params: Vec<(&str, &str)> = op["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["in"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    assert!(params.contains(&("path", "city")));
    assert!(params.contains(&("query", "units")));
    assert!(params.contains(&("header", "accept-language")));
    let demo = &api["paths"]["/session/demo"]["get"]["x-payment-info"];
    assert_eq!(demo["sessions"][0]["accepts"][0]["amount"], "50000");
    assert_eq!(
        api["paths"]["/forecast/{city}/{var1}"]["post"]["requestBody"]["content"]
            ["application/json"]["example"],
        json!({ "days": 3 })
    );

    // The enriched declarations of real 402s hold to their own schemas.
    let weather_402 = challenge(&e, Method::GET, "/weather/paris").await;
    let forecast_402 = challenge(&e, Method::POST, "/forecast/oslo/week").await;
    validate(
        &doc,
        &api,
        &[
            &weather_402["extensions"]["bazaar"],
            &forecast_402["extensions"]["bazaar"],
            &weather["extensions"]["bazaar"],
        ],
    );
}

#[tokio::test]
async fn the_validators_reject_broken_documents() {
    // The validator run is real: a broken document fails it.
    let e = engine();
    let mut doc = e.discovery_document("https://api.example.com").await;
    doc["resources"][0]["accepts"][0]["amount"] = json!("1.5");
    let api = e
        .openapi(&OpenApiInfo::new("Paid API", "1.0.0"), None)
        .await;
    let dir = std::env::temp_dir().join(format!(
        "x402-discovery-bad-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut bad_api = api.clone();
    bad_api["paths"]["/weather/{city}"]["get"]["responses"] = json!({ "402": { "content": 1 } });
    let good_doc = e.discovery_document("https://api.example.com").await;
    for (doc, api, expected) in [
        (&doc, &api, "discovery document invalid"),
        (&good_doc, &bad_api, "OpenAPI document invalid"),
    ] {
        std::fs::write(dir.join("d.json"), serde_json::to_vec(doc).unwrap()).unwrap();
        std::fs::write(dir.join("o.json"), serde_json::to_vec(api).unwrap()).unwrap();
        let out = require::node("validate-discovery.mjs")
            .arg(schema())
            .arg(dir.join("d.json"))
            .arg(dir.join("o.json"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "a broken document passed");
        assert!(
            stderr.contains(expected),
            "expected {expected:?}, got:\n{stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
