//! The in-process facilitator: verification and settlement over a Ledger.

use super::*;

/// Why a [`LocalFacilitator`] could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalConfigError {
    /// A network is not an EVM network this crate can name.
    #[error("network {0:?} is not an EVM network (CAIP-2 eip155:<id> or a known v1 name)")]
    NotEvm(String),
    /// The ledger refuses a network.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// No network was configured.
    #[error("a local facilitator needs at least one network")]
    NoNetworks,
}

/// Builds a [`LocalFacilitator`].
#[derive(Debug)]
#[must_use]
pub struct LocalFacilitatorBuilder {
    pub(super) ledger: Arc<dyn Ledger>,
    pub(super) networks: Vec<String>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) margin: Duration,
    pub(super) low_gas_threshold: U256,
}

/// The default balance under which the settlement wallet counts as low on
/// gas ([`LocalFacilitatorBuilder::low_gas_threshold`]): 0.001 of the native
/// coin (10^15 wei), a few thousand settlements on an L2 such as Base, and
/// less than one on Ethereum mainnet at busy times.
pub const DEFAULT_LOW_GAS_THRESHOLD: U256 = U256::from_limbs([1_000_000_000_000_000, 0, 0, 0]);

impl LocalFacilitatorBuilder {
    /// Adds a network to serve: a CAIP-2 id (`eip155:84532`) or a v1 name
    /// (`base-sepolia`).
    pub fn network(mut self, network: impl Into<String>) -> Self {
        self.networks.push(network.into());
        self
    }

    /// Adds several networks.
    pub fn networks<I, S>(mut self, networks: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.networks.extend(networks.into_iter().map(Into::into));
        self
    }

    /// Sets the clock (default: [`SystemClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Sets how long an authorization must stay valid after verification
    /// (default [`DEFAULT_VALID_BEFORE_MARGIN`], 6 s).
    pub fn valid_before_margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// Sets the native balance (in wei) of the settlement wallet under which
    /// [`health`](Facilitator::health) reports it low on gas, and
    /// [readiness](crate::readiness) not ready (default
    /// [`DEFAULT_LOW_GAS_THRESHOLD`], 0.001 of the native coin). Pick it
    /// from what a settlement costs on your chain times how many you want
    /// warning of.
    pub fn low_gas_threshold(mut self, wei: U256) -> Self {
        self.low_gas_threshold = wei;
        self
    }

    /// Checks the networks with the ledger and builds the facilitator.
    pub fn build(self) -> Result<LocalFacilitator, LocalConfigError> {
        if self.networks.is_empty() {
            return Err(LocalConfigError::NoNetworks);
        }
        let mut networks = BTreeMap::new();
        for name in &self.networks {
            let caip2 = caip2_of(name).ok_or_else(|| LocalConfigError::NotEvm(name.clone()))?;
            let chain_id = network::evm_chain_id(&caip2)
                .ok_or_else(|| LocalConfigError::NotEvm(name.clone()))?;
            self.ledger.check_network(&caip2)?;
            networks.insert(caip2, chain_id);
        }
        Ok(LocalFacilitator {
            ledger: self.ledger,
            networks,
            clock: self.clock,
            margin: self.margin.as_secs(),
            low_gas_threshold: self.low_gas_threshold,
        })
    }
}

/// The CAIP-2 id of an EVM network named either way.
pub(super) fn caip2_of(name: &str) -> Option<String> {
    let caip2 = network::canonical(name);
    network::evm_chain_id(caip2).map(|_| caip2.to_owned())
}

/// An in-process facilitator for EVM networks, settling through a [`Ledger`]:
/// `exact` with EIP-3009 (v1 and v2) or Permit2 (v2), and `upto` with Permit2
/// (v2) when the ledger [settles Permit2](Ledger::supports_permit2). See the
/// [module docs](crate::local) for the checks.
///
/// ```
/// use std::sync::Arc;
/// use x402_core::local::{DevLedger, FixedClock, LocalFacilitator};
///
/// let facilitator = LocalFacilitator::builder(DevLedger::new())
///     .network("base-sepolia")
///     .clock(FixedClock(1_740_672_100))
///     .build()?;
/// assert_eq!(facilitator.networks().collect::<Vec<_>>(), ["eip155:84532"]);
///
/// // Mainnets are refused by the dev ledger.
/// assert!(LocalFacilitator::builder(DevLedger::new()).network("eip155:8453").build().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct LocalFacilitator {
    pub(super) ledger: Arc<dyn Ledger>,
    /// CAIP-2 id → chain id.
    pub(super) networks: BTreeMap<String, u64>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) margin: u64,
    pub(super) low_gas_threshold: U256,
}

