//! Where the money moves: the Ledger trait and what it is asked and answers.

use super::*;

/// One EIP-3009 transfer, as a [`Ledger`] sees it. Every check that needs no
/// ledger state has passed.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Transfer<'a> {
    /// The network as a CAIP-2 id (`eip155:84532`).
    pub network: &'a str,
    /// The EVM chain id of `network`.
    pub chain_id: u64,
    /// The token contract.
    pub asset: Address,
    /// The signed authorization.
    pub payload: &'a ExactEvmPayload,
}

impl Transfer<'_> {
    /// The payer.
    pub fn from(&self) -> Address {
        self.payload.authorization.from
    }

    /// The amount in atomic units.
    pub fn value(&self) -> U256 {
        self.payload.authorization.value.get()
    }

    /// The authorization's nonce.
    pub fn nonce(&self) -> B256 {
        self.payload.authorization.nonce
    }
}

/// What a ledger knows about a transfer before it is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LedgerState {
    /// Whether the token has already used (or cancelled) the nonce; for
    /// Permit2, whether the owner has spent it.
    pub nonce_used: bool,
    /// The payer's balance of the token, in atomic units.
    pub balance: U256,
    /// Permit2 only: the payer's ERC-20 allowance to Permit2, when the ledger
    /// knows it (`None`: not checked, e.g. the dev ledger, which needs none).
    pub permit2_allowance: Option<U256>,
}

impl LedgerState {
    /// A state with these values.
    pub fn new(nonce_used: bool, balance: U256) -> Self {
        Self {
            nonce_used,
            balance,
            permit2_allowance: None,
        }
    }

    /// With the payer's allowance to Permit2.
    #[must_use]
    pub fn with_permit2_allowance(mut self, allowance: U256) -> Self {
        self.permit2_allowance = Some(allowance);
        self
    }
}

/// How a transfer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransferOutcome {
    /// The tokens moved.
    Settled {
        /// The transaction hash (a chain) or a deterministic id (the dev ledger).
        transaction: String,
    },
    /// The tokens did not move, for a business reason, and no transaction
    /// that could still move them is pending. (A transfer that may have been
    /// sent and whose outcome is not known is
    /// [`LedgerError::SettlementUnknown`], never a refusal.)
    Refused {
        /// A reason code (see [`reason`]): lowercase ASCII letters, digits
        /// and `_`. The facilitator answers
        /// [`reason::TRANSACTION_FAILED`] (or
        /// [`reason::UPTO_TRANSACTION_FAILED`]) in place of anything else.
        reason: String,
        /// Detail for logs (a node's error text, say). The facilitator
        /// writes it to `tracing` and never into its answer.
        message: Option<String>,
        /// The transaction hash, when a transaction was sent and reverted.
        transaction: Option<String>,
    },
}

impl TransferOutcome {
    /// A refusal with a reason code and no transaction.
    pub fn refused(reason: impl Into<String>) -> Self {
        Self::Refused {
            reason: reason.into(),
            message: None,
            transaction: None,
        }
    }
}

