//! Matching a payment to one of the requirements a route offers (spec §7).

use serde_json::Value;

use crate::{
    network::{self, Family},
    proto::{field, has_field, v1, v2, JsonObject},
    route::{EXACT, UPTO},
};

/// Addresses compare case-insensitively on EVM (`0x…`), exactly elsewhere
/// (Solana's base58 is case-sensitive).
fn same_address(a: &str, b: &str) -> bool {
    if a.starts_with("0x") && b.starts_with("0x") {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

/// Every key the server put in `extra` is echoed with the same value; the
/// client may add keys.
fn extra_echoed(server: &JsonObject, client: &JsonObject) -> bool {
    server.iter().all(|(k, v)| field(client, k) == Some(v))
}

/// The server's requirement a v2 payment's `accepted` refers to: `scheme`,
/// `network`, `amount`, `asset`, `payTo` and `maxTimeoutSeconds` equal, and
/// the server's `extra` echoed.
pub(crate) fn match_v2<'a>(
    accepts: impl IntoIterator<Item = &'a v2::PaymentRequirements>,
    accepted: &v2::PaymentRequirements,
) -> Option<usize> {
    accepts.into_iter().position(|r| {
        r.scheme == accepted.scheme
            && r.network == accepted.network
            && r.amount == accepted.amount
            && same_address(&r.asset, &accepted.asset)
            && same_address(&r.pay_to, &accepted.pay_to)
            && r.max_timeout_seconds == accepted.max_timeout_seconds
            && extra_echoed(&r.extra, &accepted.extra)
    })
}

/// The server's requirement a v1 payment refers to: `(scheme, network)`
/// equal, among the rows the v1 challenge offers. The facilitator checks the
/// amount and recipient against the server's row.
pub(crate) fn match_v1(
    accepts: &[v2::PaymentRequirements],
    payment: &v1::PaymentPayload,
) -> Option<usize> {
    accepts.iter().position(|r| {
        r.scheme == EXACT
            && r.scheme == payment.scheme
            && network::legacy_v1_accepts(&r.network)
            && network::v1_name(&r.network) == Some(payment.network.as_str())
    })
}

/// Whether an EVM payment's `payload` uses the transfer method its
/// requirement advertises: Permit2 (`permit2Authorization` under
/// `assetTransferMethod: "permit2"`) or EIP-3009 (`authorization`, the
/// default). A facilitator that accepts both would otherwise move the money
/// by a method the seller never offered. Other families and schemes are
/// left to their facilitator.
pub(crate) fn transfer_method_matches(
    requirement: &v2::PaymentRequirements,
    payload: &Value,
) -> bool {
    let scheme = requirement.scheme.as_str();
    if network::family(&requirement.network) != Family::Evm || (scheme != EXACT && scheme != UPTO) {
        return true;
    }
    let permit2 =
        field(&requirement.extra, "assetTransferMethod").and_then(Value::as_str) == Some("permit2");
    let has = |key: &str| payload.as_object().is_some_and(|o| has_field(o, key));
    let (wanted, other) = if permit2 {
        ("permit2Authorization", "authorization")
    } else {
        ("authorization", "permit2Authorization")
    };
    has(wanted) && !has(other)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::money::AtomicAmount;

    fn row() -> v2::PaymentRequirements {
        serde_json::from_value(json!({
            "scheme": "exact", "network": "eip155:84532", "amount": "10000",
            "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"}
        }))
        .unwrap()
    }

    #[test]
    fn v2_rule() {
        let accepts = [row()];
        let mut a = row();
        assert!(match_v2(&accepts, &a).is_some());
        a.asset = a.asset.to_lowercase();
        a.extra.insert("client".into(), json!(1));
        assert!(
            match_v2(&accepts, &a).is_some(),
            "case and added extra keys are tolerated"
        );
        for mutate in [
            (|r: &mut v2::PaymentRequirements| {
                r.pay_to = "0x0000000000000000000000000000000000000001".into();
            }) as fn(&mut _),
            |r| r.amount = AtomicAmount::from(9999u64),
            |r| r.asset = "0x0000000000000000000000000000000000000002".into(),
            |r| r.network = "eip155:8453".into(),
            |r| r.scheme = "upto".into(),
            |r| r.max_timeout_seconds = 61,
            |r| {
                r.extra.insert("name".into(), json!("USD Coin"));
            },
            |r| {
                r.extra.remove("version");
            },
        ] {
            let mut a = row();
            mutate(&mut a);
            assert!(match_v2(&accepts, &a).is_none(), "{a:?}");
        }
    }

    #[test]
    fn the_payload_uses_the_advertised_transfer_method() {
        let eip3009 = json!({"signature": "0x", "authorization": {"from": "0x1"}});
        let permit2 = json!({"signature": "0x", "permit2Authorization": {"from": "0x1"}});
        let both = json!({"authorization": {}, "permit2Authorization": {}});
        let exact = row();
        assert!(transfer_method_matches(&exact, &eip3009));
        assert!(!transfer_method_matches(&exact, &permit2));
        assert!(!transfer_method_matches(&exact, &both));
        assert!(!transfer_method_matches(&exact, &json!({})));
        let mut over_permit2 = row();
        over_permit2
            .extra
            .insert("assetTransferMethod".into(), json!("permit2"));
        assert!(transfer_method_matches(&over_permit2, &permit2));
        assert!(!transfer_method_matches(&over_permit2, &eip3009));
        let mut upto = over_permit2.clone();
        upto.scheme = "upto".into();
        assert!(!transfer_method_matches(&upto, &eip3009));
        // Not EVM: the facilitator's business.
        let mut svm = row();
        svm.network = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1".into();
        assert!(transfer_method_matches(
            &svm,
            &json!({"transaction": "..."})
        ));
    }

    #[test]
    fn v1_rule() {
        let accepts = [row()];
        let p = |network: &str, scheme: &str| -> v1::PaymentPayload {
            serde_json::from_value(
                json!({"x402Version": 1, "scheme": scheme, "network": network, "payload": {}}),
            )
            .unwrap()
        };
        assert!(match_v1(&accepts, &p("base-sepolia", "exact")).is_some());
        assert!(match_v1(&accepts, &p("base", "exact")).is_none());
        assert!(match_v1(&accepts, &p("eip155:84532", "exact")).is_none());
        assert!(match_v1(&accepts, &p("base-sepolia", "upto")).is_none());
    }
}
