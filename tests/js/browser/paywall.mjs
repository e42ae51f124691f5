#!/usr/bin/env node
// Opens an x402 paywall page in headless Chromium and pays it as a person
// would, with a test wallet injected before the page loads, in each state the
// page must explain. One browser launch; one browser context per scenario.
//
// Usage:
//   node browser/paywall.mjs --url URL --chromium PATH --out DIR
//        --payer-key 0xKEY --poor-key 0xKEY [--chain-id 84532] [--timeout-ms 60000]
//
// The wallet: an EIP-1193 provider (window.ethereum, also announced through
// EIP-6963) installed with addInitScript, whose requests go to Node through
// exposeFunction; Node answers eth_requestAccounts / eth_accounts /
// eth_chainId / wallet_switchEthereumChain and signs eth_signTypedData_v4 with
// viem's local account for the test key. Scenarios:
//   paid           payer key on the offer's chain: pays, shows the JSON and the transaction
//   refused        payer key, the wallet refuses to sign (4001)
//   wrong-network  unfunded key on chain 1, switching refused; then the person switches
//                  in the wallet (chainChanged) and pays: insufficient balance
//   no-wallet      no wallet injected
//   replayed       payer key; the browser's payment header is replaced by the one the
//                  paid scenario sent (the seller has seen it)
// Every scenario records the requests the page made (with a payment header or to
// another origin), Content-Security-Policy violations and console errors, and writes a
// screenshot of each state to DIR/<state>.png. The raw page is checked with html-validate.
//
// Output: one JSON line on stdout, {"validation", "csp", "offers", "scenarios": {...}}.
// Exit 0 when every scenario ran (the Rust test judges the outcome), 1 on a crash,
// 2 on bad arguments. The private keys are never printed.

import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";
import { HtmlValidate } from "html-validate";
import { getAddress, verifyTypedData } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { ExactEvmScheme, authorizationTypes } from "@x402/evm";

function usage(msg) {
  process.stderr.write(
    `${msg ? `paywall.mjs: ${msg}\n` : ""}usage: node browser/paywall.mjs --url URL --chromium PATH --out DIR ` +
      `--payer-key 0xKEY --poor-key 0xKEY [--chain-id 84532] [--timeout-ms 60000]\n`,
  );
  process.exit(2);
}

let values;
try {
  ({ values } = parseArgs({
    options: {
      url: { type: "string" },
      chromium: { type: "string" },
      out: { type: "string" },
      "payer-key": { type: "string" },
      "poor-key": { type: "string" },
      "chain-id": { type: "string", default: "84532" },
      "timeout-ms": { type: "string", default: "60000" },
    },
    strict: true,
  }));
} catch (e) {
  usage(e.message);
}
for (const k of ["url", "chromium", "out"]) if (!values[k]) usage(`--${k} is required`);
for (const k of ["payer-key", "poor-key"]) {
  if (!/^0x[0-9a-fA-F]{64}$/.test(values[k] ?? "")) usage(`--${k} must be a 0x-prefixed 32-byte hex private key`);
}
const chainId = Number(values["chain-id"]);
const timeout = Number(values["timeout-ms"]);
const url = values.url;
const origin = new URL(url).origin;
mkdirSync(values.out, { recursive: true });

// States the page passes through on its way to an outcome.
const TRANSIENT = new Set(["", "loading", "connecting", "switching", "signing", "paying"]);

// ---- the test wallet ------------------------------------------------------

const ICON =
  "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24'%3E%3Crect width='24' height='24' rx='6' fill='%231f5eff'/%3E%3C/svg%3E";