/// Which facilitator call a check runs for: the amount of an `upto`
/// requirement is the ceiling at `verify` and the charge at `settle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Verify,
    Settle,
}

/// A payment that passed every check, with what settling it needs.
pub(super) enum Checked {
    Eip3009(CheckedEip3009),
    Permit2(CheckedPermit2),
}

impl Checked {
    pub(super) fn payer(&self) -> Address {
        match self {
            Self::Eip3009(c) => c.payload.authorization.from,
            Self::Permit2(c) => c.payload.permit2_authorization.from,
        }
    }
}

/// A refusal: a reason code, a message and the payer when known.
pub(super) struct Refusal {
    pub(super) reason: &'static str,
    pub(super) message: String,
    pub(super) payer: Option<String>,
}

impl From<check::Refused> for Refusal {
    fn from(refused: check::Refused) -> Self {
        refuse(refused.reason, refused.message, refused.payer)
    }
}

pub(super) fn refuse(
    reason: &'static str,
    message: impl Into<String>,
    payer: Option<Address>,
) -> Refusal {
    Refusal {
        reason,
        message: message.into(),
        payer: payer.map(|p| p.to_checksum(None)),
    }
}

pub(super) fn ledger_error(e: LedgerError) -> FacilitatorError {
    FacilitatorError::Other(OtherError(Arc::new(e)))
}

/// A ledger error while moving the tokens, as `settle`'s error (the engine
/// answers 502 `settlement_unknown` and keeps the payment claimed). Its
/// sources (a node's error text) are logged here: only its fixed `Display`
/// travels on.
pub(super) fn settlement_error(e: LedgerError, network: &str) -> FacilitatorError {
    let transaction = match &e {
        LedgerError::SettlementUnknown { transaction, .. } => transaction.as_deref(),
        _ => None,
    };
    tracing::error!(
        error = %e,
        detail = %error_chain(&e),
        transaction,
        network,
        "x402: the ledger could not settle; the outcome is unknown"
    );
    ledger_error(e)
}

