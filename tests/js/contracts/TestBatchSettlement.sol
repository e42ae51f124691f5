// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

// Test contracts for the x402 `batch-settlement` scheme (EVM)
// Our own implementation of the escrow interface that the official
//   `@x402/evm` batch-settlement client, server and facilitator call,
//   written from the scheme's specification for local test chains
//   (anvil) only. NOT meant for production.
//
//   - `TestBatchSettlement`: the escrow (channels, cumulative vouchers,
//     batched claims, settle, cooperative refunds, timed withdrawal).
//   - `TestErc3009DepositCollector`: pulls a deposit with the token's
//     ERC-3009 `receiveWithAuthorization` and forwards it to the escrow.
//   - `TestPermit2DepositCollector`: pulls a deposit through Permit2
//     (`permitWitnessTransferFrom` with a DepositWitness{channelId}).
//   - `TestMulticall3`: `tryAggregate` only, which the official code
//     uses to read channel state in one call.
//
//   All four are installed with `anvil_setCode` at the addresses the
//   official code has built in (see tests/js/batch/deploy.mjs), so they
//   hold no immutables and need no constructor: every address they
//   depend on is a constant or `address(this)`.
// EIP-712 domain: {name: "x402 Batch Settlement", version: "1",
//   chainId: block.chainid, verifyingContract: address(this)}.
//   Signatures: 65-byte ECDSA (r || s || v, low s); for a payer without
//   a payerAuthorizer that is a contract, ERC-1271 as well.
//   Every revert carries a plain string reason prefixed "BatchSettlement: ".

interface ITestERC20 {
    function balanceOf(address account) external view returns (uint256);
    function transfer(address to, uint256 value) external returns (bool);
}

interface ITestERC1271 {
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4);
}

/// @notice What the escrow asks a deposit collector to do: move `amount` of
///         `token` from `payer` into the escrow (msg.sender), for `channelId`.
interface ITestDepositCollector {
    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata data) external;
}

