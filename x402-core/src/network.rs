//! Networks: CAIP-2 ids, version 1 names, and default stablecoins.
//!
//! Version 2 names networks by CAIP-2 id (`eip155:84532`); version 1 by short
//! name (`base-sepolia`). [`KNOWN_NETWORKS`] maps the two both ways and says
//! which v1 names the strict legacy v1 clients accept: a challenge row on any
//! other network would make those clients reject the whole challenge.
//!
//! ```
//! use x402_core::network;
//!
//! assert_eq!(network::v1_name("eip155:84532"), Some("base-sepolia"));
//! assert_eq!(network::caip2("base-sepolia"), Some("eip155:84532"));
//! assert_eq!(network::evm_chain_id("eip155:8453"), Some(8453));
//! assert!(!network::legacy_v1_accepts("eip155:1"));
//! let usdc = network::default_stablecoin("eip155:84532").unwrap();
//! assert_eq!((usdc.eip712_name, usdc.decimals), ("USDC", 6));
//! ```

/// A network both protocol versions can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownNetwork {
    /// The CAIP-2 id.
    pub caip2: &'static str,
    /// The version 1 name.
    pub v1_name: &'static str,
    /// Whether the strict legacy v1 clients accept the v1 name.
    pub legacy_v1_client: bool,
    /// Whether it is a mainnet (real money).
    pub mainnet: bool,
}

const fn net(
    caip2: &'static str,
    v1_name: &'static str,
    legacy: bool,
    mainnet: bool,
) -> KnownNetwork {
    KnownNetwork {
        caip2,
        v1_name,
        legacy_v1_client: legacy,
        mainnet,
    }
}

/// Solana mainnet's CAIP-2 id.
pub const SOLANA_MAINNET: &str = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp";
/// Solana devnet's CAIP-2 id.
pub const SOLANA_DEVNET: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
/// Solana testnet's CAIP-2 id.
pub const SOLANA_TESTNET: &str = "solana:4uhcVJyU9pJkvQyS88uRDiswHXSCkY3z";

/// Every network with a version 1 name (spec §2.6).
pub const KNOWN_NETWORKS: &[KnownNetwork] = &[
    net("eip155:84532", "base-sepolia", true, false),
    net("eip155:8453", "base", true, true),
    net("eip155:43113", "avalanche-fuji", true, false),
    net("eip155:43114", "avalanche", true, true),
    net("eip155:4689", "iotex", true, true),
    net("eip155:1329", "sei", true, true),
    net("eip155:1328", "sei-testnet", true, false),
    net("eip155:137", "polygon", true, true),
    net("eip155:80002", "polygon-amoy", true, false),
    net("eip155:3338", "peaq", true, true),
    net("eip155:1514", "story", true, true),
    net("eip155:41923", "educhain", true, true),
    net("eip155:324705682", "skale-base-sepolia", true, false),
    net("eip155:2741", "abstract", true, true),
    net("eip155:11124", "abstract-testnet", true, false),
    net("eip155:1", "ethereum", false, true),
    net("eip155:11155111", "sepolia", false, false),
    net("eip155:4326", "megaeth", false, true),
    net("eip155:143", "monad", false, true),
    net("eip155:988", "stable", false, true),
    net("eip155:2201", "stable-testnet", false, false),
    net(SOLANA_MAINNET, "solana", true, true),
    net(SOLANA_DEVNET, "solana-devnet", true, false),
    net(SOLANA_TESTNET, "solana-testnet", false, false),
];

/// The entry for a network named either way.
pub fn lookup(network: &str) -> Option<&'static KnownNetwork> {
    KNOWN_NETWORKS
        .iter()
        .find(|n| n.caip2 == network || n.v1_name == network)
}

/// The version 1 name of a CAIP-2 id.
pub fn v1_name(caip2: &str) -> Option<&'static str> {
    KNOWN_NETWORKS
        .iter()
        .find(|n| n.caip2 == caip2)
        .map(|n| n.v1_name)
}

/// The CAIP-2 id of a version 1 name.
pub fn caip2(v1_name: &str) -> Option<&'static str> {
    KNOWN_NETWORKS
        .iter()
        .find(|n| n.v1_name == v1_name)
        .map(|n| n.caip2)
}

