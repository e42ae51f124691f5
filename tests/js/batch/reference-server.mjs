#!/usr/bin/env node
// A tiny seller on node:http built from the OFFICIAL resource-server classes:
// `x402ResourceServer` + `x402HTTPResourceServer` + `HTTPFacilitatorClient`
// (@x402/core/server) with the batch-settlement server scheme
// (@x402/evm/batch-settlement/server). It is the reference the Rust seller is
// compared with, and proves that our escrow contract, the official
// facilitator and the official client work together.
//
// Usage:
//   node batch/reference-server.mjs --facilitator URL --pay-to 0xRECEIVER --token 0xTOKEN
//        [--token-name USDC] [--token-version 2] [--price 1000] [--charge PRICE]
//        [--authorizer-key 0xKEY] [--withdraw-delay 900] [--transfer-method eip3009|permit2]
//        [--network eip155:84532] [--port 0]
//
//   --price           the per-call ceiling (PaymentRequirements.amount), atomic units.
//   --charge          what a call actually costs (<= price; default = price), set
//                     with the settlement-overrides header so the official
//                     scheme charges less than the ceiling (dynamic pricing).
//   --authorizer-key  the server signs its own claims and refunds with this
//                     receiverAuthorizer key; without it, it delegates to the
//                     facilitator's advertised receiverAuthorizer.
//   --transfer-method the deposit path offered as extra.assetTransferMethod
//                     (default: none, which the client takes as eip3009).
//
// Routes:
//   GET  /batch/evm                      paid: {"ok":true,"call":N} (N counts handler runs)
//   POST /admin/claim-and-settle         runs the official channel manager's
//                                        claimAndSettle(): {"claims":[{vouchers,transaction}],"settle":{transaction}|null}
//   POST /admin/claim                    claim() only: {"claims":[...]}
//   POST /admin/refund                   refund() of every channel: {"refunds":[{channel,transaction}]}
//   GET  /admin/channels                 the scheme's channel storage: {"channels":[...]}
//   GET  /admin/stats                    {"handlerRuns":N}
//
// Prints ONE JSON line on stdout once listening:
//   {"ready":true,"url":"http://127.0.0.1:PORT","receiverAuthorizer":"0x.."}

import { createServer } from "node:http";
import { parseArgs } from "node:util";
import {
  HTTPFacilitatorClient,
  SETTLEMENT_OVERRIDES_HEADER,
  x402HTTPResourceServer,
  x402ResourceServer,
} from "@x402/core/server";
import { BatchSettlementEvmScheme } from "@x402/evm/batch-settlement/server";
import { getAddress } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { checkKey, toJson, usage } from "./common.mjs";

const LINE =
  "node batch/reference-server.mjs --facilitator URL --pay-to 0xADDR --token 0xADDR [--token-name USDC] [--token-version 2] " +
  "[--price 1000] [--charge N] [--authorizer-key 0xKEY] [--withdraw-delay 900] [--transfer-method eip3009|permit2] " +
  "[--network eip155:84532] [--port 0]";
let values;
try {
  ({ values } = parseArgs({
    options: {
      facilitator: { type: "string" },
      "pay-to": { type: "string" },
      token: { type: "string" },
      "token-name": { type: "string", default: "USDC" },
      "token-version": { type: "string", default: "2" },
      price: { type: "string", default: "1000" },
      charge: { type: "string" },
      "authorizer-key": { type: "string" },
      "withdraw-delay": { type: "string", default: "900" },
      "transfer-method": { type: "string" },
      network: { type: "string", default: "eip155:84532" },
      port: { type: "string", default: "0" },
    },
    strict: true,
  }));
} catch (e) {
  usage("reference-server.mjs", LINE, e.message);
}
for (const k of ["facilitator", "pay-to", "token"]) if (!values[k]) usage("reference-server.mjs", LINE, `--${k} is required`);
for (const k of ["price", "withdraw-delay", "port"]) if (!/^\d+$/.test(values[k])) usage("reference-server.mjs", LINE, `--${k} must be an integer`);
if (values.charge !== undefined && (!/^\d+$/.test(values.charge) || BigInt(values.charge) > BigInt(values.price))) {
  usage("reference-server.mjs", LINE, "--charge must be an integer <= --price");
}
if (values["transfer-method"] !== undefined && !["eip3009", "permit2"].includes(values["transfer-method"])) {
  usage("reference-server.mjs", LINE, "--transfer-method must be eip3009 or permit2");
}
if (values["authorizer-key"] !== undefined) checkKey("reference-server.mjs", LINE, "--authorizer-key", values["authorizer-key"]);

const network = values.network;
const payTo = getAddress(values["pay-to"]);
const token = getAddress(values.token);
const ROUTE = "/batch/evm";

/** The node:http request as the official HTTPAdapter. */
function adapterOf(req, url) {
  return {
    getHeader: (name) => {
      const v = req.headers[name.toLowerCase()];
      return Array.isArray(v) ? v.join(", ") : v;
    },
    getMethod: () => req.method ?? "GET",
    getPath: () => url.pathname,
    getUrl: () => url.href,
    getAcceptHeader: () => req.headers.accept ?? "",
    getUserAgent: () => req.headers["user-agent"] ?? "",
    getQueryParams: () => Object.fromEntries(url.searchParams),
    getQueryParam: (name) => url.searchParams.get(name) ?? undefined,
  };
}

