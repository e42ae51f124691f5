//! What the receiving-account check finds, and why it could not run.

use std::fmt;

use super::*;

/// A receiving account that cannot take an offer's payments.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReceivingAccountProblem {
    /// The associated token account of `payTo` for the mint does not exist:
    /// every payment fails at simulation (upstream facilitators say
    /// `invalid_exact_svm_payload_receiver_ata_not_found`).
    MissingAccount {
        /// The offer's network.
        network: String,
        /// The offer's `payTo`.
        pay_to: String,
        /// The offer's asset.
        mint: String,
        /// The mint's program.
        token_program: TokenProgram,
        /// The associated token account a payment must credit.
        expected: Pubkey,
    },
    /// `payTo` is itself a token account, not a wallet: payments must name
    /// the wallet that owns it. (Creating an associated token account for
    /// the token account would take payments nobody can spend.)
    PayToIsTokenAccount {
        /// The offer's network.
        network: String,
        /// The offer's `payTo`.
        pay_to: String,
        /// The offer's asset.
        mint: String,
        /// The mint of the token account `payTo` is.
        account_mint: Pubkey,
        /// The wallet that owns it.
        wallet: Pubkey,
    },
    /// The associated token account exists but is frozen: transfers into
    /// it fail.
    FrozenAccount {
        /// The offer's network.
        network: String,
        /// The offer's `payTo`.
        pay_to: String,
        /// The offer's asset.
        mint: String,
        /// The frozen account.
        account: Pubkey,
    },
    /// The account at the associated token address is not an initialised
    /// token account of `payTo` for the mint.
    NotATokenAccount {
        /// The offer's network.
        network: String,
        /// The offer's `payTo`.
        pay_to: String,
        /// The offer's asset.
        mint: String,
        /// The account.
        account: Pubkey,
        /// Its owner program.
        owner: String,
    },
    /// The mint does not exist on the node's cluster.
    MintNotFound {
        /// The offer's network.
        network: String,
        /// The offer's `payTo`.
        pay_to: String,
        /// The offer's asset.
        mint: String,
    },
    /// The asset is an account owned by neither token program.
    NotAMint {
        /// The offer's network.
        network: String,
        /// The offer's `payTo`.
        pay_to: String,
        /// The offer's asset.
        mint: String,
        /// The program that owns the account.
        owner: String,
    },
    /// `payTo` or the asset is not a Solana address.
    InvalidAddress {
        /// The offer's network.
        network: String,
        /// The offer's `payTo`.
        pay_to: String,
        /// The offer's asset.
        mint: String,
        /// `payTo` or `asset`.
        field: &'static str,
        /// Why.
        reason: crate::svm::AddressError,
    },
}

impl ReceivingAccountProblem {
    /// The offer's network.
    pub fn network(&self) -> &str {
        self.offer().0
    }

    /// The offer's `payTo`.
    pub fn pay_to(&self) -> &str {
        self.offer().1
    }

    /// The offer's asset (mint).
    pub fn mint(&self) -> &str {
        self.offer().2
    }

    fn offer(&self) -> (&str, &str, &str) {
        match self {
            Self::MissingAccount {
                network,
                pay_to,
                mint,
                ..
            }
            | Self::PayToIsTokenAccount {
                network,
                pay_to,
                mint,
                ..
            }
            | Self::FrozenAccount {
                network,
                pay_to,
                mint,
                ..
            }
            | Self::NotATokenAccount {
                network,
                pay_to,
                mint,
                ..
            }
            | Self::MintNotFound {
                network,
                pay_to,
                mint,
            }
            | Self::NotAMint {
                network,
                pay_to,
                mint,
                ..
            }
            | Self::InvalidAddress {
                network,
                pay_to,
                mint,
                ..
            } => (network, pay_to, mint),
        }
    }
}

impl fmt::Display for ReceivingAccountProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (network, pay_to, mint) = self.offer();
        match self {
            Self::MissingAccount {
                token_program,
                expected,
                ..
            } => write!(
                f,
                "{network}: no token account for payTo {pay_to} and mint {mint} (expected \
                 associated token account {expected}, {token_program}); create it before \
                 taking payments"
            ),
            Self::PayToIsTokenAccount {
                account_mint,
                wallet,
                ..
            } => write!(
                f,
                "{network}: payTo {pay_to} is a token account (of mint {account_mint}, owned by \
                 {wallet}), not a wallet; set payTo to the owner wallet {wallet}"
            ),
            Self::FrozenAccount { account, .. } => write!(
                f,
                "{network}: the token account {account} of payTo {pay_to} for mint {mint} is \
                 frozen; transfers into it fail"
            ),
            Self::NotATokenAccount { account, owner, .. } => write!(
                f,
                "{network}: the account {account} at payTo {pay_to}'s associated token address \
                 for mint {mint} is not its initialised token account (owner program {owner})"
            ),
            Self::MintNotFound { .. } => write!(
                f,
                "{network}: mint {mint} (offer to payTo {pay_to}) does not exist on this \
                 cluster; check the offer's asset"
            ),
            Self::NotAMint { owner, .. } => write!(
                f,
                "{network}: asset {mint} (offer to payTo {pay_to}) is not a token mint (its \
                 owner program is {owner})"
            ),
            Self::InvalidAddress { field, reason, .. } => {
                let value = if *field == "payTo" { pay_to } else { mint };
                write!(
                    f,
                    "{network}: {field} {value:?} is not a Solana address: {reason}"
                )
            }
        }
    }
}

/// Why the receiving accounts check refused, or could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceivingAccountError {
    /// Problems were found, in [`CheckMode::Refuse`].
    #[error("x402: Solana receiving accounts cannot take payments: {}", join(.0))]
    Refused(Vec<ReceivingAccountProblem>),
    /// The node could not be asked, or answered nonsense: nothing is known
    /// about the accounts.
    #[error(
        "x402: could not check the Solana receiving accounts of {network}: RPC {endpoint}: {reason}"
    )]
    Rpc {
        /// The node, as `scheme://host[:port]`.
        endpoint: String,
        /// The network whose offers were being checked.
        network: String,
        /// What went wrong.
        reason: String,
    },
    /// The RPC URL is not an `http` or `https` URL.
    #[error("x402: the Solana RPC URL for {network} is not an http(s) URL ({endpoint})")]
    InvalidRpcUrl {
        /// The network it was given for.
        network: String,
        /// The URL, as `scheme://host[:port]`.
        endpoint: String,
    },
    /// The node serves another cluster than the offer's network.
    #[error(
        "x402: the Solana RPC {endpoint} serves the cluster with genesis hash {genesis_hash}, \
         not {network}; give that network its own RPC (ReceivingAccounts::network_rpc)"
    )]
    WrongCluster {
        /// The offer's network.
        network: String,
        /// The node, as `scheme://host[:port]`.
        endpoint: String,
        /// The node's genesis hash.
        genesis_hash: String,
    },
}

pub(super) fn join(problems: &[ReceivingAccountProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
