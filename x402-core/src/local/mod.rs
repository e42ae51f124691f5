#![doc = include_str!("README.md")]

use std::{
    collections::BTreeMap,
    fmt,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use alloy_primitives::{Address, B256, U256};
use async_trait::async_trait;

use crate::{
    evm::{check, EvmPayload, ExactEvmPayload},
    facilitator::{Facilitator, FacilitatorError, OtherError},
    money::AtomicAmount,
    network,
    proto::{
        FacilitatorRequest, SettleResponse, SupportedKind, SupportedResponse, VerifyResponse,
        X402Version,
    },
};

#[cfg(feature = "chain")]
mod chain;
mod dev;
mod eip3009;
mod permit2;
#[cfg(feature = "chain")]
mod transport;

#[cfg(feature = "chain")]
#[cfg_attr(docsrs, doc(cfg(feature = "chain")))]
pub use self::chain::{ChainLedger, ChainLedgerError};
pub use self::dev::{DevLedger, DevLedgerError, DEV_LEDGER_SIGNER};
use self::eip3009::CheckedEip3009;
use self::permit2::CheckedPermit2;
pub use self::permit2::Permit2Transfer;

mod clock;
mod facilitator;
mod ledger;
pub use crate::evm::reason;

pub use self::clock::*;
pub use self::facilitator::*;
pub use self::ledger::*;
