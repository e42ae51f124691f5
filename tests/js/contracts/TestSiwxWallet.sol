// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

/// A minimal smart-contract wallet for the sign-in-with-x tests: EIP-1271
/// `isValidSignature` accepts a 65-byte ECDSA signature of the hash by its
/// owner, and nothing else.
contract TestSiwxWallet {
    address public immutable owner;

    constructor(address owner_) {
        owner = owner_;
    }

    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        if (signature.length != 65) return 0xffffffff;
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly {
            r := calldataload(signature.offset)
            s := calldataload(add(signature.offset, 32))
            v := byte(0, calldataload(add(signature.offset, 64)))
        }
        address signer = ecrecover(hash, v, r, s);
        return signer != address(0) && signer == owner ? bytes4(0x1626ba7e) : bytes4(0xffffffff);
    }
}
