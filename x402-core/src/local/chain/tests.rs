use super::*;

#[test]
fn redact_drops_path_and_credentials() {
    assert_eq!(
        redact("https://user:pw@rpc.example/v2/SECRETKEY?x=1"),
        "https://rpc.example"
    );
    assert_eq!(redact("http://127.0.0.1:8545"), "http://127.0.0.1:8545");
}

#[test]
fn http_urls_and_bare_addresses_get_the_redacting_transport() {
    let http = |s: &str| http_url(s).map(String::from);
    assert_eq!(
        http(" https://rpc.example/v2/KEY?x=1 ").as_deref(),
        Some("https://rpc.example/v2/KEY?x=1")
    );
    assert_eq!(
        http("localhost:8545").as_deref(),
        Some("http://localhost:8545/")
    );
    assert_eq!(
        http("127.0.0.1:8545").as_deref(),
        Some("http://127.0.0.1:8545/")
    );
    assert_eq!(http("[::1]:8545").as_deref(), Some("http://[::1]:8545/"));
    for other in [
        "ws://127.0.0.1:8546",
        "wss://node.example/KEY",
        "/tmp/geth.ipc",
        "",
        "http://",
    ] {
        assert_eq!(http(other), None, "{other:?}");
    }
}

#[test]
fn urls_in_error_text_lose_path_query_and_credentials() {
    assert_eq!(
        redact_urls(
            "error sending request for url (https://base.example/v2/SECRETKEY?k=1): \
             see wss://u:SECRET@node.example:8546/ws, or <http://x.example/a>"
        ),
        "error sending request for url (https://base.example): \
         see wss://node.example:8546, or <http://x.example>"
    );
    assert_eq!(redact_urls("no url here"), "no url here");
    assert_eq!(redact_urls("ends with ://"), "ends with ://");
}

/// Answers to `eth_sendRawTransaction` that leave open whether the
/// transaction, a copy of it, or one with its nonce is pending or mined:
/// `(code, message)` in the wording of several nodes.
const MAYBE_SENT_ANSWERS: &[(i64, &str)] = &[
    // geth
    (-32000, "already known"),
    (-32000, "nonce too low"),
    (-32000, "nonce too low: address 0x70997970C51812dc3A010C7d01b50e0d17dc79C8, tx: 3 state: 4"),
    (-32000, "replacement transaction underpriced"),
    (-32000, "insufficient funds for gas * price + value: address 0x7099 have 0 want 21000"),
    (-32000, "transaction underpriced"),
    (-32000, "txpool is full"),
    (-32000, "exceeds block gas limit"),
    (-32000, "max fee per gas less than block base fee: address 0x7099, maxFeePerGas: 1, baseFee: 7"),
    (-32000, "future transaction tries to replace pending"),
    (-32000, "address already reserved"),
    // anvil (foundry)
    (-32003, "transaction already imported"),
    (-32003, "nonce too low"),
    (-32003, "replacement transaction underpriced"),
    (-32003, "Insufficient funds for gas * price + value"),
    (-32003, "max fee per gas less than block base fee"),
    // reth
    (-32003, "already known"),
    (-32003, "nonce too low: next nonce 4, tx nonce 3"),
    (-32003, "insufficient funds for gas * price + value: have 0 want 21000"),
    (-32003, "transaction underpriced"),
    // erigon
    (-32000, "INTERNAL_ERROR: existing tx with same hash"),
    (-32000, "ALREADY_KNOWN"),
    (-32000, "NONCE_TOO_LOW"),
    (-32000, "could not replace existing tx"),
    (-32000, "mined"),
    (-32000, "insufficient funds"),
    (-32000, "underpriced"),
    // nethermind (older results by name, newer in geth's words)
    (-32010, "AlreadyKnown"),
    (-32010, "OldNonce, Current nonce: 4, nonce of rejected tx: 3"),
    (-32010, "ReplacementNotAllowed"),
    (-32010, "InsufficientFunds, Account balance: 0, cumulative cost: 21000"),
    (-32010, "FeeTooLow"),
    (-32010, "already known"),
    (-32010, "nonce too low"),
    // besu
    (-32000, "Known transaction"),
    (-32001, "Nonce too low"),
    (-32000, "Replacement transaction underpriced"),
    (-32004, "Upfront cost exceeds account balance"),
    (-32009, "Gas price below configured minimum gas price"),
    (-32000, "Transaction gas limit exceeds block gas limit"),
    // openethereum / parity
    (-32010, "Transaction with the same hash was already imported."),
    (-32010, "Transaction nonce is too low. Try incrementing the nonce."),
    (-32010, "Transaction gas price supplied is too low. There is another transaction with same nonce in the queue."),
    // hosted endpoints, proxies, other chains
    (-32005, "daily request count exceeded, request rate limited"),
    (429, "Too Many Requests"),
    (-32603, "internal error"),
    (-32000, "tx already exist"),
    (-32000, "transaction already in mempool"),
    (3, "execution reverted: FiatTokenV2: authorization is used or canceled"),
    (-32000, ""),
    (0, "something no node has ever said"),
    // ambiguity wins over a content word in the same answer
    (-32000, "invalid sender: nonce too low"),
    (-32601, "nonce too low"),
];

