// Interoperability test of MCP Tasks: the official Tasks extension client
// (`@modelcontextprotocol/ext-tasks`) on the TypeScript SDK v2 client pinned to 2026-07-28, over
// streamable HTTP, calls `ai_chat` on the cks-mcp release binary. The call becomes a task, which
// the extension polls to its result; a second one, whose model never answers, is cancelled.
//
// Usage: node tasks.mjs <path to cks-mcp binary>

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client'
import { createTaskSessionFromClient, resultFromTaskOutcome } from '@modelcontextprotocol/ext-tasks/client'

import { startProvider } from '../../page/provider.mjs'

import { freePort } from './net.mjs'

const BINARY = process.argv[2]
const REVISION = '2026-07-28'
const CLIENT_INFO = { name: 'interop-tasks', version: '1' }


// The model: answers at once, or never when asked to take its time (the cancelled task).
const modelPort = await freePort()
const model = await startProvider(`http://127.0.0.1:${modelPort}`, async (call) => {
  if (call.prompt.includes('take your time')) {
    await sleep(600_000, undefined, { ref: false })
    return 'too late'
  }
  return 'The graph holds a sun.'
})

const port = await freePort()
const mcpUrl = `http://127.0.0.1:${port}/mcp`
const dataDir = mkdtempSync(join(tmpdir(), 'cks-interop-tasks-'))
const server = spawn(BINARY, ['--http', `127.0.0.1:${port}`, '--no-stdio'], {
  env: {
    ...process.env,
    CKS_MCP_DATA_DIR: dataDir,
    CKS_LLM_PROVIDER: 'anthropic',
    ANTHROPIC_API_KEY: 'sk-ant-interop',
    ANTHROPIC_BASE_URL: `http://127.0.0.1:${modelPort}`,
  },
  stdio: ['ignore', 'ignore', 'inherit'],
})

/** One self-contained request of the stateless revision, as the extension frames it; its answer
 * (a JSON body or the last event of a stream) in the extension's shape. */
let nextId = 0
async function rawDispatch(request, options = {}) {
  const headers = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': REVISION,
    'mcp-method': request.method,
    ...(options.context?.headers ?? {}),
  }
  const name = request.params?.name
  if (typeof name === 'string') headers['mcp-name'] = name
  const response = await fetch(mcpUrl, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: ++nextId, ...request }), signal: options.signal })
  const text = await response.text()
  let message
  if ((response.headers.get('content-type') ?? '').includes('text/event-stream')) {
    const data = text.split('\n').filter((line) => line.startsWith('data:')).map((line) => line.slice(5).trim())
    message = JSON.parse(data.filter((d) => d.length > 0).at(-1))
  } else {
    message = JSON.parse(text)
  }
  return message.error === undefined ? { kind: 'result', result: message.result } : { kind: 'error', error: message.error }
}

try {
  const deadline = Date.now() + 20_000
  for (;;) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/health`)).ok) break
    } catch {
      if (Date.now() > deadline) throw new Error('HTTP server did not start')
      await sleep(50)
    }
  }
  const client = new Client(CLIENT_INFO, { versionNegotiation: { mode: { pin: REVISION } } })
  await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl)))
  assert.deepEqual(client.getServerCapabilities()?.extensions?.['io.modelcontextprotocol/tasks'], {})
  const graph = { objects: [{ identity: { id: 'sun', type: 'Star', name: 'Sun' } }] }
  const created = await client.callTool({ name: 'validate_knowledge', arguments: { json_data: JSON.stringify(graph) } })
  const sid = created.structuredContent.session_id

  const session = createTaskSessionFromClient(client, {
    endpointId: 'cks-mcp-interop',
    rawDispatch,
    v2RequestFraming: { protocolVersion: REVISION, clientInfo: CLIENT_INFO, clientCapabilities: {} },
  })
  try {
    const execution = await session.callTool('ai_chat', { session_id: sid, prompt: 'what is there?' })
    assert.equal(execution.kind, 'task', 'ai_chat answered in place, not as a task')
    assert.ok(execution.handle.taskId)
    const short = await session.callTool('list_versions', { session_id: sid })
    assert.equal(short.kind, 'immediate', 'a short tool answers in place')
    const { outcome } = await execution.settle()
    const result = resultFromTaskOutcome(outcome)
    assert.equal(result.structuredContent.reply, 'The graph holds a sun.', JSON.stringify(result))
    assert.equal(result.isError, false)
    const asTask = model.calls.length
    assert.equal(asTask, 1, 'one model call')

    const slow = await session.callTool('ai_chat', { session_id: sid, prompt: 'take your time' })
    while (model.calls.length < 2) await sleep(20)
    await slow.cancel()
    const settled = await slow.settle()
    assert.equal(slow.kind, 'task')
    assert.equal(settled.outcome.status, 'cancelled', JSON.stringify(settled.outcome))
  } finally {
    await session.close()
    await client.close()
  }
  console.log('tasks over http (ext-tasks, 2026-07-28): ok')
} finally {
  server.kill()
  model.close()
  rmSync(dataDir, { recursive: true, force: true })
}
