use serde_json::Value;

use super::*;

/// `tests/data/svm_ata_vectors.json`: see its `_comment` for the sources.
fn vectors() -> Value {
    serde_json::from_str(include_str!("../../../tests/data/svm_ata_vectors.json")).unwrap()
}

fn key(text: &str) -> Pubkey {
    text.parse()
        .unwrap_or_else(|e| unreachable!("{text:?}: {e}"))
}

/// 32 bytes, little-endian, with their last byte (the sign bit's) set apart.
fn bytes_with_last(prefix: &[u8], fill: u8, last: u8) -> [u8; 32] {
    let mut bytes = [fill; 32];
    bytes[..prefix.len()].copy_from_slice(prefix);
    bytes[31] = last;
    bytes
}

#[test]
fn associated_token_accounts_match_the_vectors() {
    let vectors = vectors();
    let list = vectors["associated_token_accounts"].as_array().unwrap();
    assert!(list.len() >= 8);
    let (mut token_2022, mut loops) = (0, 0);
    for v in list {
        let field = |name: &str| v[name].as_str().unwrap();
        let (owner, mint) = (key(field("owner")), key(field("mint")));
        let program = TokenProgram::from_id(&key(field("token_program"))).unwrap();
        let bump = u8::try_from(v["bump"].as_u64().unwrap()).unwrap();
        let expected = key(field("ata"));
        assert_eq!(
            associated_token_address_and_bump(&owner, &mint, program),
            (expected, bump),
            "{v}"
        );
        assert_eq!(associated_token_address(&owner, &mint, program), expected);
        assert_eq!(expected.to_string(), field("ata"));
        assert!(!expected.is_on_curve(), "{v}");
        assert_eq!(
            owner.is_on_curve(),
            v["owner_on_curve"].as_bool().unwrap(),
            "{v}"
        );
        if let Some(seed) = v["owner_seed"].as_str() {
            assert_eq!(owner.to_bytes(), <[u8; 32]>::from(Sha256::digest(seed)));
        }
        // Every bump above the vector's is on the curve.
        let program_id = program.id();
        for higher in (u16::from(bump) + 1..=255).map(|b| b as u8) {
            let seeds: [&[u8]; 4] = [
                owner.as_bytes(),
                program_id.as_bytes(),
                mint.as_bytes(),
                &[higher],
            ];
            assert_eq!(
                create_program_address(&seeds, &ASSOCIATED_TOKEN_PROGRAM_ID),
                Err(PdaError::OnCurve)
            );
        }
        token_2022 += usize::from(program == TokenProgram::Token2022);
        loops += usize::from(bump < u8::MAX);
    }
    assert!(token_2022 >= 2 && loops >= 3, "{token_2022} {loops}");
}

#[test]
fn token_programs_derive_different_accounts() {
    let owner = key("AAAGuCgkmxYDTiBvzx1QT5XEjqXPRtQaiEXQo4gatD2o");
    let mint = key("CKfatsPMUf8SkiURsDXs7eK6GWb4Jsd6UDbs7twMCWxo");
    let classic = associated_token_address(&owner, &mint, TokenProgram::Token);
    let extensions = associated_token_address(&owner, &mint, TokenProgram::Token2022);
    assert_ne!(classic, extensions);
    assert_eq!(
        extensions.to_string(),
        "GPtCoaz35vdCrFbyhxcRrkYvECrUkrBX6CoRZEv8EQDw"
    );
}

#[test]
fn program_addresses_match_solanas_vectors() {
    let vectors = vectors();
    let program = key(vectors["program_addresses_program"].as_str().unwrap());
    for v in vectors["program_addresses"].as_array().unwrap() {
        let seeds: Vec<Vec<u8>> = v["seeds_hex"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| alloy_primitives::hex::decode(s.as_str().unwrap()).unwrap())
            .collect();
        let seeds: Vec<&[u8]> = seeds.iter().map(Vec::as_slice).collect();
        assert_eq!(
            create_program_address(&seeds, &program).map(|a| a.to_string()),
            Ok(v["address"].as_str().unwrap().to_owned()),
            "{v}"
        );
    }
}

