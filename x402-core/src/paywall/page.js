// The x402 paywall page's script: pays an `exact` EIP-3009 offer from the
// visitor's browser wallet. No dependencies; nothing loaded from elsewhere.
//
// 1. Reads the challenge: fetch() of this same URL (Accept: application/json,
//    no payment header) and the PAYMENT-REQUIRED header of that 402; a
//    script cannot read the headers of its own document's response.
// 2. Finds wallets: EIP-6963 announcements, else window.ethereum (EIP-1193).
// 3. On "Pay": connects (eth_requestAccounts), switches to the offer's chain
//    (wallet_switchEthereumChain), signs TransferWithAuthorization with
//    eth_signTypedData_v4 (domain: the requirement's extra.name and
//    extra.version, the chain id, the asset as verifyingContract), sends the
//    request again with PAYMENT-SIGNATURE and shows the paid response and the
//    transaction of PAYMENT-RESPONSE.
"use strict";
(function () {
  var byId = function (id) { return document.getElementById(id); };
  var statusBox = byId("status");
  var statusTitle = byId("status-title");
  var statusDetail = byId("status-detail");
  var statusActions = byId("status-actions");
  var walletsBox = byId("wallets");
  var walletList = byId("wallet-list");
  var buttons = Array.prototype.slice.call(document.querySelectorAll("button.pay"));

  var wallets = []; // { info, provider }
  var chosen = null; // the wallet in use
  var challenge = null; // the v2 PaymentRequired of the PAYMENT-REQUIRED header
  var busy = false;
  var waitingForChain = null; // { chainId, button } while the wallet is on another chain

  // ---- display -------------------------------------------------------------

  // kind: "info" | "error" | "success"; state: a name tests and styles key on.
  function show(kind, state, title, detail, actions) {
    statusBox.hidden = false;
    statusBox.className = "status " + kind;
    statusBox.setAttribute("role", kind === "error" ? "alert" : "status");
    statusBox.setAttribute("data-state", state);
    statusTitle.textContent = title;
    statusDetail.textContent = detail || "";
    statusActions.textContent = "";
    (actions || []).forEach(function (action) {
      var b = document.createElement("button");
      b.type = "button";
      b.textContent = action.label;
      b.addEventListener("click", action.run);
      statusActions.appendChild(b);
    });
  }

  function setBusy(on) {
    busy = on;
    buttons.forEach(function (b) { b.disabled = on || challenge === null; });
  }

  function short(address) {
    var a = String(address);
    return a.length > 12 ? a.slice(0, 6) + "\u2026" + a.slice(-4) : a;
  }

  // ---- encoding ------------------------------------------------------------

  function toBase64(text) {
    var bytes = new TextEncoder().encode(text);
    var binary = "";
    for (var i = 0; i < bytes.length; i++) binary += String.fromCharCode(bytes[i]);
    return btoa(binary);
  }

  function decodeHeader(value) {
    if (!value) return null;
    try {
      var binary = atob(value.trim());
      var bytes = new Uint8Array(binary.length);
      for (var i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
      return JSON.parse(new TextDecoder().decode(bytes));
    } catch (e) {
      return null;
    }
  }

  function hex(bytes) {
    var out = "0x";
    for (var i = 0; i < bytes.length; i++) out += (bytes[i] + 0x100).toString(16).slice(1);
    return out;
  }

  function sameAddress(a, b) {
    return String(a).toLowerCase() === String(b).toLowerCase();
  }

  // ---- the challenge -------------------------------------------------------

  function loadChallenge() {
    return fetch(location.href, {
      headers: { Accept: "application/json" },
      cache: "no-store",
      credentials: "same-origin",
    }).then(function (response) {
      var parsed = decodeHeader(response.headers.get("PAYMENT-REQUIRED"));
      if (response.status !== 402 || !parsed || parsed.x402Version !== 2 || !Array.isArray(parsed.accepts)) {
        throw new Error("HTTP " + response.status + " without a payment challenge");
      }
      return parsed;
    });
  }

  // The requirement of the challenge that a button shows; null when the
  // price changed since the page was rendered.
  function requirementFor(button) {
    var d = button.dataset;
    var found = null;
    challenge.accepts.forEach(function (r) {
      if (found === null && r.scheme === d.scheme && r.network === d.network &&
          sameAddress(r.asset, d.asset) && sameAddress(r.payTo, d.payTo) && String(r.amount) === d.amount) {
        found = r;
      }
    });
    return found;
  }

  // ---- wallets -------------------------------------------------------------

  window.addEventListener("eip6963:announceProvider", function (event) {
    var detail = event.detail;
    if (!detail || !detail.provider || typeof detail.provider.request !== "function") return;
    var info = detail.info || {};
    var known = wallets.some(function (w) {
      return w.provider === detail.provider || (info.uuid && w.info.uuid === info.uuid);
    });
    if (!known) wallets.push({ info: info, provider: detail.provider });
  });

  function discover() {
    window.dispatchEvent(new Event("eip6963:requestProvider"));
  }

  // Announced wallets, else the injected window.ethereum.
  function available() {
    if (wallets.length > 0) return wallets;
    var injected = window.ethereum;
    if (injected && typeof injected.request === "function") {
      return [{ info: { name: "Browser wallet" }, provider: injected }];
    }
    return [];
  }

  function noWallet() {
    show("error", "no-wallet", "No wallet found",
      "Paying here needs a browser wallet for Ethereum networks (an extension such as MetaMask, " +
      "Coinbase Wallet or Rabby). Install one, reload this page and press Pay; or pay with an x402 client.");
  }

  function chooseWallet(list, button) {
    walletList.textContent = "";
    list.forEach(function (w) {
      var item = document.createElement("li");
      var b = document.createElement("button");
      b.type = "button";
      b.className = "wallet";
      var icon = typeof w.info.icon === "string" && w.info.icon.indexOf("data:image/") === 0 ? w.info.icon : null;
      if (icon) {
        var img = document.createElement("img");
        img.src = icon;
        img.alt = "";
        img.width = 24;
        img.height = 24;
        b.appendChild(img);
      }
      b.appendChild(document.createTextNode(String(w.info.name || "Wallet")));
      b.addEventListener("click", function () {
        chosen = w;
        watch(w.provider);
        walletsBox.hidden = true;
        pay(button);
      });
      item.appendChild(b);
      walletList.appendChild(item);
    });
    walletsBox.hidden = false;
    show("info", "choose-wallet", "Choose a wallet", "Several wallets are installed: pick the one to pay with.");
  }

  var watched = [];
  function watch(provider) {
    if (watched.indexOf(provider) >= 0 || typeof provider.on !== "function") return;
    watched.push(provider);
    provider.on("chainChanged", function (chainId) {
      if (waitingForChain && parseInt(chainId, 16) === waitingForChain.chainId) {
        var name = waitingForChain.button.dataset.networkName;
        waitingForChain = null;
        show("info", "ready", "Your wallet is on " + name + " now", "Press Pay to continue.");
      }
    });
  }

  function walletError(error) {
    var message = error && (error.message || String(error));
    return message ? String(message) : "unknown error";
  }

  // ---- paying --------------------------------------------------------------

  function pay(button) {
    if (busy || challenge === null) return;
    var requirement = requirementFor(button);
    if (requirement === null) {
      show("error", "price-changed", "The price changed",
        "This offer changed since the page was loaded. Reload the page to see the current price; nothing was charged.");
      return;
    }
    if (chosen === null) {
      discover();
      var list = available();
      if (list.length === 0) return noWallet();
      if (list.length > 1) return chooseWallet(list, button);
      chosen = list[0];
      watch(chosen.provider);
    }
    setBusy(true);
    run(chosen.provider, requirement, button).then(function () { setBusy(false); }, function (error) {
      setBusy(false);
      show("error", "error", "Something went wrong", walletError(error) + ". Nothing was charged.");
    });
  }

  function connectFailed(error) {
    if (error && error.code === 4001) {
      show("error", "connect-refused", "Wallet not connected",
        "You did not connect your wallet, so nothing was signed or charged. Press Pay to try again.");
    } else if (error && error.code === -32002) {
      show("error", "connect-pending", "Your wallet is already asking",
        "Open your wallet and answer its connection request, then press Pay again.");
    } else {
      show("error", "error", "Could not connect to your wallet", walletError(error) + ". Nothing was charged.");
    }
  }

  function run(provider, requirement, button) {
    var chainId = Number(String(requirement.network).slice("eip155:".length));
    var networkName = button.dataset.networkName;
    var price = button.dataset.price;
    var account;
    show("info", "connecting", "Connecting to your wallet\u2026", "Answer the request in your wallet.");
    return provider.request({ method: "eth_requestAccounts" }).then(function (accounts) {
      if (Array.isArray(accounts) && accounts.length > 0) return accounts;
      connectFailed({ code: 4001 });
      return null;
    }, function (error) {
      connectFailed(error);
      return null;
    }).then(function (accounts) {
      if (accounts === null) return null;
      account = String(accounts[0]);
      return provider.request({ method: "eth_chainId" });
    }).then(function (current) {
      if (current === null || current === undefined) return null;
      if (parseInt(current, 16) === chainId) return account;
      show("info", "switching", "Switching to " + networkName + "\u2026",
        "This offer is paid on " + networkName + ". Confirm the switch in your wallet.");
      return provider.request({
        method: "wallet_switchEthereumChain",
        params: [{ chainId: "0x" + chainId.toString(16) }],
      }).then(function () {
        return provider.request({ method: "eth_chainId" });
      }).then(function (now) {
        if (parseInt(now, 16) === chainId) return account;
        wrongNetwork(button, chainId, parseInt(now, 16), null);
        return null;
      }, function (error) {
        wrongNetwork(button, chainId, parseInt(current, 16), error);
        return null;
      });
    }).then(function (from) {
      if (from === null || from === undefined) return null;
      return sign(provider, from, requirement, chainId, price, networkName);
    }).then(function (signed) {
      if (signed === null || signed === undefined) return null;
      return submit(signed, price, networkName);
    });
  }

  function wrongNetwork(button, want, current, error) {
    var name = button.dataset.networkName;
    waitingForChain = { chainId: want, button: button };
    var why = error && error.code === 4902
      ? "Your wallet does not know " + name + " yet: add that network (chain id " + want + ") in your wallet"
      : "Your wallet is on chain id " + current + "; this offer is paid on " + name + " (chain id " + want + "). " +
        "Switch your wallet to " + name;
    show("error", "wrong-network", "Wrong network", why + ", then press Pay again. Nothing was signed or charged.", [
      { label: "Switch to " + name, run: function () { pay(button); } },
    ]);
  }

  function sign(provider, from, requirement, chainId, price, networkName) {
    var extra = requirement.extra || {};
    var nonce = hex(crypto.getRandomValues(new Uint8Array(32)));
    var now = Math.floor(Date.now() / 1000);
    var authorization = {
      from: from,
      to: requirement.payTo,
      value: String(requirement.amount),
      validAfter: "0",
      validBefore: String(now + Number(requirement.maxTimeoutSeconds || 60)),
      nonce: nonce,
    };
    var typedData = {
      types: {
        EIP712Domain: [
          { name: "name", type: "string" },
          { name: "version", type: "string" },
          { name: "chainId", type: "uint256" },
          { name: "verifyingContract", type: "address" },
        ],
        TransferWithAuthorization: [
          { name: "from", type: "address" },
          { name: "to", type: "address" },
          { name: "value", type: "uint256" },
          { name: "validAfter", type: "uint256" },
          { name: "validBefore", type: "uint256" },
          { name: "nonce", type: "bytes32" },
        ],
      },
      primaryType: "TransferWithAuthorization",
      domain: {
        name: String(extra.name),
        version: String(extra.version),
        chainId: chainId,
        verifyingContract: requirement.asset,
      },
      message: authorization,
    };
    show("info", "signing", "Confirm the payment in your wallet",
      "Sign to pay " + price + " from " + short(from) + " to " + short(requirement.payTo) + " on " + networkName +
      ". Signing moves no money yet: the seller settles it when your response is ready.");
    return provider.request({ method: "eth_signTypedData_v4", params: [from, JSON.stringify(typedData)] })
      .then(function (signature) {
        return {
          x402Version: 2,
          resource: challenge.resource,
          accepted: requirement,
          payload: { signature: signature, authorization: authorization },
        };
      }, function (error) {
        if (error && error.code === 4001) {
          show("error", "signature-refused", "Payment not signed",
            "You declined to sign the payment, so nothing was charged. Press Pay to try again.");
        } else {
          show("error", "error", "Your wallet could not sign the payment", walletError(error) + ". Nothing was charged.");
        }
        return null;
      });
  }

  function submit(payment, price, networkName) {
    show("info", "paying", "Paying\u2026", "The seller is checking your payment and settling it on " + networkName + ".");
    return fetch(location.href, {
      headers: { Accept: "*/*", "PAYMENT-SIGNATURE": toBase64(JSON.stringify(payment)) },
      cache: "no-store",
      credentials: "same-origin",
    }).then(function (response) {
      var receipt = decodeHeader(response.headers.get("PAYMENT-RESPONSE"));
      if (response.ok) return paid(response, receipt, price, networkName);
      return response.text().then(function (text) { refused(response, receipt, text, networkName); });
    }, function (error) {
      show("error", "network-error", "The payment did not reach the seller",
        "Your connection failed (" + walletError(error) + "). If it never arrived nothing was charged; " +
        "check your wallet's history before paying again.");
    });
  }

  // What a reason code means for the person paying.
  function explain(reason, networkName) {
    var r = String(reason || "");
    var code = r ? " (reason: " + r + ")" : "";
    if (/insufficient/.test(r)) {
      return ["insufficient-balance", "Not enough funds",
        "Your wallet does not hold enough of this token on " + networkName + " for this payment" + code +
        ". Nothing was charged. Add funds, then press Pay again."];
    }
    if (/replayed|nonce_already_used|invalid_nonce/.test(r)) {
      return ["replayed", "This payment was already used",
        "The seller has already received this signed payment, so it cannot pay for this request again" + code +
        ". Nothing more was charged. Press Pay to sign a new one."];
    }
    if (/valid_before|expired|deadline/.test(r)) {
      return ["expired", "The payment expired",
        "Your signed payment expired before the seller received it" + code + ". Nothing was charged. Press Pay to try again."];
    }
    if (/valid_after|not_yet_valid/.test(r)) {
      return ["not-yet-valid", "The payment is not valid yet",
        "Check your computer's clock, then press Pay again" + code + ". Nothing was charged."];
    }
    if (/signature/.test(r)) {
      return ["bad-signature", "The signature was not accepted",
        "The seller could not verify your wallet's signature (smart-contract wallets are not supported here)" + code +
        ". Nothing was charged."];
    }
    if (/rate_limited/.test(r)) {
      return ["rate-limited", "Too many attempts", "Wait a minute, then press Pay again. Nothing was charged."];
    }
    return ["refused", "The payment was refused", "The seller refused the payment" + code + ". Nothing was charged."];
  }

  function refused(response, receipt, text, networkName) {
    var body = null;
    try { body = JSON.parse(text); } catch (e) { body = null; }
    var bodyError = body && typeof body.error === "string" ? body.error : "";
    if (response.status === 402 && receipt && receipt.success === false) {
      var failed = explain(receipt.errorReason, networkName);
      var detail = failed[0] === "refused"
        ? "The seller could not settle the payment on " + networkName + " (reason: " + (receipt.errorReason || "unknown") +
          "). Nothing was charged and the response was withheld."
        : failed[2];
      show("error", failed[0] === "refused" ? "settlement-failed" : failed[0],
        failed[0] === "refused" ? "Settlement failed" : failed[1], detail);
      return;
    }
    if (response.status === 402) {
      var again = decodeHeader(response.headers.get("PAYMENT-REQUIRED"));
      var why = explain((again && again.error) || bodyError, networkName);
      show("error", why[0], why[1], why[2]);
      return;
    }
    if (bodyError === "settlement_unknown") {
      show("error", "settlement-unknown", "The payment's outcome is unknown",
        "The seller lost track of the settlement, so the response was withheld. Check your wallet's history before paying again.");
      return;
    }
    if (bodyError === "facilitator_unavailable" || bodyError === "claim_unavailable" || response.status === 503) {
      show("error", "unavailable", "The seller cannot take payments right now",
        "Nothing was charged. Try again in a minute.");
      return;
    }
    if (response.status === 429) {
      show("error", "rate-limited", "Too many attempts", "Wait a minute, then press Pay again. Nothing was charged.");
      return;
    }
    show("error", "http-error", "The seller answered HTTP " + response.status,
      (bodyError ? "(" + bodyError + ") " : "") + "Nothing was charged.");
  }

  function fileName(response) {
    var disposition = response.headers.get("Content-Disposition") || "";
    var match = /filename="?([^";]+)"?/i.exec(disposition);
    if (match) return match[1];
    var last = location.pathname.split("/").pop();
    return last || "download";
  }

  function paid(response, receipt, price, networkName) {
    var type = (response.headers.get("Content-Type") || "").toLowerCase();
    return response.blob().then(function (blob) {
      var result = byId("result");
      var receiptLine = byId("receipt");
      receiptLine.textContent = "";
      receiptLine.appendChild(document.createTextNode("You paid " + price + " on " + networkName + ". "));
      if (receipt && receipt.transaction) {
        receiptLine.appendChild(document.createTextNode("Transaction "));
        var code = document.createElement("code");
        code.id = "transaction";
        code.textContent = String(receipt.transaction);
        receiptLine.appendChild(code);
      } else {
        receiptLine.appendChild(document.createTextNode("No transaction was needed."));
      }
      var pre = byId("body");
      var download = byId("download");
      var shown;
      if (/json/.test(type)) {
        shown = blob.text().then(function (text) {
          try { pre.textContent = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { pre.textContent = text; }
          pre.hidden = false;
        });
      } else if (/^text\//.test(type) && !/^text\/html/.test(type)) {
        shown = blob.text().then(function (text) { pre.textContent = text; pre.hidden = false; });
      } else {
        var link = document.createElement("a");
        link.href = URL.createObjectURL(blob);
        link.download = fileName(response);
        link.textContent = "Download what you paid for (" + blob.size + " bytes)";
        download.textContent = "";
        download.appendChild(link);
        download.hidden = false;
        shown = Promise.resolve();
      }
      return shown.then(function () {
        result.hidden = false;
        buttons.forEach(function (b) { b.hidden = true; });
        show("success", "paid", "Paid", "Your payment was settled and the seller sent what you bought below.");
      });
    });
  }

  // ---- start ---------------------------------------------------------------

  function start() {
    if (buttons.length === 0) return;
    discover();
    show("info", "loading", "Loading the payment details\u2026", "");
    loadChallenge().then(function (parsed) {
      challenge = parsed;
      buttons.forEach(function (b) {
        b.addEventListener("click", function () { pay(b); });
      });
      setBusy(false);
      // Wallet extensions may inject a moment after the page loads.
      setTimeout(function () {
        discover();
        if (available().length === 0) {
          noWallet();
        } else {
          show("info", "ready", "Ready to pay", "Press Pay: your wallet asks you to connect and to sign the payment.");
        }
      }, 250);
    }, function (error) {
      show("error", "unavailable", "The payment details could not be loaded",
        walletError(error) + ". Reload the page to try again.");
    });
  }

  start();
})();