/// An error and its sources as one line, for logs.
pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// Whether `s` has the shape of a reason code: 1 to 64 lowercase ASCII
/// letters, digits and `_` (a node's message, with spaces, never has).
pub(super) fn is_reason_code(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The `invalidMessage` / `errorMessage` a refusal answers with. The
/// facilitator's own checks write their own text; a dry run's refusal
/// carries the ledger's (a node's revert message, say), which goes to
/// `tracing` and is answered with a fixed sentence, or kept when it is a
/// reason code.
pub(super) fn wire_message(reason: &'static str, message: String) -> String {
    if reason != reason::SIMULATION_FAILED && reason != reason::PERMIT2_SIMULATION_FAILED {
        return message;
    }
    if is_reason_code(&message) {
        return message;
    }
    tracing::info!(reason, detail = %message, "x402: the ledger's dry run refused the payment");
    "the token refused the transfer in a dry run".to_owned()
}

/// The `errorReason` and `errorMessage` of a ledger's refusal: its reason
/// when it is a reason code, else `fallback`, and a fixed sentence. The
/// ledger's message (a node's error text, say) goes to `tracing` only.
pub(super) fn refused_settlement(
    reason: &str,
    message: Option<&str>,
    transaction: Option<&str>,
    fallback: &'static str,
    network: &str,
) -> (String, &'static str) {
    let answer = if is_reason_code(reason) {
        reason
    } else {
        fallback
    };
    tracing::warn!(
        reason = answer,
        ledger_reason = reason,
        detail = message,
        transaction,
        network,
        "x402: the ledger refused the settlement"
    );
    let sentence = if transaction.is_some() {
        "the settlement transaction did not move the tokens"
    } else {
        "the ledger refused the transfer; nothing was sent"
    };
    (answer.to_owned(), sentence)
}

impl LocalFacilitator {
    /// Starts building a facilitator that settles through `ledger`.
    pub fn builder(ledger: impl Ledger) -> LocalFacilitatorBuilder {
        LocalFacilitatorBuilder {
            ledger: Arc::new(ledger),
            networks: Vec::new(),
            clock: Arc::new(SystemClock),
            margin: DEFAULT_VALID_BEFORE_MARGIN,
            low_gas_threshold: DEFAULT_LOW_GAS_THRESHOLD,
        }
    }

    /// The networks served, as CAIP-2 ids.
    pub fn networks(&self) -> impl Iterator<Item = &str> + '_ {
        self.networks.keys().map(String::as_str)
    }

    /// The ledger.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    /// Every check but the ledger's.
    pub(super) fn check_offline(
        &self,
        request: &FacilitatorRequest,
        phase: Phase,
    ) -> Result<Checked, Refusal> {
        let payment = &request.payment_payload;
        let requirements = &request.payment_requirements;

        if requirements.scheme() == permit2::UPTO {
            return self
                .check_upto_offline(request, phase)
                .map(Checked::Permit2);
        }
        if payment.scheme() != "exact" || requirements.scheme() != "exact" {
            return Err(refuse(
                reason::SCHEME,
                format!(
                    "scheme must be exact (payment {:?}, requirement {:?})",
                    short(payment.scheme()),
                    short(requirements.scheme())
                ),
                None,
            ));
        }
        let (network, chain_id) = self.served_network(request, reason::NETWORK_MISMATCH)?;

        let parsed = EvmPayload::from_value(payment.payload());
        if let Ok(EvmPayload::Permit2(payload)) = parsed {
            return self
                .check_permit2_offline(
                    request,
                    permit2::Permit2Kind::Exact,
                    payload,
                    (network, chain_id),
                    phase,
                )
                .map(Checked::Permit2);
        }

        self.check_eip3009_offline(request, parsed, (network, chain_id))
            .map(Checked::Eip3009)
    }

    /// The checks of a payment that need no ledger, as of now.
    pub(super) fn checks(&self) -> check::Checks {
        check::Checks {
            now: self.clock.now(),
            margin: self.margin,
            smart_wallets: check::SmartWallets::Refuse,
            signer: check::Signer::Recover,
        }
    }

    /// The requirement's network as `(CAIP-2 id, chain id)`, after checking
    /// that the payment names the same one (else `mismatch`) and that this
    /// facilitator serves it.
    pub(super) fn served_network(
        &self,
        request: &FacilitatorRequest,
        mismatch: &'static str,
    ) -> Result<(String, u64), Refusal> {
        let requirements = &request.payment_requirements;
        if request.payment_payload.network() != requirements.network() {
            return Err(refuse(
                mismatch,
                "the payment names another network than the requirement",
                None,
            ));
        }
        caip2_of(requirements.network())
            .and_then(|caip2| self.networks.get_key_value(&caip2))
            .map(|(n, id)| (n.clone(), *id))
            .ok_or_else(|| {
                refuse(
                    reason::UNSUPPORTED_NETWORK,
                    format!(
                        "network {:?} is not served by this facilitator",
                        short(requirements.network())
                    ),
                    None,
                )
            })
    }

    /// Every check, the ledger's included; at `verify`, a dry run too.
    pub(super) async fn check(
        &self,
        request: &FacilitatorRequest,
        phase: Phase,
    ) -> Result<Result<Checked, Refusal>, FacilitatorError> {
        let checked = match self.check_offline(request, phase) {
            Ok(c) => c,
            Err(r) => return Ok(Err(r)),
        };
        let refusal = match &checked {
            Checked::Eip3009(c) => self.check_eip3009_ledger(c, phase).await?,
            Checked::Permit2(c) => self.check_permit2_ledger(c, phase).await?,
        };
        Ok(match refusal {
            Some(r) => Err(r),
            None => Ok(checked),
        })
    }
}