contract TestBatchSettlement {
    // ------------------------------------------------------------------
    // Types
    // ------------------------------------------------------------------

    struct ChannelConfig {
        address payer;
        address payerAuthorizer;
        address receiver;
        address receiverAuthorizer;
        address token;
        uint40 withdrawDelay;
        bytes32 salt;
    }

    struct Voucher {
        ChannelConfig channel;
        uint128 maxClaimableAmount;
    }

    /// @notice One row of a claim: the payer's voucher and the cumulative
    ///         total the receiver claims with it (at most its ceiling).
    struct VoucherClaim {
        Voucher voucher;
        bytes signature;
        uint128 totalClaimed;
    }

    struct ChannelState {
        uint128 balance;
        uint128 totalClaimed;
    }

    struct PendingWithdrawal {
        uint128 amount;
        uint40 initiatedAt;
    }

    struct ReceiverState {
        uint128 totalClaimed;
        uint128 totalSettled;
    }

    // ------------------------------------------------------------------
    // Constants
    // ------------------------------------------------------------------

    uint40 public constant MIN_WITHDRAW_DELAY = 900;
    uint40 public constant MAX_WITHDRAW_DELAY = 30 days;

    bytes32 private constant EIP712_DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 private constant NAME_HASH = keccak256("x402 Batch Settlement");
    bytes32 private constant VERSION_HASH = keccak256("1");

    bytes32 public constant CHANNEL_CONFIG_TYPEHASH = keccak256(
        "ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"
    );
    bytes32 public constant VOUCHER_TYPEHASH = keccak256("Voucher(bytes32 channelId,uint128 maxClaimableAmount)");
    bytes32 public constant REFUND_TYPEHASH = keccak256("Refund(bytes32 channelId,uint256 nonce,uint128 amount)");
    bytes32 public constant CLAIM_ENTRY_TYPEHASH =
        keccak256("ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)");
    bytes32 public constant CLAIM_BATCH_TYPEHASH = keccak256(
        "ClaimBatch(ClaimEntry[] claims)ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
    );

    // ------------------------------------------------------------------
    // Storage
    // ------------------------------------------------------------------

    /// @notice Per channel: deposited minus withdrawn/refunded, and the
    ///         cumulative amount claimed by the receiver.
    mapping(bytes32 => ChannelState) public channels;
    mapping(bytes32 => PendingWithdrawal) public pendingWithdrawals;
    /// @notice The nonce the next `refundWithSignature` must carry.
    mapping(bytes32 => uint256) public refundNonce;
    /// @notice Per receiver and token: claimed in total, and transferred out.
    mapping(address => mapping(address => ReceiverState)) public receivers;

    bool private locked;

    // ------------------------------------------------------------------
    // Events
    // ------------------------------------------------------------------

    event ChannelCreated(bytes32 indexed channelId, ChannelConfig config);
    event ChannelClosed(bytes32 indexed channelId, ChannelConfig config);
    event Deposited(bytes32 indexed channelId, address indexed sender, uint128 amount, uint128 newBalance);
    event Claimed(
        bytes32 indexed channelId, address indexed sender, uint128 claimAmount, uint128 newTotalClaimed
    );
    event Settled(address indexed receiver, address indexed token, address indexed sender, uint128 amount);
    event WithdrawInitiated(bytes32 indexed channelId, uint128 amount, uint40 finalizeAfter);
    event WithdrawFinalized(bytes32 indexed channelId, address indexed sender, uint128 amount);
    event Refunded(bytes32 indexed channelId, address indexed sender, uint128 amount);

    modifier nonReentrant() {
        require(!locked, "BatchSettlement: reentrant call");
        locked = true;
        _;
        locked = false;
    }

    // ------------------------------------------------------------------
    // Views
    // ------------------------------------------------------------------

    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(abi.encode(EIP712_DOMAIN_TYPEHASH, NAME_HASH, VERSION_HASH, block.chainid, address(this)));
    }

    /// @notice The channel id: the EIP-712 hash of the config under this
    ///         contract's domain (so it is bound to the chain and deployment).
    function getChannelId(ChannelConfig calldata config) public view returns (bytes32) {
        return _hashTypedData(_hashConfig(config));
    }

    function getVoucherDigest(bytes32 channelId, uint128 maxClaimableAmount) public view returns (bytes32) {
        return _hashTypedData(keccak256(abi.encode(VOUCHER_TYPEHASH, channelId, maxClaimableAmount)));
    }

    function getRefundDigest(bytes32 channelId, uint256 nonce, uint128 amount) public view returns (bytes32) {
        return _hashTypedData(keccak256(abi.encode(REFUND_TYPEHASH, channelId, nonce, amount)));
    }

    function getClaimBatchDigest(VoucherClaim[] calldata voucherClaims) public view returns (bytes32) {
        bytes32[] memory entries = new bytes32[](voucherClaims.length);
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            VoucherClaim calldata c = voucherClaims[i];
            entries[i] = keccak256(
                abi.encode(
                    CLAIM_ENTRY_TYPEHASH,
                    getChannelId(c.voucher.channel),
                    c.voucher.maxClaimableAmount,
                    c.totalClaimed
                )
            );
        }
        return _hashTypedData(keccak256(abi.encode(CLAIM_BATCH_TYPEHASH, keccak256(abi.encodePacked(entries)))));
    }

    // ------------------------------------------------------------------
    // Deposit
    // ------------------------------------------------------------------

    /// @notice Adds `amount` to the channel of `config`, pulled from the payer
    ///         by `collector` (which must hand the tokens to this contract).
    ///         Anyone may submit it (the facilitator does): the collector
    ///         checks the payer's authorization.
    function deposit(ChannelConfig calldata config, uint128 amount, address collector, bytes calldata collectorData)
        external
        nonReentrant
    {
        require(amount > 0, "BatchSettlement: zero deposit");
        require(config.receiverAuthorizer != address(0), "BatchSettlement: zero receiverAuthorizer");
        require(
            config.withdrawDelay >= MIN_WITHDRAW_DELAY && config.withdrawDelay <= MAX_WITHDRAW_DELAY,
            "BatchSettlement: withdrawDelay out of range"
        );
        require(collector.code.length > 0, "BatchSettlement: collector is not a contract");
        bytes32 channelId = getChannelId(config);

        uint256 before = ITestERC20(config.token).balanceOf(address(this));
        ITestDepositCollector(collector).collect(config.payer, config.token, amount, channelId, collectorData);
        require(
            ITestERC20(config.token).balanceOf(address(this)) - before == amount,
            "BatchSettlement: collector did not deliver the deposit"
        );

        ChannelState storage ch = channels[channelId];
        if (ch.balance == 0 && ch.totalClaimed == 0) emit ChannelCreated(channelId, config);
        ch.balance += amount;
        emit Deposited(channelId, msg.sender, amount, ch.balance);
    }

    // ------------------------------------------------------------------
    // Claims and settlement
    // ------------------------------------------------------------------

    /// @notice Claims vouchers, called by each row's receiver or receiverAuthorizer.
    function claim(VoucherClaim[] calldata voucherClaims) external nonReentrant {
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            ChannelConfig calldata cfg = voucherClaims[i].voucher.channel;
            require(
                msg.sender == cfg.receiver || msg.sender == cfg.receiverAuthorizer,
                "BatchSettlement: caller is not the receiver or its authorizer"
            );
            _claim(voucherClaims[i]);
        }
    }

    /// @notice Claims vouchers of many channels with one EIP-712 `ClaimBatch`
    ///         signature of their (common) receiverAuthorizer; anyone may relay it.
    function claimWithSignature(VoucherClaim[] calldata voucherClaims, bytes calldata authorizerSignature)
        external
        nonReentrant
    {
        require(voucherClaims.length > 0, "BatchSettlement: no claims");
        address authorizer = voucherClaims[0].voucher.channel.receiverAuthorizer;
        for (uint256 i = 1; i < voucherClaims.length; i++) {
            require(
                voucherClaims[i].voucher.channel.receiverAuthorizer == authorizer,
                "BatchSettlement: claims of different receiverAuthorizers"
            );
        }
        require(
            _isValidSignature(authorizer, getClaimBatchDigest(voucherClaims), authorizerSignature),
            "BatchSettlement: invalid claim authorization"
        );
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            _claim(voucherClaims[i]);
        }
    }

    /// @notice Transfers everything claimed but not yet settled for
    ///         (`receiver`, `token`) to `receiver`. Permissionless.
    function settle(address receiver, address token) external nonReentrant {
        ReceiverState storage r = receivers[receiver][token];
        uint128 amount = r.totalClaimed - r.totalSettled;
        r.totalSettled = r.totalClaimed;
        if (amount > 0) {
            require(ITestERC20(token).transfer(receiver, amount), "BatchSettlement: transfer failed");
        }
        emit Settled(receiver, token, msg.sender, amount);
    }

    // ------------------------------------------------------------------
    // Timed withdrawal (the payer's escape hatch)
    // ------------------------------------------------------------------

    function initiateWithdraw(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        require(
            msg.sender == config.payer || msg.sender == config.payerAuthorizer,
            "BatchSettlement: caller is not the payer or its authorizer"
        );
        bytes32 channelId = getChannelId(config);
        ChannelState storage ch = channels[channelId];
        require(amount > 0, "BatchSettlement: zero withdrawal");
        require(amount <= ch.balance - ch.totalClaimed, "BatchSettlement: withdrawal exceeds unclaimed escrow");
        require(pendingWithdrawals[channelId].initiatedAt == 0, "BatchSettlement: withdrawal already pending");
        pendingWithdrawals[channelId] = PendingWithdrawal(amount, uint40(block.timestamp));
        emit WithdrawInitiated(channelId, amount, uint40(block.timestamp) + config.withdrawDelay);
    }

    function finalizeWithdraw(ChannelConfig calldata config) external nonReentrant {
        require(
            msg.sender == config.payer || msg.sender == config.payerAuthorizer,
            "BatchSettlement: caller is not the payer or its authorizer"
        );
        bytes32 channelId = getChannelId(config);
        PendingWithdrawal memory w = pendingWithdrawals[channelId];
        require(w.initiatedAt != 0, "BatchSettlement: no pending withdrawal");
        require(
            block.timestamp >= uint256(w.initiatedAt) + config.withdrawDelay, "BatchSettlement: withdraw delay not over"
        );
        delete pendingWithdrawals[channelId];
        ChannelState storage ch = channels[channelId];
        uint128 available = ch.balance - ch.totalClaimed;
        uint128 amount = w.amount < available ? w.amount : available;
        ch.balance -= amount;
        if (amount > 0) {
            require(ITestERC20(config.token).transfer(config.payer, amount), "BatchSettlement: transfer failed");
        }
        emit WithdrawFinalized(channelId, msg.sender, amount);
        _maybeClosed(channelId, config, amount);
    }

    // ------------------------------------------------------------------
    // Cooperative refund
    // ------------------------------------------------------------------

    function refund(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        require(
            msg.sender == config.receiver || msg.sender == config.receiverAuthorizer,
            "BatchSettlement: caller is not the receiver or its authorizer"
        );
        _refund(getChannelId(config), config, amount);
    }

    function refundWithSignature(
        ChannelConfig calldata config,
        uint128 amount,
        uint256 nonce,
        bytes calldata receiverAuthorizerSignature
    ) external nonReentrant {
        bytes32 channelId = getChannelId(config);
        require(nonce == refundNonce[channelId], "BatchSettlement: wrong refund nonce");
        require(
            _isValidSignature(
                config.receiverAuthorizer, getRefundDigest(channelId, nonce, amount), receiverAuthorizerSignature
            ),
            "BatchSettlement: invalid refund authorization"
        );
        _refund(channelId, config, amount);
    }

    // ------------------------------------------------------------------
    // Multicall (e.g. claim + refund in one transaction)
    // ------------------------------------------------------------------

    function multicall(bytes[] calldata data) external returns (bytes[] memory results) {
        results = new bytes[](data.length);
        for (uint256 i = 0; i < data.length; i++) {
            (bool ok, bytes memory out) = address(this).delegatecall(data[i]);
            if (!ok) {
                assembly {
                    revert(add(out, 32), mload(out))
                }
            }
            results[i] = out;
        }
    }

    // ------------------------------------------------------------------
    // Internals
    // ------------------------------------------------------------------

    function _claim(VoucherClaim calldata c) private {
        ChannelConfig calldata cfg = c.voucher.channel;
        bytes32 channelId = getChannelId(cfg);
        uint128 ceiling = c.voucher.maxClaimableAmount;
        address voucherSigner = cfg.payerAuthorizer != address(0) ? cfg.payerAuthorizer : cfg.payer;
        bytes32 digest = getVoucherDigest(channelId, ceiling);
        bool valid = cfg.payerAuthorizer != address(0)
            ? _recover(digest, c.signature) == voucherSigner
            : _isValidSignature(voucherSigner, digest, c.signature);
        require(valid, "BatchSettlement: invalid voucher signature");
        require(c.totalClaimed <= ceiling, "BatchSettlement: claim exceeds voucher ceiling");

        ChannelState storage ch = channels[channelId];
        require(c.totalClaimed <= ch.balance, "BatchSettlement: claim exceeds channel balance");
        // Cumulative: a row at or below what is claimed already changes nothing.
        if (c.totalClaimed <= ch.totalClaimed) return;
        uint128 delta = c.totalClaimed - ch.totalClaimed;
        ch.totalClaimed = c.totalClaimed;
        receivers[cfg.receiver][cfg.token].totalClaimed += delta;
        emit Claimed(channelId, msg.sender, delta, c.totalClaimed);
    }

    function _refund(bytes32 channelId, ChannelConfig calldata config, uint128 amount) private {
        require(amount > 0, "BatchSettlement: zero refund");
        // The nonce moves first, also when nothing can be refunded.
        refundNonce[channelId] += 1;
        ChannelState storage ch = channels[channelId];
        uint128 available = ch.balance - ch.totalClaimed;
        uint128 actual = amount < available ? amount : available;
        if (actual == 0) return;
        ch.balance -= actual;
        PendingWithdrawal storage w = pendingWithdrawals[channelId];
        if (w.initiatedAt != 0) {
            if (actual >= w.amount) delete pendingWithdrawals[channelId];
            else w.amount -= actual;
        }
        require(ITestERC20(config.token).transfer(config.payer, actual), "BatchSettlement: transfer failed");
        emit Refunded(channelId, msg.sender, actual);
        _maybeClosed(channelId, config, actual);
    }

    function _maybeClosed(bytes32 channelId, ChannelConfig calldata config, uint128 moved) private {
        ChannelState storage ch = channels[channelId];
        if (moved > 0 && ch.balance == 0 && ch.totalClaimed == 0) emit ChannelClosed(channelId, config);
    }

    function _hashConfig(ChannelConfig calldata c) private pure returns (bytes32) {
        return keccak256(
            abi.encode(
                CHANNEL_CONFIG_TYPEHASH,
                c.payer,
                c.payerAuthorizer,
                c.receiver,
                c.receiverAuthorizer,
                c.token,
                c.withdrawDelay,
                c.salt
            )
        );
    }

    function _hashTypedData(bytes32 structHash) private view returns (bytes32) {
        return keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash));
    }

    /// @dev ECDSA for accounts without code, ERC-1271 for contracts.
    function _isValidSignature(address signer, bytes32 digest, bytes calldata signature) private view returns (bool) {
        if (signer == address(0)) return false;
        if (signer.code.length == 0) return _recover(digest, signature) == signer;
        (bool ok, bytes memory out) =
            signer.staticcall(abi.encodeWithSelector(ITestERC1271.isValidSignature.selector, digest, signature));
        return ok && out.length >= 32 && abi.decode(out, (bytes4)) == ITestERC1271.isValidSignature.selector;
    }

    /// @dev Recovers a 65-byte (r || s || v) signature; address(0) when malformed.
    function _recover(bytes32 digest, bytes calldata signature) private pure returns (address) {
        if (signature.length != 65) return address(0);
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        uint8 v = uint8(signature[64]);
        if (v < 27) v += 27;
        if (uint256(s) > 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0) return address(0);
        if (v != 27 && v != 28) return address(0);
        return ecrecover(digest, v, r, s);
    }
}

