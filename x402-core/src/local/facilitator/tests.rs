use alloy_primitives::{address, Bytes};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use serde_json::json;

use super::*;
use crate::evm::{eip3009_domain, Eip3009Authorization};

const NETWORK: &str = "eip155:84532";
const TOKEN: Address = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
const SELLER: Address = address!("209693Bc6afc0C5328bA36FaF03C514EF312287C");
const NOW: u64 = 1_740_672_100;
/// A node's error text, with a URL carrying a key: it must never reach
/// an answer.
const NODE_TEXT: &str =
    "execution reverted: FiatTokenV2: invalid signature (https://rpc.example/v2/SECRETKEY)";

/// What the scripted ledger's `transfer` answers.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Refused {
        reason: &'static str,
        transaction: Option<&'static str>,
    },
    Unknown,
    Backend,
}

/// A ledger that approves every state check and answers `simulate` and
/// `transfer` as scripted, with [`NODE_TEXT`] as its detail.
#[derive(Debug)]
struct Scripted {
    simulate: Option<&'static str>,
    transfer: Answer,
}

#[async_trait]
impl Ledger for Scripted {
    fn signer(&self) -> Address {
        Address::repeat_byte(0x11)
    }

    fn check_network(&self, _: &str) -> Result<(), LedgerError> {
        Ok(())
    }

    async fn state(&self, _: &Transfer<'_>) -> Result<LedgerState, LedgerError> {
        Ok(LedgerState::new(false, U256::from(1_000_000u64)))
    }

    async fn simulate(&self, _: &Transfer<'_>) -> Result<Option<String>, LedgerError> {
        Ok(self.simulate.map(str::to_owned))
    }

    async fn transfer(&self, _: &Transfer<'_>) -> Result<TransferOutcome, LedgerError> {
        match self.transfer {
            Answer::Refused {
                reason,
                transaction,
            } => Ok(TransferOutcome::Refused {
                reason: reason.to_owned(),
                message: Some(NODE_TEXT.to_owned()),
                transaction: transaction.map(str::to_owned),
            }),
            Answer::Unknown => Err(LedgerError::SettlementUnknown {
                transaction: Some("0xabc".to_owned()),
                source: NODE_TEXT.into(),
            }),
            Answer::Backend => Err(LedgerError::Backend(NODE_TEXT.into())),
        }
    }
}

fn facilitator(simulate: Option<&'static str>, transfer: Answer) -> LocalFacilitator {
    LocalFacilitator::builder(Scripted { simulate, transfer })
        .network(NETWORK)
        .clock(FixedClock(NOW))
        .build()
        .unwrap()
}

/// A v2 `exact` request for 1000 units, signed by a fixed key.
fn request() -> FacilitatorRequest {
    let key = PrivateKeySigner::from_bytes(&B256::repeat_byte(7)).unwrap();
    let authorization = Eip3009Authorization {
        from: key.address(),
        to: SELLER,
        value: AtomicAmount::from(1_000u64),
        valid_after: U256::from(NOW - 600),
        valid_before: U256::from(NOW + 300),
        nonce: B256::repeat_byte(9),
    };
    let domain = eip3009_domain("USDC", "2", 84532, TOKEN);
    let signature = key
        .sign_hash_sync(&authorization.signing_hash(&domain))
        .unwrap();
    let payload = ExactEvmPayload {
        signature: Bytes::from(signature.as_bytes().to_vec()),
        authorization,
    };
    let requirements = json!({
        "scheme": "exact",
        "network": NETWORK,
        "amount": "1000",
        "asset": TOKEN.to_checksum(None),
        "payTo": SELLER.to_checksum(None),
        "maxTimeoutSeconds": 300,
        "extra": {"name": "USDC", "version": "2"},
    });
    serde_json::from_value(json!({
        "x402Version": 2,
        "paymentPayload": {
            "x402Version": 2,
            "accepted": requirements,
            "payload": serde_json::to_value(payload).unwrap(),
        },
        "paymentRequirements": requirements,
    }))
    .unwrap()
}

/// Everything an answer shows, as JSON text.
fn shown(answer: &impl serde::Serialize) -> String {
    let text = serde_json::to_string(answer).unwrap();
    for leak in ["FiatToken", "invalid signature", "SECRETKEY", "rpc.example"] {
        assert!(!text.contains(leak), "{leak:?} leaked in {text}");
    }
    text
}

