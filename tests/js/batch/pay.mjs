#!/usr/bin/env node
// Pays N calls to a batch-settlement URL with the OFFICIAL client:
// @x402/fetch `wrapFetchWithPayment(fetch, client)` with
// `new x402Client().register("eip155:*", new BatchSettlementEvmScheme(signer, options))`
// (@x402/evm/batch-settlement/client), signer = toClientEvmSigner(account, publicClient).
// The calls run one after another with ONE client (so one channel, one
// in-memory channel store): the first call deposits, the rest send vouchers.
//
// Usage:
//   node batch/pay.mjs --url URL --key 0xBUYERKEY --rpc http://127.0.0.1:PORT
//        [--calls 1] [--deposit ATOMIC] [--salt 0x<32 bytes>] [--method GET]
//        [--record-headers] [--refund all|ATOMIC] [--timeout-ms 60000]
//
//   --deposit         deposit exactly this much when the client needs to
//                     deposit (a depositStrategy); default: the official policy
//                     (the server's extra.minDeposit, else 5 x the price).
//   --salt            the channel salt (a new salt = a new channel).
//   --record-headers  also print, per call, the raw PAYMENT-SIGNATURE header
//                     the client sent (base64 JSON), to replay or alter it.
//   --refund all|N    after the calls, ask for a cooperative refund with the
//                     official client's refund(url[, {amount}]).
//
// Output: ONE JSON line on stdout:
//   {"payer":"0x..","channelId":"0x..|null","deposits":<how many deposit payloads were sent>,
//    "calls":[{"status":200,"body":"..","paymentResponse":{..}|null,
//              "sent":[{"type":"deposit|voucher","maxClaimableAmount":"..","depositAmount":"..|null",
//                       "header":"<base64>" (with --record-headers)}]}],
//    "refund":<settle response>|null}
// ("sent" lists every paid request the client made for that call: a corrective
// 402 and its retry show up as two entries.) Exit 0 when every HTTP exchange
// completed (any status); 1 with a message on stderr if the client threw;
// 2 on bad arguments. The private key is never printed.

import { parseArgs } from "node:util";
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { toClientEvmSigner } from "@x402/evm";
import { BatchSettlementEvmScheme } from "@x402/evm/batch-settlement/client";
import { createPublicClient, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { checkKey, localChain, toJson, usage } from "./common.mjs";

const LINE =
  "node batch/pay.mjs --url URL --key 0xKEY --rpc URL [--calls 1] [--deposit ATOMIC] [--salt 0x..] [--method GET] " +
  "[--record-headers] [--refund all|ATOMIC] [--timeout-ms 60000]";
let values;
try {
  ({ values } = parseArgs({
    options: {
      url: { type: "string" },
      key: { type: "string" },
      rpc: { type: "string" },
      calls: { type: "string", default: "1" },
      deposit: { type: "string" },
      salt: { type: "string" },
      method: { type: "string", default: "GET" },
      "record-headers": { type: "boolean", default: false },
      refund: { type: "string" },
      "timeout-ms": { type: "string", default: "60000" },
    },
    strict: true,
    allowNegative: false,
  }));
} catch (e) {
  usage("pay.mjs", LINE, e.message);
}
if (!values.url) usage("pay.mjs", LINE, "--url is required");
if (!values.rpc) usage("pay.mjs", LINE, "--rpc is required");
checkKey("pay.mjs", LINE, "--key", values.key);
for (const k of ["calls", "timeout-ms"]) if (!/^\d+$/.test(values[k])) usage("pay.mjs", LINE, `--${k} must be an integer`);
if (values.deposit !== undefined && !/^[1-9]\d*$/.test(values.deposit)) usage("pay.mjs", LINE, "--deposit must be a positive integer");
if (values.salt !== undefined && !/^0x[0-9a-fA-F]{64}$/.test(values.salt)) usage("pay.mjs", LINE, "--salt must be 32 bytes hex");
if (values.refund !== undefined && values.refund !== "all" && !/^\d+$/.test(values.refund)) {
  usage("pay.mjs", LINE, "--refund takes all or an atomic amount");
}

function decodeSent(header) {
  try {
    const payment = JSON.parse(Buffer.from(header, "base64").toString("utf8"));
    const p = payment.payload ?? {};
    return {
      type: p.type ?? null,
      channelId: p.voucher?.channelId ?? null,
      maxClaimableAmount: p.voucher?.maxClaimableAmount ?? null,
      depositAmount: p.deposit?.amount ?? null,
    };
  } catch {
    return { type: null, channelId: null, maxClaimableAmount: null, depositAmount: null };
  }
}

async function main() {
  const chain = await localChain(values.rpc);
  const account = privateKeyToAccount(values.key);
  const publicClient = createPublicClient({ chain, transport: http(values.rpc) });
  const signer = toClientEvmSigner(account, publicClient);
  const options = {
    ...(values.salt ? { salt: values.salt } : {}),
    ...(values.deposit ? { depositStrategy: () => values.deposit } : {}),
  };
  const scheme = new BatchSettlementEvmScheme(signer, options);
  const client = new x402Client().register("eip155:*", scheme).setSpendControls(false);

  // The network fetch under the official wrapper: records what it sends.
  let sent = [];
  const recordingFetch = async (input, init) => {
    const request = new Request(input, init);
    const header = request.headers.get("payment-signature");
    if (header) sent.push({ ...decodeSent(header), ...(values["record-headers"] ? { header } : {}) });
    return fetch(request);
  };
  const payFetch = wrapFetchWithPayment(recordingFetch, client);

  const calls = [];
  let channelId = null;
  let deposits = 0;
  for (let i = 0; i < Number(values.calls); i++) {
    sent = [];
    const response = await payFetch(values.url, {
      method: values.method.toUpperCase(),
      signal: AbortSignal.timeout(Number(values["timeout-ms"])),
    });
    const body = await response.text();
    const raw = response.headers.get("payment-response");
    let paymentResponse = null;
    if (raw) {
      try {
        paymentResponse = decodePaymentResponseHeader(raw);
      } catch {
        paymentResponse = { undecodable: raw };
      }
    }
    for (const s of sent) {
      if (s.type === "deposit") deposits += 1;
      channelId ??= s.channelId;
    }
    calls.push({ status: response.status, body, paymentResponse, sent });
  }

  let refund = null;
  if (values.refund !== undefined) {
    refund = await scheme.refund(values.url, values.refund === "all" ? {} : { amount: values.refund });
  }
  process.stdout.write(`${toJson({ payer: account.address, channelId, deposits, calls, refund })}\n`);
}

main().catch((e) => {
  process.stderr.write(`pay.mjs: ${e?.stack ?? e?.message ?? String(e)}\n`);
  process.exit(1);
});