/// @notice Deposit collector for tokens with ERC-3009: the payer signs
///         `ReceiveWithAuthorization(from = payer, to = this collector, value,
///         validAfter, validBefore, nonce)` with
///         `nonce = keccak256(abi.encode(channelId, salt))`; the escrow calls
///         `collect` with `data = abi.encode(validAfter, validBefore, salt, signature)`.
///         Only the escrow may call it, so a captured authorization cannot be
///         redirected to anyone else.
contract TestErc3009DepositCollector is ITestDepositCollector {
    /// @notice Where the official code expects the escrow.
    address public constant BATCH_SETTLEMENT = 0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003;

    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata data)
        external
        override
    {
        require(msg.sender == BATCH_SETTLEMENT, "BatchSettlement: collector caller is not the escrow");
        (uint256 validAfter, uint256 validBefore, uint256 salt, bytes memory signature) =
            abi.decode(data, (uint256, uint256, uint256, bytes));
        bytes32 nonce = keccak256(abi.encode(channelId, salt));
        (bool ok, bytes memory out) = token.call(
            abi.encodeWithSignature(
                "receiveWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)",
                payer,
                address(this),
                amount,
                validAfter,
                validBefore,
                nonce,
                signature
            )
        );
        if (!ok) {
            assembly {
                revert(add(out, 32), mload(out))
            }
        }
        require(ITestERC20(token).transfer(msg.sender, amount), "BatchSettlement: forward to escrow failed");
    }
}