/// At most 64 characters of untrusted input, for messages.
pub(super) fn short(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

#[async_trait]
impl Facilitator for LocalFacilitator {
    async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        Ok(match self.check(request, Phase::Verify).await? {
            Ok(checked) => VerifyResponse::valid(checked.payer().to_checksum(None)),
            Err(r) => VerifyResponse {
                invalid_message: Some(wire_message(r.reason, r.message)),
                ..VerifyResponse::invalid(r.reason, r.payer)
            },
        })
    }

    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        let network = request.payment_requirements.network().to_owned();
        // No separate dry run: a chain ledger's gas estimation is one.
        let checked = match self.check(request, Phase::Settle).await? {
            Ok(c) => c,
            Err(r) => {
                return Ok(SettleResponse {
                    error_message: Some(wire_message(r.reason, r.message)),
                    payer: r.payer,
                    ..SettleResponse::failure(network, r.reason)
                })
            }
        };
        let payer = checked.payer().to_checksum(None);
        let (outcome, amount) = match &checked {
            Checked::Eip3009(c) => (
                self.ledger
                    .transfer(&c.transfer())
                    .await
                    .map_err(|e| settlement_error(e, &network))?,
                c.payload.authorization.value,
            ),
            Checked::Permit2(c) if c.amount.is_zero() => {
                // A zero `upto` charge moves nothing and sends nothing.
                return Ok(SettleResponse {
                    success: true,
                    payer: Some(payer),
                    transaction: String::new(),
                    network,
                    amount: Some(AtomicAmount::ZERO),
                    ..SettleResponse::default()
                });
            }
            Checked::Permit2(c) => (
                self.ledger
                    .permit2_transfer(&c.transfer())
                    .await
                    .map_err(|e| settlement_error(e, &network))?,
                AtomicAmount::from(c.amount),
            ),
        };
        Ok(match outcome {
            TransferOutcome::Settled { transaction } => SettleResponse {
                success: true,
                payer: Some(payer),
                transaction,
                network,
                amount: Some(amount),
                ..SettleResponse::default()
            },
            TransferOutcome::Refused {
                reason,
                message,
                transaction,
            } => {
                let fallback = if request.payment_requirements.scheme() == permit2::UPTO {
                    reason::UPTO_TRANSACTION_FAILED
                } else {
                    reason::TRANSACTION_FAILED
                };
                let (reason, sentence) = refused_settlement(
                    &reason,
                    message.as_deref(),
                    transaction.as_deref(),
                    fallback,
                    &network,
                );
                SettleResponse {
                    error_message: Some(sentence.to_owned()),
                    payer: Some(payer),
                    transaction: transaction.unwrap_or_default(),
                    ..SettleResponse::failure(network, reason)
                }
            }
        })
    }

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        let mut kinds = Vec::new();
        for caip2 in self.networks.keys() {
            kinds.push(SupportedKind {
                x402_version: X402Version::V2,
                scheme: "exact".to_owned(),
                network: caip2.clone(),
                extra: None,
            });
            if let Some(v1) = network::v1_name(caip2) {
                kinds.push(SupportedKind {
                    x402_version: X402Version::V1,
                    scheme: "exact".to_owned(),
                    network: v1.to_owned(),
                    extra: None,
                });
            }
        }
        if self.ledger.supports_permit2() {
            let mut extra = crate::proto::JsonObject::new();
            extra.insert(
                "facilitatorAddress".to_owned(),
                serde_json::Value::String(self.ledger.signer().to_checksum(None)),
            );
            for caip2 in self.networks.keys() {
                kinds.push(SupportedKind {
                    x402_version: X402Version::V2,
                    scheme: permit2::UPTO.to_owned(),
                    network: caip2.clone(),
                    extra: Some(extra.clone()),
                });
            }
        }
        let mut signers = BTreeMap::new();
        signers.insert(
            "eip155:*".to_owned(),
            vec![self.ledger.signer().to_checksum(None)],
        );
        Ok(SupportedResponse {
            kinds,
            extensions: Vec::new(),
            signers,
        })
    }

    /// `/supported` (computed, no I/O) and, when the ledger pays gas
    /// ([`Ledger::gas_balance`]), its signer's balance on each network
    /// served, low under the
    /// [threshold](LocalFacilitatorBuilder::low_gas_threshold). A balance
    /// that cannot be read is reported as unknown (and logged).
    async fn health(&self) -> crate::facilitator::FacilitatorHealth {
        let health = crate::facilitator::FacilitatorHealth::new(self.supported().await);
        let balance = match self.ledger.gas_balance().await {
            Ok(None) => return health,
            Ok(Some(balance)) => Some(balance),
            Err(error) => {
                tracing::warn!(
                    error = %error,
                    detail = %error_chain(&error),
                    "x402: the settlement wallet's gas balance cannot be read"
                );
                None
            }
        };
        let address = self.ledger.signer().to_checksum(None);
        self.networks.keys().fold(health, |health, network| {
            health.with_wallet(crate::facilitator::GasWallet::new(
                network.clone(),
                address.clone(),
                balance,
                self.low_gas_threshold,
            ))
        })
    }
}

#[cfg(test)]
mod tests;
