// Starts an unpacked MCP bundle the way Claude Desktop does: the command, arguments and environment
// come from the manifest's mcp_config through the bundle library's own substitution (${__dirname},
// the user_config values and their defaults). Then it speaks MCP over the server's stdin and stdout:
// initialize, notifications/initialized and tools/list (every page). The server must answer with
// the manifest's name and version, list at least one tool and every tool the manifest names, and
// exit cleanly when its stdin closes.
//
// Usage: node packaging/start-bundle.mjs UNPACKED_BUNDLE HOME DATA_DIR
// HOME stands in for the user's home directory (the server's default paths lie under it);
// DATA_DIR is the value given for the data_dir setting.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, sep } from "node:path";
import { createInterface } from "node:readline";
import { getMcpConfigForManifest } from "@anthropic-ai/mcpb/node";

const [dir, home, dataDir] = process.argv.slice(2);
if (!dataDir) {
  console.error("usage: node packaging/start-bundle.mjs UNPACKED_BUNDLE HOME DATA_DIR");
  process.exit(2);
}
let server;
let stderr = "";
const fail = (message) => {
  console.error(`start-bundle: ${message}`);
  if (stderr) console.error(`start-bundle: the server's stderr:\n${stderr.slice(-4000)}`);
  server?.kill("SIGKILL");
  process.exit(1);
};
setTimeout(() => fail("no answer within 60 s"), 60_000).unref();

const manifest = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8"));
const config = await getMcpConfigForManifest({
  manifest,
  extensionPath: dir,
  systemDirs: {
    HOME: home,
    DESKTOP: join(home, "Desktop"),
    DOCUMENTS: join(home, "Documents"),
    DOWNLOADS: join(home, "Downloads"),
  },
  userConfig: { data_dir: dataDir },
  pathSeparator: sep,
});
if (!config) fail("the manifest gives no MCP configuration to start");
const unresolved = JSON.stringify(config).match(/\$\{[^}]*\}/);
if (unresolved) fail(`${unresolved[0]} is left in the configuration: ${JSON.stringify(config)}`);

server = spawn(config.command, config.args ?? [], {
  env: { ...process.env, HOME: home, ...config.env },
  stdio: ["pipe", "pipe", "pipe"],
});
server.on("error", (error) => fail(`${config.command} did not start: ${error.message}`));
server.stderr.on("data", (chunk) => (stderr += chunk));
// A server that exits early closes its stdin: that is reported below, as the exit it is.
server.stdin.on("error", () => {});
const answers = new Map();
let waiting = null;
createInterface({ input: server.stdout }).on("line", (line) => {
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    fail(`the server wrote a line that is not JSON on stdout: ${line.slice(0, 200)}`);
  }
  if (message.id !== undefined && (message.result !== undefined || message.error !== undefined)) {
    answers.set(message.id, message);
    waiting?.();
  }
});
const exited = new Promise((resolve) => server.on("exit", (code, signal) => resolve({ code, signal })));

let next = 1;
const send = (message) => server.stdin.write(`${JSON.stringify(message)}\n`);
const call = async (method, params) => {
  const id = next++;
  send({ jsonrpc: "2.0", id, method, params });
  while (!answers.has(id)) {
    const early = await Promise.race([new Promise((resolve) => (waiting = resolve)), exited]);
    if (early?.code !== undefined) fail(`the server exited (${early.code ?? early.signal}) before answering ${method}`);
  }
  const answer = answers.get(id);
  if (answer.error) fail(`${method} failed: ${JSON.stringify(answer.error)}`);
  return answer.result;
};

const initialized = await call("initialize", {
  protocolVersion: "2025-06-18",
  capabilities: {},
  clientInfo: { name: "package-bundle", version: "1" },
});
const info = initialized.serverInfo ?? {};
if (info.name !== manifest.name) fail(`the server calls itself ${info.name}, the manifest ${manifest.name}`);
if (info.version !== manifest.version) fail(`the server is version ${info.version}, the manifest says ${manifest.version}`);
send({ jsonrpc: "2.0", method: "notifications/initialized" });
const tools = [];
let cursor;
do {
  const page = await call("tools/list", cursor ? { cursor } : {});
  tools.push(...page.tools);
  cursor = page.nextCursor;
} while (cursor);
if (tools.length === 0) fail("the server lists no tools");
const served = new Set(tools.map((tool) => tool.name));
const missing = (manifest.tools ?? []).map((tool) => tool.name).filter((name) => !served.has(name));
if (missing.length) fail(`the manifest names tools the server does not list: ${missing.join(", ")}`);

server.stdin.end();
const end = await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 10_000, null))]);
if (!end) fail("the server did not exit within 10 s of its stdin closing");
if (end.code !== 0) fail(`the server exited with ${end.code ?? end.signal} when its stdin closed`);
console.log(
  `start-bundle: ${info.name} ${info.version} answered over stdio with ${tools.length} tools ` +
    `(the manifest's ${manifest.tools?.length ?? 0} among them), started as ${config.command}`,
);