/// Answers after which the transaction certainly cannot be mined.
const REFUSED_ANSWERS: &[(i64, &str)] = &[
    // geth / reth
    (-32000, "invalid sender"),
    (-32000, "intrinsic gas too low"),
    (-32000, "oversized data"),
    (-32000, "negative value"),
    (-32000, "transaction type not supported"),
    (
        -32000,
        "tx fee (1.25 ether) exceeds the configured cap (1.00 ether)",
    ),
    (
        -32000,
        "only replay-protected (EIP-155) transactions allowed over RPC",
    ),
    (-32000, "rlp: expected input list for types.DynamicFeeTx"),
    (-32000, "invalid chain id for signer: have 1 want 84532"),
    (-32003, "max initcode size exceeded"),
    // anvil
    (-32003, "invalid chain id for signer"),
    (-32000, "intrinsic gas too low"),
    (-32602, "Failed to decode transaction"),
    // erigon
    (-32000, "INVALID_SENDER"),
    (
        -32000,
        "fork supporting this transaction type is not activated yet",
    ),
    (-32000, "initcode too large"),
    // nethermind
    (-32010, "failed to recover sender"),
    (-32010, "transaction too large"),
    (-32010, "unsupported transaction type"),
    // besu
    (-32000, "Invalid signature"),
    (-32000, "Wrong chainId"),
    (-32003, "Intrinsic gas exceeds gas limit"),
    (-32000, "Transaction fee cap exceeded"),
    // the call itself was not understood
    (-32700, "Parse error"),
    (-32600, "Invalid request"),
    (
        -32601,
        "the method eth_sendRawTransaction does not exist/is not available",
    ),
];

#[test]
fn broadcast_errors_that_may_hide_a_sent_transaction_are_unknown() {
    for &(code, message) in MAYBE_SENT_ANSWERS {
        assert_eq!(
            classify_broadcast_error(code, message),
            Broadcast::MaybeSent,
            "{code} {message:?}"
        );
    }
}

#[test]
fn only_errors_about_the_transaction_itself_are_refusals() {
    for &(code, message) in REFUSED_ANSWERS {
        assert_eq!(
            classify_broadcast_error(code, message),
            Broadcast::Refused,
            "{code} {message:?}"
        );
    }
}

#[test]
fn words_break_on_case_and_punctuation() {
    assert_eq!(words("AlreadyKnown"), " already known ");
    assert_eq!(words("ALREADY_KNOWN"), " already known ");
    assert_eq!(words("Wrong chainId!"), " wrong chain id ");
    assert_eq!(
        words("  replay-protected (EIP-155) "),
        " replay protected eip 155 "
    );
    assert_eq!(words(""), " ");
    // Phrases match at word starts only: "mined" is not in
    // "undetermined", nor "known transaction" in "unknown transaction".
    assert_eq!(
        classify_broadcast_error(-32000, "invalid sender (undetermined)"),
        Broadcast::Refused
    );
    assert_eq!(
        classify_broadcast_error(-32000, "invalid signature on unknown transaction"),
        Broadcast::Refused
    );
}

#[tokio::test]
async fn node_errors_never_show_the_rpc_url_path() {
    // Nothing listens on port 1: the connection is refused.
    let url = "http://127.0.0.1:1/v2/SECRETKEY?apikey=SECRETQUERY";
    let key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
    let Err(error) = ChainLedger::new(url, key).await else {
        panic!("a node on port 1 answered");
    };
    let mut chain = format!("{error} {error:?}");
    let mut source = std::error::Error::source(&error);
    while let Some(e) = source {
        chain.push_str(&format!(" {e} {e:?}"));
        source = e.source();
    }
    assert!(!chain.contains("SECRET"), "{chain}");
    assert!(chain.contains("127.0.0.1:1"), "{chain}");
}
