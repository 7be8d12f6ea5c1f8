// A scripted model provider for the studio checks: an HTTP server on 127.0.0.1 that speaks the
// Anthropic Messages wire format (POST /v1/messages, not streamed), so a server pointed at it
// (CKS_LLM_PROVIDER=anthropic, ANTHROPIC_BASE_URL) gets its model calls answered by the check.
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
 * `answer({ system, prompt, body })` returns (or resolves to): a string, the reply's text; or
 * `{ status, body }`, an error reply. Returns `{ calls, close() }`; `calls` lists each call's
 * `{ system, prompt, body, reply }` in the order they came.
 */
export async function startProvider(url, answer) {
  const { hostname, port } = new URL(url)
  const calls = []
  const server = createServer(async (request, response) => {
    const chunks = []
    for await (const chunk of request) chunks.push(chunk)
    const send = (status, reply) => {
      response.writeHead(status, { 'content-type': 'application/json' })
      response.end(JSON.stringify(reply))
    }
    if (request.method !== 'POST' || new URL(request.url, url).pathname !== '/v1/messages') {
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
      if (typeof reply === 'string') {
        send(200, {
          id: `msg_${calls.length}`,
          type: 'message',
          role: 'assistant',
          model: body.model,
          content: [{ type: 'text', text: reply }],
          stop_reason: 'end_turn',
          stop_sequence: null,
          usage: { input_tokens: Math.ceil(call.prompt.length / 4), output_tokens: Math.ceil(reply.length / 4) },
        })
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
    close: () => new Promise((resolve) => {
      server.closeAllConnections()
      server.close(resolve)
    }),
  }
}
