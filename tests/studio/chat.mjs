// Drives cks-studio's Chat page (its ChatPanel: the model picker, turns with their tool calls,
// Continue after a turn cut short, Retry after a failed one) in Debian's Chromium against a running
// cks-mcp, and checks every step against the server's own answers: what ai_chat answered the page,
// what the model was sent, and the graph the model's tool calls changed. The model is a scripted
// provider (tests/studio/provider.mjs) that scripts/studio-check points the server at with
// tests/studio/chat.env (a turn stops after two model calls). Arguments come from the environment:
// STUDIO_URL (a running cks-studio), MCP_URL (our server's base URL), PROVIDER_URL (where to serve
// the model), CHROMIUM (the browser binary), SCREENSHOTS (a folder, optional).
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'

import { call, open, server, studio } from './harness.mjs'
import { startProvider } from './provider.mjs'

const ADD = 'Add Ada Lovelace, who wrote notes on the Analytical Engine.'
const LIST = 'Look at the whole graph, then describe it.'
const RENAME = 'Rename the engine to Difference Engine.'
const MODELS = [{ id: 'claude-studio-chat', display_name: 'Chat model' }, { id: 'claude-studio-other', display_name: 'Other model' }]

// ---- The model: for each prompt, one answer per model call of its turn ----

/** A message's text blocks (a string content is one). */
const textOf = (message) => typeof message.content === 'string'
  ? message.content
  : message.content.filter((b) => b.type === 'text').map((b) => b.text).join('\n')
/** The tool results of a message (none for text). */
const resultsOf = (message) => typeof message.content === 'string' ? [] : message.content.filter((b) => b.type === 'tool_result')
const resultText = (block) => typeof block.content === 'string' ? block.content : block.content.map((b) => b.text ?? '').join('')
/** The prompt a call answers (the last user message with text) and how many answers of it came before. */
function stage(messages) {
  const at = messages.findLastIndex((m) => m.role === 'user' && textOf(m).trim() !== '' && resultsOf(m).length === 0)
  return { prompt: textOf(messages[at]), step: messages.slice(at + 1).filter((m) => m.role === 'assistant').length }
}
const failures = new Map()
const outage = { status: 500, body: { type: 'error', error: { type: 'api_error', message: 'scripted outage' } } }
const provider = await startProvider(process.env.PROVIDER_URL, ({ body }) => {
  const { prompt, step } = stage(body.messages)
  const last = body.messages.at(-1)
  if (failures.get(prompt) > 0) {
    failures.set(prompt, failures.get(prompt) - 1)
    return outage
  }
  if (prompt === ADD && step === 0) {
    return {
      text: 'I will add her.',
      tools: [{
        name: 'evolve_knowledge',
        input: {
          operations: [
            { type: 'add_object', identity: { id: 'ada', type: 'Person', name: 'Ada Lovelace' } },
            { type: 'add_relation', identity: { id: 'ada-wrote-engine', type: 'Relation', name: 'wrote about' }, participants: ['ada', 'engine'], relation_type: 'wrote_about' },
          ],
        },
      }],
    }
  }
  if (prompt === ADD && step === 1) {
    const [result] = resultsOf(last)
    assert.ok(result && !result.is_error, `the evolve_knowledge result: ${JSON.stringify(result)}`)
    return 'Added Ada Lovelace, who wrote about the Analytical Engine.'
  }
  if (prompt === LIST && step === 0) return { tools: [{ name: 'query_subgraph', input: {} }] }
  if (prompt === LIST && step === 1) return { tools: [{ name: 'explain_knowledge', input: {} }] }
  if (prompt === LIST && step === 2) {
    // Continued: the graph read two answers ago is in the history the page sent back.
    const read = body.messages.flatMap(resultsOf).map((b) => JSON.parse(resultText(b))).find((r) => r.subgraph)
    const names = read.subgraph.nodes.map((n) => n.identity.name).sort()
    return `The graph holds ${names.length} objects: ${names.join(', ')}.`
  }
  if (prompt === RENAME && step === 0) {
    return { tools: [{ name: 'evolve_knowledge', input: { operations: [{ type: 'rename_object', object_id: 'engine', new_name: 'Difference Engine' }] } }] }
  }
  if (prompt === RENAME && step === 1) return 'Renamed it to Difference Engine.'
  throw new Error(`an unexpected model call: ${JSON.stringify({ prompt, step })}`)
}, { models: MODELS })

