//! What a node's answer to a broadcast says about the transaction: refused,
//! or perhaps sent.

/// What a node's error answer to `eth_sendRawTransaction` says about the
/// transaction it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Broadcast {
    /// Refused for what the transaction is (undecodable, wrongly signed,
    /// for another chain, below its intrinsic gas, a fee above the node's
    /// cap, ...), or the call itself was not understood: the node did not
    /// take it and would have refused any copy of it the same way at any
    /// time, so no copy can be pending or mined.
    Refused,
    /// This transaction, an earlier copy of it (a proxy or load balancer
    /// retrying a request whose answer was lost sends the same bytes
    /// again), or another transaction with its nonce may be pending or
    /// mined: whether the tokens moved is unknown.
    MaybeSent,
}

/// Answers saying that this transaction, a copy of it, or one with its nonce
/// is pending or mined, in the wording of geth, reth, erigon, nethermind,
/// besu, anvil and openethereum. They decide before anything else.
///
/// Insufficient funds (for the facilitator's gas) is here too: besu checks
/// the balance before the nonce, so a copy mined earlier, which spent gas,
/// can be answered with "upfront cost exceeds account balance" instead of
/// "nonce too low".
pub(super) const MAYBE_SENT: &[&str] = &[
    "already known",
    "already imported",
    "known transaction",
    "same hash",
    "already exist",
    "already in",
    "same nonce",
    "nonce too low",
    "nonce is too low",
    "old nonce",
    "stale nonce",
    "replace",
    "mined",
    "insufficient funds",
    "upfront cost",
    "exceeds account balance",
];

/// Answers about the transaction's own content, which every copy shares and
/// no chain or pool state changes: the only errors after which a
/// transaction certainly cannot be mined.
pub(super) const NOT_SENT: &[&str] = &[
    "invalid sender",
    "failed to recover sender",
    "invalid signature",
    "invalid transaction signature",
    "invalid chain id",
    "wrong chain id",
    "incorrect chain id",
    "chain id mismatch",
    "intrinsic gas",
    "oversized data",
    "too large",
    "initcode",
    "exceeds the configured cap",
    "fee cap exceeded",
    "type not supported",
    "unsupported transaction type",
    "not activated",
    "replay protected",
    "negative value",
    "decode",
    "rlp",
];

/// Classifies a node's error answer to `eth_sendRawTransaction` (its
/// JSON-RPC `code` and `message`, with any `data` appended) as
/// [`Broadcast::Refused`] or [`Broadcast::MaybeSent`].
///
/// The rules, in order:
///
/// 1. A message that says the transaction, a copy or its nonce is already
///    known, pending, replaced or mined, or that the sender cannot pay
///    ([`MAYBE_SENT`]): maybe sent.
/// 2. A JSON-RPC protocol error (`-32700` parse error, `-32600` invalid
///    request, `-32601` method not found): the node did not process the
///    call, refused.
/// 3. A message about the transaction's own content ([`NOT_SENT`]):
///    refused.
/// 4. Anything else (pool full, underpriced, fee below the base fee, gas
///    above the block limit, rate limits, an execution revert, an unknown
///    wording): maybe sent. These depend on chain or pool state that an
///    earlier copy of the transaction may itself have changed, so they do
///    not prove that no copy is pending or mined.
///
/// Words match case-insensitively at word starts, with `_`, `-` and
/// camel case read as word breaks (`ALREADY_KNOWN`, `AlreadyKnown` and
/// "already known" are one phrase).
pub(super) fn classify_broadcast_error(code: i64, message: &str) -> Broadcast {
    let text = words(message);
    let says = |phrases: &[&str]| {
        phrases
            .iter()
            .any(|phrase| text.contains(words(phrase).trim_end()))
    };
    if says(MAYBE_SENT) {
        return Broadcast::MaybeSent;
    }
    if matches!(code, -32700 | -32600 | -32601) || says(NOT_SENT) {
        return Broadcast::Refused;
    }
    Broadcast::MaybeSent
}

/// `text` lowercased as words, each preceded by one space, with a space at
/// the end: every character that is not an ASCII letter or digit, and every
/// lowercase-to-uppercase step (`chainId`), breaks words.
pub(super) fn words(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    let (mut in_word, mut previous_lower) = (false, false);
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            if !in_word || (c.is_ascii_uppercase() && previous_lower) {
                out.push(' ');
            }
            out.push(c.to_ascii_lowercase());
            in_word = true;
            previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        } else {
            (in_word, previous_lower) = (false, false);
        }
    }
    out.push(' ');
    out
}
