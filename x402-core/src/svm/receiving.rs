//! The start-up check of Solana receiving accounts: every `solana:*` offer's
//! `payTo` must hold an associated token account for the offer's mint, or
//! every payment fails at simulation. See the [module docs](super#receiving-accounts).

use std::{collections::HashMap, fmt, time::Duration};

use base64::Engine as _;
use reqwest::{Client, Url};
use serde_json::{json, Value};

use super::{associated_token_address, Pubkey, TokenProgram};
use crate::{
    capped::{read_capped, truncate_chars},
    network::{self, Family},
    redact::urls_in as redact_urls,
    route::Offer,
};

/// The default deadline of each RPC request.
pub const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest RPC answer read, in bytes.
const MAX_ANSWER_BYTES: usize = 256 * 1024;
/// The longest RPC error text kept, in characters.
const MAX_REASON_CHARS: usize = 300;
/// A token account's bytes up to its state: mint (32), owner (32),
/// amount (8), delegate (4 + 32), state (1).
const TOKEN_ACCOUNT_PREFIX: usize = 109;
/// Where a token account's state is, and what the state of a frozen one is.
const STATE_OFFSET: usize = 108;
const STATE_INITIALIZED: u8 = 1;
const STATE_FROZEN: u8 = 2;

/// What a check does with the problems it finds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum CheckMode {
    /// Returns them as [`ReceivingAccountError::Refused`], for the caller to
    /// propagate so that the server does not start.
    #[default]
    Refuse,
    /// Logs each with `tracing::warn!` and returns them in `Ok`.
    Warn,
}

/// The check of every Solana offer's receiving account, against a JSON-RPC
/// node: see the [module docs](super#receiving-accounts).
///
/// The RPC URL can carry an API key: it is never logged or shown beyond
/// `scheme://host[:port]`.
#[must_use]
#[derive(Clone)]
pub struct ReceivingAccounts {
    rpc_url: String,
    network_rpcs: Vec<(String, String)>,
    mode: CheckMode,
    timeout: Duration,
}

impl fmt::Debug for ReceivingAccounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let networks: Vec<_> = self
            .network_rpcs
            .iter()
            .map(|(network, url)| (network.as_str(), redact_text(url)))
            .collect();
        f.debug_struct("ReceivingAccounts")
            .field("rpc_url", &redact_text(&self.rpc_url))
            .field("network_rpcs", &networks)
            .field("mode", &self.mode)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl ReceivingAccounts {
    /// A check asking the node at `rpc_url` (`http` or `https`) about every
    /// Solana network's offers, refusing on any problem, with a deadline of
    /// [`DEFAULT_RPC_TIMEOUT`] on each request.
    pub fn new(rpc_url: impl Into<String>) -> Self {
        Self {
            rpc_url: rpc_url.into(),
            network_rpcs: Vec::new(),
            mode: CheckMode::Refuse,
            timeout: DEFAULT_RPC_TIMEOUT,
        }
    }

    /// Asks the node at `rpc_url` instead about the offers on `network`
    /// (CAIP-2, e.g. [`SOLANA_DEVNET`](crate::network::SOLANA_DEVNET)), for
    /// an engine that takes payments on more than one cluster.
    pub fn network_rpc(mut self, network: impl Into<String>, rpc_url: impl Into<String>) -> Self {
        let network = network.into();
        self.network_rpcs.retain(|(n, _)| *n != network);
        self.network_rpcs.push((network, rpc_url.into()));
        self
    }

    /// What to do with the problems found (default [`CheckMode::Refuse`]).
    pub fn mode(mut self, mode: CheckMode) -> Self {
        self.mode = mode;
        self
    }

    /// The deadline of each RPC request (default [`DEFAULT_RPC_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Checks the receiving account of every Solana offer in `offers`
    /// (an engine's: [`Engine::static_offers`](crate::Engine::static_offers)).
    /// Offers on other families of networks are skipped, and so are Solana
    /// offers without an asset on a network without a default stablecoin
    /// (the engine refuses those itself).
    ///
    /// `Ok` holds the problems found, each logged, in [`CheckMode::Warn`]
    /// (none in [`CheckMode::Refuse`], where any is an `Err`). A check that
    /// could not run (the node unreachable or answering nonsense, a node of
    /// another cluster, a URL that is no URL) is an `Err` in either mode.
    pub async fn check(
        &self,
        offers: &[Offer],
    ) -> Result<Vec<ReceivingAccountProblem>, ReceivingAccountError> {
        let targets = targets(offers);
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let client = Client::builder()
            .timeout(self.timeout)
            .connect_timeout(self.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ReceivingAccountError::Rpc {
                endpoint: redact_text(&self.rpc_url),
                network: targets[0].network.clone(),
                reason: format!("no HTTP client: {}", error_text(e)),
            })?;
        let mut session = Session {
            client,
            timeout: self.timeout,
            nodes: HashMap::new(),
            mints: HashMap::new(),
            next_id: 0,
        };
        let mut problems = Vec::new();
        for target in &targets {
            let url = self
                .network_rpcs
                .iter()
                .find(|(n, _)| *n == target.network)
                .map_or(self.rpc_url.as_str(), |(_, url)| url.as_str());
            if let Some(problem) = session.check(target, url).await? {
                problems.push(problem);
            }
        }
        tracing::debug!(
            checked = targets.len(),
            problems = problems.len(),
            "x402: checked the Solana receiving accounts"
        );
        if problems.is_empty() {
            return Ok(problems);
        }
        match self.mode {
            CheckMode::Refuse => Err(ReceivingAccountError::Refused(problems)),
            CheckMode::Warn => {
                for problem in &problems {
                    tracing::warn!(
                        network = problem.network(),
                        pay_to = problem.pay_to(),
                        mint = problem.mint(),
                        "x402: {problem}"
                    );
                }
                Ok(problems)
            }
        }
    }
}