/// The CAIP-2 id of a network named either way (`eip155:84532` or
/// `base-sepolia`); an unknown version 1 name as it is.
pub fn canonical(network: &str) -> &str {
    if network.contains(':') {
        network
    } else {
        caip2(network).unwrap_or(network)
    }
}

/// Whether strict legacy v1 clients accept a challenge row on this network
/// (named by CAIP-2 id).
pub fn legacy_v1_accepts(caip2: &str) -> bool {
    KNOWN_NETWORKS
        .iter()
        .any(|n| n.caip2 == caip2 && n.legacy_v1_client)
}

/// The family of a network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Family {
    /// EVM chains (`eip155:*`).
    Evm,
    /// Solana (`solana:*`).
    Svm,
    /// Anything else.
    Other,
}

/// The family of a network named either way.
pub fn family(network: &str) -> Family {
    let caip = canonical(network);
    if caip.starts_with("eip155:") {
        Family::Evm
    } else if caip.starts_with("solana:") {
        Family::Svm
    } else {
        Family::Other
    }
}

/// The EVM chain id of a network named either way (`eip155:84532` or
/// `base-sepolia`).
pub fn evm_chain_id(network: &str) -> Option<u64> {
    let id = canonical(network).strip_prefix("eip155:")?;
    if id.is_empty()
        || id.len() > 20
        || !id.bytes().all(|b| b.is_ascii_digit())
        || id.starts_with('0')
    {
        return None;
    }
    id.parse().ok()
}

/// Whether a network is known to be a mainnet. Unknown EVM chains count as
/// mainnets unless they are well-known development chain ids (31337, 1337),
/// so that a dev ledger never pretends to settle on real money.
pub fn is_mainnet(network: &str) -> bool {
    match lookup(network) {
        Some(n) => n.mainnet,
        None => !matches!(evm_chain_id(network), Some(31337 | 1337)),
    }
}

/// Whether a CAIP-2 pattern (`eip155:*` or an exact id) covers a network.
pub fn pattern_matches(pattern: &str, network: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => network.starts_with(prefix),
        None => pattern == network,
    }
}

/// How an EVM token moves under the `exact` scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransferMethod {
    /// EIP-3009 `transferWithAuthorization`.
    Eip3009,
    /// Permit2 `permitWitnessTransferFrom` through the x402 proxy.
    Permit2,
    /// An SPL token transfer (Solana).
    Spl,
}

/// A network's default stablecoin, used when a seller prices in dollars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stablecoin {
    /// The CAIP-2 network id.
    pub network: &'static str,
    /// Token contract or mint.
    pub address: &'static str,
    /// EIP-712 domain `name` (`""` off EVM).
    pub eip712_name: &'static str,
    /// EIP-712 domain `version` (`""` off EVM).
    pub eip712_version: &'static str,
    /// Decimals.
    pub decimals: u8,
    /// How it is transferred.
    pub transfer_method: TransferMethod,
}

const fn coin(
    network: &'static str,
    address: &'static str,
    eip712_name: &'static str,
    eip712_version: &'static str,
    decimals: u8,
    transfer_method: TransferMethod,
) -> Stablecoin {
    Stablecoin {
        network,
        address,
        eip712_name,
        eip712_version,
        decimals,
        transfer_method,
    }
}

