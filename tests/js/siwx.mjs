#!/usr/bin/env node
// Signs in to a sign-in-with-x route with the official @x402/extensions helpers.
//
// Usage:
//   node siwx.mjs --url URL --key 0xPRIVKEY [--mode sign-in|replay|foreign]
//                 [--proof HEADER]              (replay: the SIGN-IN-WITH-X value to send again)
//                 [--foreign-origin URL]        (foreign: the origin the proof is built for)
//                 [--timeout-ms 30000]
//
// --mode sign-in (default): wrapFetchWithSIWx(fetch, account) fetches URL; on the 402 it
//   reads extensions["sign-in-with-x"], signs the SIWE message for the chain of the first
//   offer (createSIWxPayload, EIP-191 with a viem account) and sends the request again
//   with the SIGN-IN-WITH-X header (encodeSIWxHeader).
// --mode replay: sends --proof again as SIGN-IN-WITH-X, with plain fetch.
// --mode foreign: fetches the 402, moves its domain/uri/resources to --foreign-origin (a
//   proof a site at that origin could have obtained), signs it there with
//   createSIWxPayload and sends it to URL.
//
// Output: exactly one JSON line on stdout
//   {"status": <int>, "body": <string>, "proof": <SIGN-IN-WITH-X value sent|null>,
//    "error": <the final 402's PAYMENT-REQUIRED "error"|null>,
//    "cacheControl": <the final response's Cache-Control|null>}
// Exit 0 whenever the HTTP exchange completed (any status); 1 if the client threw;
// 2 on bad arguments. The private key is never printed.

import { parseArgs } from "node:util";
import { privateKeyToAccount } from "viem/accounts";

function usage(msg) {
  process.stderr.write(
    `${msg ? `siwx.mjs: ${msg}\n` : ""}usage: node siwx.mjs --url URL --key 0xPRIVKEY ` +
      `[--mode sign-in|replay|foreign] [--proof HEADER] [--foreign-origin URL] [--timeout-ms 30000]\n`,
  );
  process.exit(2);
}

let values;
try {
  ({ values } = parseArgs({
    options: {
      url: { type: "string" },
      key: { type: "string" },
      mode: { type: "string", default: "sign-in" },
      proof: { type: "string" },
      "foreign-origin": { type: "string" },
      "timeout-ms": { type: "string", default: "30000" },
    },
    strict: true,
  }));
} catch (e) {
  usage(e.message);
}
if (!values.url) usage("--url is required");
if (!values.key || !/^0x[0-9a-fA-F]{64}$/.test(values.key)) usage("--key must be a 0x-prefixed 32-byte hex private key");
if (!["sign-in", "replay", "foreign"].includes(values.mode)) usage("--mode must be sign-in, replay or foreign");
if (values.mode === "replay" && !values.proof) usage("--mode replay needs --proof");
if (values.mode === "foreign" && !values["foreign-origin"]) usage("--mode foreign needs --foreign-origin");
if (!/^\d+$/.test(values["timeout-ms"])) usage("--timeout-ms must be an integer");

const HEADER = "SIGN-IN-WITH-X";
const account = privateKeyToAccount(values.key);
const signal = AbortSignal.timeout(Number(values["timeout-ms"]));

const { SIGN_IN_WITH_X, createSIWxPayload, encodeSIWxHeader, wrapFetchWithSIWx } = await import(
  "@x402/extensions/sign-in-with-x"
);
const { decodePaymentRequiredHeader } = await import("@x402/core/http");

/** fetch that remembers the SIGN-IN-WITH-X value of the last request it sent. */
let sent = null;
const recordingFetch = async (input, init) => {
  const request = new Request(input, init);
  sent = request.headers.get(HEADER);
  return fetch(request, { signal });
};

function challengeOf(response) {
  const raw = response.headers.get("PAYMENT-REQUIRED");
  return raw ? decodePaymentRequiredHeader(raw) : null;
}

async function signIn() {
  return wrapFetchWithSIWx(recordingFetch, account)(values.url);
}

async function replay() {
  return recordingFetch(values.url, { headers: { [HEADER]: values.proof } });
}

async function foreign() {
  const first = await fetch(values.url, { signal });
  const challenge = challengeOf(first);
  const declaration = challenge?.extensions?.[SIGN_IN_WITH_X];
  if (!declaration) throw new Error(`no ${SIGN_IN_WITH_X} declaration in the ${first.status}`);
  const origin = new URL(values["foreign-origin"]);
  const path = new URL(values.url).pathname;
  const uri = new URL(path, origin).toString();
  const chain = declaration.supportedChains[0];
  const info = { ...declaration.info, domain: origin.host, uri, resources: [uri], chainId: chain.chainId, type: chain.type };
  const payload = await createSIWxPayload(info, account, uri);
  return recordingFetch(values.url, { headers: { [HEADER]: encodeSIWxHeader(payload) } });
}

async function main() {
  const run = { "sign-in": signIn, replay, foreign }[values.mode];
  const response = await run();
  const body = await response.text();
  const error = response.status === 402 ? (challengeOf(response)?.error ?? null) : null;
  const cacheControl = response.headers.get("cache-control");
  process.stdout.write(`${JSON.stringify({ status: response.status, body, proof: sent, error, cacheControl })}\n`);
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`siwx.mjs: ${e?.shortMessage ?? e?.message ?? String(e)}\n`);
    process.exit(1);
  },
);