/// Checks the receiving account of every Solana offer in `offers` (an
/// engine's [`static_offers`](crate::Engine::static_offers)) against the
/// node at `rpc_url`: [`ReceivingAccounts::new`]`(rpc_url).mode(mode).check(offers)`,
/// with the problems of [`CheckMode::Warn`] only logged.
pub async fn check_receiving_accounts(
    offers: &[Offer],
    rpc_url: &str,
    mode: CheckMode,
) -> Result<(), ReceivingAccountError> {
    ReceivingAccounts::new(rpc_url)
        .mode(mode)
        .check(offers)
        .await
        .map(drop)
}

/// One `(network, payTo, mint)` to check.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    network: String,
    pay_to: String,
    mint: String,
}

/// The distinct Solana receiving accounts of `offers`, in order.
fn targets(offers: &[Offer]) -> Vec<Target> {
    let mut out: Vec<Target> = Vec::new();
    for offer in offers {
        if network::family(&offer.network) != Family::Svm {
            continue;
        }
        let network = network::canonical(&offer.network).to_owned();
        let mint = match (&offer.asset, network::default_stablecoin(&network)) {
            (Some(asset), _) => asset.address.clone(),
            (None, Some(coin)) => coin.address.to_owned(),
            (None, None) => continue,
        };
        let target = Target {
            network,
            pay_to: offer.pay_to.clone(),
            mint,
        };
        if !out.contains(&target) {
            out.push(target);
        }
    }
    out
}

/// An account as `getAccountInfo` tells it: its owner program and the
/// slice of its data asked for.
struct Account {
    owner: String,
    data: Vec<u8>,
}

/// The node of one URL, once asked for its genesis hash.
struct Node {
    url: Url,
    endpoint: String,
    genesis_hash: String,
}

/// What one check run has learnt, and its client.
struct Session {
    client: Client,
    timeout: Duration,
    /// By RPC URL.
    nodes: HashMap<String, Node>,
    /// Each mint's program, by (RPC URL, mint); `None` for no account.
    mints: HashMap<(String, String), Option<String>>,
    next_id: u64,
}

