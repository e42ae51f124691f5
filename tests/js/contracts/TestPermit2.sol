// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title Minimal Permit2 and x402 Permit2 proxies for local test chains
/// @notice Stand-ins for Uniswap's Permit2 (`permitWitnessTransferFrom`, the
///         nonce bitmap) and for x402's `x402ExactPermit2Proxy` and
///         `x402UptoPermit2Proxy`, with the same ABI and EIP-712 hashing as
///         the canonical contracts, for the x402 integration tests. They are
///         written for anvil only and are NOT meant for production.
/// @dev    The tests place their runtime code at the canonical addresses with
///         `anvil_setCode` (Permit2 at 0x000000000022D473030F116dDEE9F6B43aC78BA3,
///         the exact proxy at 0x402085c248EeA27D92E8b30b2C58ed07f9E20001, the
///         upto proxy at 0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002), so no
///         contract has a constructor, immutables or initial storage: the
///         domain separator is computed from `block.chainid` and
///         `address(this)` on every call.
///         - Only 65-byte ECDSA signatures of EOAs are accepted (no ERC-1271).
///         - Every revert carries a plain string reason.

/// @notice The subset of Uniswap's ISignatureTransfer the proxies use.
interface ISignatureTransfer {
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    struct PermitTransferFrom {
        TokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    struct SignatureTransferDetails {
        address to;
        uint256 requestedAmount;
    }

    function permitWitnessTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external;
}

interface IERC20Minimal {
    function transferFrom(address from, address to, uint256 value) external returns (bool);
}

/// @title TestPermit2
/// @notice `permitWitnessTransferFrom` and `nonceBitmap` as in Uniswap's
///         SignatureTransfer: the spender is `msg.sender`, nonces are
///         unordered (one bit per nonce, per owner, across all tokens), and
///         the token moves with `transferFrom` (the owner approves Permit2).
contract TestPermit2 is ISignatureTransfer {
    bytes32 private constant EIP712_DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,uint256 chainId,address verifyingContract)");
    bytes32 private constant NAME_HASH = keccak256("Permit2");
    bytes32 public constant TOKEN_PERMISSIONS_TYPEHASH = keccak256("TokenPermissions(address token,uint256 amount)");
    string public constant PERMIT_TRANSFER_FROM_WITNESS_TYPEHASH_STUB =
        "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,";

    /// @dev secp256k1n / 2; signatures with a larger `s` are malleable and rejected.
    uint256 private constant HALF_CURVE_ORDER =
        0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    /// @notice owner => word position => bitmap of used nonces.
    mapping(address => mapping(uint256 => uint256)) public nonceBitmap;

    event UnorderedNonceInvalidation(address indexed owner, uint256 word, uint256 mask);

    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(abi.encode(EIP712_DOMAIN_TYPEHASH, NAME_HASH, block.chainid, address(this)));
    }

    function permitWitnessTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external {
        require(block.timestamp <= permit.deadline, "Permit2: signature expired");
        require(transferDetails.requestedAmount <= permit.permitted.amount, "Permit2: invalid amount");
        _useUnorderedNonce(owner, permit.nonce);

        bytes32 typeHash = keccak256(abi.encodePacked(PERMIT_TRANSFER_FROM_WITNESS_TYPEHASH_STUB, witnessTypeString));
        bytes32 tokenPermissionsHash = keccak256(
            abi.encode(TOKEN_PERMISSIONS_TYPEHASH, permit.permitted.token, permit.permitted.amount)
        );
        bytes32 structHash = keccak256(
            abi.encode(typeHash, tokenPermissionsHash, msg.sender, permit.nonce, permit.deadline, witness)
        );
        bytes32 digest = keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash));
        require(_recover(digest, signature) == owner, "Permit2: invalid signer");

        require(
            IERC20Minimal(permit.permitted.token).transferFrom(
                owner, transferDetails.to, transferDetails.requestedAmount
            ),
            "Permit2: transfer failed"
        );
    }

    function _useUnorderedNonce(address from, uint256 nonce) private {
        uint256 wordPos = nonce >> 8;
        uint256 bit = 1 << (nonce & 0xff);
        uint256 flipped = nonceBitmap[from][wordPos] ^= bit;
        require(flipped & bit != 0, "Permit2: invalid nonce");
    }

    function _recover(bytes32 digest, bytes calldata signature) private pure returns (address signer) {
        require(signature.length == 65, "Permit2: invalid signature length");
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        uint8 v = uint8(signature[64]);
        if (v < 27) {
            v += 27;
        }
        require(uint256(s) <= HALF_CURVE_ORDER, "Permit2: invalid signature 's' value");
        require(v == 27 || v == 28, "Permit2: invalid signature 'v' value");
        signer = ecrecover(digest, v, r, s);
        require(signer != address(0), "Permit2: invalid signature");
    }
}

/// @title TestX402UptoPermit2Proxy
/// @notice `settle(permit, amount, owner, witness, signature)`: the facilitator
///         named in the witness moves `amount` (at most the permitted amount)
///         from `owner` to `witness.to` through Permit2.
contract TestX402UptoPermit2Proxy {
    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    ISignatureTransfer public constant PERMIT2 = ISignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);
    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    event Settled();

    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external {
        require(owner != address(0), "x402UptoPermit2Proxy: invalid owner");
        require(witness.to != address(0), "x402UptoPermit2Proxy: invalid destination");
        require(msg.sender == witness.facilitator, "x402UptoPermit2Proxy: unauthorized facilitator");
        require(block.timestamp >= witness.validAfter, "x402UptoPermit2Proxy: payment too early");
        require(amount <= permit.permitted.amount, "x402UptoPermit2Proxy: amount exceeds permitted");
        bytes32 witnessHash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter));
        PERMIT2.permitWitnessTransferFrom(
            permit,
            ISignatureTransfer.SignatureTransferDetails({to: witness.to, requestedAmount: amount}),
            owner,
            witnessHash,
            WITNESS_TYPE_STRING,
            signature
        );
        emit Settled();
    }
}

/// @title TestX402ExactPermit2Proxy
/// @notice `settle(permit, owner, witness, signature)`: moves exactly the
///         permitted amount from `owner` to `witness.to` through Permit2.
contract TestX402ExactPermit2Proxy {
    struct Witness {
        address to;
        uint256 validAfter;
    }

    ISignatureTransfer public constant PERMIT2 = ISignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);
    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,uint256 validAfter)");

    event Settled();

    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external {
        require(owner != address(0), "x402ExactPermit2Proxy: invalid owner");
        require(witness.to != address(0), "x402ExactPermit2Proxy: invalid destination");
        require(block.timestamp >= witness.validAfter, "x402ExactPermit2Proxy: payment too early");
        bytes32 witnessHash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.validAfter));
        PERMIT2.permitWitnessTransferFrom(
            permit,
            ISignatureTransfer.SignatureTransferDetails({to: witness.to, requestedAmount: permit.permitted.amount}),
            owner,
            witnessHash,
            WITNESS_TYPE_STRING,
            signature
        );
        emit Settled();
    }
}
