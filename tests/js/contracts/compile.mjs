#!/usr/bin/env node
// Compiles contracts/TestUSDC.sol with solc-js (standard JSON input, optimizer on)
// and writes contracts/TestUSDC.json:
//   { contractName, abi, bytecode: "0x...", deployedBytecode: "0x...", solcVersion, settings }
//
// Usage: node contracts/compile.mjs        (or: npm run compile)
//
// The output is deterministic for a given source + solc version (the metadata
// hash is not appended to the bytecode), so the committed artifact only changes
// when the Solidity source or the pinned solc version changes.

import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import solc from "solc";

const here = dirname(fileURLToPath(import.meta.url));
const contractName = "TestUSDC";
const sourceFile = `${contractName}.sol`;
const outFile = join(here, `${contractName}.json`);

const settings = {
  optimizer: { enabled: true, runs: 200 },
  // Pinned so the artifact does not depend on solc's default; anvil supports it.
  evmVersion: "cancun",
  metadata: { bytecodeHash: "none" },
  outputSelection: {
    "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] },
  },
};

const input = {
  language: "Solidity",
  sources: { [sourceFile]: { content: readFileSync(join(here, sourceFile), "utf8") } },
  settings,
};

const output = JSON.parse(solc.compile(JSON.stringify(input)));

let failed = false;
for (const diag of output.errors ?? []) {
  process.stderr.write(`${diag.formattedMessage ?? diag.message}\n`);
  if (diag.severity === "error") failed = true;
}
if (failed) {
  process.stderr.write("compile.mjs: compilation failed\n");
  process.exit(1);
}

const contract = output.contracts?.[sourceFile]?.[contractName];
if (!contract?.evm?.bytecode?.object) {
  process.stderr.write(`compile.mjs: no bytecode for ${contractName}\n`);
  process.exit(1);
}

const artifact = {
  contractName,
  abi: contract.abi,
  bytecode: `0x${contract.evm.bytecode.object}`,
  deployedBytecode: `0x${contract.evm.deployedBytecode.object}`,
  solcVersion: solc.version(),
  settings: { optimizer: settings.optimizer, evmVersion: settings.evmVersion, metadata: settings.metadata },
};

writeFileSync(outFile, `${JSON.stringify(artifact, null, 2)}\n`);
process.stderr.write(
  `compile.mjs: wrote ${outFile} (solc ${artifact.solcVersion}, ${(artifact.bytecode.length - 2) / 2} bytes init code)\n`,
);
