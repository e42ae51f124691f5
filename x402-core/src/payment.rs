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
    pub requirements: SharedRequirements,
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

/// An immutable string shared rather than copied: cloning it copies no
/// text. It reads as a `&str` (it derefs to one) and compares with `str`,
/// `&str` and `String`.
///
/// Most are shared by reference count. The few the engine hands to every
/// paid request (a route's pattern; the scheme, network, asset and
/// recipient of an offer with a static price) are kept for the life of the
/// process instead, and cloned without writing a count: every request on
/// every core cloned and dropped them three times (the engine's copy, the
/// handler's extensions, the extractor's), so the counts' cache lines moved
/// between cores with every request.
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
#[derive(Clone)]
pub struct SharedStr(Shared<str>);

/// How [`SharedStr`] and [`SharedRequirements`] hold what they share:
/// by reference count, or kept for the life of the process.
enum Shared<T: ?Sized + 'static> {
    Counted(Arc<T>),
    Kept(&'static T),
}

// Not derived: that would ask `T: Clone`, which `str` is not.
impl<T: ?Sized + 'static> Clone for Shared<T> {
    fn clone(&self) -> Self {
        match self {
            Self::Counted(shared) => Self::Counted(Arc::clone(shared)),
            Self::Kept(kept) => Self::Kept(kept),
        }
    }
}

impl<T: ?Sized + 'static> Shared<T> {
    fn get(&self) -> &T {
        match self {
            Self::Counted(shared) => shared,
            Self::Kept(kept) => kept,
        }
    }
}

impl SharedStr {
    /// The text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// `s`, kept for the life of the process if it is among the first
    /// [`KEPT_BYTES`] bytes of such strings (each text is kept once), else
    /// counted. For text from the engine's configuration that every paid
    /// request clones: a route's pattern, a static offer's names (not those
    /// of offers priced per request, which would take the lock below on
    /// every paid request).
    pub(crate) fn kept(s: &str) -> Self {
        match keep(s) {
            Some(kept) => Self(Shared::Kept(kept)),
            None => Self::from(s),
        }
    }

    /// `s` [kept](Self::kept) if it lasts (a static offer's), else
    /// counted.
    pub(crate) fn kept_if(lasting: bool, s: &str) -> Self {
        if lasting {
            Self::kept(s)
        } else {
            Self::from(s)
        }
    }

    /// Whether the text is kept for the life of the process.
    #[cfg(test)]
    pub(crate) fn is_kept(&self) -> bool {
        matches!(self.0, Shared::Kept(_))
    }
}

/// How much text [`SharedStr::kept`] keeps at most, in all: what is kept is
/// never freed, and an engine's routes (or many engines built in one
/// process) may name more than is worth keeping.
pub(crate) const KEPT_BYTES: usize = 64 * 1024;

/// The kept copy of `s`, made if there is room left: a look-up under a
/// process-wide lock, taken when a route or a static offer makes its names.
fn keep(s: &str) -> Option<&'static str> {
    use std::sync::{Mutex, PoisonError};
    static KEPT: Mutex<Kept> = Mutex::new(Kept::new(KEPT_BYTES));
    KEPT.lock().unwrap_or_else(PoisonError::into_inner).keep(s)
}

/// Texts kept for the life of the process, each once, up to a budget.
struct Kept {
    texts: std::collections::BTreeSet<&'static str>,
    bytes: usize,
    budget: usize,
}

impl Kept {
    const fn new(budget: usize) -> Self {
        Self {
            texts: std::collections::BTreeSet::new(),
            bytes: 0,
            budget,
        }
    }

    fn keep(&mut self, s: &str) -> Option<&'static str> {
        if let Some(&text) = self.texts.get(s) {
            return Some(text);
        }
        if self.bytes + s.len() > self.budget {
            return None;
        }
        let text: &'static str = Box::leak(Box::from(s));
        self.texts.insert(text);
        self.bytes += s.len();
        Some(text)
    }
}

