// A scripted model provider for the studio checks: an HTTP server on 127.0.0.1 that speaks the
// Anthropic Messages wire format (POST /v1/messages, not streamed; GET /v1/models, the model list),
// so a server pointed at it (CKS_LLM_PROVIDER=anthropic, ANTHROPIC_BASE_URL) gets its model calls
// answered by the check.
import assert from 'node:assert/strict'
import { createServer } from 'node:http'

/** The text of a request's system prompt and of its user turns. */
function texts(body) {
  const flat = (content) =>
    typeof content === 'string' ? content : (content ?? []).map((block) => block.text ?? '').join('\n')
  return { system: flat(body.system), prompt: (body.messages ?? []).map((m) => flat(m.content)).join('\n') }
}

/**
 * Listens on `url` (http://127.0.0.1:PORT) and answers each call with what
 * `answer({ system, prompt, body })` returns (or resolves to): a string, the reply's text;
 * `{ tools: [{ name, input }], text? }`, an answer asking for those tool calls (ids `toolu_N_I`); or
 * `{ status, body }`, a reply of its own (an error). `models` (default one, `claude-scripted`) is
 * the model list GET /v1/models answers. Returns `{ calls, listings, close() }`; `calls` lists each
 * call's `{ system, prompt, body, reply }` in the order they came, `listings` counts the model-list
 * requests.
 */
export async function startProvider(url, answer, { models = [{ id: 'claude-scripted', display_name: 'Scripted' }] } = {}) {
  const { hostname, port } = new URL(url)
  const calls = []
  let listings = 0
  const server = createServer(async (request, response) => {
    const chunks = []
    for await (const chunk of request) chunks.push(chunk)
    const send = (status, reply) => {
      response.writeHead(status, { 'content-type': 'application/json' })
      response.end(JSON.stringify(reply))
    }
    const path = new URL(request.url, url).pathname
    if (request.method === 'GET' && path === '/v1/models') {
      listings += 1
      const data = models.map((m) => ({ type: 'model', created_at: '2026-01-01T00:00:00Z', ...m }))
      send(200, { data, has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null })
      return
    }
    if (request.method !== 'POST' || path !== '/v1/messages') {
      send(404, { type: 'error', error: { type: 'not_found_error', message: `${request.method} ${request.url}` } })
      return
    }
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
    const call = { ...texts(body), body }
    calls.push(call)
    if (body.stream) {
      call.reply = { status: 400 }
      send(400, { type: 'error', error: { type: 'invalid_request_error', message: 'this provider does not stream' } })
      return
    }
    try {
      const reply = await answer(call)
      call.reply = reply
      const message = (content, stopReason) => send(200, {
        id: `msg_${calls.length}`,
        type: 'message',
        role: 'assistant',
        model: body.model,
        content,
        stop_reason: stopReason,
        stop_sequence: null,
        usage: {
          input_tokens: Math.ceil(call.prompt.length / 4),
          output_tokens: Math.ceil(JSON.stringify(content).length / 4),
        },
      })
      if (typeof reply === 'string') {
        message([{ type: 'text', text: reply }], 'end_turn')
      } else if (reply.tools) {
        const uses = reply.tools.map((tool, i) => ({ type: 'tool_use', id: `toolu_${calls.length}_${i}`, name: tool.name, input: tool.input }))
        message([...(reply.text ? [{ type: 'text', text: reply.text }] : []), ...uses], 'tool_use')
      } else {
        send(reply.status, reply.body)
      }
    } catch (error) {
      call.reply = { status: 500, error: String(error) }
      send(500, { type: 'error', error: { type: 'api_error', message: `the check's script failed: ${error}` } })
    }
  })
  await new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(Number(port), hostname, resolve)
  })
  assert.equal(server.address().port, Number(port))
  return {
    calls,
    get listings() { return listings },
    close: () => new Promise((resolve) => {
      server.closeAllConnections()
      server.close(resolve)
    }),
  }
}
