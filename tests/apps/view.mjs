// The MCP Apps check: cks-mcp's inline view, loaded in Chromium the way a host loads it.
//
// The server runs over stdio behind the official TypeScript client, which declares the extension.
// A session of 500 named objects and their relations is made; the tools' `_meta` (read with the
// extension's own `getToolUiResourceUri`) name the view, which is read with `resources/read`. In
// Chromium, a host page uses the extension's own AppBridge and PostMessageTransport to load the
// view's HTML into a sandboxed frame under the policy a host applies, completes the handshake and
// sends it the results of query_subgraph, search_semantic and compare_versions. Checked: the
// frame's SVG shows the objects' names, the diff's colours, no policy violation (a listener the
// check puts first in each frame, proven on a frame that breaks the policy on purpose, and the
// console), no console error, and no request to anything but the check's own page. The time from
// sending a result to the painted picture is printed, not checked.
//
// Usage: node view.mjs   (environment: CKS_MCP_BIN, CHROMIUM, SCREENSHOTS; APPS_DEBUG=1 prints
// every console message and page error)

import assert from 'node:assert/strict'
import { createWriteStream, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:http'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

import { Client } from '@modelcontextprotocol/client'
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio'
import { RESOURCE_MIME_TYPE, getToolUiResourceUri } from '@modelcontextprotocol/ext-apps/app-bridge'
import { EXTENSION_ID } from '@modelcontextprotocol/ext-apps/server'
import { build } from 'esbuild'
import { chromium } from 'playwright-core'

const here = dirname(fileURLToPath(import.meta.url))
const BINARY = process.env.CKS_MCP_BIN
const SCREENSHOTS = process.env.SCREENSHOTS || join(here, 'screenshots')
const OBJECTS = 500
assert.ok(BINARY, 'CKS_MCP_BIN names the server binary')
mkdirSync(SCREENSHOTS, { recursive: true })

let step = 0
async function check(title, body) {
  step += 1
  const started = Date.now()
  await body()
  console.log(`ok ${step} - ${title} (${Date.now() - started} ms)`)
}

// ---- The graph: 500 objects of six types, a tree of relations, cross links, three-way ones ----

const TYPES = ['Concept', 'Person', 'Place', 'Event', 'Claim', 'Source']
const WORDS = ['amber', 'basalt', 'cedar', 'delta', 'ember', 'fjord', 'garnet', 'harbour', 'indigo', 'juniper']
const objects = []
for (let i = 0; i < OBJECTS; i += 1) {
  const name = `${WORDS[i % 10]} ${WORDS[Math.floor(i / 10) % 10]} ${i}`
  objects.push({ identity: { id: `o${i}`, type: TYPES[i % TYPES.length], name }, structure: { rank: i } })
}
const relation = (id, participants, type) => ({
  identity: { id, type: 'Relation', name: id },
  structure: { participants, relation_type: type },
})
for (let i = 1; i < OBJECTS; i += 1) objects.push(relation(`tree${i}`, [`o${i}`, `o${Math.floor((i - 1) / 3)}`], 'part_of'))
for (let i = 0; i < OBJECTS; i += 9) objects.push(relation(`cross${i}`, [`o${i}`, `o${(i * 37 + 11) % OBJECTS}`], 'cites'))
for (let i = 0; i < 30; i += 3) objects.push(relation(`three${i}`, [`o${i}`, `o${i + 100}`, `o${i + 200}`], 'agrees'))
const names = objects.filter((o) => !o.structure.participants).map((o) => o.identity.name)

// ---- The server, as a client that declares the extension sees it ----

const data = mkdtempSync(join(tmpdir(), 'cks-apps-check-'))
const client = new Client(
  { name: 'cks-apps-check', version: '1.0.0' },
  {
    versionNegotiation: { mode: 'legacy' },
    capabilities: { extensions: { [EXTENSION_ID]: { mimeTypes: [RESOURCE_MIME_TYPE] } } },
  },
)
const transport = new StdioClientTransport({
  command: BINARY,
  args: [],
  env: { ...process.env, CKS_MCP_DATA_DIR: data, CKS_SWEEPERS: 'off', CKS_EMBEDDING_PROVIDER: 'none' },
  stderr: 'pipe',
})
// The server's log, kept beside the screenshots.
const log = createWriteStream(join(SCREENSHOTS, 'server.log'))
transport.stderr?.pipe(log)
await client.connect(transport)

/** A tool's result, as the host receives it, and its object. */
async function call(name, args) {
  const result = await client.callTool({ name, arguments: args })
  const value = result.structuredContent ?? JSON.parse(result.content[0].text)
  assert.ok(!result.isError, `${name}: ${JSON.stringify(value).slice(0, 400)}`)
  return { result, value }
}

let tools
let view
await check('the server names its view: the extension, the tools, the resource', async () => {
  const extensions = client.getServerCapabilities()?.extensions ?? {}
  assert.deepEqual(extensions[EXTENSION_ID], { mimeTypes: [RESOURCE_MIME_TYPE] })
  tools = new Map((await client.listTools()).tools.map((tool) => [tool.name, tool]))
  const naming = [...tools.values()].filter((tool) => getToolUiResourceUri(tool)).map((tool) => tool.name).sort()
  assert.deepEqual(naming, ['compare_versions', 'query_subgraph', 'search_semantic'])
  const uri = getToolUiResourceUri(tools.get('query_subgraph'))
  const { resources } = await client.listResources()
  const listed = resources.find((r) => r.uri === uri)
  assert.ok(listed, `${uri} is not listed`)
  assert.equal(listed.mimeType, RESOURCE_MIME_TYPE)
  assert.deepEqual(listed._meta?.ui?.csp, { connectDomains: [], resourceDomains: [] })
  const read = await client.readResource({ uri })
  assert.equal(read.contents.length, 1)
  view = read.contents[0]
  assert.equal(view.mimeType, RESOURCE_MIME_TYPE)
  assert.match(view.text, /^<!doctype html>/i)
  assert.ok(view.text.length <= 150 * 1024, `the view is ${view.text.length} bytes`)
  assert.doesNotMatch(view.text, /https?:\/\//, 'the view names an address')
  assert.deepEqual(view._meta?.ui?.csp, { connectDomains: [], resourceDomains: [] })
  console.log(`# the view: ${uri}, ${view.text.length} bytes`)
})

const { value: made } = await call('validate_knowledge', { json_data: JSON.stringify({ version: '1.0', objects }) })
assert.equal(made.valid, true, JSON.stringify(made).slice(0, 400))
const session = made.session_id

// ---- The browser, and a page of the check's own as the host ----

const bundle = await build({
  stdin: {
    contents: "export { AppBridge, PostMessageTransport } from '@modelcontextprotocol/ext-apps/app-bridge'",
    resolveDir: here,
  },
  bundle: true,
  format: 'esm',
  platform: 'browser',
  write: false,
  logLevel: 'warning',
})
const files = {
  '/': ['text/html', '<!doctype html><html><head><meta charset="utf-8"><title>Host</title></head><body><script type="module" src="/host.mjs"></script></body></html>'],
  '/host.mjs': ['text/javascript', readFileSync(join(here, 'host.mjs'))],
  '/app-bridge.js': ['text/javascript', bundle.outputFiles[0].contents],
  '/favicon.ico': ['image/x-icon', ''],
}
const web = createServer((request, response) => {
  const file = files[new URL(request.url, 'http://127.0.0.1').pathname]
  response.writeHead(file ? 200 : 404, { 'content-type': file ? file[0] : 'text/plain' })
  response.end(file ? file[1] : 'not found')
})
await new Promise((resolve) => web.listen(0, '127.0.0.1', resolve))
const origin = `http://127.0.0.1:${web.address().port}`

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
})
const context = await browser.newContext({ viewport: { width: 1040, height: 900 } })
const requests = []
context.on('request', (request) => requests.push(request.url()))
const page = await context.newPage()
const problems = []
page.on('pageerror', (error) => {
  if (process.env.APPS_DEBUG) console.log('pageerror:', error.message)
  problems.push(`uncaught: ${error.message}`)
})
page.on('console', (message) => {
  if (process.env.APPS_DEBUG) console.log('console:', message.type(), message.text())
  if (message.type() === 'error' || /Content Security Policy/i.test(message.text())) problems.push(`console: ${message.text()}`)
})
// What the policy refuses, heard in each frame by a listener the check puts before the view's own
// script (under the same policy), besides the console's reports.
const PROBE = "window.__violations = []; document.addEventListener('securitypolicyviolation', " +
  "(e) => window.__violations.push(e.effectiveDirective + ' ' + e.blockedURI))"