/// Why a ledger could not answer (as opposed to refusing a transfer).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The ledger does not serve this network.
    #[error("ledger does not serve network {network:?}: {why}")]
    UnsupportedNetwork {
        /// The network.
        network: String,
        /// Why.
        why: String,
    },
    /// The ledger cannot settle this kind of transfer (e.g. Permit2).
    #[error("the ledger does not settle {0} transfers")]
    Unsupported(&'static str),
    /// The node or backing store failed.
    #[error("ledger backend error")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A settlement transaction may have been sent and whether it moved the
    /// tokens is not known: the node's answer to the submission left it open
    /// ("already known", "nonce too low", "replacement transaction
    /// underpriced", no answer at all, ...), or no receipt came within the
    /// timeout. The facilitator's `settle` answers it with an error, never
    /// with a refusal: the engine's 502 `settlement_unknown`, the payment
    /// kept claimed.
    #[error("the settlement transaction may have been sent; its outcome is unknown")]
    SettlementUnknown {
        /// The transaction's hash, when one was computed, to reconcile by.
        transaction: Option<String>,
        /// What went wrong (a node's error text, for logs only).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Where the money moves: a chain, or memory.
///
/// Implementations must make [`transfer`](Ledger::transfer) atomic per
/// authorization: of concurrent transfers of one `(asset, from, nonce)`, at
/// most one succeeds.
#[async_trait]
pub trait Ledger: Send + Sync + fmt::Debug + 'static {
    /// The address that submits settlements, listed in `/supported` signers.
    fn signer(&self) -> Address;

    /// Whether the ledger can serve `network` (a CAIP-2 id); checked when the
    /// facilitator is built.
    fn check_network(&self, network: &str) -> Result<(), LedgerError>;

    /// The nonce's state and the payer's balance.
    async fn state(&self, transfer: &Transfer<'_>) -> Result<LedgerState, LedgerError>;

    /// Dry-runs the transfer without making it (an `eth_call` on a chain):
    /// `Some(message)` when it would fail. Run by `verify` only, after the
    /// other checks pass. The default simulates nothing.
    async fn simulate(&self, transfer: &Transfer<'_>) -> Result<Option<String>, LedgerError> {
        let _ = transfer;
        Ok(None)
    }

    /// Moves the tokens.
    async fn transfer(&self, transfer: &Transfer<'_>) -> Result<TransferOutcome, LedgerError>;

    /// Whether the ledger settles Permit2 witness transfers (the `upto`
    /// scheme, and `exact` with `assetTransferMethod: "permit2"`). The
    /// facilitator lists `upto` in `/supported`, and accepts Permit2
    /// payloads, only when it does. The default is `false`.
    fn supports_permit2(&self) -> bool {
        false
    }

    /// The Permit2 nonce's state for the owner and the owner's balance of
    /// the token. Called only when [`supports_permit2`](Ledger::supports_permit2)
    /// is `true`; the default answers [`LedgerError::Unsupported`].
    async fn permit2_state(
        &self,
        transfer: &Permit2Transfer<'_>,
    ) -> Result<LedgerState, LedgerError> {
        let _ = transfer;
        Err(LedgerError::Unsupported("Permit2"))
    }

    /// Dry-runs a Permit2 transfer, as [`simulate`](Ledger::simulate) does
    /// for EIP-3009. The default simulates nothing.
    async fn permit2_simulate(
        &self,
        transfer: &Permit2Transfer<'_>,
    ) -> Result<Option<String>, LedgerError> {
        let _ = transfer;
        Ok(None)
    }

    /// Moves [`Permit2Transfer::amount`] of the permitted token from the
    /// owner to `witness.to` and spends the owner's Permit2 nonce. Atomic per
    /// `(owner, nonce)`: of concurrent transfers, at most one succeeds. The
    /// default answers [`LedgerError::Unsupported`].
    async fn permit2_transfer(
        &self,
        transfer: &Permit2Transfer<'_>,
    ) -> Result<TransferOutcome, LedgerError> {
        let _ = transfer;
        Err(LedgerError::Unsupported("Permit2"))
    }

    /// The native balance (in wei) of the [signer](Ledger::signer), which
    /// pays the gas of settlements: `None` when the ledger pays no gas (the
    /// default, and the [`DevLedger`]). Read by
    /// [readiness](crate::readiness) probes, never on a payment's path.
    async fn gas_balance(&self) -> Result<Option<U256>, LedgerError> {
        Ok(None)
    }
}

#[async_trait]
impl<L: Ledger + ?Sized> Ledger for Arc<L> {
    fn signer(&self) -> Address {
        (**self).signer()
    }

    fn check_network(&self, network: &str) -> Result<(), LedgerError> {
        (**self).check_network(network)
    }

    async fn state(&self, transfer: &Transfer<'_>) -> Result<LedgerState, LedgerError> {
        (**self).state(transfer).await
    }

    async fn simulate(&self, transfer: &Transfer<'_>) -> Result<Option<String>, LedgerError> {
        (**self).simulate(transfer).await
    }

    async fn transfer(&self, transfer: &Transfer<'_>) -> Result<TransferOutcome, LedgerError> {
        (**self).transfer(transfer).await
    }

    fn supports_permit2(&self) -> bool {
        (**self).supports_permit2()
    }

    async fn permit2_state(
        &self,
        transfer: &Permit2Transfer<'_>,
    ) -> Result<LedgerState, LedgerError> {
        (**self).permit2_state(transfer).await
    }

    async fn permit2_simulate(
        &self,
        transfer: &Permit2Transfer<'_>,
    ) -> Result<Option<String>, LedgerError> {
        (**self).permit2_simulate(transfer).await
    }

    async fn permit2_transfer(
        &self,
        transfer: &Permit2Transfer<'_>,
    ) -> Result<TransferOutcome, LedgerError> {
        (**self).permit2_transfer(transfer).await
    }

    async fn gas_balance(&self) -> Result<Option<U256>, LedgerError> {
        (**self).gas_balance().await
    }
}
