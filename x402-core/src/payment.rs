//! What a paid handler receives: the [`VerifiedPayment`] the engine puts in
//! the request's extensions (the adapters' `Payment` extractors hand it
//! over), with the [`SessionCall`] when the call was redeemed from a
//! prepaid session. Its text fields are [`SharedStr`]s: the engine's own
//! strings, shared rather than copied for every request.

use std::{borrow::Borrow, fmt, ops::Deref, sync::Arc};

use crate::{
    meter::Meter,
    money::AtomicAmount,
    proto::{v2, X402Version},
};

/// The verified payment, put in the request's extensions for the handler.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct VerifiedPayment {
    /// The payment's protocol version.
    pub version: X402Version,
    /// The scheme.
    pub scheme: SharedStr,
    /// The network as a CAIP-2 id.
    pub network: SharedStr,
    /// The payer's address, as the facilitator reported it.
    pub payer: Option<SharedStr>,
    /// The amount authorised (the price for `exact`, the ceiling for `upto`,
    /// zero for a call redeemed from a prepaid session).
    pub amount: AtomicAmount,
    /// The asset.
    pub asset: SharedStr,
    /// The recipient.
    pub pay_to: SharedStr,
    /// The seller's requirement the payment matched (for a session call, the
    /// first way the session was sold). Shared with the engine's route table.
    pub requirements: Arc<v2::PaymentRequirements>,
    /// The matched route's pattern.
    pub route: SharedStr,
    /// On `upto` routes, where the handler reports what the call cost.
    pub meter: Option<Meter>,
    /// Set when the call was redeemed from a prepaid session.
    pub session: Option<SessionCall>,
    /// Set when the request passed by [sign-in-with-x](crate::siwx): who
    /// signed in (the amount is then zero, and nothing is settled).
    pub sign_in: Option<crate::siwx::SignedIn>,
}

/// A call redeemed from a prepaid session.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionCall {
    /// Calls left after this one.
    pub remaining: u64,
    /// The session's scope, shared with the route's session offer.
    pub scope: SharedStr,
}

/// An immutable string shared by reference count: cloning it copies no
/// text. It reads as a `&str` (it derefs to one) and compares with `str`,
/// `&str` and `String`.
///
/// ```
/// use x402_core::payment::SharedStr;
///
/// let network = SharedStr::from("eip155:8453");
/// let copy = network.clone(); // the same text, not a copy of it
/// assert_eq!(copy, "eip155:8453");
/// assert!(network.starts_with("eip155:"));
/// let owned: String = network.into();
/// assert_eq!(owned, "eip155:8453");
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SharedStr(Arc<str>);

impl SharedStr {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for SharedStr {
    fn default() -> Self {
        Self::from("")
    }
}

impl Deref for SharedStr {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SharedStr {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for SharedStr {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> Self {
        Self(Arc::from(s))
    }
}

impl From<String> for SharedStr {
    fn from(s: String) -> Self {
        Self(Arc::from(s))
    }
}

impl From<&String> for SharedStr {
    fn from(s: &String) -> Self {
        Self::from(s.as_str())
    }
}

impl From<SharedStr> for String {
    fn from(s: SharedStr) -> Self {
        s.0.as_ref().to_owned()
    }
}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for SharedStr {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<SharedStr> for str {
    fn eq(&self, other: &SharedStr) -> bool {
        self == &*other.0
    }
}

impl PartialEq<SharedStr> for &str {
    fn eq(&self, other: &SharedStr) -> bool {
        *self == &*other.0
    }
}

impl PartialEq<SharedStr> for String {
    fn eq(&self, other: &SharedStr) -> bool {
        **self == *other.0
    }
}

impl serde::Serialize for SharedStr {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for SharedStr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::SharedStr;

    #[test]
    fn reads_compares_and_serializes_as_its_text() {
        let s = SharedStr::from("eip155:8453".to_owned());
        assert_eq!(s, "eip155:8453");
        assert_eq!("eip155:8453", s);
        assert_eq!(s, "eip155:8453".to_owned());
        assert_eq!(format!("{s} {s:?}"), "eip155:8453 \"eip155:8453\"");
        assert_eq!(
            serde_json::to_string(&s).ok().as_deref(),
            Some("\"eip155:8453\"")
        );
        let back: SharedStr = serde_json::from_str("\"eip155:8453\"").unwrap_or_default();
        assert_eq!(back, s);
        assert_eq!(SharedStr::default(), "");
        let map: std::collections::HashMap<SharedStr, u8> = [(s.clone(), 1)].into();
        assert_eq!(map.get("eip155:8453"), Some(&1));
    }
}
