// Verifies one Standard Webhooks message with the reference `standardwebhooks`
// package, independently of the Rust verifier.
// stdin: {"secret": "whsec_...", "headers": {"webhook-id": ...}, "body": "<raw body>"}
// stdout: the verified payload as JSON; exit code 1 if verification fails.
import { Webhook } from "standardwebhooks";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { secret, headers, body } = JSON.parse(input);
try {
  const payload = new Webhook(secret).verify(body, headers);
  process.stdout.write(JSON.stringify(payload));
} catch (e) {
  process.stderr.write(`verification failed: ${e.message}\n`);
  process.exit(1);
}