impl Session {
    /// The problem of one receiving account, if it has one.
    async fn check(
        &mut self,
        target: &Target,
        rpc_url: &str,
    ) -> Result<Option<ReceivingAccountProblem>, ReceivingAccountError> {
        let Target {
            network,
            pay_to,
            mint,
        } = target;
        let problem = |field, reason| ReceivingAccountProblem::InvalidAddress {
            network: network.clone(),
            pay_to: pay_to.clone(),
            mint: mint.clone(),
            field,
            reason,
        };
        let owner: Pubkey = match pay_to.parse() {
            Ok(owner) => owner,
            Err(e) => return Ok(Some(problem("payTo", e))),
        };
        let mint_key: Pubkey = match mint.parse() {
            Ok(mint) => mint,
            Err(e) => return Ok(Some(problem("asset", e))),
        };
        self.node(network, rpc_url).await?;

        let key = (rpc_url.to_owned(), mint.clone());
        let mint_owner = match self.mints.get(&key) {
            Some(owner) => owner.clone(),
            None => {
                let owner = self
                    .account(network, rpc_url, &mint_key, 0)
                    .await?
                    .map(|a| a.owner);
                self.mints.insert(key, owner.clone());
                owner
            }
        };
        let Some(mint_owner) = mint_owner else {
            return Ok(Some(ReceivingAccountProblem::MintNotFound {
                network: network.clone(),
                pay_to: pay_to.clone(),
                mint: mint.clone(),
            }));
        };
        let Some(program) = program_of(&mint_owner) else {
            return Ok(Some(ReceivingAccountProblem::NotAMint {
                network: network.clone(),
                pay_to: pay_to.clone(),
                mint: mint.clone(),
                owner: mint_owner,
            }));
        };

        let expected = associated_token_address(&owner, &mint_key, program);
        let ata = self
            .account(network, rpc_url, &expected, TOKEN_ACCOUNT_PREFIX)
            .await?;
        let Some(ata) = ata else {
            // Is payTo a token account itself, named instead of its wallet?
            if let Some(account) = self.account(network, rpc_url, &owner, 64).await? {
                if let (Some(_), Some(account_mint), Some(wallet)) = (
                    program_of(&account.owner),
                    key_at(&account.data, 0),
                    key_at(&account.data, 32),
                ) {
                    return Ok(Some(ReceivingAccountProblem::PayToIsTokenAccount {
                        network: network.clone(),
                        pay_to: pay_to.clone(),
                        mint: mint.clone(),
                        account_mint,
                        wallet,
                    }));
                }
            }
            return Ok(Some(ReceivingAccountProblem::MissingAccount {
                network: network.clone(),
                pay_to: pay_to.clone(),
                mint: mint.clone(),
                token_program: program,
                expected,
            }));
        };
        let initialised = ata.owner == program.id().to_string()
            && key_at(&ata.data, 0) == Some(mint_key)
            && key_at(&ata.data, 32) == Some(owner);
        match ata.data.get(STATE_OFFSET) {
            Some(&STATE_INITIALIZED) if initialised => Ok(None),
            Some(&STATE_FROZEN) if initialised => {
                Ok(Some(ReceivingAccountProblem::FrozenAccount {
                    network: network.clone(),
                    pay_to: pay_to.clone(),
                    mint: mint.clone(),
                    account: expected,
                }))
            }
            _ => Ok(Some(ReceivingAccountProblem::NotATokenAccount {
                network: network.clone(),
                pay_to: pay_to.clone(),
                mint: mint.clone(),
                account: expected,
                owner: ata.owner,
            })),
        }
    }

    /// The node at `rpc_url` (its URL and endpoint), asked for its genesis
    /// hash on first use, which must match `network` when that is a CAIP-2
    /// Solana id (`solana:` and the first 32 characters of the genesis hash).
    async fn node(
        &mut self,
        network: &str,
        rpc_url: &str,
    ) -> Result<(Url, String), ReceivingAccountError> {
        let node = match self.nodes.get(rpc_url) {
            Some(node) => node,
            None => {
                let url =
                    parse_rpc_url(rpc_url).ok_or_else(|| ReceivingAccountError::InvalidRpcUrl {
                        network: network.to_owned(),
                        endpoint: redact_text(rpc_url),
                    })?;
                let endpoint = redact(&url);
                let answer = self
                    .call(network, &url, &endpoint, "getGenesisHash", json!([]))
                    .await?;
                let genesis_hash = answer
                    .as_str()
                    .filter(|hash| hash.parse::<Pubkey>().is_ok())
                    .ok_or_else(|| ReceivingAccountError::Rpc {
                        endpoint: endpoint.clone(),
                        network: network.to_owned(),
                        reason: "getGenesisHash answered no hash".to_owned(),
                    })?
                    .to_owned();
                self.nodes.entry(rpc_url.to_owned()).or_insert(Node {
                    url,
                    endpoint,
                    genesis_hash,
                })
            }
        };
        let reference = network.strip_prefix("solana:").unwrap_or_default();
        if reference.len() == 32 && !node.genesis_hash.starts_with(reference) {
            return Err(ReceivingAccountError::WrongCluster {
                network: network.to_owned(),
                endpoint: node.endpoint.clone(),
                genesis_hash: node.genesis_hash.clone(),
            });
        }
        Ok((node.url.clone(), node.endpoint.clone()))
    }

