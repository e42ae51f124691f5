#!/usr/bin/env node
// Pays an x402-protected URL with the official v2 client and a payment-identifier id,
// and prints the PAYMENT-SIGNATURE header it sent, so a test can send it again.
//
// Usage:
//   node payment-id.mjs --url URL --key 0xPRIVKEY --id ID
//                       [--rpc http://127.0.0.1:PORT] [--mode pay|create] [--timeout-ms 60000]
//
// The client: x402Client (@x402/fetch) with ExactEvmScheme (@x402/evm), spend controls
// off (the test token is unknown to the SDK), and an onBeforePaymentCreation hook that
// adds the id with @x402/extensions' appendPaymentIdentifierToExtensions to the 402's
// declared extensions; the client echoes them into the payment's `extensions`, so the
// payment carries extensions["payment-identifier"].info.id = ID.
//
// --mode pay (default): @x402/fetch wrapFetchWithPayment pays the URL; the fetch it
//   wraps records the PAYMENT-SIGNATURE header of the paid request.
// --mode create: only asks for the 402 and creates the payment (x402HTTPClient), without
//   sending it: the header is printed for the test to send.
//
// Output: one JSON line on stdout
//   {"status": <int|null>, "body": <string|null>, "paymentResponse": <object|null>,
//    "paymentResponseRaw": <string|null>, "paymentSignature": <string|null>,
//    "declared": <the 402's extensions["payment-identifier"]|null>}
// Exit 0 when the exchange completed (any status), 1 if the client threw, 2 on bad
// arguments. The private key is never printed.

import { parseArgs } from "node:util";
import { createPublicClient, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { baseSepolia } from "viem/chains";

function usage(msg) {
  process.stderr.write(
    `${msg ? `payment-id.mjs: ${msg}\n` : ""}usage: node payment-id.mjs --url URL --key 0xPRIVKEY --id ID ` +
      `[--rpc URL] [--mode pay|create] [--timeout-ms 60000]\n`,
  );
  process.exit(2);
}

let values;
try {
  ({ values } = parseArgs({
    options: {
      url: { type: "string" },
      key: { type: "string" },
      id: { type: "string" },
      rpc: { type: "string", default: "http://127.0.0.1:8545" },
      mode: { type: "string", default: "pay" },
      "timeout-ms": { type: "string", default: "60000" },
    },
    strict: true,
  }));
} catch (e) {
  usage(e.message);
}
if (!values.url) usage("--url is required");
if (!values.key || !/^0x[0-9a-fA-F]{64}$/.test(values.key)) usage("--key must be a 0x-prefixed 32-byte hex private key");
if (!values.id) usage("--id is required");
if (!["pay", "create"].includes(values.mode)) usage("--mode must be pay or create");
if (!/^\d+$/.test(values["timeout-ms"])) usage("--timeout-ms must be an integer");

const { wrapFetchWithPayment, x402Client, x402HTTPClient, decodePaymentResponseHeader } = await import("@x402/fetch");
const { ExactEvmScheme, toClientEvmSigner } = await import("@x402/evm");
const { appendPaymentIdentifierToExtensions, PAYMENT_IDENTIFIER } = await import("@x402/extensions/payment-identifier");

const chain = { ...baseSepolia, rpcUrls: { default: { http: [values.rpc] } } };
const publicClient = createPublicClient({ chain, transport: http(values.rpc) });
const signer = toClientEvmSigner(privateKeyToAccount(values.key), publicClient);

let declared = null;
const client = new x402Client().register("eip155:*", new ExactEvmScheme(signer)).setSpendControls(false);
client.onBeforePaymentCreation(async ({ paymentRequired }) => {
  const extensions = paymentRequired.extensions ?? {};
  declared = structuredClone(extensions[PAYMENT_IDENTIFIER] ?? null);
  // Throws on an invalid id; does nothing when the server declared no extension.
  appendPaymentIdentifierToExtensions(extensions, values.id);
  paymentRequired.extensions = extensions;
});

const signal = AbortSignal.timeout(Number(values["timeout-ms"]));

async function pay() {
  let paymentSignature = null;
  const recording = async (input, init) => {
    const request = new Request(input, init);
    const sent = request.headers.get("PAYMENT-SIGNATURE");
    if (sent !== null) paymentSignature = sent;
    return fetch(request);
  };
  const response = await wrapFetchWithPayment(recording, client)(values.url, { signal });
  const body = await response.text();
  const raw = response.headers.get("PAYMENT-RESPONSE");
  let paymentResponse = null;
  if (raw !== null) {
    try {
      paymentResponse = decodePaymentResponseHeader(raw);
    } catch (e) {
      process.stderr.write(`payment-id.mjs: could not decode PAYMENT-RESPONSE: ${e?.message ?? e}\n`);
    }
  }
  return { status: response.status, body, paymentResponse, paymentResponseRaw: raw, paymentSignature };
}

async function create() {
  const httpClient = new x402HTTPClient(client);
  const challenge = await fetch(values.url, { signal });
  if (challenge.status !== 402) throw new Error(`expected a 402, got ${challenge.status}`);
  let body;
  try {
    body = JSON.parse(await challenge.text());
  } catch {}
  const paymentRequired = httpClient.getPaymentRequiredResponse((name) => challenge.headers.get(name), body);
  const payload = await client.createPaymentPayload(paymentRequired);
  const headers = httpClient.encodePaymentSignatureHeader(payload);
  return {
    status: null,
    body: null,
    paymentResponse: null,
    paymentResponseRaw: null,
    paymentSignature: headers["PAYMENT-SIGNATURE"] ?? null,
  };
}

try {
  const result = values.mode === "pay" ? await pay() : await create();
  process.stdout.write(`${JSON.stringify({ ...result, declared })}\n`);
  process.exit(0);
} catch (e) {
  process.stderr.write(`payment-id.mjs: ${e?.shortMessage ?? e?.message ?? String(e)}\n`);
  process.exit(1);
}