/// Default stablecoins by network (spec §3.7). Note that Base mainnet USDC's
/// EIP-712 name is `USD Coin` while Base Sepolia's is `USDC`.
pub const DEFAULT_STABLECOINS: &[Stablecoin] = &[
    coin(
        "eip155:8453",
        "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        "USD Coin",
        "2",
        6,
        TransferMethod::Eip3009,
    ),
    coin(
        "eip155:84532",
        "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        "USDC",
        "2",
        6,
        TransferMethod::Eip3009,
    ),
    coin(
        "eip155:137",
        "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359",
        "USD Coin",
        "2",
        6,
        TransferMethod::Eip3009,
    ),
    coin(
        "eip155:42161",
        "0xaf88d065e77c8cC2239327C5EDb3A432268e5831",
        "USD Coin",
        "2",
        6,
        TransferMethod::Eip3009,
    ),
    coin(
        "eip155:421614",
        "0x75faf114eafb1BDbe2F0316DF893fd58CE46AA4d",
        "USD Coin",
        "2",
        6,
        TransferMethod::Eip3009,
    ),
    coin(
        "eip155:143",
        "0x754704Bc059F8C67012fEd69BC8A327a5aafb603",
        "USD Coin",
        "2",
        6,
        TransferMethod::Eip3009,
    ),
    coin(
        "eip155:988",
        "0x779Ded0c9e1022225f8E0630b35a9b54bE713736",
        "USDT0",
        "1",
        6,
        TransferMethod::Eip3009,
    ),
    coin(
        "eip155:2201",
        "0x78Cf24370174180738C5B8E352B6D14c83a6c9A9",
        "USDT0",
        "1",
        6,
        TransferMethod::Eip3009,
    ),
    coin(
        "eip155:4326",
        "0xFAfDdbb3FC7688494971a79cc65DCa3EF82079E7",
        "MegaUSD",
        "1",
        18,
        TransferMethod::Permit2,
    ),
    coin(
        "eip155:31611",
        "0x118917a40FAF1CD7a13dB0Ef56C86De7973Ac503",
        "Mezo USD",
        "1",
        18,
        TransferMethod::Permit2,
    ),
    coin(
        SOLANA_MAINNET,
        "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
        "",
        "",
        6,
        TransferMethod::Spl,
    ),
    coin(
        SOLANA_DEVNET,
        "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU",
        "",
        "",
        6,
        TransferMethod::Spl,
    ),
    coin(
        SOLANA_TESTNET,
        "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU",
        "",
        "",
        6,
        TransferMethod::Spl,
    ),
];

/// The default stablecoin of a network named either way.
pub fn default_stablecoin(network: &str) -> Option<&'static Stablecoin> {
    let caip = if network.contains(':') {
        network
    } else {
        caip2(network)?
    };
    DEFAULT_STABLECOINS.iter().find(|c| c.network == caip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_both_ways() {
        for n in KNOWN_NETWORKS {
            assert_eq!(v1_name(n.caip2), Some(n.v1_name));
            assert_eq!(caip2(n.v1_name), Some(n.caip2));
        }
        assert_eq!(caip2("solana-devnet"), Some(SOLANA_DEVNET));
        assert_eq!(caip2("solana:devnet"), None);
        assert!(legacy_v1_accepts("eip155:84532"));
        assert!(!legacy_v1_accepts("eip155:11155111"));
        assert!(!legacy_v1_accepts(SOLANA_TESTNET));
        assert!(!legacy_v1_accepts("eip155:31337"));
    }

    #[test]
    fn chain_ids() {
        assert_eq!(evm_chain_id("eip155:84532"), Some(84532));
        assert_eq!(evm_chain_id("base"), Some(8453));
        assert_eq!(evm_chain_id("eip155:"), None);
        assert_eq!(evm_chain_id("eip155:01"), None);
        assert_eq!(evm_chain_id("eip155:-1"), None);
        assert_eq!(evm_chain_id("eip155:99999999999999999999999"), None);
        assert_eq!(evm_chain_id(SOLANA_MAINNET), None);
        assert_eq!(family("base-sepolia"), Family::Evm);
        assert_eq!(family("solana"), Family::Svm);
        assert_eq!(family("stellar:testnet"), Family::Other);
    }

    #[test]
    fn mainnets_are_known_or_assumed() {
        assert!(is_mainnet("eip155:8453"));
        assert!(!is_mainnet("eip155:84532"));
        assert!(!is_mainnet("eip155:31337"));
        assert!(is_mainnet("eip155:999999"));
    }

    #[test]
    fn patterns() {
        assert!(pattern_matches("eip155:*", "eip155:84532"));
        assert!(!pattern_matches("eip155:*", "solana:x"));
        assert!(pattern_matches("eip155:1", "eip155:1"));
        assert!(!pattern_matches("eip155:1", "eip155:10"));
    }
}
