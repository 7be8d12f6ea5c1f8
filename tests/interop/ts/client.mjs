// Interoperability test: drives the cks-mcp release binary with the official TypeScript MCP
// SDKs over stdio and streamable HTTP. SDK v1 (`@modelcontextprotocol/sdk`) speaks 2025-11-25;
// SDK v2 (`@modelcontextprotocol/client`) runs in each of its modes: "legacy" (the `initialize`
// handshake), "auto" (`server/discover` first) and pinned to 2026-07-28 (stateless, no handshake).
// Each also approves a chat's destructive call when the server asks (elicitation), with a scripted
// Anthropic server as the model.
//
// Usage: node client.mjs <path to cks-mcp binary>

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport as StdioV1 } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport as HttpV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { Client as ClientV2, StreamableHTTPClientTransport as HttpV2 } from '@modelcontextprotocol/client'
import { StdioClientTransport as StdioV2 } from '@modelcontextprotocol/client/stdio'
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js'

import { startProvider } from '../../page/provider.mjs'

import { freePort } from './net.mjs'

const BINARY = process.argv[2]

// What the SDKs' schema validators say of our schemas ("unknown format", "strict mode: ..."):
// every published schema must compile without a word.
const warnings = []
for (const level of ['warn', 'error']) {
  const original = console[level]
  console[level] = (...args) => {
    warnings.push(args.map(String).join(' '))
    original(...args)
  }
}

const GRAPH = {
  version: '1.0',
  objects: [
    { identity: { id: 'sun', type: 'Star', name: 'Sun' }, structure: { mass: 1.0 } },
    { identity: { id: 'earth', type: 'Planet', name: 'Earth' }, structure: { note: 'blå' } },
    {
      identity: { id: 'orbit', type: 'Relation', name: 'Earth orbits Sun' },
      structure: { participants: ['earth', 'sun'], relation_type: 'orbits' },
    },
  ],
}

// The model: asked to undo to a version, it reverts to it; given the call's result, it says so.
const modelPort = await freePort()
const model = await startProvider(`http://127.0.0.1:${modelPort}`, (call) =>
  call.results.length > 0
    ? `Revert: ${call.results[0].is_error ? 'an error' : 'done'}.`
    : { tools: [{ name: 'revert_version', input: { target_version_id: call.prompt.split(' ').pop() } }] },
)
const SERVER_ENV = {
  ...process.env,
  CKS_LLM_PROVIDER: 'anthropic',
  ANTHROPIC_API_KEY: 'sk-ant-interop',
  ANTHROPIC_BASE_URL: `http://127.0.0.1:${modelPort}`,
}

// The user, asked about a destructive call: run it.
let asked = 0
const approve = async (request) => {
  assert.match(request.params.message, /revert_version/)
  asked += 1
  return { action: 'accept', content: { approve: true } }
}

function clientV1() {
  const client = new ClientV1({ name: 'interop', version: '1' }, { capabilities: { elicitation: {} } })
  client.setRequestHandler(ElicitRequestSchema, approve)
  return client
}

function clientV2(mode) {
  const options = { versionNegotiation: { mode }, capabilities: { elicitation: { form: {} } } }
  const client = new ClientV2({ name: 'interop', version: '1' }, options)
  client.setRequestHandler('elicitation/create', approve)
  return client
}

// The clients under test: each with the revision it must end up speaking.
const CLIENTS = [
  { label: 'v1', revision: '2025-11-25', make: clientV1 },
  ...[
    ['legacy', '2025-11-25'],
    ['auto', '2026-07-28'],
    [{ pin: '2026-07-28' }, '2026-07-28'],
  ].map(([mode, revision]) => ({
    label: `v2 ${typeof mode === 'string' ? mode : `pin ${mode.pin}`}`,
    revision,
    v2: true,
    make: () => clientV2(mode),
  })),
]

/** The tool result object: content[0].text parsed, equal to structuredContent; business errors marked. */
function resultOf(result) {
  assert.equal(result.content?.[0]?.type, 'text', JSON.stringify(result))
  const value = JSON.parse(result.content[0].text)
  if (result.structuredContent !== undefined) assert.deepEqual(result.structuredContent, value)
  const businessError = typeof value?.error === 'string'
  assert.equal(Boolean(result.isError), businessError, JSON.stringify(result))
  return value
}

async function knowledgeFlow(client, label) {
  const { tools } = await client.listTools()
  const byName = new Map(tools.map((t) => [t.name, t]))
  for (const name of ['validate_knowledge', 'evolve_knowledge', 'query_subgraph', 'list_versions', 'ai_chat']) {
    assert.ok(byName.has(name), `${label}: ${name} missing from tools/list`)
  }
  assert.equal(byName.get('query_subgraph').annotations.readOnlyHint, true)

  const call = async (name, args) => resultOf(await client.callTool({ name, arguments: args }))
  const validated = await call('validate_knowledge', { json_data: JSON.stringify(GRAPH) })
  assert.equal(validated.valid, true, JSON.stringify(validated))
  const sid = validated.session_id
  const evolved = await call('evolve_knowledge', {
    session_id: sid,
    operations: [{ type: 'add_object', identity: { id: 'moon', type: 'Moon', name: 'Moon' } }],
  })
  assert.equal(evolved.operations_applied, 1, JSON.stringify(evolved))
  const sub = await call('query_subgraph', { session_id: sid, seed_ids: ['earth'], depth: 1 })
  const ids = new Set(JSON.parse(sub.subgraph).objects.map((o) => o.identity.id))
  assert.deepEqual([...ids].sort(), ['earth', 'orbit', 'sun'])
  const missing = await call('list_versions', { session_id: 'no-such-session' })
  assert.equal(missing.error, 'session_not_found')

  const { resources } = await client.listResources()
  assert.ok(resources.some((r) => r.uri === `cks://sessions/${sid}`), `${label}: session not listed`)
  const read = await client.readResource({ uri: `cks://sessions/${sid}` })
  const state = JSON.parse(read.contents[0].text)
  assert.deepEqual(state.objects.map((o) => o.identity.id).sort(), ['earth', 'moon', 'orbit', 'sun'])
  const { prompts } = await client.listPrompts()
  assert.ok(prompts.some((p) => p.name === 'explore_subgraph'))
  const prompt = await client.getPrompt({ name: 'explore_subgraph', arguments: { session_id: sid, seed_id: 'moon' } })
  assert.ok(prompt.messages[0].content.text.includes(sid))

  await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), /no_such_tool/)

  // A chat with approvals reverts the session: the user is asked once, and the same call comes
  // back with the revert done.
  const { versions } = await call('list_versions', { session_id: sid })
  const before = asked
  const chat = await call('ai_chat', { session_id: sid, approvals: true, prompt: `undo to ${versions[0].version_id}` })
  assert.equal(asked, before + 1, `${label}: the user was not asked`)
  assert.equal(chat.reply, 'Revert: done.', JSON.stringify(chat))
  assert.equal(chat.pending_approval, undefined)
  const after = await call('list_versions', { session_id: sid })
  assert.equal(after.versions.length, versions.length + 1, `${label}: not reverted`)
}

