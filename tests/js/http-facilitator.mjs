// A facilitator on Node's own HTTP server (no packages), for the Rust
// facilitator client's interop test (tests/tests/core_http_facilitator.rs):
// keep-alive as Node does it (`Connection: keep-alive`, `Keep-Alive:
// timeout=5`), `POST /verify` answered with a Content-Length body,
// `POST /settle` written in pieces (so Node frames it chunked), and
// `GET /connections`: how many connections it accepted. Prints
// `listening on http://ADDR` once bound.
import http from "node:http";

let connections = 0;
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString("utf8");
    if (req.method === "GET" && req.url === "/connections") {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ connections }));
      return;
    }
    let request;
    try {
      request = JSON.parse(body);
    } catch {
      res.statusCode = 400;
      res.end("not JSON");
      return;
    }
    const payer = request.paymentPayload?.payload?.authorization?.from ?? null;
    const network = request.paymentRequirements?.network ?? null;
    res.setHeader("content-type", "application/json; charset=utf-8");
    res.setHeader("x-powered-by", "Express");
    if (req.method === "POST" && req.url === "/verify") {
      res.end(JSON.stringify({ isValid: true, payer }));
    } else if (req.method === "POST" && req.url === "/settle") {
      const text = JSON.stringify({ success: true, transaction: "0x" + "ab".repeat(32), network, payer });
      res.write(text.slice(0, 10));
      setTimeout(() => {
        res.write(text.slice(10, 40));
        setTimeout(() => res.end(text.slice(40)), 5);
      }, 5);
    } else {
      res.statusCode = 404;
      res.end();
    }
  });
});
server.on("connection", () => {
  connections += 1;
});
server.listen(0, "127.0.0.1", () => {
  const { address, port } = server.address();
  console.log(`listening on http://${address}:${port}`);
});