#[test]
fn seed_limits_are_solanas() {
    let program = key("BPFLoaderUpgradeab1e11111111111111111111111");
    let long = [127u8; MAX_SEED_LEN + 1];
    let max = [0u8; MAX_SEED_LEN];
    assert_eq!(
        create_program_address(&[&long], &program),
        Err(PdaError::MaxSeedLengthExceeded)
    );
    assert_eq!(
        create_program_address(&[b"short_seed", &long], &program),
        Err(PdaError::MaxSeedLengthExceeded)
    );
    assert!(create_program_address(&[&max], &program).is_ok());
    let numbers: Vec<[u8; 1]> = (1..=17u8).map(|n| [n]).collect();
    let seventeen: Vec<&[u8]> = numbers.iter().map(|n| n.as_slice()).collect();
    assert_eq!(
        create_program_address(&seventeen, &program),
        Err(PdaError::MaxSeedLengthExceeded)
    );
    assert!(create_program_address(&seventeen[..16], &program).is_ok());
    // The bump is a seed too: 15 seeds leave room for it, 16 do not.
    assert!(find_program_address(&seventeen[..15], &program).is_some());
    assert_eq!(find_program_address(&seventeen[..16], &program), None);
    assert_eq!(find_program_address(&[&long], &program), None);
    // What find returns, create confirms.
    let (address, bump) = find_program_address(&[b"Lil'", b"Bits"], &program).unwrap();
    assert_eq!(
        create_program_address(&[b"Lil'", b"Bits", &[bump]], &program),
        Ok(address)
    );
}

