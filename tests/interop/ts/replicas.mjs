// The replicas check's TypeScript clients: SDK v1, and SDK v2 in its legacy and auto modes, each
// run one workflow through a load balancer that sends each request to the next replica: create,
// evolve, query, an ai_chat with progress, and an ai_chat cancelled while the model thinks,
// checked to stop on the replica that runs it (the model's server sees the call abandoned).
//
// Usage: node replicas.mjs <MCP URL behind the balancer> <model status URL>

import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'

import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport as HttpV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { Client as ClientV2, StreamableHTTPClientTransport as HttpV2 } from '@modelcontextprotocol/client'

const [url, statusUrl] = process.argv.slice(2)

const CLIENTS = [
  { label: 'ts v1', v2: false, connect: async () => {
    const client = new ClientV1({ name: 'replicas', version: '1' })
    await client.connect(new HttpV1(new URL(url)))
    return client
  } },
  ...['legacy', 'auto'].map((mode) => ({ label: `ts v2 ${mode}`, v2: true, connect: async () => {
    const client = new ClientV2({ name: 'replicas', version: '1' }, { versionNegotiation: { mode } })
    await client.connect(new HttpV2(new URL(url)))
    return client
  } })),
]

const model = async () => (await fetch(statusUrl)).json()

async function waitFor(what, check) {
  const deadline = Date.now() + 30_000
  for (;;) {
    if (await check()) return
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`)
    await sleep(50)
  }
}

async function workflow(client, { label, v2 }) {
  // v1 takes a result schema before the options; v2 does not.
  const invoke = (params, options) => (v2 ? client.callTool(params, options) : client.callTool(params, undefined, options))
  const call = async (name, args, options) => {
    const result = await invoke({ name, arguments: args }, options)
    const value = JSON.parse(result.content[0].text)
    assert.equal(typeof value.error, 'undefined', `${label} ${name}: ${result.content[0].text}`)
    return value
  }
  const graph = { objects: [
    { identity: { id: 'sun', type: 'Star', name: 'Sun' } },
    { identity: { id: 'earth', type: 'Planet', name: 'Earth' } },
  ] }
  const { session_id: sid } = await call('validate_knowledge', { json_data: JSON.stringify(graph) })
  const evolved = await call('evolve_knowledge', { session_id: sid, operations: [
    { type: 'add_relation', identity: { id: 'orbit', type: 'Relation', name: 'orbits' },
      participants: ['earth', 'sun'], relation_type: 'orbits' },
  ] })
  assert.equal(evolved.operations_applied, 1)
  const sub = await call('query_subgraph', { session_id: sid, seed_ids: ['earth'], depth: 1 })
  assert.equal(sub.returned_nodes, 2, JSON.stringify(sub))

  const progress = []
  const chat = await call('ai_chat', { session_id: sid, messages: [{ role: 'user', content: 'Describe the graph.' }] },
    { onprogress: (p) => progress.push(p), timeout: 60_000 })
  assert.match(chat.reply, /sun and a planet/, JSON.stringify(chat))
  assert.ok(progress.length > 0, `${label}: no progress notification`)

  const before = await model()
  const controller = new AbortController()
  const cancelled = invoke(
    { name: 'ai_chat', arguments: { session_id: sid, messages: [{ role: 'user', content: 'take your time' }] } },
    { signal: controller.signal, timeout: 120_000 })
  await waitFor('the model to be asked', async () => (await model()).calls > before.calls)
  controller.abort('the user stopped it')
  await assert.rejects(cancelled)
  await waitFor(`${label}: the cancelled turn to stop on its replica`, async () => (await model()).abandoned > before.abandoned)
}

for (const spec of CLIENTS) {
  const client = await spec.connect()
  try {
    await workflow(client, spec)
  } finally {
    await client.close()
  }
  console.log(`replicas ${spec.label}: ok`)
}
