//! EIP-1271 smart-wallet signatures: the wallet contract itself says
//! whether a signature is its own (`isValidSignature`), which takes a call
//! to the chain.

use std::error::Error as StdError;

use alloy_primitives::{Address, B256};
use async_trait::async_trait;

alloy_sol_types::sol! {
    /// EIP-1271.
    function isValidSignature(bytes32 hash, bytes signature) external view returns (bytes4 magicValue);
}

// The call itself is made by `RpcSmartWallets` (feature `http-facilitator`).
/// The value `isValidSignature` returns for a valid signature.
#[cfg(any(feature = "http-facilitator", test))]
pub(crate) const EIP1271_MAGIC: [u8; 4] = [0x16, 0x26, 0xba, 0x7e];

/// The EIP-1271 call data asking `isValidSignature(hash, signature)`.
#[cfg(any(feature = "http-facilitator", test))]
pub(crate) fn call_data(hash: B256, signature: &[u8]) -> Vec<u8> {
    use alloy_sol_types::SolCall;
    isValidSignatureCall {
        hash,
        signature: signature.to_vec().into(),
    }
    .abi_encode()
}

/// Whether an `eth_call` answer is the EIP-1271 magic value (a `bytes4`,
/// left-aligned in a 32-byte word).
#[cfg(any(feature = "http-facilitator", test))]
pub(crate) fn is_magic(answer: &[u8]) -> bool {
    answer.len() >= 32 && answer[..4] == EIP1271_MAGIC && answer[4..32].iter().all(|b| *b == 0)
}

/// Asks smart-contract wallets whether a signature is theirs (EIP-1271),
/// for proofs whose signature does not recover their address. Without one
/// ([`SignInConfig::smart_wallets`](super::SignInConfig::smart_wallets)),
/// such proofs are refused.
#[async_trait]
pub trait SmartWallets: Send + Sync + 'static {
    /// Whether `wallet` on `chain_id` (CAIP-2) answers `isValidSignature(hash,
    /// signature)` with the EIP-1271 magic value.
    async fn is_valid_signature(
        &self,
        chain_id: &str,
        wallet: Address,
        hash: B256,
        signature: &[u8],
    ) -> Result<bool, Box<dyn StdError + Send + Sync>>;
}

impl std::fmt::Debug for dyn SmartWallets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SmartWallets")
    }
}

/// [`SmartWallets`] over JSON-RPC (`eth_call` at `latest`), one endpoint
/// per chain (feature `http-facilitator`, for its HTTP client). A chain
/// with no endpoint has no smart wallets: their proofs are refused.
#[cfg(feature = "http-facilitator")]
#[cfg_attr(docsrs, doc(cfg(feature = "http-facilitator")))]
#[derive(Debug, Clone)]
pub struct RpcSmartWallets {
    client: reqwest::Client,
    endpoints: Vec<(String, String)>,
}

#[cfg(feature = "http-facilitator")]
impl RpcSmartWallets {
    /// No endpoints yet; calls time out after 2 s (the engine's sign-in
    /// deadline bounds them too).
    pub fn new() -> Self {
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(2))
            .build()
            .unwrap_or_default();
        Self {
            client,
            endpoints: Vec::new(),
        }
    }

    /// Asks `rpc_url` about wallets on `chain_id` (CAIP-2, `eip155:8453`).
    #[must_use]
    pub fn chain(mut self, chain_id: impl Into<String>, rpc_url: impl Into<String>) -> Self {
        self.endpoints.push((chain_id.into(), rpc_url.into()));
        self
    }
}

#[cfg(feature = "http-facilitator")]
impl Default for RpcSmartWallets {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "http-facilitator")]
#[async_trait]
impl SmartWallets for RpcSmartWallets {
    async fn is_valid_signature(
        &self,
        chain_id: &str,
        wallet: Address,
        hash: B256,
        signature: &[u8],
    ) -> Result<bool, Box<dyn StdError + Send + Sync>> {
        let Some((_, url)) = self.endpoints.iter().find(|(c, _)| c == chain_id) else {
            return Ok(false);
        };
        let data = alloy_primitives::hex::encode_prefixed(call_data(hash, signature));
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "eth_call",
            "params": [{ "to": wallet, "data": data }, "latest"],
        });
        let answer: serde_json::Value = self
            .client
            .post(url)
            .json(&body)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        if answer.get("error").is_some() {
            // A revert (no such contract method, a wallet that refuses by
            // reverting) is a "no", not an outage.
            return Ok(false);
        }
        let result = answer
            .get("result")
            .and_then(serde_json::Value::as_str)
            .ok_or("eth_call answered no result")?;
        let bytes = alloy_primitives::hex::decode(result)?;
        Ok(is_magic(&bytes))
    }
}