/// A seller's requirement shared rather than copied, as [`SharedStr`]
/// shares text: cloning it copies nothing, and it reads as the
/// [`PaymentRequirements`](v2::PaymentRequirements) it derefs to.
///
/// A static offer's requirement, which every paid request clones (into its
/// payment, then the handler's extensions, then an extractor's copy), is
/// kept for the life of the process, up to [`KEPT_REQUIREMENTS`] of them,
/// and cloned without writing a count; others are counted.
///
/// ```
/// use std::sync::Arc;
/// use x402_core::{payment::SharedRequirements, proto::v2::PaymentRequirements};
///
/// let requirement: PaymentRequirements = serde_json::from_value(serde_json::json!({
///     "scheme": "exact", "network": "eip155:84532", "amount": "1000",
///     "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
///     "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
///     "maxTimeoutSeconds": 60, "extra": {}
/// }))?;
/// let shared = SharedRequirements::from(Arc::new(requirement.clone()));
/// assert_eq!(shared.amount, requirement.amount);
/// assert_eq!(*shared.clone(), requirement);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone)]
pub struct SharedRequirements(Shared<v2::PaymentRequirements>);

/// How many distinct requirements [`SharedRequirements`] keeps at most, in
/// all: what is kept is never freed.
pub const KEPT_REQUIREMENTS: usize = 128;

impl SharedRequirements {
    /// The requirement.
    pub fn as_requirements(&self) -> &v2::PaymentRequirements {
        self.0.get()
    }

    /// `requirements`, kept for the life of the process if it is among the
    /// first [`KEPT_REQUIREMENTS`] such requirements (each kept once), else
    /// counted. For a static offer's requirement, made once per offer.
    pub(crate) fn kept(requirements: &Arc<v2::PaymentRequirements>) -> Self {
        use std::sync::{Mutex, PoisonError};
        static KEPT: Mutex<Vec<&'static v2::PaymentRequirements>> = Mutex::new(Vec::new());
        let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&found) = kept.iter().find(|&&r| r == &**requirements) {
            return Self(Shared::Kept(found));
        }
        if kept.len() >= KEPT_REQUIREMENTS {
            return Self::from(requirements.clone());
        }
        let leaked: &'static v2::PaymentRequirements =
            Box::leak(Box::new((**requirements).clone()));
        kept.push(leaked);
        Self(Shared::Kept(leaked))
    }

    /// `requirements` [kept](Self::kept) if it lasts (a static offer's),
    /// else counted.
    pub(crate) fn kept_if(lasting: bool, requirements: &Arc<v2::PaymentRequirements>) -> Self {
        if lasting {
            Self::kept(requirements)
        } else {
            Self::from(requirements.clone())
        }
    }

    /// Whether the requirement is kept for the life of the process.
    #[cfg(test)]
    pub(crate) fn is_kept(&self) -> bool {
        matches!(self.0, Shared::Kept(_))
    }
}

impl Deref for SharedRequirements {
    type Target = v2::PaymentRequirements;

    fn deref(&self) -> &v2::PaymentRequirements {
        self.as_requirements()
    }
}

impl AsRef<v2::PaymentRequirements> for SharedRequirements {
    fn as_ref(&self) -> &v2::PaymentRequirements {
        self.as_requirements()
    }
}

impl PartialEq for SharedRequirements {
    fn eq(&self, other: &Self) -> bool {
        self.as_requirements() == other.as_requirements()
    }
}

impl fmt::Debug for SharedRequirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_requirements(), f)
    }
}

impl From<Arc<v2::PaymentRequirements>> for SharedRequirements {
    fn from(requirements: Arc<v2::PaymentRequirements>) -> Self {
        Self(Shared::Counted(requirements))
    }
}

impl From<v2::PaymentRequirements> for SharedRequirements {
    fn from(requirements: v2::PaymentRequirements) -> Self {
        Self::from(Arc::new(requirements))
    }
}

impl PartialEq for SharedStr {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for SharedStr {}

impl PartialOrd for SharedStr {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SharedStr {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for SharedStr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
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
        self.as_str()
    }
}

impl AsRef<str> for SharedStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for SharedStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> Self {
        Self(Shared::Counted(Arc::from(s)))
    }
}

