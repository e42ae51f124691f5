//! A secp256k1 signer for tests, backed by `alloy-signer-local` (a
//! dev-dependency): EIP-712 digests signed as a wallet would.

use alloy_primitives::{keccak256, Address, Bytes, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;

/// A test key.
#[derive(Debug)]
pub(crate) struct TestSigner {
    inner: PrivateKeySigner,
}

impl TestSigner {
    /// The key with this secret scalar (in `1..n`).
    pub(crate) fn new(secret: U256) -> Self {
        let inner = PrivateKeySigner::from_bytes(&B256::from(secret.to_be_bytes::<32>()))
            .expect("secret in 1..n");
        Self { inner }
    }

    /// A key derived from arbitrary seed bytes.
    pub(crate) fn from_seed(seed: &[u8]) -> Self {
        let mut material = keccak256(seed);
        // keccak256 output is a valid scalar with overwhelming probability;
        // rehash in the astronomically rare other case.
        loop {
            if let Ok(inner) = PrivateKeySigner::from_bytes(&material) {
                return Self { inner };
            }
            material = keccak256(material);
        }
    }

    /// The key's address.
    pub(crate) fn address(&self) -> Address {
        self.inner.address()
    }

    /// Signs a digest: 65 bytes `r || s || v`, low `s`, `v` 27 or 28.
    pub(crate) fn sign(&self, digest: B256) -> Bytes {
        let signature = self
            .inner
            .sign_hash_sync(&digest)
            .expect("signing a digest");
        Bytes::from(signature.as_bytes().to_vec())
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{address, uint, Signature};

    use super::*;

    #[test]
    fn known_keys_have_known_addresses() {
        assert_eq!(
            TestSigner::new(U256::from(1u8)).address(),
            address!("7E5F4552091A69125d5DfCb7b8C2659029395Bdf")
        );
        // The first Hardhat/Anvil development account.
        let anvil = uint!(0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80_U256);
        assert_eq!(
            TestSigner::new(anvil).address(),
            address!("f39Fd6e51aad88F6F4ce6aB8827279cffFb92266")
        );
    }

    #[test]
    fn signatures_recover_with_alloy() {
        let signer = TestSigner::from_seed(b"test");
        for i in 0u8..4 {
            let digest = keccak256([i]);
            let sig = signer.sign(digest);
            assert_eq!(sig.len(), 65);
            assert!(sig[64] == 27 || sig[64] == 28);
            let parsed = Signature::from_raw(&sig).unwrap();
            assert_eq!(
                parsed.recover_address_from_prehash(&digest).unwrap(),
                signer.address()
            );
            assert_eq!(
                crate::evm::recover_signer(digest, &sig),
                Ok(signer.address())
            );
        }
    }
}
