//! Discovery through every adapter: `GET /.well-known/x402` and the OpenAPI
//! document, served outside the paywall from the engine's route table.

use serde_json::{json, Value};
use x402_core::discovery::{OPENAPI_PATH, WELL_KNOWN_PATH};

use super::{
    capability_builder, CEILING, METERED, SESSION_CALLS, SESSION_OFFER, SESSION_PATH,
    SESSION_SCOPE, SESSION_TTL,
};
use crate::{adapters::openapi_info, suite::expected_row, Adapter, Fixture, Reply, DESCRIPTION};

/// A discovery answer: 200 JSON, free (no challenge, no receipt), handler
/// not run.
#[track_caller]
fn assert_document(reply: &Reply) -> Value {
    reply.assert_status(200);
    assert!(
        reply
            .header("content-type")
            .unwrap_or_default()
            .starts_with("application/json"),
        "{:?}",
        reply.headers
    );
    assert_eq!(reply.header("cache-control"), Some("public, max-age=60"));
    assert_eq!(reply.header("access-control-allow-origin"), Some("*"));
    assert!(
        reply.header("vary").is_none(),
        "a fixed public origin does not vary"
    );
    assert!(reply.header("payment-required").is_none());
    assert!(reply.header("payment-response").is_none());
    assert!(!reply.leaks_secret());
    reply.json()
}

/// The resource of `document` at `path`.
#[track_caller]
fn resource<'a>(document: &'a Value, path: &str) -> &'a Value {
    document["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == path)
        .unwrap_or_else(|| panic!("{path} not listed: {document}"))
}

/// Scenario 28. The discovery document lists every protected route with its
/// offers under the public origin (whatever the `Host`), and the OpenAPI
/// document marks each paid operation; neither runs the handler or calls
/// the facilitator's `/verify` or `/settle`.
pub async fn s28_discovery<A: Adapter>() {
    let f = Fixture::with_engine::<A>(|standin| capability_builder(standin.facilitator())).await;

    let document = assert_document(&f.get(WELL_KNOWN_PATH, &[]).await);
    assert_eq!(document["x402Version"], 2);
    assert_eq!(document["discoveryVersion"], 1);
    assert_eq!(document["baseUrl"], f.base);
    let paths: Vec<&str> = document["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["/paid", "/stream", "/dynamic", METERED, SESSION_PATH]
    );

    let paid = resource(&document, "/paid");
    assert_eq!(paid["resource"], f.url("/paid"));
    assert_eq!(paid["type"], "http");
    assert_eq!(paid["method"], "GET");
    assert_eq!(paid["description"], DESCRIPTION);
    assert_eq!(paid["mimeType"], "application/json");
    assert_eq!(paid["pricing"], "static");
    assert_eq!(paid["settlement"], "afterHandler");
    assert_eq!(paid["accepts"], json!([expected_row()]));
    assert_eq!(paid["sessions"], json!([]));

    assert_eq!(
        resource(&document, "/stream")["settlement"],
        "beforeHandler"
    );
    let dynamic = resource(&document, "/dynamic");
    assert_eq!(dynamic["pricing"], "dynamic");
    assert_eq!(dynamic["accepts"], json!([]));
    let metered = resource(&document, METERED);
    assert_eq!(metered["accepts"][0]["scheme"], "upto");
    assert_eq!(metered["accepts"][0]["amount"], CEILING);
    let sessions = &resource(&document, SESSION_PATH)["sessions"];
    assert_eq!(sessions[0]["id"], SESSION_OFFER);
    assert_eq!(sessions[0]["calls"], SESSION_CALLS);
    assert_eq!(sessions[0]["ttlSeconds"], SESSION_TTL.as_secs());
    assert_eq!(sessions[0]["scope"], SESSION_SCOPE);
    assert_eq!(sessions[0]["accepts"][0]["amount"], "50000");

    // A client's Host does not name the base.
    let hostile = crate::boundary::send_raw(
        &f.base,
        "GET",
        WELL_KNOWN_PATH,
        &[
            ("Host", "evil.example"),
            ("X-Forwarded-Host", "evil.example"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(hostile.status, 200);
    let from_hostile: Value = serde_json::from_slice(&hostile.body).unwrap();
    assert_eq!(from_hostile, document);

    let api = assert_document(&f.get(OPENAPI_PATH, &[]).await);
    assert_eq!(api["openapi"], "3.1.0");
    assert_eq!(api["info"]["title"], openapi_info().title);
    assert_eq!(api["servers"], json!([{"url": f.base}]));
    let info = &api["paths"]["/paid"]["get"]["x-payment-info"];
    assert_eq!(info["accepts"], json!([expected_row()]), "{api}");
    assert!(api["paths"][SESSION_PATH]["get"]["x-payment-info"]["sessions"][0].is_object());

    f.handler.assert_calls(0);
    f.standin.assert_calls(0, 0);
}