// ---- The session and the page ----

const created = await call('validate_knowledge', {
  json_data: JSON.stringify({ objects: [{ identity: { id: 'engine', type: 'Concept', name: 'Analytical Engine' } }] }),
})
assert.ok(created.session_id && created.valid, JSON.stringify(created))
const session = created.session_id
const objects = async () => JSON.parse((await call('serialize_knowledge', { session_id: session })).serialized).objects

const { page, check, finish } = await open('chat', session)

// What ai_chat answered the page, in order.
const answers = []
page.on('response', async (response) => {
  const request = response.request()
  if (request.url() !== `${server}/mcp` || request.method() !== 'POST') return
  const sent = JSON.parse(request.postData())
  if (sent.params?.name !== 'ai_chat') return
  const reply = await response.json()
  answers.push({ sent: sent.params.arguments, answer: JSON.parse(reply.result.content[0].text) })
})
async function nextAnswer(count) {
  const deadline = Date.now() + 20_000
  while (answers.length < count) {
    assert.ok(Date.now() < deadline, `timed out waiting for ai_chat answer ${count}`)
    await sleep(100)
  }
  return answers[count - 1]
}

const list = page.locator('div.flex-1.overflow-y-auto.p-4')
/** The turns shown: [role, text] in order (the text without the tool calls and buttons). */
const shownTurns = () => list.evaluate((element) => [...element.children]
  .filter((c) => c.classList.contains('justify-end') || c.classList.contains('justify-start'))
  .filter((c) => c.textContent.trim() !== 'thinking…')
  .map((c) => [c.classList.contains('justify-end') ? 'user' : 'assistant', c.firstElementChild.firstChild.textContent]))
async function expectTurns(turns) {
  try {
    await page.waitForFunction(([wanted]) => {
      const element = document.querySelector('div.flex-1.overflow-y-auto.p-4')
      if (!element) return false // the page is still loading
      const shown = [...element.children]
        .filter((c) => c.classList.contains('justify-end') || c.classList.contains('justify-start'))
        .filter((c) => c.textContent.trim() !== 'thinking…')
        .map((c) => [c.classList.contains('justify-end') ? 'user' : 'assistant', c.firstElementChild.firstChild.textContent])
      return JSON.stringify(shown) === JSON.stringify(wanted)
    }, [turns], { timeout: 20_000 })
  } catch {
    assert.deepEqual(await shownTurns(), turns, 'the turns shown')
  }
}
const bubble = (i) => list.locator(':scope > div.flex').nth(i).locator(':scope > div')
const input = page.getByPlaceholder(/^Ask cks-mcp/)
async function send(text) {
  await input.fill(text)
  await page.getByRole('button', { name: 'Send', exact: true }).click()
}
const banner = page.locator('div.text-red-400.text-xs.px-4')
const picker = page.locator('h2', { hasText: 'Chat' }).locator('xpath=following-sibling::select[1]')

await check('the model picker offers list_llm_models\' models, the default named as get_llm_status reports it', async () => {
  await page.goto(`${studio}/chat`)
  const status = await call('get_llm_status', {})
  const models = await call('list_llm_models', {})
  assert.equal(status.model, 'claude-studio-chat')
  await page.waitForFunction(() => document.querySelector('h2 + select:not([disabled])'))
  const options = await picker.locator('option').allInnerTexts()
  assert.deepEqual(options, [`Default (${status.model})`, ...models.models.map((m) => m.name)])
  assert.deepEqual(models.models.map((m) => m.name), MODELS.map((m) => m.id))
  assert.equal(await page.getByText(/^No LLM provider configured/).count(), 0)
})

