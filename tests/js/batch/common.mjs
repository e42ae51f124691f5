// Shared bits of the batch-settlement helpers (deploy.mjs, facilitator.mjs,
// pay.mjs, reference-server.mjs): the canonical addresses the official
// `@x402/evm` batch-settlement code has built in, the test contracts installed
// there, and viem clients on a local chain.

import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  BATCH_SETTLEMENT_ADDRESS,
  ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
  PERMIT2_ADDRESS,
} from "@x402/evm";
import { createPublicClient, createWalletClient, defineChain, getAddress, http, publicActions } from "viem";
import { privateKeyToAccount } from "viem/accounts";

const here = dirname(fileURLToPath(import.meta.url));

/** PERMIT2_DEPOSIT_COLLECTOR_ADDRESS of the official batch-settlement code (not exported by `@x402/evm`). */
export const PERMIT2_DEPOSIT_COLLECTOR_ADDRESS = getAddress("0x4020425FAf3B746C082C2f942b4E5159887B0005");

/** Multicall3's usual address; the official code reads channel state through its `tryAggregate`. */
export const MULTICALL3_ADDRESS = getAddress("0xcA11bde05977b3631167028862bE2a173976CA11");

/** Each test contract (artifact in ../contracts) and where it is installed. */
export const INSTALLS = [
  { name: "batchSettlement", artifact: "TestBatchSettlement.json", address: getAddress(BATCH_SETTLEMENT_ADDRESS) },
  {
    name: "erc3009Collector",
    artifact: "TestErc3009DepositCollector.json",
    address: getAddress(ERC3009_DEPOSIT_COLLECTOR_ADDRESS),
  },
  {
    name: "permit2Collector",
    artifact: "TestPermit2DepositCollector.json",
    address: getAddress(PERMIT2_DEPOSIT_COLLECTOR_ADDRESS),
  },
  { name: "multicall3", artifact: "TestMulticall3.json", address: MULTICALL3_ADDRESS },
  // The permit2 deposits go through Permit2 itself (the test stand-in of ../contracts/TestPermit2.sol).
  { name: "permit2", artifact: "TestPermit2.json", address: getAddress(PERMIT2_ADDRESS) },
];

/** The committed artifact `../contracts/<file>`. */
export function artifact(file) {
  return JSON.parse(readFileSync(join(here, "..", "contracts", file), "utf8"));
}

/** Fails with a usage line (exit 2). */
export function usage(script, line, msg) {
  process.stderr.write(`${msg ? `${script}: ${msg}\n` : ""}usage: ${line}\n`);
  process.exit(2);
}

export function checkKey(script, line, name, key) {
  if (!key || !/^0x[0-9a-fA-F]{64}$/.test(key)) usage(script, line, `${name} must be a 0x-prefixed 32-byte hex private key`);
}

/** A viem chain for the node at `rpc` (its chain id asked once). */
export async function localChain(rpc) {
  const chainId = await createPublicClient({ transport: http(rpc) }).getChainId();
  return defineChain({
    id: chainId,
    name: `local-${chainId}`,
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [rpc] } },
  });
}

/** A wallet client of `key` extended with the public actions, on `chain`. */
export function walletOn(chain, key) {
  return createWalletClient({ account: privateKeyToAccount(key), chain, transport: http(chain.rpcUrls.default.http[0]) }).extend(
    publicActions,
  );
}

/** JSON.stringify that writes bigints as decimal strings. */
export function toJson(value) {
  return JSON.stringify(value, (_, v) => (typeof v === "bigint" ? v.toString() : v));
}
