// Drives cks-studio's Settings page in Debian's Chromium against a running cks-mcp, and checks every
// step against the server's own answers: the MCP server URL and "Test Connection" (our server's
// /health answers; a dead port does not), and the LLM provider status the page shows
// (get_llm_status, with list_llm_models beside it) for a scripted model provider
// (tests/studio/provider.mjs) that scripts/studio-check points the server at with
// tests/studio/settings.env. Arguments come from the environment: STUDIO_URL (a running
// cks-studio), MCP_URL (our server's base URL), PROVIDER_URL (where to serve the model), CHROMIUM
// (the browser binary), SCREENSHOTS (a folder, optional).
import assert from 'node:assert/strict'
import { createServer } from 'node:net'

import { call, open, server, studio } from './harness.mjs'
import { startProvider } from './provider.mjs'

const MODELS = [
  { id: 'claude-studio-settings', display_name: 'Studio settings model' },
  { id: 'claude-studio-other', display_name: 'Another model' },
]
const provider = await startProvider(process.env.PROVIDER_URL, () => {
  throw new Error('the settings page asks for no model answer')
}, { models: MODELS })

/** A loopback port nothing listens on (bound, then closed). */
async function deadPort() {
  const socket = createServer()
  await new Promise((resolve) => socket.listen(0, '127.0.0.1', resolve))
  const { port } = socket.address()
  await new Promise((resolve) => socket.close(resolve))
  return port
}
const dead = `http://127.0.0.1:${await deadPort()}`

const session = (await call('validate_knowledge', {
  json_data: JSON.stringify({ objects: [{ identity: { id: 'a', type: 'Concept', name: 'A' } }] }),
})).session_id
assert.ok(session)

const { page, check, finish } = await open('settings', session)

// The tool calls the page makes, by name; and the URLs "Test Connection" fetches.
const toolCalls = []
const fetched = []
page.on('request', (request) => {
  if (request.url() === `${server}/mcp` && request.method() === 'POST') {
    toolCalls.push(JSON.parse(request.postData()).params?.name)
  } else if (request.url().endsWith('/health')) {
    fetched.push(request.url())
  }
})

const tab = (name) => page.getByRole('navigation').getByRole('button', { name, exact: true })
const card = (label) => page.locator('div.rounded-lg.p-5').filter({ has: page.getByText(label, { exact: true }) })
const urlInput = () => card('MCP Server').getByRole('textbox')
const storedSettings = () => page.evaluate(() => JSON.parse(localStorage.getItem('cks-studio:settings') ?? '{}').state ?? {})

await check('the Connection tab edits the server URL, kept in the browser, and names the connected session', async () => {
  await page.goto(`${studio}/settings`)
  await tab('Connection').click()
  await urlInput().fill(server)
  assert.equal((await storedSettings()).mcpServerUrl, server)
  await assert.doesNotReject(card('MCP Server').getByText(`current session: ${session}`, { exact: false }).waitFor())
  await page.reload()
  await tab('Connection').click()
  assert.equal(await urlInput().inputValue(), server, 'the URL after a reload')
})

await check('"Test Connection" against our server: reachable, as its /health answers', async () => {
  const health = await fetch(`${server}/health`)
  assert.equal(health.status, 200)
  await card('MCP Server').getByRole('button', { name: 'Test Connection' }).click()
  await assert.doesNotReject(card('MCP Server').getByText('Server reachable.', { exact: true }).waitFor())
  assert.deepEqual(fetched, [`${server}/health`])
  assert.equal(await card('MCP Server').getByText(/^Could not reach/).count(), 0)
})

await check('"Test Connection" against a dead port: not reachable', async () => {
  await urlInput().fill(dead)
  await card('MCP Server').getByRole('button', { name: 'Test Connection' }).click()
  await assert.doesNotReject(card('MCP Server').getByText(`Could not reach ${dead}.`, { exact: true }).waitFor())
  assert.equal(await card('MCP Server').getByText('Server reachable.').count(), 0)
  assert.equal(fetched.at(-1), `${dead}/health`)
})

