//! Solana addresses: their base58 text, whether they are ed25519 points,
//! program derived addresses and associated token accounts.

use std::{fmt, str::FromStr, sync::OnceLock};

use alloy_primitives::U256;
use sha2::{Digest as _, Sha256};

use super::base58;

/// A Solana address (an account's public key, or a program derived
/// address): 32 bytes, written in base58.
///
/// ```
/// use x402_core::svm::Pubkey;
///
/// let mint: Pubkey = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v".parse()?;
/// assert_eq!(mint.to_string(), "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v");
/// // An EVM address is no Solana address ('0' is no base58 digit).
/// assert!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C".parse::<Pubkey>().is_err());
/// # Ok::<(), x402_core::svm::AddressError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pubkey([u8; 32]);

/// The longest base58 text of 32 bytes.
const MAX_BASE58_LEN: usize = 44;

impl Pubkey {
    /// The address with these bytes.
    pub const fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The address's bytes.
    pub const fn to_bytes(&self) -> [u8; 32] {
        self.0
    }

    /// The address's bytes, borrowed.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Whether the bytes are the compressed form of a point of the ed25519
    /// curve, so that the address can be a wallet's public key. Program
    /// derived addresses, associated token accounts among them, are not.
    ///
    /// The same test as curve25519-dalek's
    /// `CompressedEdwardsY::decompress().is_some()`, which Solana uses: the
    /// low 255 bits, little-endian, are y (reduced modulo p = 2^255 - 19
    /// when they are not below it), the top bit is x's sign, and y is on the
    /// curve when (y² - 1) / (d·y² + 1) is a square modulo p. Like dalek,
    /// and unlike RFC 8032, a set sign bit with x = 0 is accepted.
    pub fn is_on_curve(&self) -> bool {
        is_on_curve(&self.0)
    }
}

impl From<[u8; 32]> for Pubkey {
    fn from(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl From<Pubkey> for [u8; 32] {
    fn from(address: Pubkey) -> Self {
        address.0
    }
}

impl AsRef<[u8]> for Pubkey {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Display for Pubkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&base58::encode(&self.0))
    }
}

impl fmt::Debug for Pubkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pubkey({self})")
    }
}

impl FromStr for Pubkey {
    type Err = AddressError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.len() > MAX_BASE58_LEN {
            return Err(AddressError::TooLong { len: text.len() });
        }
        let bytes = base58::decode(text)
            .map_err(|(character, index)| AddressError::InvalidCharacter { character, index })?;
        <[u8; 32]>::try_from(bytes.as_slice())
            .map(Self)
            .map_err(|_| AddressError::WrongLength { bytes: bytes.len() })
    }
}

/// Why a text is not a Solana address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    /// Longer than any base58 text of 32 bytes.
    #[error("{len} characters: too long for a Solana address (at most 44)")]
    TooLong {
        /// Its length, in bytes.
        len: usize,
    },
    /// A character outside the base58 alphabet (which has no `0`, `O`, `I`
    /// or `l`).
    #[error("{character:?} at character {index} is not a base58 digit")]
    InvalidCharacter {
        /// The character.
        character: char,
        /// Its index, in characters.
        index: usize,
    },
    /// Valid base58 that is not 32 bytes.
    #[error("decodes to {bytes} bytes, not 32")]
    WrongLength {
        /// How many bytes it decodes to.
        bytes: usize,
    },
}

/// Why [`create_program_address`] found no address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PdaError {
    /// More than [`MAX_SEEDS`] seeds, or one longer than [`MAX_SEED_LEN`].
    #[error("more than 16 seeds, or a seed longer than 32 bytes")]
    MaxSeedLengthExceeded,
    /// The hash is a point of the curve: not a valid program address.
    #[error("the derived address is on the ed25519 curve")]
    OnCurve,
}