impl From<String> for SharedStr {
    fn from(s: String) -> Self {
        Self(Shared::Counted(Arc::from(s)))
    }
}

impl From<&String> for SharedStr {
    fn from(s: &String) -> Self {
        Self::from(s.as_str())
    }
}

impl From<SharedStr> for String {
    fn from(s: SharedStr) -> Self {
        s.as_str().to_owned()
    }
}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for SharedStr {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<SharedStr> for str {
    fn eq(&self, other: &SharedStr) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<SharedStr> for &str {
    fn eq(&self, other: &SharedStr) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<SharedStr> for String {
    fn eq(&self, other: &SharedStr) -> bool {
        self.as_str() == other.as_str()
    }
}

impl serde::Serialize for SharedStr {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
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

    #[test]
    fn a_text_is_kept_once_within_its_budget() {
        let mut kept = super::Kept::new(8);
        let first = kept.keep("exact").unwrap();
        // The same text at another address gets the same copy.
        let copy = String::from("exact");
        assert!(std::ptr::eq(kept.keep(copy.as_str()).unwrap(), first));
        assert_ne!(first.as_ptr(), copy.as_ptr());
        // 5 bytes kept, 3 left: a 4-byte text is refused, a 3-byte one kept.
        assert_eq!(kept.keep("base"), None);
        assert_eq!(kept.keep("evm"), Some("evm"));
        assert_eq!(kept.keep("exact"), Some("exact"));
    }

    #[test]
    fn a_kept_string_equals_a_counted_one() {
        let text = "/kept/test/route/{id}";
        let kept = SharedStr::kept(text);
        let counted = SharedStr::from(text);
        assert_eq!(kept, counted);
        assert_eq!(kept.cmp(&counted), std::cmp::Ordering::Equal);
        let state = std::hash::RandomState::new();
        assert_eq!(
            std::hash::BuildHasher::hash_one(&state, &kept),
            std::hash::BuildHasher::hash_one(&state, &counted)
        );
        assert_eq!(format!("{kept} {kept:?}"), format!("{text} {text:?}"));
        assert_eq!(String::from(kept.clone()), text);
        let map: std::collections::HashMap<SharedStr, u8> = [(counted, 1)].into();
        assert_eq!(map.get(&kept), Some(&1));
    }

    #[test]
    fn a_requirement_is_kept_once_and_equals_its_counted_self() {
        use std::sync::Arc;

        use super::SharedRequirements;
        let requirement: crate::proto::v2::PaymentRequirements =
            serde_json::from_value(serde_json::json!({
                "scheme": "exact", "network": "eip155:1", "amount": "7",
                "asset": "0x0000000000000000000000000000000000000001",
                "payTo": "0x0000000000000000000000000000000000000002",
                "maxTimeoutSeconds": 60, "extra": {"test": "a_requirement_is_kept_once"}
            }))
            .unwrap();
        let a = SharedRequirements::kept(&Arc::new(requirement.clone()));
        let b = SharedRequirements::kept(&Arc::new(requirement.clone()));
        assert!(a.is_kept() && b.is_kept());
        // The same requirement from another Arc is the same kept copy.
        assert!(std::ptr::eq(a.as_requirements(), b.as_requirements()));
        let counted = SharedRequirements::from(requirement.clone());
        assert!(!counted.is_kept());
        assert_eq!(a, counted);
        assert_eq!(*a.clone(), requirement);
        assert_eq!(format!("{a:?}"), format!("{requirement:?}"));
    }

    #[test]
    fn kept_strings_stop_at_their_budget_and_are_counted_after() {
        // Past the budget, a new text is counted (a fresh copy each time).
        let big = "x".repeat(super::KEPT_BYTES + 1);
        let a = SharedStr::kept(&big);
        let b = SharedStr::kept(&big);
        assert_eq!(a, b);
        assert!(!std::ptr::eq(a.as_str(), b.as_str()));
    }
}