await check('a turn: the model\'s tool call changes the graph, and its answer is shown with the call', async () => {
  await picker.selectOption('claude-studio-other')
  const calls = provider.calls.length
  await send(ADD)
  const { sent, answer } = await nextAnswer(1)
  assert.equal(sent.session_id, session)
  assert.equal(sent.model, 'claude-studio-other')
  assert.deepEqual(sent.messages, [{ role: 'user', content: ADD }])
  assert.equal(answer.reply, 'Added Ada Lovelace, who wrote about the Analytical Engine.', JSON.stringify(answer))
  assert.deepEqual(answer.tool_calls.map((c) => [c.name, c.is_error]), [['evolve_knowledge', false]])
  // Two model calls, both for the picked model, offered evolve_knowledge.
  const made = provider.calls.slice(calls)
  assert.equal(made.length, 2)
  for (const c of made) {
    assert.equal(c.body.model, 'claude-studio-other')
    assert.ok(c.body.tools.some((t) => t.name === 'evolve_knowledge'))
  }
  await expectTurns([['user', ADD], ['assistant', answer.reply]])
  // The graph changed as the model asked.
  const stored = await objects()
  const ada = stored.find((o) => o.identity.id === 'ada')
  assert.deepEqual(ada?.identity, { id: 'ada', type: 'Person', name: 'Ada Lovelace' })
  const wrote = stored.find((o) => o.identity.id === 'ada-wrote-engine')
  assert.deepEqual(wrote?.structure, { participants: ['ada', 'engine'], relation_type: 'wrote_about' })
  const seeded = (await call('query_subgraph', { session_id: session, seed_ids: ['ada'], depth: 1, compact_mode: true })).subgraph
  assert.deepEqual(seeded.edges.map((e) => [e.source, e.target, e.type]), [['ada', 'engine', 'wrote_about']])
  // The call, opened: its tool and its arguments as the server ran them.
  const assistant = bubble(1)
  await assistant.getByRole('button', { name: '▸ 1 tool call' }).click()
  await assert.doesNotReject(assistant.getByText('evolve_knowledge', { exact: true }).waitFor())
  const args = await assistant.locator('div.font-mono.truncate').innerText()
  assert.deepEqual(JSON.parse(args), answer.tool_calls[0].arguments)
  assert.equal(answer.tool_calls[0].arguments.session_id, session)
  await picker.selectOption('')
})

await check('the Graph page shows what the chat added', async () => {
  await page.locator('a[data-nav="graph"]').click()
  await assert.doesNotReject(page.locator('.react-flow__node[data-id="ada"]').waitFor())
  await assert.doesNotReject(page.locator('.react-flow__edge').filter({ hasText: 'wrote_about' }).waitFor())
  await page.locator('a[data-nav="chat"]').click()
  await expectTurns([['user', ADD], ['assistant', 'Added Ada Lovelace, who wrote about the Analytical Engine.']])
})

let continued
await check('a turn cut short at the iteration cap offers Continue, which finishes it from the same history', async () => {
  const calls = provider.calls.length
  await send(LIST)
  const { sent, answer } = await nextAnswer(2)
  assert.equal(sent.model, undefined, 'the default model is sent as no model')
  assert.equal(answer.truncated, true, JSON.stringify(answer))
  assert.equal(answer.truncation_reason, 'max_iterations')
  assert.deepEqual(answer.tool_calls.map((c) => c.name), ['query_subgraph', 'explain_knowledge'])
  assert.equal(provider.calls.length - calls, 2)
  assert.equal(provider.calls.at(-1).body.model, 'claude-studio-chat')
  await expectTurns([
    ['user', ADD], ['assistant', 'Added Ada Lovelace, who wrote about the Analytical Engine.'],
    ['user', LIST], ['assistant', answer.reply],
  ])
  const cut = bubble(3)
  await assert.doesNotReject(cut.getByRole('button', { name: '▸ 2 tool calls' }).waitFor())
  await cut.getByRole('button', { name: 'Continue' }).click()
  const again = await nextAnswer(3)
  // The page sent back the server's messages as they were: no second copy of the prompt.
  assert.deepEqual(again.sent.messages, answer.messages)
  assert.equal(again.sent.messages.filter((m) => m.role === 'user' && textOf(m) === LIST).length, 1)
  assert.equal(again.answer.truncated, undefined, JSON.stringify(again.answer))
  const names = JSON.parse(JSON.stringify(answer.tool_calls[0].result)).subgraph.nodes.map((n) => n.identity.name).sort()
  assert.equal(again.answer.reply, `The graph holds ${names.length} objects: ${names.join(', ')}.`)
  assert.deepEqual(names, ['Ada Lovelace', 'Analytical Engine'])
  continued = again.answer.reply
  await expectTurns([
    ['user', ADD], ['assistant', 'Added Ada Lovelace, who wrote about the Analytical Engine.'],
    ['user', LIST], ['assistant', answer.reply], ['assistant', continued],
  ])
  assert.equal(await page.getByRole('button', { name: 'Continue' }).count(), 0)
})

