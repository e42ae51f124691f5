#!/usr/bin/env node
// Compiles the test contracts with solc-js (standard JSON input, optimizer on)
// and writes one JSON artifact per contract next to its source:
//   { contractName, abi, bytecode: "0x...", deployedBytecode: "0x...", solcVersion, settings }
//
//   contracts/TestUSDC.sol    -> TestUSDC.json
//   contracts/TestPermit2.sol -> TestPermit2.json, TestX402UptoPermit2Proxy.json,
//                                TestX402ExactPermit2Proxy.json
//   contracts/TestSiwxWallet.sol -> TestSiwxWallet.json
//   contracts/TestBatchSettlement.sol -> TestBatchSettlement.json,
//                                TestErc3009DepositCollector.json, TestPermit2DepositCollector.json,
//                                TestMulticall3.json
//
// Usage: node contracts/compile.mjs        (or: npm run compile)
//
// The output is deterministic for a given source + solc version (the metadata
// hash is not appended to the bytecode), so the committed artifacts only change
// when a Solidity source or the pinned solc version changes. Each source is
// compiled on its own, so adding a source never changes another's artifacts.

import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import solc from "solc";

const here = dirname(fileURLToPath(import.meta.url));
/** Each source file and the contracts in it that get an artifact. */
const targets = [
  { sourceFile: "TestUSDC.sol", contracts: ["TestUSDC"] },
  {
    sourceFile: "TestPermit2.sol",
    contracts: ["TestPermit2", "TestX402UptoPermit2Proxy", "TestX402ExactPermit2Proxy"],
  },
  { sourceFile: "TestSiwxWallet.sol", contracts: ["TestSiwxWallet"] },
  {
    sourceFile: "TestBatchSettlement.sol",
    contracts: ["TestBatchSettlement", "TestErc3009DepositCollector", "TestPermit2DepositCollector", "TestMulticall3"],
  },
];

const settings = {
  optimizer: { enabled: true, runs: 200 },
  // Pinned so the artifact does not depend on solc's default; anvil supports it.
  evmVersion: "cancun",
  metadata: { bytecodeHash: "none" },
  outputSelection: {
    "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] },
  },
};

function compile({ sourceFile, contracts }) {
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
    process.stderr.write(`compile.mjs: compilation of ${sourceFile} failed\n`);
    process.exit(1);
  }

  for (const contractName of contracts) {
    const contract = output.contracts?.[sourceFile]?.[contractName];
    if (!contract?.evm?.bytecode?.object) {
      process.stderr.write(`compile.mjs: no bytecode for ${contractName}\n`);
      process.exit(1);
    }

    const outFile = join(here, `${contractName}.json`);
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
  }
}

for (const target of targets) {
  compile(target);
}