/// The most seeds of a program derived address, the bump seed included.
pub const MAX_SEEDS: usize = 16;
/// The longest seed of a program derived address, in bytes.
pub const MAX_SEED_LEN: usize = 32;
/// What ends the hashed text of every program derived address.
const PDA_MARKER: &[u8; 21] = b"ProgramDerivedAddress";

/// The program address of `seeds` under `program_id`, as Solana's
/// `create_program_address`: `sha256(seed_1 ‖ … ‖ seed_n ‖ program_id ‖
/// "ProgramDerivedAddress")`, refused when it is on the curve (see
/// [`Pubkey::is_on_curve`]) or when the seeds are too many or too long.
pub fn create_program_address(seeds: &[&[u8]], program_id: &Pubkey) -> Result<Pubkey, PdaError> {
    if seeds.len() > MAX_SEEDS || seeds.iter().any(|seed| seed.len() > MAX_SEED_LEN) {
        return Err(PdaError::MaxSeedLengthExceeded);
    }
    let mut hasher = Sha256::new();
    for seed in seeds {
        hasher.update(seed);
    }
    hasher.update(program_id.0);
    hasher.update(PDA_MARKER);
    let address: [u8; 32] = hasher.finalize().into();
    if is_on_curve(&address) {
        return Err(PdaError::OnCurve);
    }
    Ok(Pubkey(address))
}

/// The program derived address of `seeds` under `program_id` and its bump
/// seed, as Solana's `try_find_program_address`: the first bump, from 255
/// down to 1 (Solana never tries 0), whose [`create_program_address`] of
/// `seeds ‖ [bump]` is off the curve. `None` when no bump works or the
/// seeds are too many (at most 15, the bump being the 16th) or too long.
pub fn find_program_address(seeds: &[&[u8]], program_id: &Pubkey) -> Option<(Pubkey, u8)> {
    for bump in (1..=u8::MAX).rev() {
        let bump_seed = [bump];
        let mut with_bump: Vec<&[u8]> = seeds.to_vec();
        with_bump.push(&bump_seed);
        match create_program_address(&with_bump, program_id) {
            Ok(address) => return Some((address, bump)),
            Err(PdaError::OnCurve) => {}
            Err(PdaError::MaxSeedLengthExceeded) => return None,
        }
    }
    None
}

/// The associated token account program,
/// `ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL`.
pub const ASSOCIATED_TOKEN_PROGRAM_ID: Pubkey = Pubkey([
    140, 151, 37, 143, 78, 36, 137, 241, 187, 61, 16, 41, 20, 142, 13, 131, 11, 90, 19, 153, 218,
    255, 16, 132, 4, 142, 123, 216, 219, 233, 248, 89,
]);
/// The SPL Token program, `TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA`.
pub const TOKEN_PROGRAM_ID: Pubkey = Pubkey([
    6, 221, 246, 225, 215, 101, 161, 147, 217, 203, 225, 70, 206, 235, 121, 172, 28, 180, 133, 237,
    95, 91, 55, 145, 58, 140, 245, 133, 126, 255, 0, 169,
]);
/// The Token-2022 (Token Extensions) program,
/// `TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb`.
pub const TOKEN_2022_PROGRAM_ID: Pubkey = Pubkey([
    6, 221, 246, 225, 238, 117, 143, 222, 24, 66, 93, 188, 228, 108, 205, 218, 182, 26, 252, 77,
    131, 185, 13, 39, 254, 189, 249, 40, 216, 161, 139, 252,
]);

/// The program that owns a mint and its token accounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenProgram {
    /// The SPL Token program ([`TOKEN_PROGRAM_ID`]), USDC's.
    Token,
    /// The Token-2022 program ([`TOKEN_2022_PROGRAM_ID`]).
    Token2022,
}

impl TokenProgram {
    /// The program's address.
    pub const fn id(self) -> Pubkey {
        match self {
            Self::Token => TOKEN_PROGRAM_ID,
            Self::Token2022 => TOKEN_2022_PROGRAM_ID,
        }
    }