// Runs in the page before its own scripts: the provider, talking to Node.
function injectWallet({ icon }) {
  const listeners = {};
  const provider = {
    isX402TestWallet: true,
    async request({ method, params }) {
      const reply = JSON.parse(await window.__x402TestWallet(JSON.stringify({ method, params: params ?? [] })));
      if (reply.error) {
        const error = new Error(reply.error.message);
        error.code = reply.error.code;
        throw error;
      }
      if (method === "wallet_switchEthereumChain") emit("chainChanged", params[0].chainId);
      return reply.result;
    },
    on(event, fn) {
      (listeners[event] ||= []).push(fn);
      return provider;
    },
    removeListener(event, fn) {
      listeners[event] = (listeners[event] || []).filter((f) => f !== fn);
      return provider;
    },
  };
  function emit(event, arg) {
    for (const fn of listeners[event] || []) fn(arg);
  }
  window.__x402TestWalletEmit = emit;
  window.ethereum = provider;
  const info = Object.freeze({ uuid: "7c0d3b4e-3c1a-4d7e-9f51-402402402402", name: "x402 Test Wallet", icon, rdns: "dev.x402.test-wallet" });
  const announce = () =>
    window.dispatchEvent(new CustomEvent("eip6963:announceProvider", { detail: Object.freeze({ info, provider }) }));
  window.addEventListener("eip6963:requestProvider", announce);
  announce();
}

// Runs in every page: records CSP violations.
function recordViolations() {
  window.__cspViolations = [];
  document.addEventListener("securitypolicyviolation", (e) => {
    window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI || "inline"}`);
  });
}

function wallet(key, { chain, refuseSign = false, switchable = true }) {
  const account = privateKeyToAccount(key);
  const state = { chain, refuseSign, switchable, calls: [], typedData: [] };
  const error = (code, message) => ({ error: { code, message } });
  async function handle({ method, params }) {
    state.calls.push(method);
    switch (method) {
      case "eth_requestAccounts":
      case "eth_accounts":
        return { result: [account.address.toLowerCase()] };
      case "eth_chainId":
        return { result: `0x${state.chain.toString(16)}` };
      case "wallet_switchEthereumChain": {
        if (!state.switchable) return error(4001, "User rejected the request.");
        state.chain = Number.parseInt(params[0].chainId, 16);
        return { result: null };
      }
      case "eth_signTypedData_v4": {
        if (String(params[0]).toLowerCase() !== account.address.toLowerCase()) return error(4100, "Unauthorized account");
        const typed = JSON.parse(params[1]);
        state.typedData.push(typed);
        if (state.refuseSign) return error(4001, "User rejected the request.");
        const { EIP712Domain, ...types } = typed.types;
        const message = { ...typed.message };
        for (const field of types[typed.primaryType]) {
          if (/^u?int/.test(field.type)) message[field.name] = BigInt(message[field.name]);
        }
        const signature = await account.signTypedData({ domain: typed.domain, types, primaryType: typed.primaryType, message });
        return { result: signature };
      }
      default:
        return error(4200, `unsupported method ${method}`);
    }
  }
  return { account, state, handle };
}

// ---- scenarios ------------------------------------------------------------

const browser = await chromium.launch({
  executablePath: values.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  timeout,
});

async function scenario(name, { wallet: w, route } = {}) {
  const context = await browser.newContext({ viewport: { width: 720, height: 400 }, deviceScaleFactor: 1 });
  const record = { name, states: [], paymentRequests: 0, paymentHeaders: [], foreign: [], consoleErrors: [], screenshots: {} };
  await context.addInitScript(recordViolations);
  if (w) {
    await context.exposeFunction("__x402TestWallet", async (json) => JSON.stringify(await w.handle(JSON.parse(json))));
    await context.addInitScript(injectWallet, { icon: ICON });
  }
  if (route) await context.route(url, route);
  const page = await context.newPage();
  // Script errors and console errors; Chromium's own line for each non-2xx
  // response ("Failed to load resource: ... 402") is not one.
  page.on("pageerror", (e) => record.consoleErrors.push(`uncaught: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource:")) record.consoleErrors.push(m.text());
  });
  page.on("request", async (request) => {
    const u = request.url();
    if (!u.startsWith(origin + "/") && !u.startsWith("data:") && !u.startsWith("blob:")) record.foreign.push(u);
    const headers = await request.allHeaders().catch(() => request.headers());
    if (headers["payment-signature"] !== undefined) {
      record.paymentRequests += 1;
      record.paymentHeaders.push(headers["payment-signature"]);
    }
  });
  const response = await page.goto(url, { waitUntil: "load", timeout });
  const status = page.locator("#status");

  async function settle() {
    await page.waitForFunction(
      (transient) => {
        const s = document.getElementById("status");
        return s && !s.hidden && !transient.includes(s.getAttribute("data-state") || "");
      },
      [...TRANSIENT],
      { timeout },
    );
    const state = await status.getAttribute("data-state");
    record.states.push({
      state,
      title: await page.locator("#status-title").innerText(),
      detail: await page.locator("#status-detail").innerText(),
    });
    return state;
  }
  // Marks the status as not yet answered, then acts: settle() waits for the
  // page's answer to that action.
  async function act(action) {
    await page.evaluate(() => document.getElementById("status").setAttribute("data-state", ""));
    await action();
  }
  const pay = () => act(() => page.locator("button.pay").first().click());
  async function shot(file) {
    const path = join(values.out, `${file}.png`);
    await page.screenshot({ path, fullPage: true });
    record.screenshots[file] = path;
  }
  async function done() {
    record.cspViolations = await page.evaluate(() => window.__cspViolations);
    await context.close();
    return record;
  }
  return { page, response, record, settle, act, pay, shot, done, wallet: w };
}

