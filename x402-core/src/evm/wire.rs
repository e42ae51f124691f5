//! Serde helpers for the wire forms of EVM values.
//!
//! Hex values must carry a `0x` prefix (as every x402 SDK writes them);
//! addresses are read in any case and written in EIP-55 checksum form; uint256
//! fields are decimal strings.

use std::{borrow::Cow, fmt::Display, str::FromStr};

use alloy_primitives::{Address, U256};
use serde::{de::Error as _, Deserialize, Deserializer, Serializer};

use crate::money::{with_str, AtomicAmount};

/// Parses a `0x`-prefixed hex string with `T`'s [`FromStr`].
fn parse_prefixed<T>(s: &str) -> Result<T, String>
where
    T: FromStr,
    T::Err: Display,
{
    if !s.starts_with("0x") && !s.starts_with("0X") {
        return Err(format!(
            "expected a 0x-prefixed hex string, got {:?}",
            Shortened(s)
        ));
    }
    s.parse::<T>().map_err(|e| e.to_string())
}

/// Shows at most 80 characters of untrusted input in an error message.
struct Shortened<'a>(&'a str);

impl std::fmt::Debug for Shortened<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.char_indices().nth(80) {
            Some((end, _)) => write!(f, "{:?}…", &self.0[..end]),
            None => write!(f, "{:?}", self.0),
        }
    }
}

/// A `0x`-prefixed hex value (`B256`, `Bytes`), written as lowercase hex.
pub(super) mod prefixed_hex {
    use super::*;

    pub(crate) fn serialize<T, S>(value: &T, serializer: S) -> Result<S::Ok, S::Error>
    where
        T: serde::Serialize,
        S: Serializer,
    {
        value.serialize(serializer)
    }

    pub(crate) fn deserialize<'de, T, D>(deserializer: D) -> Result<T, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        with_str(deserializer, parse_prefixed)
    }
}

/// An address: `0x` and 40 hex digits in any case, written with its EIP-55
/// checksum.
pub(super) mod checksummed {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        value: &Address,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&value.to_checksum(None))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Address, D::Error> {
        with_str(deserializer, parse_prefixed)
    }
}

/// An optional address, as [`checksummed`]; use with `skip_serializing_if`.
pub(super) mod checksummed_opt {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        value: &Option<Address>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(address) => serializer.serialize_str(&address.to_checksum(None)),
            None => serializer.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Address>, D::Error> {
        let s = <Option<Cow<'de, str>>>::deserialize(deserializer)?;
        s.map(|s| parse_prefixed(&s).map_err(D::Error::custom))
            .transpose()
    }
}

/// A uint256 as a decimal string only (EIP-3009 `validAfter`/`validBefore`).
pub(super) mod decimal_u256 {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(value: &U256, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(value)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<U256, D::Error> {
        with_str(deserializer, |s| {
            AtomicAmount::parse_decimal(s).map(AtomicAmount::get)
        })
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{Bytes, B256};
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Probe {
        #[serde(with = "checksummed")]
        address: Address,
        #[serde(
            with = "checksummed_opt",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        maybe: Option<Address>,
        #[serde(with = "prefixed_hex")]
        word: B256,
        #[serde(with = "prefixed_hex")]
        bytes: Bytes,
        #[serde(with = "decimal_u256")]
        number: U256,
    }

    const ADDRESS: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";

    fn probe(address: &str, word: &str, bytes: &str, number: &str) -> serde_json::Value {
        serde_json::json!({"address": address, "word": word, "bytes": bytes, "number": number})
    }

    #[test]
    fn addresses_read_in_any_case_and_write_checksummed() {
        let word = format!("0x{}", "ab".repeat(32));
        for address in [
            ADDRESS,
            &ADDRESS.to_lowercase(),
            &ADDRESS.to_uppercase().replace("0X", "0x"),
        ] {
            let p: Probe = serde_json::from_value(probe(address, &word, "0x01", "7")).unwrap();
            let out = serde_json::to_value(&p).unwrap();
            assert_eq!(out["address"], ADDRESS);
            assert!(out.get("maybe").is_none());
        }
    }

    #[test]
    fn hex_needs_its_prefix() {
        let word = "ab".repeat(32);
        assert!(serde_json::from_value::<Probe>(probe(ADDRESS, &word, "0x01", "7")).is_err());
        let word = format!("0x{word}");
        assert!(serde_json::from_value::<Probe>(probe(&ADDRESS[2..], &word, "0x01", "7")).is_err());
        assert!(serde_json::from_value::<Probe>(probe(ADDRESS, &word, "01", "7")).is_err());
        // Wrong lengths and non-hex are refused.
        assert!(serde_json::from_value::<Probe>(probe(ADDRESS, "0xab", "0x01", "7")).is_err());
        assert!(serde_json::from_value::<Probe>(probe("0x857b", &word, "0x01", "7")).is_err());
        assert!(serde_json::from_value::<Probe>(probe(ADDRESS, &word, "0xzz", "7")).is_err());
        // Not strings at all.
        let mut v = probe(ADDRESS, &word, "0x01", "7");
        v["word"] = serde_json::json!(vec![0u8; 32]);
        assert!(serde_json::from_value::<Probe>(v).is_err());
    }

    #[test]
    fn decimal_u256_is_strict() {
        let word = format!("0x{}", "00".repeat(32));
        for bad in ["0x10", "-1", "1.0", "", " 1", "1e3"] {
            assert!(
                serde_json::from_value::<Probe>(probe(ADDRESS, &word, "0x", bad)).is_err(),
                "{bad:?}"
            );
        }
        let mut v = probe(ADDRESS, &word, "0x", "1");
        v["number"] = serde_json::json!(1);
        assert!(serde_json::from_value::<Probe>(v).is_err());
        let p: Probe = serde_json::from_value(probe(ADDRESS, &word, "0x", "0010")).unwrap();
        assert_eq!(p.number, U256::from(10u8));
        assert_eq!(serde_json::to_value(&p).unwrap()["number"], "10");
    }

    #[test]
    fn optional_address_round_trips() {
        let word = format!("0x{}", "00".repeat(32));
        let mut v = probe(ADDRESS, &word, "0x", "1");
        v["maybe"] = serde_json::json!(ADDRESS.to_lowercase());
        let p: Probe = serde_json::from_value(v).unwrap();
        assert_eq!(serde_json::to_value(&p).unwrap()["maybe"], ADDRESS);
        let mut v = probe(ADDRESS, &word, "0x", "1");
        v["maybe"] = serde_json::Value::Null;
        assert_eq!(serde_json::from_value::<Probe>(v).unwrap().maybe, None);
    }

    #[test]
    fn error_messages_do_not_echo_huge_input() {
        let huge = "x".repeat(10_000);
        let err = parse_prefixed::<Address>(&huge).unwrap_err();
        assert!(err.len() < 200, "{err}");
    }
}
