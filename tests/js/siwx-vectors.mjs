#!/usr/bin/env node
// Writes the sign-in-with-x test vectors of x402-core (src/siwx/testdata/official.json):
// SIWE messages as the official @x402/extensions helpers format them, and a proof
// (the SIGN-IN-WITH-X header and its payload) signed by createSIWxPayload with
// anvil's account 1. Run from tests/js: node siwx-vectors.mjs > ../../x402-core/src/siwx/testdata/official.json
import { createSIWxPayload, encodeSIWxHeader, formatSIWEMessage } from "@x402/extensions/sign-in-with-x";
import { privateKeyToAccount } from "viem/accounts";

const account = privateKeyToAccount("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d");
const full = {
  domain: "127.0.0.1:4021",
  uri: "http://127.0.0.1:4021/siwx/demo",
  version: "1",
  chainId: "eip155:84532",
  type: "eip191",
  nonce: "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6",
  issuedAt: "2026-01-31T12:00:00.000Z",
  expirationTime: "2026-01-31T12:05:00.000Z",
  resources: ["http://127.0.0.1:4021/siwx/demo"],
  statement: "Sign in to the demo",
};
const bare = {
  domain: "api.example.com",
  uri: "https://api.example.com/report?x=1",
  version: "1",
  chainId: "eip155:8453",
  type: "eip191",
  nonce: "abcdefgh1234",
  issuedAt: "2026-01-31T12:00:00Z",
  notBefore: "2026-01-31T11:00:00.000Z",
  requestId: "req-1",
  resources: ["https://api.example.com/report", "ipfs://bafy"],
};
const messages = [full, bare, { ...bare, notBefore: undefined, requestId: undefined, resources: undefined }].map(
  (info) => ({ info, address: account.address, message: formatSIWEMessage(info, account.address) }),
);
const payload = await createSIWxPayload(full, account, full.uri);
const out = { messages, proof: { payload, header: encodeSIWxHeader(payload), signer: account.address } };
process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
