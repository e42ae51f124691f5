#!/usr/bin/env node
// Pays an x402-protected URL with the official x402 clients and reports the result.
//
// Usage:
//   node pay.mjs --client v2|v1 --url URL --key 0xPRIVKEY
//                [--rpc http://127.0.0.1:PORT] [--chain-id 84532]
//                [--method GET] [--data BODY] [--header "Name: value"]...
//                [--schemes exact[,upto]]      (v2 only; default: exact)
//                [--spend-controls off|sdk]     (v2 only; default: off)
//                [--max-value ATOMIC|sdk]       (v1 only; default: no cap)
//                [--timeout-ms 60000]
//
// --client v2: @x402/fetch `wrapFetchWithPayment(fetch, client)` where
//   client = new x402Client() (re-exported by @x402/fetch)
//     .register("eip155:*", new ExactEvmScheme(signer))        // @x402/evm
//     [.register("eip155:*", new UptoEvmScheme(signer))]       // @x402/evm/upto/client, with --schemes exact,upto
//     .setSpendControls(false)                                 // unless --spend-controls sdk
//   and signer = toClientEvmSigner(privateKeyToAccount(key), publicClient(--rpc)).
//   Only v2 schemes are registered, so a v1-style 402 (no PAYMENT-REQUIRED header) makes
//   the client throw ("No client registered for x402 version: 1").
// --client v1: legacy x402-fetch `wrapFetchWithPayment(fetch, walletClient, maxValue)`
//   with a viem wallet client whose chain id is --chain-id (84532 => "base-sepolia").
//
// Output: exactly one JSON line on stdout
//   {"status": <int>, "body": <string>, "paymentResponse": <object|null>,
//    "paymentResponseHeader": "PAYMENT-RESPONSE" | "X-PAYMENT-RESPONSE" | null}
// Exit 0 whenever the HTTP exchange completed (any status). Exit 1 with a message
// on stderr if the client threw (e.g. no acceptable requirement, bad 402 body).
// Exit 2 on bad command-line arguments. The private key is never printed.