    /// The program whose address this is.
    pub fn from_id(id: &Pubkey) -> Option<Self> {
        [Self::Token, Self::Token2022]
            .into_iter()
            .find(|p| p.id() == *id)
    }

    /// `Token program` or `Token-2022 program`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Token => "Token program",
            Self::Token2022 => "Token-2022 program",
        }
    }
}

impl fmt::Display for TokenProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The associated token account of `owner` for `mint`: the account an
/// `exact` payment's transfer must credit, the program derived address of
/// `[owner, token program, mint]` under [`ASSOCIATED_TOKEN_PROGRAM_ID`]
/// (as `getAssociatedTokenAddressSync` of `@solana/spl-token`, with owners
/// off the curve allowed).
///
/// ```
/// use x402_core::svm::{associated_token_address, Pubkey, TokenProgram};
///
/// let owner: Pubkey = "3h1zGmCwsRJnVk5BuRNMLsPaQu1y2aqXqXDWYCgrp5UG".parse()?;
/// let usdc: Pubkey = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v".parse()?;
/// assert_eq!(
///     associated_token_address(&owner, &usdc, TokenProgram::Token).to_string(),
///     "3uetDDizgTtadDHZzyy9BqxrjQcozMEkxzbKhfZF4tG3",
/// );
/// # Ok::<(), x402_core::svm::AddressError>(())
/// ```
///
/// # Panics
///
/// When none of the 255 bump seeds gives an address off the curve, as
/// Solana's `find_program_address` does: each is off with probability about
/// one half, so this never happens in practice.
pub fn associated_token_address(owner: &Pubkey, mint: &Pubkey, program: TokenProgram) -> Pubkey {
    associated_token_address_and_bump(owner, mint, program).0
}

/// [`associated_token_address`] with its bump seed.
#[allow(clippy::expect_used)]
pub(super) fn associated_token_address_and_bump(
    owner: &Pubkey,
    mint: &Pubkey,
    program: TokenProgram,
) -> (Pubkey, u8) {
    let seeds: [&[u8]; 3] = [&owner.0, &program.id().0, &mint.0];
    // Three 32-byte seeds are within the limits, so only a run of 255 bumps
    // on the curve (probability 2^-255) could leave nothing.
    find_program_address(&seeds, &ASSOCIATED_TOKEN_PROGRAM_ID)
        .expect("an associated token account has a bump seed off the curve")
}

/// Field constants: p = 2^255 - 19 and the curve's d = -121665 / 121666.
struct Field {
    p: U256,
    d: U256,
}

fn field() -> &'static Field {
    static FIELD: OnceLock<Field> = OnceLock::new();
    FIELD.get_or_init(|| {
        let p = (U256::from(1u8) << 255usize) - U256::from(19u8);
        let inverse = |x: U256| x.pow_mod(p - U256::from(2u8), p);
        let d = (p - U256::from(121_665u32)).mul_mod(inverse(U256::from(121_666u32)), p);
        Field { p, d }
    })
}

/// See [`Pubkey::is_on_curve`].
fn is_on_curve(bytes: &[u8; 32]) -> bool {
    let Field { p, d } = *field();
    let mut y = *bytes;
    y[31] &= 0x7f;
    // Below 2^255 < 2p: one subtraction reduces it, as dalek's arithmetic
    // does for the 19 values from p up.
    let mut y = U256::from_le_bytes(y);
    if y >= p {
        y -= p;
    }
    let one = U256::from(1u8);
    let yy = y.mul_mod(y, p);
    let u = yy.add_mod(p - one, p); // y² - 1
    let v = d.mul_mod(yy, p).add_mod(one, p); // d·y² + 1
                                              // v is never 0: -1/d is not a square, as d is not and -1 is (p = 1 mod 4).
    let x2 = u.mul_mod(v.pow_mod(p - U256::from(2u8), p), p);
    // Euler's criterion; x² = 0 (y = ±1) is a point too.
    x2.is_zero() || x2.pow_mod((p - one) >> 1usize, p) == one
}

#[cfg(test)]
mod tests;