await check('"Test Connection" against our server again: reachable again', async () => {
  await urlInput().fill(server)
  await card('MCP Server').getByRole('button', { name: 'Test Connection' }).click()
  await assert.doesNotReject(card('MCP Server').getByText('Server reachable.', { exact: true }).waitFor())
  assert.equal(await card('MCP Server').getByText(/^Could not reach/).count(), 0)
})

await check('the AI & LLM tab shows the provider, its model and availability as get_llm_status reports them', async () => {
  const status = await call('get_llm_status', {})
  assert.equal(status.provider, 'anthropic', JSON.stringify(status))
  assert.equal(status.model, 'claude-studio-settings', JSON.stringify(status))
  assert.equal(status.anthropic_configured, true, JSON.stringify(status))
  assert.equal(status.reachable, true, `the scripted provider answers its model list: ${JSON.stringify(status)}`)
  const listings = provider.listings
  await tab('AI & LLM').click()
  const llm = card('LLM Provider')
  await assert.doesNotReject(llm.getByText('Anthropic', { exact: true }).waitFor())
  await assert.doesNotReject(llm.getByText(status.model, { exact: true }).waitFor())
  assert.equal(await llm.locator('span[title]').first().getAttribute('title'), 'available')
  assert.equal(await llm.getByText(/^Could not reach cks-mcp/).count(), 0)
  assert.ok(toolCalls.includes('get_llm_status'), JSON.stringify(toolCalls))
  // The page's status came from the provider itself (the model list is not cached).
  assert.ok(provider.listings > listings, 'the page\'s get_llm_status did not ask the provider')
})

await check('the status\'s model is one list_llm_models offers, from the provider\'s own list', async () => {
  const status = await call('get_llm_status', {})
  const models = await call('list_llm_models', {})
  assert.equal(models.provider, status.provider)
  assert.deepEqual(models.models.map((m) => m.name), MODELS.map((m) => m.id))
  assert.deepEqual(models.models.map((m) => m.display_name), MODELS.map((m) => m.display_name))
  assert.ok(models.models.some((m) => m.name === status.model))
})

await check('Refresh asks the server again', async () => {
  const before = toolCalls.filter((n) => n === 'get_llm_status').length
  const listings = provider.listings
  const answered = page.waitForResponse((response) => response.url() === `${server}/mcp`
    && JSON.parse(response.request().postData()).params?.name === 'get_llm_status')
  await card('LLM Provider').getByRole('button', { name: 'Refresh' }).click()
  const status = JSON.parse((await (await answered).json()).result.content[0].text)
  assert.equal(status.model, 'claude-studio-settings')
  await assert.doesNotReject(card('LLM Provider').getByRole('button', { name: 'Refresh', exact: true }).waitFor())
  assert.equal(toolCalls.filter((n) => n === 'get_llm_status').length, before + 1)
  assert.ok(provider.listings > listings)
  await assert.doesNotReject(card('LLM Provider').getByText('claude-studio-settings', { exact: true }).waitFor())
})

await check('the provider status names the failure when the studio\'s server is unreachable', async () => {
  // The Graph page's server field is the URL every tool call goes to.
  await page.goto(`${studio}/`)
  await page.getByPlaceholder('http://127.0.0.1:8765').fill(dead)
  await page.locator('a[data-nav="settings"]').click()
  await tab('AI & LLM').click()
  await assert.doesNotReject(card('LLM Provider').getByText(/^Could not reach cks-mcp: /).waitFor())
  // Back on our server, the status is back.
  await page.goto(`${studio}/`)
  await page.getByPlaceholder('http://127.0.0.1:8765').fill(server)
  await page.locator('a[data-nav="settings"]').click()
  await tab('AI & LLM').click()
  await assert.doesNotReject(card('LLM Provider').getByText('Anthropic', { exact: true }).waitFor())
})

await finish()
await provider.close()