#[test]
fn curve_points_match_the_vectors() {
    let vectors = vectors();
    let list = vectors["curve_points"].as_array().unwrap();
    let mut on = 0;
    for v in list {
        let bytes: [u8; 32] = alloy_primitives::hex::decode(v["hex"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        let expected = v["on_curve"].as_bool().unwrap();
        assert_eq!(Pubkey::new(bytes).is_on_curve(), expected, "{v}");
        on += usize::from(expected);
    }
    assert!(on > 0 && on < list.len());
}

#[test]
fn curve_constants() {
    let Field { p, d } = *field();
    assert_eq!(
        d,
        U256::from_str_radix(
            "37095705934669439343138083508754565189542113879843219016388785533085940283555",
            10
        )
        .unwrap()
    );
    assert_eq!(
        p,
        U256::from_str_radix(
            "7fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffed",
            16
        )
        .unwrap()
    );
    for (id, text) in [
        (
            TOKEN_PROGRAM_ID,
            "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA",
        ),
        (
            TOKEN_2022_PROGRAM_ID,
            "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb",
        ),
        (
            ASSOCIATED_TOKEN_PROGRAM_ID,
            "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL",
        ),
    ] {
        assert_eq!(id.to_string(), text);
        assert_eq!(key(text), id);
    }
    assert_eq!(
        TokenProgram::from_id(&TOKEN_PROGRAM_ID),
        Some(TokenProgram::Token)
    );
    assert_eq!(
        TokenProgram::from_id(&TOKEN_2022_PROGRAM_ID),
        Some(TokenProgram::Token2022)
    );
    assert_eq!(TokenProgram::from_id(&ASSOCIATED_TOKEN_PROGRAM_ID), None);
    assert_eq!(TokenProgram::Token2022.to_string(), "Token-2022 program");
}

#[test]
fn on_and_off_curve_edge_cases() {
    // (bytes, on the curve as curve25519-dalek decides).
    let cases: [([u8; 32], bool, &str); 14] = [
        // The base point, y = 4/5, and its negation.
        (bytes_with_last(&[0x58], 0x66, 0x66), true, "base point"),
        (bytes_with_last(&[0x58], 0x66, 0xe6), true, "-base point"),
        // y = 0: x² = -1, a square. The system program's address.
        ([0; 32], true, "y = 0"),
        (bytes_with_last(&[], 0, 0x80), true, "y = 0, sign set"),
        // y = 1 (the identity, x = 0), with the sign bit set: RFC 8032 and
        // @solana/addresses refuse it, dalek (and so Solana) accepts it.
        (bytes_with_last(&[1], 0, 0), true, "y = 1"),
        (
            bytes_with_last(&[1], 0, 0x80),
            true,
            "y = 1, x = 0 with sign",
        ),
        // y = p - 1 = -1: x = 0 again.
        (bytes_with_last(&[0xec], 0xff, 0x7f), true, "y = -1"),
        (
            bytes_with_last(&[0xec], 0xff, 0xff),
            true,
            "y = -1, sign set",
        ),
        // y ≥ p is reduced: p is 0, p + 1 is 1.
        (bytes_with_last(&[0xed], 0xff, 0x7f), true, "y = p"),
        (bytes_with_last(&[0xee], 0xff, 0x7f), true, "y = p + 1"),
        (
            bytes_with_last(&[0xee], 0xff, 0xff),
            true,
            "y = p + 1, sign set",
        ),
        // y = 2: (4 - 1) / (4d + 1) is not a square; nor is p + 2.
        (bytes_with_last(&[2], 0, 0), false, "y = 2"),
        (bytes_with_last(&[0xef], 0xff, 0x7f), false, "y = p + 2"),
        // 2^255 - 1 (all ones) is p + 18, and 18 is on the curve.
        ([0xff; 32], true, "y = p + 18"),
    ];
    for (bytes, on, what) in cases {
        assert_eq!(Pubkey::new(bytes).is_on_curve(), on, "{what}");
    }
    // The reduction agrees with the canonical value on every y from p up.
    for k in 0..19u8 {
        let high = bytes_with_last(&[0xed + k], 0xff, 0x7f);
        let low = bytes_with_last(&[k], 0, 0);
        assert_eq!(
            Pubkey::new(high).is_on_curve(),
            Pubkey::new(low).is_on_curve(),
            "y = p + {k}"
        );
    }
    // A program derived address is off the curve, a wallet on it.
    assert!(!key("3uetDDizgTtadDHZzyy9BqxrjQcozMEkxzbKhfZF4tG3").is_on_curve());
    assert!(key("3h1zGmCwsRJnVk5BuRNMLsPaQu1y2aqXqXDWYCgrp5UG").is_on_curve());
}

#[test]
fn invalid_base58_is_refused() {
    let good = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";
    for (text, expected) in [
        ("", AddressError::WrongLength { bytes: 0 }),
        ("1", AddressError::WrongLength { bytes: 1 }),
        (&good[..42], AddressError::WrongLength { bytes: 31 }),
        // The Token-2022 id with a wrong tail: valid base58 of 33 bytes.
        (
            "TokenzQdBNbLqP5VEhdkAS6EPFLC1tzEEbV9Zn5fZkjf",
            AddressError::WrongLength { bytes: 33 },
        ),
        (
            "0PjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
            AddressError::InvalidCharacter {
                character: '0',
                index: 0,
            },
        ),
        (
            "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDtOv",
            AddressError::InvalidCharacter {
                character: 'O',
                index: 42,
            },
        ),
        (
            "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDtlv",
            AddressError::InvalidCharacter {
                character: 'l',
                index: 42,
            },
        ),
        (
            " EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1",
            AddressError::InvalidCharacter {
                character: ' ',
                index: 0,
            },
        ),
        (
            "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            AddressError::InvalidCharacter {
                character: '0',
                index: 0,
            },
        ),
        (&format!("{good}1"), AddressError::TooLong { len: 45 }),
        (&"1".repeat(1000), AddressError::TooLong { len: 1000 }),
    ] {
        assert_eq!(text.parse::<Pubkey>(), Err(expected), "{text:?}");
    }
    // 44 digits can be more than 32 bytes: the largest 32 bytes are
    // "JEKNVnkbo3jma5nREBBJCDoXFVeKkD56V3xKrvRmWxFG".
    assert_eq!(
        "JEKNVnkbo3jma5nREBBJCDoXFVeKkD56V3xKrvRmWxFG".parse::<Pubkey>(),
        Ok(Pubkey::new([0xff; 32]))
    );
    assert_eq!(
        "JEKNVnkbo3jma5nREBBJCDoXFVeKkD56V3xKrvRmWxFH".parse::<Pubkey>(),
        Err(AddressError::WrongLength { bytes: 33 })
    );
}

#[test]
fn text_round_trips() {
    // The system program: 32 zero bytes are 32 ones.
    let zero = Pubkey::new([0; 32]);
    assert_eq!(zero.to_string(), "1".repeat(32));
    assert_eq!(key(&"1".repeat(32)), zero);
    // A leading zero byte is a leading 1.
    let pda = key("13yWmRpaTR4r5nAktwLqMpRNr28tnVUZw26rTvPSSB19");
    assert_eq!(pda.as_bytes()[0], 0);
    assert_eq!(
        pda.to_string(),
        "13yWmRpaTR4r5nAktwLqMpRNr28tnVUZw26rTvPSSB19"
    );
    assert_eq!(
        format!("{pda:?}"),
        "Pubkey(13yWmRpaTR4r5nAktwLqMpRNr28tnVUZw26rTvPSSB19)"
    );
    assert_eq!(Pubkey::from(pda.to_bytes()), pda);
    assert_eq!(<[u8; 32]>::from(pda), pda.to_bytes());
    assert_eq!(pda.as_ref(), pda.as_bytes());
}
