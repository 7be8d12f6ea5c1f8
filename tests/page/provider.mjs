// A scripted model for the page check: an HTTP server on 127.0.0.1 that speaks the Anthropic
// Messages wire format — POST /v1/messages, whole or streamed (SSE), and GET /v1/models — so a
// server pointed at it (CKS_LLM_PROVIDER=anthropic, ANTHROPIC_BASE_URL) gets its model calls
// answered by the check. The same idea as tests/studio/provider.mjs, with tool calls, streaming and
// a model list.
import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'

export const MODELS = [
  { id: 'scripted-small', display_name: 'Scripted small' },
  { id: 'scripted-large', display_name: 'Scripted large' },
]

const flat = (content) =>
  typeof content === 'string' ? content : (content ?? []).map((block) => block.text ?? '').join('\n')

/**
 * What the script sees of a request: `prompt`, the text of the last user message that has text;
 * `results`, the tool results sent since then (`{tool_use_id, content, is_error}`), oldest first;
 * `system`; `body`, the whole request.
 */
function view(body) {
  const messages = body.messages ?? []
  let prompt = ''
  const results = []
  for (let i = messages.length - 1; i >= 0; i -= 1) {
    const m = messages[i]
    if (m.role !== 'user') continue
    const blocks = typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : m.content ?? []
    results.unshift(...blocks.filter((b) => b.type === 'tool_result'))
    const text = blocks.filter((b) => b.type === 'text').map((b) => b.text).join('\n')
    if (text.trim()) {
      prompt = text
      break
    }
  }
  return { system: flat(body.system), prompt, results, body }
}

/**
 * Listens on `url` (http://127.0.0.1:PORT) and answers each model call with what
 * `answer(view)` returns (or resolves to): a string (the reply's text); `{text?, tools: [{name,
 * input}]}` (tool calls, after an optional text); or `{status, body}` (an error reply). Streamed
 * requests get the same answer as Anthropic's event stream, the text in small deltas `delayMs`
 * apart. Returns `{calls, close()}`: each call's view and reply, in order, and `abandoned` once the
 * client closed the call before its answer.
 */
export async function startProvider(url, answer, { delayMs = 40 } = {}) {
  const { hostname, port } = new URL(url)
  const calls = []
  const server = createServer(async (request, response) => {
    const chunks = []
    for await (const chunk of request) chunks.push(chunk)
    const send = (status, reply) => {
      response.writeHead(status, { 'content-type': 'application/json' })
      response.end(JSON.stringify(reply))
    }
    const path = new URL(request.url, url).pathname
    if (request.method === 'GET' && path === '/v1/models') {
      send(200, { data: MODELS.map((m) => ({ type: 'model', ...m })), has_more: false })
      return
    }
    if (request.method !== 'POST' || path !== '/v1/messages') {
      send(404, { type: 'error', error: { type: 'not_found_error', message: `${request.method} ${request.url}` } })
      return
    }
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
    const call = view(body)
    calls.push(call)
    // A client that gives up on the call (a cancelled chat turn) closes the request unanswered.
    response.on('close', () => {
      call.abandoned = !response.writableFinished
    })
    let reply
    try {
      reply = await answer(call)
    } catch (error) {
      reply = { status: 500, body: { type: 'error', error: { type: 'api_error', message: `the check's script failed: ${error}` } } }
    }
    call.reply = reply
    if (reply && typeof reply === 'object' && 'status' in reply) {
      send(reply.status, reply.body)
      return
    }
    const { text = '', tools = [] } = typeof reply === 'string' ? { text: reply } : reply
    const content = []
    if (text || !tools.length) content.push({ type: 'text', text })
    tools.forEach((tool, i) => content.push({ type: 'tool_use', id: `toolu_${calls.length}_${i}`, name: tool.name, input: tool.input ?? {} }))
    const stopReason = tools.length ? 'tool_use' : 'end_turn'
    const usage = { input_tokens: Math.ceil(JSON.stringify(body.messages).length / 4), output_tokens: Math.ceil((text.length + 1) / 4) }
    const id = `msg_${calls.length}`
    if (!body.stream) {
      send(200, { id, type: 'message', role: 'assistant', model: body.model, content, stop_reason: stopReason, stop_sequence: null, usage })
      return
    }
    response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    const event = (type, data) => response.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`)
    event('message_start', { message: { id, type: 'message', role: 'assistant', model: body.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: usage.input_tokens, output_tokens: 1 } } })
    for (const [index, block] of content.entries()) {
      if (block.type === 'text') {
        event('content_block_start', { index, content_block: { type: 'text', text: '' } })
        for (const piece of block.text.match(/\S+\s*|\s+/g) ?? []) {
          event('content_block_delta', { index, delta: { type: 'text_delta', text: piece } })
          await sleep(delayMs)
        }
      } else {
        event('content_block_start', { index, content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} } })
        event('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) } })
      }
      event('content_block_stop', { index })
    }
    event('message_delta', { delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: usage.output_tokens } })
    event('message_stop', {})
    response.end()
  })
  await new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(Number(port), hostname, resolve)
  })
  assert.equal(server.address().port, Number(port))
  return {
    calls,
    close: () => new Promise((resolve) => {
      server.closeAllConnections()
      server.close(resolve)
    }),
  }
}