await check('a failed turn shows the server\'s error with Retry; Retry resends it (still failing)', async () => {
  failures.set(RENAME, 2)
  await send(RENAME)
  const { answer } = await nextAnswer(4)
  assert.equal(answer.error, 'llm_call_failed', JSON.stringify(answer))
  await assert.doesNotReject(banner.getByText(`LLM call failed: ${answer.message} Try again or check Settings.`, { exact: true }).waitFor())
  const history = [
    ['user', ADD], ['assistant', 'Added Ada Lovelace, who wrote about the Analytical Engine.'],
    ['user', LIST], ['assistant', answers[1].answer.reply], ['assistant', continued], ['user', RENAME],
  ]
  await expectTurns(history)
  assert.equal((await objects()).find((o) => o.identity.id === 'engine').identity.name, 'Analytical Engine')
  await banner.getByRole('button', { name: 'Retry' }).click()
  const again = await nextAnswer(5)
  assert.equal(again.answer.error, 'llm_call_failed')
  assert.deepEqual(again.sent.messages, answers[3].sent.messages, 'Retry sends the same messages')
  await assert.doesNotReject(banner.getByRole('button', { name: 'Retry' }).waitFor())
  await expectTurns(history)
})

await check('the message\'s own Retry (its actions) resends it once more, and the turn goes through', async () => {
  const user = bubble(5)
  await user.getByRole('button', { name: 'Retry', exact: true }).click()
  const { sent, answer } = await nextAnswer(6)
  assert.deepEqual(sent.messages, answers[3].sent.messages, 'Retry sends the same messages')
  assert.equal(sent.messages.filter((m) => m.role === 'user' && textOf(m) === RENAME).length, 1)
  assert.equal(answer.reply, 'Renamed it to Difference Engine.', JSON.stringify(answer))
  assert.deepEqual(answer.tool_calls.map((c) => [c.name, c.is_error]), [['evolve_knowledge', false]])
  await expectTurns([
    ['user', ADD], ['assistant', 'Added Ada Lovelace, who wrote about the Analytical Engine.'],
    ['user', LIST], ['assistant', answers[1].answer.reply], ['assistant', continued],
    ['user', RENAME], ['assistant', answer.reply],
  ])
  assert.equal(await banner.count(), 0)
  assert.equal((await objects()).find((o) => o.identity.id === 'engine').identity.name, 'Difference Engine')
  // Only the trailing user message offers Retry; after the answer, none does.
  assert.equal(await list.getByRole('button', { name: 'Retry', exact: true }).count(), 0)
})

await check('the model was called as scripted: nine calls, the only failures the two outages', async () => {
  assert.equal(provider.calls.length, 9, JSON.stringify(provider.calls.map((c) => stage(c.body.messages))))
  const failed = provider.calls.filter((c) => typeof c.reply !== 'string' && !c.reply?.tools)
  assert.deepEqual(failed.map((c) => c.reply), [outage, outage])
})

await finish()
await provider.close()
