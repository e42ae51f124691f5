//! What the handlers answer: one function per route, so that both servers
//! send the same JSON. Your business logic goes here; the paid bodies are
//! only asked for once the payment is verified.

use std::time::SystemTime;

use serde_json::{json, Value};
use x402_core::{meter::Meter, VerifiedPayment};

use crate::UPTO_CHARGE;

/// `GET /exact/evm/eip3009` (paid $0.001): logs the payment and returns
/// `{"message": "Paid content: exact (EIP-3009)", "timestamp": ..., "run": run}`,
/// `run` being which run of the handler this is
/// ([`AppState::count_run`](crate::AppState::count_run)).
pub fn exact_body(payment: &VerifiedPayment, run: u64) -> Value {
    tracing::info!(payer = ?payment.payer, amount = %payment.amount, run, "paid call");
    exact_call_body(run)
}

/// What [`exact_body`] answers, without its log line: the body alone, for
/// servers that answer the same JSON with no [`VerifiedPayment`] at hand
/// (the benchmark's floors).
pub fn exact_call_body(run: u64) -> Value {
    with_run(message_body("Paid content: exact (EIP-3009)"), run)
}

/// `GET /upto/evm/permit2`: reports what the call cost through the `meter`
/// (here a fixed [`UPTO_CHARGE`]; in a real API, tokens used, bytes
/// sent...) and returns `{"message": "Paid content: upto (metered)",
/// "run": run, ...}`.
pub fn upto_body(meter: &Meter, run: u64) -> Value {
    meter.set(UPTO_CHARGE);
    with_run(message_body("Paid content: upto (metered)"), run)
}

/// `GET /batch/evm` (`batch-settlement`): reports the call's cost through
/// the `meter` (`BATCH_CHARGE`), counts the run, and returns
/// `{"message": "Paid content: batch-settlement", "run": N, ...}`.
pub fn batch_body(state: &crate::AppState, meter: &Meter) -> Value {
    meter.set(state.batch_charge);
    let run = state.count_run(crate::PaidRoute::Batch);
    with_run(message_body("Paid content: batch-settlement"), run)
}

/// `body` with `"run": run`.
fn with_run(mut body: Value, run: u64) -> Value {
    if let Value::Object(map) = &mut body {
        map.insert("run".into(), json!(run));
    }
    body
}

/// `GET /session/demo` (paid per call, or redeemed from a prepaid session):
/// `{"message": "Paid content: session demo", "timestamp": ...}`, with
/// `sessionCallsRemaining` when the call was redeemed from a session, and
/// `"run": run`.
pub fn session_body(payment: &VerifiedPayment, run: u64) -> Value {
    session_call_body(payment.session.as_ref().map(|call| call.remaining), run)
}

/// What [`session_body`] answers for a call with `remaining` session calls
/// left (`None`: paid per call), from the count alone.
pub fn session_call_body(remaining: Option<u64>, run: u64) -> Value {
    let mut body = with_run(message_body("Paid content: session demo"), run);
    if let (Some(remaining), Value::Object(map)) = (remaining, &mut body) {
        map.insert("sessionCallsRemaining".into(), json!(remaining));
    }
    body
}

/// `GET /siwx/demo` (paid $0.001 once, then sign-in-with-x for an hour):
/// `{"message": "Paid content: sign-in-with-x demo", "timestamp": ...,
/// "run": run, "signedIn": bool, "payer": ...}`; `run` is how many times
/// the handler has run ([`AppState::count_run`](crate::AppState::count_run)).
pub fn siwx_body(payment: &VerifiedPayment, run: u64) -> Value {
    let mut body = message_body("Paid content: sign-in-with-x demo");
    if let Value::Object(map) = &mut body {
        map.insert("run".into(), json!(run));
        map.insert("signedIn".into(), json!(payment.sign_in.is_some()));
        map.insert("payer".into(), json!(payment.payer));
    }
    body
}

/// `GET /health` (free): `{"status": "ok", "timestamp": ...}`.
pub fn health_body() -> Value {
    json!({ "status": "ok", "timestamp": timestamp() })
}

/// `POST /close`, when it stops the server (see
/// [`AppState::close_enabled`](crate::AppState::close_enabled)):
/// `{"message": "closing", "timestamp": ...}`.
pub fn close_body() -> Value {
    message_body("closing")
}

/// `{"message": message, "timestamp": now}`: the shape of every paid body.
pub fn message_body(message: &str) -> Value {
    json!({ "message": message, "timestamp": timestamp() })
}

/// Now as RFC 3339 UTC, to the second (`2026-01-31T12:00:00Z`):
/// [`x402_core::webhook::rfc3339_seconds`].
pub fn timestamp() -> String {
    x402_core::webhook::rfc3339_seconds(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        let t = timestamp();
        assert_eq!(t.len(), 20);
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T');
    }

    #[test]
    fn bodies() {
        assert_eq!(health_body()["status"], "ok");
        assert_eq!(close_body()["message"], "closing");
        let meter = Meter::new(crate::UPTO_CEILING.into());
        let body = upto_body(&meter, 3);
        assert_eq!(body["message"], "Paid content: upto (metered)");
        assert_eq!(body["run"], 3);
        assert_eq!(meter.reported(), Some(UPTO_CHARGE.into()));
        for body in [health_body(), close_body(), body] {
            assert!(body["timestamp"].is_string(), "{body}");
        }
    }
}
