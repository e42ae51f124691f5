#!/usr/bin/env node
// Installs the batch-settlement test contracts on a local anvil at the
// addresses the official `@x402/evm` batch-settlement code has built in, with
// `anvil_setCode` (the contracts keep no immutables and need no constructor):
//
//   TestBatchSettlement          -> BATCH_SETTLEMENT_ADDRESS          (the escrow)
//   TestErc3009DepositCollector  -> ERC3009_DEPOSIT_COLLECTOR_ADDRESS (eip3009 deposits)
//   TestPermit2DepositCollector  -> PERMIT2_DEPOSIT_COLLECTOR_ADDRESS (permit2 deposits)
//   TestMulticall3               -> 0xcA11bde05977b3631167028862bE2a173976CA11
//   TestPermit2                  -> PERMIT2_ADDRESS (0x000000000022D473030F116dDEE9F6B43aC78BA3)
//
// The token (TestUSDC) is deployed by ../deploy.mjs as for the other tests.
//
// Usage: node batch/deploy.mjs --rpc http://127.0.0.1:PORT
// Prints one JSON line:
//   {"batchSettlement":"0x..","erc3009Collector":"0x..","permit2Collector":"0x..","multicall3":"0x..","permit2":"0x.."}

import { parseArgs } from "node:util";
import { createPublicClient, http } from "viem";
import { INSTALLS, artifact, usage } from "./common.mjs";

const LINE = "node batch/deploy.mjs --rpc URL";
let values;
try {
  ({ values } = parseArgs({ options: { rpc: { type: "string" } }, strict: true }));
} catch (e) {
  usage("deploy.mjs", LINE, e.message);
}
if (!values.rpc) usage("deploy.mjs", LINE, "--rpc is required");

async function main() {
  const client = createPublicClient({ transport: http(values.rpc) });
  const out = {};
  for (const { name, artifact: file, address } of INSTALLS) {
    const code = artifact(file).deployedBytecode;
    await client.request({ method: "anvil_setCode", params: [address, code] });
    const installed = await client.getCode({ address });
    if (installed?.toLowerCase() !== code.toLowerCase()) throw new Error(`code at ${address} is not ${file}`);
    out[name] = address;
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

main().catch((e) => {
  process.stderr.write(`deploy.mjs: ${e?.shortMessage ?? e?.message ?? String(e)}\n`);
  process.exit(1);
});
