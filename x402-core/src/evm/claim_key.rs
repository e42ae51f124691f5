//! Writing EVM claim keys (`x402:{network}:…`) without the formatting
//! machinery: one allocation of the right size, hex written by table.

use std::fmt::Write as _;

use alloy_primitives::{hex, U256};

/// A claim key being written: `x402:{network}`, then one `:`-separated
/// part per call.
pub(super) struct ClaimKeyWriter(String);

impl ClaimKeyWriter {
    /// `x402:{network}`, with room for `rest` more bytes.
    pub(super) fn new(network: &str, rest: usize) -> Self {
        let mut key = String::with_capacity(5 + network.len() + rest);
        key.push_str("x402:");
        key.push_str(network);
        Self(key)
    }

    /// `:{text}`.
    pub(super) fn text(&mut self, text: &str) {
        self.0.push(':');
        self.0.push_str(text);
    }

    /// `:0x{bytes}`, lowercase hex (at most 32 bytes).
    pub(super) fn hex(&mut self, bytes: &[u8]) {
        let mut buf = [0u8; 64];
        let out = &mut buf[..2 * bytes.len().min(32)];
        // The slice is exactly twice the input's length (inputs here are
        // addresses and 32-byte words), so this cannot fail.
        if hex::encode_to_slice(&bytes[..out.len() / 2], out).is_ok() {
            self.0.push_str(":0x");
            // Hex digits are ASCII.
            self.0
                .push_str(std::str::from_utf8(out).unwrap_or_default());
        }
    }

    /// `:{n}` in decimal.
    pub(super) fn decimal(&mut self, n: &U256) {
        self.0.push(':');
        // Writing to a String cannot fail.
        let _ = write!(self.0, "{n}");
    }

    pub(super) fn finish(self) -> String {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{address, b256, Address, B256};

    use super::*;

    #[test]
    fn writes_what_format_would() {
        let asset = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
        let from = address!("857b06519E91e3A54538791bDbb0E22373e36b66");
        let nonce = b256!("f3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480");
        let mut key = ClaimKeyWriter::new("eip155:84532", 0);
        key.hex(asset.as_slice());
        key.hex(from.as_slice());
        key.hex(nonce.as_slice());
        assert_eq!(
            key.finish(),
            format!("x402:eip155:84532:{asset:#x}:{from:#x}:{nonce:#x}")
        );
        let mut key = ClaimKeyWriter::new("eip155:1", 0);
        key.text("permit2");
        key.hex(Address::ZERO.as_slice());
        key.decimal(&U256::MAX);
        assert_eq!(
            key.finish(),
            format!("x402:eip155:1:permit2:{:#x}:{}", Address::ZERO, U256::MAX)
        );
        let mut key = ClaimKeyWriter::new("n", 0);
        key.hex(B256::ZERO.as_slice());
        key.decimal(&U256::ZERO);
        assert_eq!(key.finish(), format!("x402:n:{:#x}:0", B256::ZERO));
    }
}