/// @notice The Permit2 function the Permit2 deposit collector calls
///         (Uniswap's `ISignatureTransfer.permitWitnessTransferFrom`).
interface ITestPermit2 {
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

/// @notice Deposit collector for any ERC-20 through Permit2: the payer
///         approves Permit2 and signs `PermitWitnessTransferFrom(permitted =
///         {token, amount}, spender = this collector, nonce, deadline,
///         witness = DepositWitness{channelId})`; the escrow calls `collect`
///         with `data = abi.encode(nonce, deadline, signature, eip2612PermitData)`
///         and Permit2 moves the tokens straight to the escrow. Only the
///         escrow may call it. An EIP-2612 permit in `eip2612PermitData`
///         (abi.encode(value, deadline, v, r, s)) is applied first when given.
contract TestPermit2DepositCollector is ITestDepositCollector {
    address public constant BATCH_SETTLEMENT = 0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003;
    address public constant PERMIT2 = 0x000000000022D473030F116dDEE9F6B43aC78BA3;
    bytes32 public constant DEPOSIT_WITNESS_TYPEHASH = keccak256("DepositWitness(bytes32 channelId)");
    /// @dev What follows Permit2's "PermitWitnessTransferFrom(TokenPermissions
    ///      permitted,address spender,uint256 nonce,uint256 deadline," stub:
    ///      the witness member, then the referenced types in alphabetical order.
    string public constant WITNESS_TYPE_STRING =
        "DepositWitness witness)DepositWitness(bytes32 channelId)TokenPermissions(address token,uint256 amount)";

    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata data)
        external
        override
    {
        require(msg.sender == BATCH_SETTLEMENT, "BatchSettlement: collector caller is not the escrow");
        (uint256 nonce, uint256 deadline, bytes memory signature, bytes memory eip2612PermitData) =
            abi.decode(data, (uint256, uint256, bytes, bytes));
        if (eip2612PermitData.length > 0) _permit(token, payer, eip2612PermitData);
        ITestPermit2(PERMIT2).permitWitnessTransferFrom(
            ITestPermit2.PermitTransferFrom(ITestPermit2.TokenPermissions(token, amount), nonce, deadline),
            ITestPermit2.SignatureTransferDetails(msg.sender, amount),
            payer,
            keccak256(abi.encode(DEPOSIT_WITNESS_TYPEHASH, channelId)),
            WITNESS_TYPE_STRING,
            signature
        );
    }

    /// @dev Applies an EIP-2612 permit for Permit2; one already used (or
    ///      front-run) is fine when the allowance is there.
    function _permit(address token, address payer, bytes memory permitData) private {
        (uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s) =
            abi.decode(permitData, (uint256, uint256, uint8, bytes32, bytes32));
        (bool ok,) = token.call(
            abi.encodeWithSignature(
                "permit(address,address,uint256,uint256,uint8,bytes32,bytes32)", payer, PERMIT2, value, deadline, v, r, s
            )
        );
        ok;
    }
}

/// @notice The one Multicall3 function the official code calls
///         (`tryAggregate`), at Multicall3's usual address on anvil.
contract TestMulticall3 {
    struct Call {
        address target;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    function tryAggregate(bool requireSuccess, Call[] calldata calls)
        external
        payable
        returns (Result[] memory returnData)
    {
        returnData = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; i++) {
            (bool ok, bytes memory out) = calls[i].target.call(calls[i].callData);
            if (requireSuccess) require(ok, "Multicall3: call failed");
            returnData[i] = Result(ok, out);
        }
    }
}