import { parseArgs } from "node:util";
import { createPublicClient, createWalletClient, defineChain, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { baseSepolia } from "viem/chains";

function usage(msg) {
  process.stderr.write(
    `${msg ? `pay.mjs: ${msg}\n` : ""}usage: node pay.mjs --client v2|v1 --url URL --key 0xPRIVKEY [--rpc URL] [--chain-id 84532] ` +
      `[--method GET] [--data BODY] [--header "Name: value"]... [--schemes exact,upto] [--spend-controls off|sdk] ` +
      `[--max-value ATOMIC|sdk] [--timeout-ms 60000]\n`,
  );
  process.exit(2);
}

let values;
try {
  ({ values } = parseArgs({
    options: {
      client: { type: "string" },
      url: { type: "string" },
      key: { type: "string" },
      rpc: { type: "string", default: "http://127.0.0.1:8545" },
      "chain-id": { type: "string", default: "84532" },
      method: { type: "string", default: "GET" },
      data: { type: "string" },
      header: { type: "string", multiple: true, default: [] },
      schemes: { type: "string", default: "exact" },
      "spend-controls": { type: "string", default: "off" },
      "max-value": { type: "string" },
      "timeout-ms": { type: "string", default: "60000" },
    },
    strict: true,
  }));
} catch (e) {
  usage(e.message);
}

if (values.client !== "v1" && values.client !== "v2") usage("--client must be v1 or v2");
if (!values.url) usage("--url is required");
if (!values.key || !/^0x[0-9a-fA-F]{64}$/.test(values.key)) usage("--key must be a 0x-prefixed 32-byte hex private key");
if (!/^\d+$/.test(values["chain-id"])) usage("--chain-id must be an integer");
if (!/^\d+$/.test(values["timeout-ms"])) usage("--timeout-ms must be an integer");
if (!["off", "sdk"].includes(values["spend-controls"])) usage("--spend-controls must be off or sdk");
const schemes = values.schemes.split(",").map((s) => s.trim()).filter(Boolean);
for (const s of schemes) if (s !== "exact" && s !== "upto") usage(`unknown scheme ${JSON.stringify(s)} in --schemes`);
if (values["max-value"] !== undefined && values["max-value"] !== "sdk" && !/^\d+$/.test(values["max-value"])) {
  usage("--max-value must be an integer (atomic units) or sdk");
}

const chainId = Number(values["chain-id"]);
const chain =
  chainId === baseSepolia.id
    ? { ...baseSepolia, rpcUrls: { default: { http: [values.rpc] } } }
    : defineChain({
        id: chainId,
        name: `local-${chainId}`,
        nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
        rpcUrls: { default: { http: [values.rpc] } },
      });
const transport = http(values.rpc);
const account = privateKeyToAccount(values.key);

const headers = new Headers();
for (const h of values.header) {
  const i = h.indexOf(":");
  if (i <= 0) usage(`bad --header ${JSON.stringify(h)} (expected "Name: value")`);
  headers.append(h.slice(0, i).trim(), h.slice(i + 1).trim());
}
const init = {
  method: values.method.toUpperCase(),
  headers,
  signal: AbortSignal.timeout(Number(values["timeout-ms"])),
};
if (values.data !== undefined) init.body = values.data;

function decodeFallback(raw) {
  return JSON.parse(Buffer.from(raw, "base64").toString("utf8"));
}

async function payV2() {
  const { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } = await import("@x402/fetch");
  const { ExactEvmScheme, toClientEvmSigner } = await import("@x402/evm");

  const publicClient = createPublicClient({ chain, transport });
  const signer = toClientEvmSigner(account, publicClient);
  const client = new x402Client();
  if (schemes.includes("exact")) client.register("eip155:*", new ExactEvmScheme(signer));
  if (schemes.includes("upto")) {
    const { UptoEvmScheme } = await import("@x402/evm/upto/client");
    client.register("eip155:*", new UptoEvmScheme(signer));
  }
  // The SDK's default spend controls only allow known "default assets" (e.g. the real
  // Base Sepolia USDC address) and cap payments at $1; our freshly deployed TestUSDC is
  // unknown to it and would be refused. "sdk" keeps the SDK defaults.
  if (values["spend-controls"] === "off") client.setSpendControls(false);

  const fetchWithPayment = wrapFetchWithPayment(fetch, client);
  const response = await fetchWithPayment(values.url, init);
  return { response, decode: decodePaymentResponseHeader };
}

async function payV1() {
  const { wrapFetchWithPayment, decodeXPaymentResponse } = await import("x402-fetch");
  const walletClient = createWalletClient({ account, chain, transport });
  const mv = values["max-value"];
  // x402-fetch's own default cap is 0.1 USDC (100000 atomic units); "sdk" keeps it.
  const maxValue = mv === "sdk" ? undefined : mv !== undefined ? BigInt(mv) : 2n ** 256n - 1n;
  const fetchWithPayment = wrapFetchWithPayment(fetch, walletClient, maxValue);
  const response = await fetchWithPayment(values.url, init);
  return { response, decode: decodeXPaymentResponse };
}

async function main() {
  const { response, decode } = values.client === "v2" ? await payV2() : await payV1();
  const body = await response.text();

  let paymentResponseHeader = null;
  let raw = null;
  for (const name of ["PAYMENT-RESPONSE", "X-PAYMENT-RESPONSE"]) {
    const v = response.headers.get(name);
    if (v !== null) {
      paymentResponseHeader = name;
      raw = v;
      break;
    }
  }

  let paymentResponse = null;
  if (raw !== null) {
    try {
      paymentResponse = decode(raw);
    } catch (e) {
      try {
        paymentResponse = decodeFallback(raw);
      } catch {
        process.stderr.write(`pay.mjs: could not decode ${paymentResponseHeader} header: ${e?.message ?? e}\n`);
      }
    }
  }

  process.stdout.write(
    `${JSON.stringify({ status: response.status, body, paymentResponse, paymentResponseHeader })}\n`,
  );
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`pay.mjs: ${e?.shortMessage ?? e?.message ?? String(e)}\n`);
    process.exit(1);
  },
);