// The view's tool calls, which the host passes on to the server.
const calls = []
await page.exposeFunction('callServerTool', async (params) => {
  calls.push(params)
  return client.callTool(params)
})
await page.goto(`${origin}/`)
await page.waitForFunction(() => typeof window.openView === 'function')

/** The frame named `name`, once attached. */
async function frameOf(name) {
  const deadline = Date.now() + 5000
  for (;;) {
    const frame = page.frame({ name })
    if (frame) return frame
    assert.ok(Date.now() < deadline, `no frame ${name}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** Loads the view for `tool`'s call, sends the result; answers its frame and the times. */
async function show(name, tool, args, result) {
  const opened = await page.evaluate((options) => window.openView(options), {
    name, html: view.text, csp: view._meta?.ui?.csp, probe: PROBE, tool: tools.get(tool), args,
  })
  assert.equal(opened.app?.name, 'cks-graph', JSON.stringify(opened))
  const frame = await frameOf(name)
  const started = performance.now()
  await page.evaluate(([n, r]) => window.sendResult(n, r), [name, result])
  await frame.waitForFunction(() => document.body.dataset.paintedMs !== undefined, null, { timeout: 20000 })
    .catch(async (error) => {
      const said = await frame.evaluate(() => document.getElementById('message').textContent).catch(() => '?')
      throw new Error(`${name}: not drawn (the view says: ${said}); ${error.message}`)
    })
  const wall = performance.now() - started
  const own = await frame.evaluate(() => document.body.dataset)
  assert.equal(own.state, 'rendered')
  return { frame, wall, built: Number(own.renderMs), painted: Number(own.paintedMs) }
}

async function texts(frame, selector) {
  return frame.$$eval(selector, (elements) => elements.map((e) => e.textContent))
}

async function noViolations(frame) {
  const violations = await frame.evaluate(() => window.__violations)
  assert.deepEqual(violations, [], 'policy violations')
  assert.deepEqual(problems, [], 'errors in the page')
}

try {
  await check('a frame that breaks the policy is heard (the listeners work)', async () => {
    await page.evaluate(([html, probe]) => window.openBreakingFrame(html, probe),
      ['<!doctype html><html><head></head><body><script>try { eval("1") } catch {}</script></body></html>', PROBE])
    const frame = await frameOf('breaks-policy')
    await frame.waitForFunction(() => window.__violations?.length > 0, null, { timeout: 5000 })
    assert.match((await frame.evaluate(() => window.__violations)).join(), /script-src/)
    problems.length = 0
  })

  let subgraph
  await check(`query_subgraph of ${OBJECTS} objects: every name drawn`, async () => {
    // The whole graph: without seeds an answer stops at about 40 KB unless asked for everything.
    const args = { session_id: session, max_objects: 0 }
    const { result, value } = await call('query_subgraph', args)
    assert.equal(value.returned_nodes, OBJECTS)
    subgraph = await show('subgraph', 'query_subgraph', args, result)
    const drawn = await texts(subgraph.frame, '#nodes text')
    assert.deepEqual([...drawn].sort(), [...names].sort())
    const relations = objects.length - OBJECTS
    assert.equal(await subgraph.frame.evaluate(() => Number(document.body.dataset.relations)), relations)
    const lines = await subgraph.frame.$$eval('#edges line', (e) => e.length)
    assert.ok(lines >= relations, `${lines} lines for ${relations} relations`)
    const size = await page.evaluate(() => window.viewSize('subgraph'))
    assert.ok(size.height > 300, `the host sized the frame to the view: ${JSON.stringify(size)}`)
    await noViolations(subgraph.frame)
    await page.locator('iframe[name=subgraph]').screenshot({ path: join(SCREENSHOTS, '01-subgraph.png') })
    console.log(`# ${OBJECTS} objects painted ${subgraph.wall.toFixed(0)} ms after the result was sent ` +
      `(the view's own count: built in ${subgraph.built} ms, painted in ${subgraph.painted} ms)`)
  })

  await check('compact_mode: the same names from {nodes, edges}', async () => {
    const args = { session_id: session, seed_ids: ['o0'], depth: 2, compact_mode: true }
    const { result, value } = await call('query_subgraph', args)
    const shown = await show('compact', 'query_subgraph', args, result)
    const expected = value.subgraph.nodes.map((n) => n.identity.name).sort()
    assert.deepEqual((await texts(shown.frame, '#nodes text')).sort(), expected)
    await noViolations(shown.frame)
  })

  await check("search_semantic: the matches drawn and marked", async () => {
    const args = { session_id: session, query: 'garnet', mode: 'lexical', top_k: 3 }
    const { result, value } = await call('search_semantic', args)
    assert.ok(value.matched_seeds.length > 0, JSON.stringify(value).slice(0, 300))
    const shown = await show('search', 'search_semantic', args, result)
    const seeds = await texts(shown.frame, '#nodes .seed text')
    const byId = new Map(objects.map((o) => [o.identity.id, o.identity.name]))
    assert.deepEqual(seeds.sort(), value.matched_seeds.map((id) => byId.get(id)).sort())
    assert.match(await shown.frame.$eval('#title', (e) => e.textContent), /garnet/)
    // A click shows an object's details; the buttons zoom.
    const best = value.matched_seeds[0]
    await shown.frame.locator(`#nodes g[data-id="${best}"] circle`).click()
    assert.equal(await shown.frame.$eval('#detail h2', (e) => e.textContent), byId.get(best))
    const before = await shown.frame.$eval('#graph', (e) => e.getAttribute('viewBox'))
    await shown.frame.locator('#zoom-in').click()
    assert.notEqual(await shown.frame.$eval('#graph', (e) => e.getAttribute('viewBox')), before)
    await noViolations(shown.frame)
    await page.locator('iframe[name=search]').screenshot({ path: join(SCREENSHOTS, '02-search.png') })
  })

  await check('compare_versions: added, removed and changed objects in colour, named', async () => {
    const base = made.version_id
    assert.ok(base, JSON.stringify(made).slice(0, 300))
    await call('evolve_knowledge', {
      session_id: session,
      operations: [
        { type: 'rename_object', object_id: 'o10', new_name: 'renamed ten' },
        { type: 'remove_object', object_id: 'o499' },
        { type: 'add_object', identity: { id: 'fresh', type: 'Concept', name: 'a fresh idea' }, structure: {} },
        { type: 'add_relation', identity: { id: 'fresh-link', type: 'Relation', name: 'fresh-link' }, participants: ['fresh', 'o0'], relation_type: 'cites' },
      ],
    })
    const args = { session_id: session, target_version_id: base }
    const { result, value } = await call('compare_versions', args)
    assert.equal(value.summary.added_objects, 2, JSON.stringify(value.summary))
    calls.length = 0
    const shown = await show('diff', 'compare_versions', args, result)
    assert.deepEqual(await texts(shown.frame, '#nodes .added text'), ['a fresh idea'])
    assert.equal((await texts(shown.frame, '#nodes .changed text')).length, 1)
    assert.equal((await texts(shown.frame, '#nodes .removed text')).length, 1)
    // The names the operations give only by id come from the server, through the host.
    await shown.frame.waitForFunction(() => {
      const removed = document.querySelector('#nodes .removed text')?.textContent
      const changed = document.querySelector('#nodes .changed text')?.textContent
      return removed !== 'o499' && changed?.includes('→')
    }, null, { timeout: 10000 })
    assert.deepEqual(await texts(shown.frame, '#nodes .removed text'), [names[499]])
    assert.deepEqual(await texts(shown.frame, '#nodes .changed text'), [`${names[10]} → renamed ten`])
    assert.ok((await texts(shown.frame, '#nodes .context text')).includes(names[0]))
    assert.ok(calls.length > 0 && calls.every((c) => c.name === 'query_subgraph'), JSON.stringify(calls))
    assert.match((await texts(shown.frame, '#legend span')).join(' '), /added 1.*removed 1.*changed 1/)
    await noViolations(shown.frame)
    await page.locator('iframe[name=diff]').screenshot({ path: join(SCREENSHOTS, '03-diff.png') })
  })

  await check('no request left the page', async () => {
    const outside = requests.filter((url) => !url.startsWith(`${origin}/`))
    assert.deepEqual(outside, [], 'requests outside the page')
    assert.deepEqual(problems, [])
  })
  console.log(`# render: ${OBJECTS} objects in ${subgraph.wall.toFixed(0)} ms (goal: at most 1000 ms); ` +
    `view ${view.text.length} bytes (goal: at most ${150 * 1024})`)
} finally {
  await browser.close()
  web.close()
  await client.close()
  rmSync(data, { recursive: true, force: true })
}