#[tokio::test]
async fn a_ledger_refusal_answers_its_reason_code_and_never_its_message() {
    let refused = Answer::Refused {
        reason: reason::TRANSACTION_FAILED,
        transaction: None,
    };
    let receipt = facilitator(None, refused).settle(&request()).await.unwrap();
    shown(&receipt);
    assert!(!receipt.success);
    assert_eq!(
        receipt.error_reason.as_deref(),
        Some(reason::TRANSACTION_FAILED)
    );
    assert_eq!(
        receipt.error_message.as_deref(),
        Some("the ledger refused the transfer; nothing was sent")
    );
    assert_eq!(receipt.transaction, "");
    assert!(receipt.payer.is_some());

    // A mined revert keeps its transaction hash (the ledger's own).
    let reverted = Answer::Refused {
        reason: reason::TRANSACTION_FAILED,
        transaction: Some("0xdef"),
    };
    let receipt = facilitator(None, reverted)
        .settle(&request())
        .await
        .unwrap();
    shown(&receipt);
    assert_eq!(receipt.transaction, "0xdef");
    assert_eq!(
        receipt.error_message.as_deref(),
        Some("the settlement transaction did not move the tokens")
    );
}

#[tokio::test]
async fn a_ledger_reason_that_is_not_a_code_is_answered_as_transaction_failed() {
    for odd in [
        "rpc error: nonce too low",
        "Insufficient funds",
        "",
        "a_code_that_is_far_too_long_to_be_one_of_ours_because_it_goes_on_and_on",
    ] {
        let answer = Answer::Refused {
            reason: odd,
            transaction: None,
        };
        let receipt = facilitator(None, answer).settle(&request()).await.unwrap();
        assert_eq!(
            receipt.error_reason.as_deref(),
            Some(reason::TRANSACTION_FAILED),
            "{odd:?}"
        );
        assert!(odd.is_empty() || !shown(&receipt).contains(odd), "{odd:?}");
    }
    // A ledger's own code is kept.
    let answer = Answer::Refused {
        reason: reason::NONCE_USED,
        transaction: None,
    };
    let receipt = facilitator(None, answer).settle(&request()).await.unwrap();
    assert_eq!(receipt.error_reason.as_deref(), Some(reason::NONCE_USED));
}

#[tokio::test]
async fn an_unknown_outcome_is_an_error_never_a_refusal() {
    for answer in [Answer::Unknown, Answer::Backend] {
        let Err(error) = facilitator(None, answer).settle(&request()).await else {
            panic!("{answer:?} must be an error: the engine's settlement_unknown");
        };
        let display = error.to_string();
        assert!(!display.contains("FiatToken"), "{display}");
        assert!(!display.contains("SECRETKEY"), "{display}");
        let FacilitatorError::Other(OtherError(inner)) = &error else {
            panic!("{error:?}");
        };
        let ledger = inner.downcast_ref::<LedgerError>().unwrap();
        match (answer, ledger) {
            (
                Answer::Unknown,
                LedgerError::SettlementUnknown {
                    transaction: Some(hash),
                    ..
                },
            ) => assert_eq!(hash, "0xabc"),
            (Answer::Backend, LedgerError::Backend(_)) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        LedgerError::SettlementUnknown {
            transaction: None,
            source: NODE_TEXT.into(),
        }
        .to_string(),
        "the settlement transaction may have been sent; its outcome is unknown"
    );
}

#[tokio::test]
async fn a_dry_run_refusal_answers_a_fixed_message() {
    let settled = Answer::Refused {
        reason: reason::TRANSACTION_FAILED,
        transaction: None,
    };
    let verdict = facilitator(Some(NODE_TEXT), settled)
        .verify(&request())
        .await
        .unwrap();
    shown(&verdict);
    assert!(!verdict.is_valid);
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some(reason::SIMULATION_FAILED)
    );
    assert_eq!(
        verdict.invalid_message.as_deref(),
        Some("the token refused the transfer in a dry run")
    );
    // A reason code from the ledger is kept as the message.
    let verdict = facilitator(Some(reason::PERMIT2_PROXY_NOT_DEPLOYED), settled)
        .verify(&request())
        .await
        .unwrap();
    assert_eq!(
        verdict.invalid_message.as_deref(),
        Some(reason::PERMIT2_PROXY_NOT_DEPLOYED)
    );
    // No dry-run refusal: valid.
    let verdict = facilitator(None, settled).verify(&request()).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
}

#[test]
fn reason_codes_have_one_shape() {
    for code in [
        reason::TRANSACTION_FAILED,
        reason::UPTO_TRANSACTION_FAILED,
        reason::PERMIT2_PROXY_NOT_DEPLOYED,
        reason::UNDEPLOYED_SMART_WALLET,
    ] {
        assert!(is_reason_code(code), "{code}");
    }
    for text in [
        "",
        "nonce too low",
        "Nonce_too_low",
        "already-known",
        "x402: error",
        NODE_TEXT,
    ] {
        assert!(!is_reason_code(text), "{text}");
    }
    assert!(!is_reason_code(&"a".repeat(65)));
}
