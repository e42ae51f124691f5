#!/usr/bin/env node
// Deploys TestUSDC (from contracts/TestUSDC.json) and optionally mints.
//
// Usage:
//   node deploy.mjs --rpc http://127.0.0.1:PORT --key 0xDEPLOYERKEY \
//     [--name USDC] [--version 2] [--mint 0xADDR1=1000000,0xADDR2=5000]
//
// Amounts are atomic units (6 decimals). The deployer becomes the owner (only
// the owner can mint). Prints exactly one JSON line on stdout: {"token":"0x..."}
// Exit code != 0 with a message on stderr on any failure.

import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { createPublicClient, createWalletClient, defineChain, getAddress, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";

const here = dirname(fileURLToPath(import.meta.url));

function usage(msg) {
  process.stderr.write(
    `${msg ? `deploy.mjs: ${msg}\n` : ""}usage: node deploy.mjs --rpc URL --key 0xPRIVKEY [--name USDC] [--version 2] [--mint 0xADDR=AMOUNT,...]\n`,
  );
  process.exit(2);
}

function parseMint(spec) {
  if (!spec) return [];
  return spec
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry) => {
      const [addr, amount] = entry.split("=");
      if (!addr || amount === undefined || !/^\d+$/.test(amount.trim())) {
        usage(`bad --mint entry ${JSON.stringify(entry)} (expected 0xADDRESS=ATOMIC_AMOUNT)`);
      }
      return { to: getAddress(addr.trim()), amount: BigInt(amount.trim()) };
    });
}

async function main() {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        rpc: { type: "string" },
        key: { type: "string" },
        name: { type: "string", default: "USDC" },
        version: { type: "string", default: "2" },
        mint: { type: "string" },
      },
      strict: true,
    }));
  } catch (e) {
    usage(e.message);
  }
  if (!values.rpc) usage("--rpc is required");
  if (!values.key || !/^0x[0-9a-fA-F]{64}$/.test(values.key)) usage("--key must be a 0x-prefixed 32-byte hex private key");
  const mints = parseMint(values.mint);

  const artifact = JSON.parse(readFileSync(join(here, "contracts", "TestUSDC.json"), "utf8"));
  const account = privateKeyToAccount(values.key);
  const transport = http(values.rpc);

  const bootstrap = createPublicClient({ transport });
  const chainId = await bootstrap.getChainId();
  const chain = defineChain({
    id: chainId,
    name: `local-${chainId}`,
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [values.rpc] } },
  });
  const publicClient = createPublicClient({ chain, transport });
  const wallet = createWalletClient({ account, chain, transport });

  const deployHash = await wallet.deployContract({
    abi: artifact.abi,
    bytecode: artifact.bytecode,
    args: [values.name, values.version],
  });
  const deployReceipt = await publicClient.waitForTransactionReceipt({ hash: deployHash });
  if (deployReceipt.status !== "success" || !deployReceipt.contractAddress) {
    throw new Error(`deployment transaction ${deployHash} failed`);
  }
  const token = getAddress(deployReceipt.contractAddress);

  for (const { to, amount } of mints) {
    const hash = await wallet.writeContract({
      address: token,
      abi: artifact.abi,
      functionName: "mint",
      args: [to, amount],
    });
    const receipt = await publicClient.waitForTransactionReceipt({ hash });
    if (receipt.status !== "success") throw new Error(`mint to ${to} failed (tx ${hash})`);
  }

  process.stdout.write(`${JSON.stringify({ token })}\n`);
}

main().catch((e) => {
  process.stderr.write(`deploy.mjs: ${e?.shortMessage ?? e?.message ?? String(e)}\n`);
  process.exit(1);
});
