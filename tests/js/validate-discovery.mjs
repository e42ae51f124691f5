// Validates x402 discovery output with real validators:
//   node validate-discovery.mjs <discovery.schema.json> <discovery.json> <openapi.json> [<bazaar-declaration.json> ...]
// - the discovery document against its JSON Schema (ajv, draft 2020-12, formats);
// - the OpenAPI document with @apidevtools/swagger-parser (OpenAPI 3.1 schema + semantics);
// - each bazaar declaration's `info` against its own `schema` (as facilitators do).
// Prints "ok" and exits 0, or prints the errors and exits 1.
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import SwaggerParser from "@apidevtools/swagger-parser";

const [schemaPath, docPath, openapiPath, ...bazaarPaths] = process.argv.slice(2);
if (!schemaPath || !docPath || !openapiPath) {
  console.error("usage: validate-discovery.mjs <schema> <document> <openapi> [<bazaar>...]");
  process.exit(2);
}
const read = (p) => JSON.parse(readFileSync(p, "utf8"));
let failed = false;

// Strict: a mistake in the committed schema itself is an error too.
const ajv = new Ajv2020({ allErrors: true, strict: true });
addFormats(ajv);
let validate;
try {
  validate = ajv.compile(read(schemaPath));
} catch (e) {
  console.error("discovery schema does not compile:", e.message);
  process.exit(1);
}
if (!validate(read(docPath))) {
  failed = true;
  console.error("discovery document invalid:", JSON.stringify(validate.errors, null, 2));
}

for (const p of bazaarPaths) {
  const decl = read(p);
  const lax = new Ajv2020({ allErrors: true, strict: false });
  const v = lax.compile(decl.schema);
  if (!v(decl.info)) {
    failed = true;
    console.error(`bazaar info of ${p} does not match its schema:`, JSON.stringify(v.errors, null, 2));
  }
}

try {
  const api = await SwaggerParser.validate(read(openapiPath));
  if (api.openapi !== "3.1.0") throw new Error(`expected openapi 3.1.0, got ${api.openapi}`);
} catch (e) {
  failed = true;
  console.error("OpenAPI document invalid:", e.message, e.details ? JSON.stringify(e.details, null, 2) : "");
}

if (failed) process.exit(1);
console.log("ok");