const payer = (options) => wallet(values["payer-key"], { chain: chainId, ...options });
const output = { scenarios: {} };

async function main() {

// paid
{
  const s = await scenario("paid", { wallet: payer() });
  output.status = s.response.status();
  output.csp = s.response.headers()["content-security-policy"] ?? null;
  // The page as served, and the example's other paid pages (a ceiling, a
  // session offer), through html-validate's recommended rules.
  const validator = new HtmlValidate({ extends: ["html-validate:recommended"] });
  const pages = { [new URL(url).pathname]: await s.response.text() };
  for (const path of ["/upto/evm/permit2", "/session/demo"]) {
    const r = await fetch(origin + path, { headers: { Accept: "text/html", "User-Agent": await s.page.evaluate(() => navigator.userAgent) } });
    pages[path] = r.headers.get("content-type")?.startsWith("text/html") ? await r.text() : `not HTML: ${r.status}`;
  }
  output.validation = { valid: true, pages: Object.keys(pages), messages: [] };
  for (const [path, html] of Object.entries(pages)) {
    if (html.startsWith("not HTML")) {
      output.validation.valid = false;
      output.validation.messages.push(`${path} ${html}`);
      continue;
    }
    const report = await validator.validateString(html);
    output.validation.valid &&= report.valid;
    output.validation.messages.push(
      ...report.results.flatMap((r) => r.messages.map((m) => `${path} ${m.line}:${m.column} ${m.ruleId} ${m.message}`)),
    );
  }
  output.offers = await s.page.locator("li.offer").allInnerTexts();
  // How a ceiling and a session offer read.
  output.otherPages = {};
  for (const [file, path] of [["upto-offer", "/upto/evm/permit2"], ["session-offer", "/session/demo"]]) {
    const other = await browser.newContext({ viewport: { width: 720, height: 400 } });
    const p = await other.newPage();
    await p.goto(origin + path, { waitUntil: "load", timeout });
    // A page with nothing it can pay shows no status.
    await p.waitForFunction(
      () => !document.querySelector("button.pay") ||
        !["", "loading"].includes(document.getElementById("status").getAttribute("data-state") || ""),
      null,
      { timeout },
    );
    output.otherPages[path] = await p.locator("li.offer").allInnerTexts();
    await p.screenshot({ path: join(values.out, `${file}.png`), fullPage: true });
    await other.close();
  }
  await s.settle(); // ready
  await s.shot("offers");
  await s.pay();
  const state = await s.settle();
  await s.shot(state);
  const r = s.record;
  if (state === "paid") {
    r.transaction = await s.page.locator("#transaction").innerText();
    r.receipt = await s.page.locator("#receipt").innerText();
    r.body = await s.page.locator("#body").innerText();
  }
  r.typedData = s.wallet.state.typedData;
  r.walletCalls = s.wallet.state.calls;
  r.payer = s.wallet.account.address;
  // The payment the page sent, and the typed data the official client signs
  // for the same requirement (captured from its signer, not signed).
  if (r.paymentHeaders.length === 1 && r.typedData.length === 1) {
    const payment = JSON.parse(Buffer.from(r.paymentHeaders[0], "base64").toString("utf8"));
    r.payment = payment;
    let official = null;
    const scheme = new ExactEvmScheme({
      address: s.wallet.account.address,
      signTypedData: async (typed) => {
        official = typed;
        return `0x${"00".repeat(65)}`;
      },
    });
    await scheme.createPaymentPayload(2, payment.accepted);
    const page = r.typedData[0];
    const { EIP712Domain, ...pageTypes } = page.types;
    const asMessage = (m) => ({
      from: getAddress(m.from),
      to: getAddress(m.to),
      value: BigInt(m.value).toString(),
      validAfter: BigInt(m.validAfter).toString(),
    });
    const domain = (d) => ({ ...d, chainId: Number(d.chainId), verifyingContract: getAddress(d.verifyingContract) });
    r.matchesOfficial = {
      domain: JSON.stringify(domain(page.domain)) === JSON.stringify(domain(official.domain)),
      types: JSON.stringify(pageTypes) === JSON.stringify(authorizationTypes) &&
        JSON.stringify(official.types) === JSON.stringify(authorizationTypes),
      primaryType: page.primaryType === official.primaryType,
      message: JSON.stringify(asMessage(page.message)) === JSON.stringify(asMessage(official.message)),
      validBeforeSkewSeconds: Math.abs(Number(BigInt(page.message.validBefore) - BigInt(official.message.validBefore))),
      nonceBytes: (page.message.nonce.length - 2) / 2,
      authorizationIsMessage: JSON.stringify(payment.payload.authorization) === JSON.stringify(page.message),
      signatureRecovers: await verifyTypedData({
        address: s.wallet.account.address,
        domain: page.domain,
        types: pageTypes,
        primaryType: page.primaryType,
        message: Object.fromEntries(
          Object.entries(page.message).map(([k, v]) => [k, /^valid|^value$/.test(k) ? BigInt(v) : v]),
        ),
        signature: payment.payload.signature,
      }),
    };
  }
  output.scenarios.paid = await s.done();
}

// refused
{
  const s = await scenario("refused", { wallet: payer({ refuseSign: true }) });
  await s.settle();
  await s.pay();
  await s.shot(await s.settle());
  s.record.walletCalls = s.wallet.state.calls;
  output.scenarios.refused = await s.done();
}

// wrong network, then the person switches, then the balance is short
{
  const w = wallet(values["poor-key"], { chain: 1, switchable: false });
  const s = await scenario("wrong-network", { wallet: w });
  await s.settle();
  await s.pay();
  await s.shot(await s.settle());
  s.record.paymentRequestsBeforeSwitch = s.record.paymentRequests;
  // The person switches in the wallet itself.
  w.state.chain = chainId;
  await s.act(() => s.page.evaluate((id) => window.__x402TestWalletEmit("chainChanged", id), `0x${chainId.toString(16)}`));
  await s.settle(); // ready again
  await s.pay();
  await s.shot(await s.settle());
  s.record.walletCalls = w.state.calls;
  output.scenarios.wrongNetwork = await s.done();
}

// no wallet
{
  const s = await scenario("no-wallet");
  await s.settle();
  await s.pay();
  await s.shot(await s.settle());
  output.scenarios.noWallet = await s.done();
}

// replayed: the paid scenario's payment, sent again
{
  const used = output.scenarios.paid.paymentHeaders[0];
  const s = await scenario("replayed", {
    wallet: payer(),
    route: async (route) => {
      const headers = route.request().headers();
      if (used && headers["payment-signature"] !== undefined) headers["payment-signature"] = used;
      await route.continue({ headers });
    },
  });
  await s.settle();
  await s.pay();
  await s.shot(await s.settle());
  output.scenarios.replayed = await s.done();
}

}

try {
  await main();
} finally {
  await browser.close();
}
// Payment headers are not printed whole (they are signed authorizations).
for (const s of Object.values(output.scenarios)) delete s.paymentHeaders;
process.stdout.write(`${JSON.stringify(output)}\n`);