/**
 * The default list is the core profile; an unlisted tool is called by name; find_tools finds one,
 * which is then called and, on a revision with sessions, joins the list.
 */
async function profileFlow(client, spec, label) {
  const names = (await client.listTools()).tools.map((t) => t.name)
  assert.ok(names.length <= 25 && names.includes('find_tools') && !names.includes('list_agents'), `${label}: ${names}`)
  const call = async (name, args) => resultOf(await client.callTool({ name, arguments: args }))
  assert.ok(Array.isArray((await call('list_processes', {})).processes), label)
  const found = await call('find_tools', { need: 'list the sweepers' })
  const sweepers = found.tools.find((t) => t.name === 'list_agents')
  assert.equal(sweepers?.inputSchema?.type, 'object', `${label}: ${JSON.stringify(found)}`)
  assert.ok(Array.isArray((await call('list_agents', {})).agents), label)
  const listed = (await client.listTools()).tools.map((t) => t.name)
  const expected = spec.revision === '2026-07-28' ? names : [...new Set([...names, ...found.tools.map((t) => t.name)])]
  assert.deepEqual(new Set(listed), new Set(expected), label)
}

async function checkConnected(client, spec) {
  assert.equal(client.getServerVersion()?.name, 'cks-mcp')
  if (spec.v2) assert.equal(client.getNegotiatedProtocolVersion(), spec.revision, spec.label)
}

async function overStdio(spec, dataDir) {
  const Transport = spec.v2 ? StdioV2 : StdioV1
  const transport = new Transport({ command: BINARY, args: [], env: { ...SERVER_ENV, CKS_MCP_DATA_DIR: dataDir } })
  const client = spec.make()
  await client.connect(transport)
  try {
    await checkConnected(client, spec)
    await profileFlow(client, spec, `stdio ${spec.label}`)
    await knowledgeFlow(client, `stdio ${spec.label}`)
  } finally {
    await client.close()
  }
}

async function overHttp(spec, port) {
  const Transport = spec.v2 ? HttpV2 : HttpV1
  const client = spec.make()
  await client.connect(new Transport(new URL(`http://127.0.0.1:${port}/mcp`)))
  try {
    await checkConnected(client, spec)
    await profileFlow(client, spec, `http ${spec.label}`)
    await knowledgeFlow(client, `http ${spec.label}`)
  } finally {
    await client.close()
  }
}


async function startHttp(dataDir, port) {
  const child = spawn(BINARY, ['--http', `127.0.0.1:${port}`, '--no-stdio'], {
    env: { ...SERVER_ENV, CKS_MCP_DATA_DIR: dataDir },
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  const deadline = Date.now() + 20_000
  while (Date.now() < deadline) {
    try {
      const response = await fetch(`http://127.0.0.1:${port}/health`)
      if (response.ok) return child
    } catch {
      await new Promise((r) => setTimeout(r, 50))
    }
  }
  child.kill()
  throw new Error('HTTP server did not start')
}

/** With CKS_MCP_TOOLS=all, every tool is listed, as the reference lists them. */
async function everyToolListed(dataDir) {
  const env = { ...SERVER_ENV, CKS_MCP_DATA_DIR: dataDir, CKS_MCP_TOOLS: 'all' }
  const client = clientV1()
  await client.connect(new StdioV1({ command: BINARY, args: [], env }))
  try {
    const names = (await client.listTools()).tools.map((t) => t.name)
    assert.ok(names.length > 70 && names.includes('list_agents') && names.includes('migrate_storage'), `${names.length}`)
  } finally {
    await client.close()
  }
}

const dataDir = mkdtempSync(join(tmpdir(), 'cks-interop-ts-'))
try {
  for (const spec of CLIENTS) {
    await overStdio(spec, join(dataDir, 'stdio'))
    console.log(`stdio ${spec.label}: ok`)
  }
  await everyToolListed(join(dataDir, 'stdio'))
  console.log('stdio, every tool listed: ok')
  const port = await freePort()
  const server = await startHttp(join(dataDir, 'http'), port)
  try {
    for (const spec of CLIENTS) {
      await overHttp(spec, port)
      console.log(`http ${spec.label}: ok`)
    }
  } finally {
    server.kill()
  }
} finally {
  rmSync(dataDir, { recursive: true, force: true })
  model.close()
}
assert.deepEqual(warnings, [], 'the SDKs warned of our schemas')
