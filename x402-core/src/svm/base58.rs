//! Base58 in Bitcoin's alphabet, the text form of Solana addresses: each
//! leading zero byte is a leading `1`, the rest is the big-endian number in
//! base 58.

/// The 58 digits, in order of value.
const ALPHABET: &[u8; 58] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/// The value of each ASCII byte as a digit, or `0xff`.
const DIGITS: [u8; 128] = {
    let mut digits = [0xff; 128];
    let mut i = 0;
    while i < ALPHABET.len() {
        digits[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    digits
};

/// `bytes` in base58.
pub(crate) fn encode(bytes: &[u8]) -> String {
    let zeros = bytes.iter().take_while(|&&b| b == 0).count();
    // Base-58 digits, least significant first.
    let mut digits: Vec<u8> = Vec::with_capacity(bytes.len() * 138 / 100 + 1);
    for &byte in &bytes[zeros..] {
        let mut carry = u32::from(byte);
        for digit in &mut digits {
            carry += u32::from(*digit) << 8;
            *digit = (carry % 58) as u8;
            carry /= 58;
        }
        while carry > 0 {
            digits.push((carry % 58) as u8);
            carry /= 58;
        }
    }
    let mut out = String::with_capacity(zeros + digits.len());
    out.extend(std::iter::repeat_n('1', zeros));
    out.extend(
        digits
            .iter()
            .rev()
            .map(|&d| char::from(ALPHABET[usize::from(d)])),
    );
    out
}

/// The bytes `text` encodes, or the first character that is no base58 digit
/// (with its index in characters).
pub(super) fn decode(text: &str) -> Result<Vec<u8>, (char, usize)> {
    // Bytes, most significant first, after the leading zeros.
    let mut bytes: Vec<u8> = Vec::with_capacity(text.len());
    let mut zeros = 0;
    let mut leading = true;
    for (index, c) in text.chars().enumerate() {
        let digit = u8::try_from(c)
            .ok()
            .and_then(|b| DIGITS.get(usize::from(b)))
            .copied()
            .filter(|&d| d != 0xff)
            .ok_or((c, index))?;
        if leading && digit == 0 {
            zeros += 1;
            continue;
        }
        leading = false;
        let mut carry = u32::from(digit);
        for byte in bytes.iter_mut().rev() {
            carry += u32::from(*byte) * 58;
            *byte = carry as u8;
            carry >>= 8;
        }
        while carry > 0 {
            bytes.insert(0, carry as u8);
            carry >>= 8;
        }
    }
    let mut out = vec![0; zeros];
    out.extend_from_slice(&bytes);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn known_encodings() {
        // The Bitcoin test vectors (base58_encode_decode.json of Bitcoin Core).
        let cases: [(&[u8], &str); 8] = [
            (b"", ""),
            (&[0x61], "2g"),
            (&[0x62, 0x62, 0x62], "a3gV"),
            (&[0x63, 0x63, 0x63], "aPEr"),
            (b"simply a long string", "2cFupjhnEsSn59qHXstmK2ffpLv2"),
            (&[0, 0, 0, 0x28, 0x7f, 0xb4, 0xcd], "111233QC4"),
            (&[0; 3], "111"),
            (&[0xff; 4], "7YXq9G"),
        ];
        for (bytes, text) in cases {
            assert_eq!(encode(bytes), text, "{bytes:?}");
            assert_eq!(decode(text), Ok(bytes.to_vec()), "{text:?}");
        }
    }

    #[test]
    fn rejects_characters_outside_the_alphabet() {
        for (text, bad, index) in [
            ("0", '0', 0),
            ("abcO", 'O', 3),
            ("I", 'I', 0),
            ("l1", 'l', 0),
            ("11+", '+', 2),
            ("a b", ' ', 1),
            ("é", 'é', 0),
        ] {
            assert_eq!(decode(text), Err((bad, index)), "{text:?}");
        }
    }

    proptest! {
        #[test]
        fn round_trips(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let text = encode(&bytes);
            prop_assert_eq!(decode(&text), Ok(bytes));
        }
    }
}
