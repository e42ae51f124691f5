#!/usr/bin/env node
// An HTTP facilitator on 127.0.0.1 built from the OFFICIAL facilitator classes:
// `x402Facilitator` (@x402/core/facilitator) with the batch-settlement
// facilitator scheme (@x402/evm/batch-settlement/facilitator) and the exact
// one (@x402/evm/exact/facilitator), on a local anvil.
//
// Usage:
//   node batch/facilitator.mjs --rpc http://127.0.0.1:PORT --key 0xRELAYERKEY
//        [--authorizer-key 0xKEY] [--port 0] [--network eip155:<chainId>]
//
//   --key             the facilitator's gas payer (submits deposit, claim,
//                     settle and refund transactions); an anvil dev key.
//   --authorizer-key  the receiverAuthorizer the facilitator signs claims and
//                     refunds with when a server delegates them (advertised as
//                     `extra.receiverAuthorizer` of the batch-settlement kind in
//                     GET /supported). Without it, servers must sign their own.
//   --port            0 (default) picks a free port. PORT in the environment
//                     is used when --port is not given.
//
// HTTP API (as upstream's facilitator):
//   POST /verify    {x402Version, paymentPayload, paymentRequirements} -> VerifyResponse
//   POST /settle    {x402Version, paymentPayload, paymentRequirements} -> SettleResponse
//   GET  /supported -> {kinds, extensions, signers}
//   GET  /health    -> {"ok":true}
// Results (also isValid:false / success:false) are 200; a body that is not
// JSON or lacks the two objects is 400 {"error"}; a thrown error is 500 {"error"}.
//
// Once listening it prints ONE JSON line on stdout:
//   {"ready":true,"url":"http://127.0.0.1:PORT","relayer":"0x..","receiverAuthorizer":"0x..|null","network":"eip155:N"}
// and one line per request on stderr ("verify deposit -> isValid=true"); it
// never prints a key. It runs until killed (SIGTERM/SIGINT end it cleanly).

import { createServer } from "node:http";
import { parseArgs } from "node:util";
import { x402Facilitator } from "@x402/core/facilitator";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { BatchSettlementEvmScheme } from "@x402/evm/batch-settlement/facilitator";
import { ExactEvmScheme } from "@x402/evm/exact/facilitator";
import { privateKeyToAccount } from "viem/accounts";
import { checkKey, localChain, toJson, usage, walletOn } from "./common.mjs";

const LINE =
  "node batch/facilitator.mjs --rpc URL --key 0xRELAYERKEY [--authorizer-key 0xKEY] [--port 0] [--network eip155:N]";
let values;
try {
  ({ values } = parseArgs({
    options: {
      rpc: { type: "string" },
      key: { type: "string" },
      "authorizer-key": { type: "string" },
      port: { type: "string" },
      network: { type: "string" },
    },
    strict: true,
  }));
} catch (e) {
  usage("facilitator.mjs", LINE, e.message);
}
if (!values.rpc) usage("facilitator.mjs", LINE, "--rpc is required");
checkKey("facilitator.mjs", LINE, "--key", values.key);
if (values["authorizer-key"] !== undefined) checkKey("facilitator.mjs", LINE, "--authorizer-key", values["authorizer-key"]);
const port = values.port ?? process.env.PORT ?? "0";
if (!/^\d+$/.test(port)) usage("facilitator.mjs", LINE, "--port must be an integer");

const MAX_BODY = 1 << 20;

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(Object.assign(new Error("request body too large"), { status: 413 }));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

function send(res, status, body) {
  const text = toJson(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

function kindOf(paymentPayload) {
  const scheme = paymentPayload?.accepted?.scheme ?? "?";
  const type = paymentPayload?.payload?.type;
  return type ? `${scheme}/${type}` : scheme;
}

async function main() {
  const chain = await localChain(values.rpc);
  const network = values.network ?? `eip155:${chain.id}`;
  const wallet = walletOn(chain, values.key);
  const signer = toFacilitatorEvmSigner({ ...wallet, address: wallet.account.address });
  const authorizer = values["authorizer-key"] ? privateKeyToAccount(values["authorizer-key"]) : undefined;

  const facilitator = new x402Facilitator()
    .register(network, new BatchSettlementEvmScheme(signer, authorizer))
    .register(network, new ExactEvmScheme(signer));

  const server = createServer(async (req, res) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    try {
      if (req.method === "GET" && path === "/supported") return send(res, 200, facilitator.getSupported());
      if (req.method === "GET" && path === "/health") return send(res, 200, { ok: true });
      if (req.method === "POST" && (path === "/verify" || path === "/settle")) {
        let body;
        try {
          body = JSON.parse(await readBody(req));
        } catch (e) {
          return send(res, e.status ?? 400, { error: e.status ? e.message : "body is not JSON" });
        }
        const { paymentPayload, paymentRequirements } = body ?? {};
        if (typeof paymentPayload !== "object" || paymentPayload === null || typeof paymentRequirements !== "object" || paymentRequirements === null) {
          return send(res, 400, { error: "paymentPayload and paymentRequirements are required" });
        }
        if (path === "/verify") {
          const result = await facilitator.verify(paymentPayload, paymentRequirements);
          process.stderr.write(
            `facilitator: verify ${kindOf(paymentPayload)} -> isValid=${result.isValid}${result.invalidReason ? ` (${result.invalidReason})` : ""}\n`,
          );
          return send(res, 200, result);
        }
        const result = await facilitator.settle(paymentPayload, paymentRequirements);
        process.stderr.write(
          `facilitator: settle ${kindOf(paymentPayload)} -> success=${result.success}${result.errorReason ? ` (${result.errorReason})` : ""} tx=${result.transaction || "-"}\n`,
        );
        return send(res, 200, result);
      }
      return send(res, 404, { error: "not found" });
    } catch (e) {
      process.stderr.write(`facilitator: ${req.method} ${path} threw: ${e?.message ?? e}\n`);
      if (!res.headersSent) send(res, 500, { error: e?.message ?? String(e) });
    }
  });

  server.listen(Number(port), "127.0.0.1", () => {
    const { port: bound } = server.address();
    process.stdout.write(
      `${JSON.stringify({
        ready: true,
        url: `http://127.0.0.1:${bound}`,
        relayer: wallet.account.address,
        receiverAuthorizer: authorizer?.address ?? null,
        network,
      })}\n`,
    );
  });
  const stop = () => server.close(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main().catch((e) => {
  process.stderr.write(`facilitator.mjs: ${e?.shortMessage ?? e?.message ?? String(e)}\n`);
  process.exit(1);
});
