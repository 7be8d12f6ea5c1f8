// Checks server.json against the MCP registry's published JSON Schema (server.schema.json beside
// this file), and that server.json, the bundle's manifest and the workspace's Cargo.toml give the
// same version. Two broken copies of server.json must fail, so a validator that accepts anything
// is caught too.
//
// Usage: node packaging/check-server-json.mjs ROOT [BUNDLE]
// With BUNDLE (a packed .mcpb) and CKS_BUNDLE_URL (where that file is published) set, it also
// writes ROOT/target/server.json: server.json with the bundle as an `mcpb` package (its URL and
// SHA-256), checked the same way, ready for the registry.
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Ajv from "ajv";
import addFormats from "ajv-formats";

const [root, bundle] = process.argv.slice(2);
if (!root) {
  console.error("usage: node packaging/check-server-json.mjs ROOT [BUNDLE]");
  process.exit(2);
}
const fail = (message) => {
  console.error(`check-server-json: ${message}`);
  process.exit(1);
};
const readJson = (path) => JSON.parse(readFileSync(path, "utf8"));

const schema = readJson(join(root, "packaging/server.schema.json"));
const server = readJson(join(root, "server.json"));
const manifest = readJson(join(root, "packaging/mcpb/manifest.json"));
const cargo = readFileSync(join(root, "Cargo.toml"), "utf8");
const workspace = /^\[workspace\.package\]$([^[]*)/m.exec(cargo);
const version = workspace && /^version\s*=\s*"([^"]+)"/m.exec(workspace[1]);
if (!version) fail("no version in Cargo.toml's [workspace.package]");

// The schema is draft-07; `example` is an annotation of its own, not a JSON Schema keyword.
const ajv = new Ajv({ allErrors: true });
addFormats(ajv);
ajv.addKeyword("example");
const validate = ajv.compile(schema);
const check = (document, what) => {
  if (!validate(document)) {
    fail(`${what} does not match ${schema.$id}:\n${ajv.errorsText(validate.errors, { separator: "\n" })}`);
  }
};

check(server, "server.json");
if (server.$schema !== schema.$id) fail(`server.json's $schema is ${server.$schema}, not ${schema.$id}`);
for (const [what, found] of [["server.json", server.version], ["packaging/mcpb/manifest.json", manifest.version]]) {
  if (found !== version[1]) fail(`${what} gives version ${found}, Cargo.toml ${version[1]}`);
}
for (const [what, broken] of [
  ["a name without a namespace", { ...server, name: "cks-mcp" }],
  ["a description of 101 characters", { ...server, description: "x".repeat(101) }],
]) {
  if (validate(broken)) fail(`the schema accepted ${what}: the validator checks nothing`);
}
console.log(`check-server-json: server.json matches ${schema.$id}; version ${version[1]} everywhere`);

const url = process.env.CKS_BUNDLE_URL;
if (bundle && url) {
  if (!/^https:\/\/\S+$/.test(url)) fail(`CKS_BUNDLE_URL must be an https:// URL, not ${url}`);
  const release = {
    ...server,
    packages: [
      {
        registryType: "mcpb",
        identifier: url,
        version: server.version,
        fileSha256: createHash("sha256").update(readFileSync(bundle)).digest("hex"),
        transport: { type: "stdio" },
      },
    ],
  };
  check(release, "the release's server.json");
  mkdirSync(join(root, "target"), { recursive: true });
  writeFileSync(join(root, "target/server.json"), `${JSON.stringify(release, null, 2)}\n`);
  console.log(`check-server-json: wrote target/server.json with the bundle at ${url}`);
}
