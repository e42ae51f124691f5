//! The `SIGN-IN-WITH-X` header's payload and the EIP-4361 (SIWE) message
//! rebuilt from it, byte for byte as the official client signs it.

use serde::{Deserialize, Serialize};

/// The JSON a client sends, base64-encoded, in the `SIGN-IN-WITH-X` header:
/// the fields of the message it signed, and the signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SiwxPayload {
    /// The host (and port) the message was signed for: `api.example.com`.
    pub domain: String,
    /// The signer's address (EIP-55 for EVM).
    pub address: String,
    /// A human-readable statement, if the challenge had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
    /// The resource URI the message was signed for.
    pub uri: String,
    /// The SIWE version: `1`.
    pub version: String,
    /// CAIP-2 chain id (`eip155:8453`).
    pub chain_id: String,
    /// The signature type: `eip191` (EVM) or `ed25519` (Solana).
    #[serde(rename = "type")]
    pub kind: String,
    /// The server-issued nonce.
    pub nonce: String,
    /// When the challenge was issued (RFC 3339).
    pub issued_at: String,
    /// When the message stops being valid (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    /// When the message starts being valid (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// A request id, if the challenge had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Resources the sign-in covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
    /// A hint of how the signature is checked (`eip191`, `eip1271`,
    /// `eip6492`, `siws`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_scheme: Option<String>,
    /// The signature: `0x`-hex for EVM.
    pub signature: String,
}

/// A field that cannot be written into a message the client could have
/// signed: a line break (which would let one field pose as another), an
/// empty required field, or a chain id that is not `eip155:<number>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) &'static str);

/// Whether `s` fits on one line of the message.
fn one_line(s: &str) -> bool {
    !s.contains(['\n', '\r'])
}

/// The numeric chain id of an `eip155:<number>` CAIP-2 id.
pub(crate) fn evm_chain_id(chain_id: &str) -> Option<u64> {
    let digits = chain_id.strip_prefix("eip155:")?;
    if digits.is_empty() || digits.len() > 19 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The EIP-4361 message the payload's signature must be over: the official
/// client's `formatSIWEMessage` output for the same fields.
///
/// ```text
/// {domain} wants you to sign in with your Ethereum account:
/// {address}
///
/// {statement}            (and a blank line after it, when there is one)
///
/// URI: {uri}
/// Version: {version}
/// Chain ID: {number}
/// Nonce: {nonce}
/// Issued At: {issuedAt}
/// Expiration Time: ...   (each optional line only when present)
/// Not Before: ...
/// Request ID: ...
/// Resources:
/// - {resource}
/// ```
pub(crate) fn siwe_message(p: &SiwxPayload) -> Result<String, Malformed> {
    let chain = evm_chain_id(&p.chain_id).ok_or(Malformed("invalid_siwx_chain_id"))?;
    let required = [
        &p.domain,
        &p.address,
        &p.uri,
        &p.version,
        &p.nonce,
        &p.issued_at,
    ];
    if required.iter().any(|f| f.is_empty() || !one_line(f)) {
        return Err(Malformed("invalid_siwx_message"));
    }
    let optional = [
        &p.statement,
        &p.expiration_time,
        &p.not_before,
        &p.request_id,
    ];
    if optional
        .iter()
        .any(|f| f.as_deref().is_some_and(|v| !one_line(v)))
    {
        return Err(Malformed("invalid_siwx_message"));
    }
    let resources = p.resources.as_deref().unwrap_or_default();
    if resources.iter().any(|r| r.is_empty() || !one_line(r)) {
        return Err(Malformed("invalid_siwx_message"));
    }
    let mut m = String::with_capacity(320);
    m.push_str(&p.domain);
    m.push_str(" wants you to sign in with your Ethereum account:\n");
    m.push_str(&p.address);
    m.push_str("\n\n");
    // An empty statement is written as none (the official client skips it).
    if let Some(statement) = p.statement.as_deref().filter(|s| !s.is_empty()) {
        m.push_str(statement);
        m.push('\n');
    }
    m.push_str("\nURI: ");
    m.push_str(&p.uri);
    m.push_str("\nVersion: ");
    m.push_str(&p.version);
    m.push_str("\nChain ID: ");
    m.push_str(&chain.to_string());
    m.push_str("\nNonce: ");
    m.push_str(&p.nonce);
    m.push_str("\nIssued At: ");
    m.push_str(&p.issued_at);
    let lines = [
        ("\nExpiration Time: ", &p.expiration_time),
        ("\nNot Before: ", &p.not_before),
        ("\nRequest ID: ", &p.request_id),
    ];
    for (label, value) in lines {
        if let Some(value) = value {
            m.push_str(label);
            m.push_str(value);
        }
    }
    if !resources.is_empty() {
        m.push_str("\nResources:");
        for r in resources {
            m.push_str("\n- ");
            m.push_str(r);
        }
    }
    Ok(m)
}