    /// `getAccountInfo` of `address` (base64, `confirmed`), with the first
    /// `data_len` bytes of its data; `None` when there is no account.
    async fn account(
        &mut self,
        network: &str,
        rpc_url: &str,
        address: &Pubkey,
        data_len: usize,
    ) -> Result<Option<Account>, ReceivingAccountError> {
        let (url, endpoint) = self.node(network, rpc_url).await?;
        let params = json!([
            address.to_string(),
            {
                "encoding": "base64",
                "commitment": "confirmed",
                "dataSlice": { "offset": 0, "length": data_len },
            },
        ]);
        let answer = self
            .call(network, &url, &endpoint, "getAccountInfo", params)
            .await?;
        let malformed = |what: &str| ReceivingAccountError::Rpc {
            endpoint: endpoint.clone(),
            network: network.to_owned(),
            reason: format!("getAccountInfo of {address}: {what}"),
        };
        let value = answer
            .get("value")
            .ok_or_else(|| malformed("no `value` in the result"))?;
        if value.is_null() {
            return Ok(None);
        }
        let owner = value
            .get("owner")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("no `owner`"))?
            .to_owned();
        let data = match value.get("data") {
            Some(Value::Array(parts)) if parts.get(1) == Some(&json!("base64")) => parts
                .first()
                .and_then(Value::as_str)
                .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
                .ok_or_else(|| malformed("`data` is not base64"))?,
            _ => return Err(malformed("no base64 `data`")),
        };
        Ok(Some(Account { owner, data }))
    }

    /// One JSON-RPC call: its `result`, or the error that stopped it.
    async fn call(
        &mut self,
        network: &str,
        url: &Url,
        endpoint: &str,
        method: &str,
        params: Value,
    ) -> Result<Value, ReceivingAccountError> {
        self.next_id += 1;
        let body =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        let failed = |reason: String| ReceivingAccountError::Rpc {
            endpoint: endpoint.to_owned(),
            network: network.to_owned(),
            reason: truncate_chars(&scrub(&redact_urls(&reason), url), MAX_REASON_CHARS),
        };
        let timeout = self.timeout;
        let transport = |e: reqwest::Error| {
            if e.is_timeout() {
                failed(format!("{method}: no answer within {timeout:?}"))
            } else {
                failed(format!("{method}: {}", error_text(e)))
            }
        };
        let response = self
            .client
            .post(url.clone())
            .json(&body)
            .send()
            .await
            .map_err(transport)?;
        let status = response.status();
        let (answer, cut) = read_capped(response, MAX_ANSWER_BYTES)
            .await
            .map_err(transport)?;
        if !status.is_success() {
            return Err(failed(format!("{method}: HTTP {status}")));
        }
        if cut {
            return Err(failed(format!(
                "{method}: answer longer than {MAX_ANSWER_BYTES} bytes"
            )));
        }
        let mut answer: Value = serde_json::from_slice(&answer)
            .map_err(|e| failed(format!("{method}: answer is not JSON ({e})")))?;
        if let Some(error) = answer.get("error").filter(|e| !e.is_null()) {
            let code = error
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or_default();
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default();
            return Err(failed(format!(
                "{method}: JSON-RPC error {code}: {message}"
            )));
        }
        match answer.get_mut("result") {
            Some(result) => Ok(result.take()),
            None => Err(failed(format!("{method}: answer has no `result`"))),
        }
    }
}

/// The token program of an owner program's address, if it is one.
fn program_of(owner: &str) -> Option<TokenProgram> {
    TokenProgram::from_id(&owner.parse().ok()?)
}

/// The address in `data[at..at + 32]`.
fn key_at(data: &[u8], at: usize) -> Option<Pubkey> {
    let bytes: [u8; 32] = data.get(at..at.checked_add(32)?)?.try_into().ok()?;
    Some(Pubkey::new(bytes))
}

/// `rpc_url` as an `http` or `https` URL with a host.
fn parse_rpc_url(rpc_url: &str) -> Option<Url> {
    Url::parse(rpc_url.trim())
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host())
}

/// `scheme://host[:port]` of a URL: no credentials, path, query or
/// fragment, where an RPC provider's API key goes.
fn redact(url: &Url) -> String {
    crate::redact::url(url.as_str())
}

/// [`redact`] of a text that may not parse as a URL.
fn redact_text(text: &str) -> String {
    Url::parse(text.trim()).map_or_else(|_| "<not a URL>".to_owned(), |url| redact(&url))
}

/// `text` without the parts of `url` that can hold a key (credentials, path
/// segments, query keys and values of 6 characters or more), for a node
/// that quotes them in an error.
fn scrub(text: &str, url: &Url) -> String {
    let mut secrets: Vec<String> = url
        .path_segments()
        .into_iter()
        .flatten()
        .map(str::to_owned)
        .chain(
            url.query_pairs()
                .flat_map(|(key, value)| [key.into_owned(), value.into_owned()]),
        )
        .chain([url.username().to_owned()])
        .chain(url.password().map(str::to_owned))
        .filter(|part| part.len() >= 6)
        .collect();
    // The longest first, so that a part of another is not cut out of it.
    secrets.sort_by_key(|part| std::cmp::Reverse(part.len()));
    let mut text = text.to_owned();
    for secret in &secrets {
        text = text.replace(secret.as_str(), "<redacted>");
    }
    text
}

/// An error and its sources, without the URL reqwest adds.
fn error_text(error: reqwest::Error) -> String {
    crate::redact::error_chain(&error.without_url())
}

mod problem;

pub use self::problem::{ReceivingAccountError, ReceivingAccountProblem};

#[cfg(test)]
mod tests;