function send(res, status, headers, body) {
  const text = typeof body === "string" ? body : toJson(body ?? {});
  const lower = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
  res.writeHead(status, { "content-type": "application/json", ...lower, "content-length": Buffer.byteLength(text) });
  res.end(text);
}

async function main() {
  const authorizer = values["authorizer-key"] ? privateKeyToAccount(values["authorizer-key"]) : undefined;
  const scheme = new BatchSettlementEvmScheme(payTo, {
    withdrawDelay: Number(values["withdraw-delay"]),
    ...(authorizer ? { receiverAuthorizerSigner: authorizer } : {}),
  });
  const facilitator = new HTTPFacilitatorClient({ url: values.facilitator });
  const resourceServer = new x402ResourceServer(facilitator).register(network, scheme);
  const routes = {
    [`GET ${ROUTE}`]: {
      accepts: {
        scheme: "batch-settlement",
        network,
        payTo,
        price: {
          amount: values.price,
          asset: token,
          extra: {
            name: values["token-name"],
            version: values["token-version"],
            ...(values["transfer-method"] ? { assetTransferMethod: values["transfer-method"] } : {}),
          },
        },
        maxTimeoutSeconds: 3600,
      },
      description: "batch-settlement reference route",
      mimeType: "application/json",
    },
  };
  const httpServer = new x402HTTPResourceServer(resourceServer, routes);
  await httpServer.initialize();
  const manager = scheme.createChannelManager(facilitator, network, token);

  let handlerRuns = 0;
  let serial = Promise.resolve();

  async function handle(req, res) {
    const url = new URL(req.url ?? "/", `http://${req.headers.host ?? "127.0.0.1"}`);
    if (url.pathname.startsWith("/admin/")) {
      if (req.method === "POST" && url.pathname === "/admin/claim-and-settle") {
        const r = await manager.claimAndSettle();
        return send(res, 200, {}, { claims: r.claims, settle: r.settle ?? null });
      }
      if (req.method === "POST" && url.pathname === "/admin/claim") return send(res, 200, {}, { claims: await manager.claim() });
      if (req.method === "POST" && url.pathname === "/admin/refund") return send(res, 200, {}, { refunds: await manager.refund() });
      if (req.method === "GET" && url.pathname === "/admin/channels") {
        return send(res, 200, {}, { channels: await scheme.getStorage().list() });
      }
      if (req.method === "GET" && url.pathname === "/admin/stats") return send(res, 200, {}, { handlerRuns });
      return send(res, 404, {}, { error: "not found" });
    }

    const adapter = adapterOf(req, url);
    const context = {
      adapter,
      path: url.pathname,
      method: req.method ?? "GET",
      paymentHeader: adapter.getHeader("payment-signature") || adapter.getHeader("x-payment"),
    };
    if (!httpServer.requiresPayment(context)) return send(res, 404, {}, { error: "not found" });

    const result = await httpServer.processHTTPRequest(context);
    if (result.type === "payment-error") {
      const { status, headers, body, isHtml } = result.response;
      return send(res, status, { ...headers, ...(isHtml ? { "content-type": "text/html" } : {}) }, isHtml ? String(body) : (body ?? {}));
    }
    if (result.type === "no-payment-required") return send(res, 200, {}, { ok: true, free: true });

    // payment-verified: run the handler, then settle with the official server.
    handlerRuns += 1;
    const body = toJson({ ok: true, call: handlerRuns });
    const responseHeaders = { "content-type": "application/json" };
    if (values.charge !== undefined) responseHeaders[SETTLEMENT_OVERRIDES_HEADER] = JSON.stringify({ amount: values.charge });
    const settled = await httpServer.processSettlement(
      result.paymentPayload,
      result.paymentRequirements,
      result.declaredExtensions,
      { request: context, responseBody: Buffer.from(body), responseHeaders },
      undefined,
      result.beforeHandlerSettlement,
    );
    if (!settled.success) {
      const { status, headers, body: failBody } = settled.response;
      return send(res, status, headers, failBody ?? {});
    }
    return send(res, 200, settled.headers, body);
  }

  const server = createServer((req, res) => {
    // One request at a time: the reference is about correctness, not speed.
    serial = serial.then(() =>
      handle(req, res).catch((e) => {
        process.stderr.write(`reference-server: ${req.method} ${req.url} threw: ${e?.stack ?? e}\n`);
        if (!res.headersSent) send(res, 500, {}, { error: e?.message ?? String(e) });
      }),
    );
  });
  server.listen(Number(values.port), "127.0.0.1", () => {
    const { port } = server.address();
    process.stdout.write(
      `${JSON.stringify({
        ready: true,
        url: `http://127.0.0.1:${port}`,
        receiverAuthorizer: authorizer?.address ?? null,
      })}\n`,
    );
  });
  const stop = () => server.close(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main().catch((e) => {
  process.stderr.write(`reference-server.mjs: ${e?.stack ?? e?.message ?? String(e)}\n`);
  process.exit(1);
});
