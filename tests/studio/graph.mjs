// Drives cks-studio's Graph page in Debian's Chromium against a running cks-mcp, and checks every
// step against the server's own answers: the session's objects and relations on the canvas and in
// the side panel, commits made outside the browser arriving through the `/events` stream without a
// reload, and the "New object" and "New relation" forms committing to the server. Arguments come
// from the environment: STUDIO_URL (a running cks-studio), MCP_URL (our server's base URL),
// CHROMIUM (the browser binary), SCREENSHOTS (a folder, optional).
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'

import { call, open, server, studio } from './harness.mjs'

const object = (id, type, name, structure = {}) => ({ identity: { id, type, name }, structure })
const relation = (id, from, to, type) => object(id, 'Relation', type, { participants: [from, to], relation_type: type })

const created = await call('validate_knowledge', {
  json_data: JSON.stringify({
    objects: [
      object('ada', 'Person', 'Ada Lovelace', { born: 1815, note: 'wrote the first program' }),
      object('engine', 'Concept', 'Analytical Engine'),
      object('notes', 'Claim', 'Notes on the Engine'),
      relation('ada-wrote-notes', 'ada', 'notes', 'wrote'),
      relation('notes-describe-engine', 'notes', 'engine', 'describes'),
    ],
  }),
})
assert.ok(created.session_id && created.valid, JSON.stringify(created))
const session = created.session_id
// Another session, changed while the page shows the first: its commits must not touch the page.
const other = (await call('validate_knowledge', { json_data: JSON.stringify({ objects: [object('x', 'Concept', 'Elsewhere')] }) })).session_id

/** The whole graph as query_subgraph answers it (compact: nodes, and edges as source/target/type). */
async function subgraph(args = {}) {
  const answer = await call('query_subgraph', { session_id: session, compact_mode: true, ...args })
  assert.ok(answer.subgraph, JSON.stringify(answer))
  return answer.subgraph
}
/**
 * What the canvas should show: one node per non-relation object, titled with its type, name and
 * number of relations; one edge per relation, from its first participant to its second.
 */
async function expected() {
  const { nodes, edges } = await subgraph()
  const degree = (id) => edges.filter((e) => e.source === id).length + edges.filter((e) => e.target === id).length
  const title = (n) => {
    const d = degree(n.identity.id)
    return `${n.identity.type}: ${n.identity.name}${d > 0 ? ` · ${d} connection${d === 1 ? '' : 's'}` : ''}`
  }
  return {
    nodes: nodes.map((n) => `${n.identity.id} | ${title(n)}`).sort(),
    edges: edges.map((e) => `edge-${e.source}->${e.target}:${e.type}`).sort(),
  }
}

const { page, check, finish } = await open('graph', session)

const node = (id) => page.locator(`.react-flow__node[data-id="${id}"]`)
async function shown() {
  return page.evaluate(() => ({
    nodes: [...document.querySelectorAll('.react-flow__node')]
      .map((n) => `${n.getAttribute('data-id')} | ${n.querySelector('[title]')?.getAttribute('title')}`)
      .sort(),
    edges: [...document.querySelectorAll('.react-flow__edge')].map((e) => e.getAttribute('data-id')).sort(),
  }))
}
/** Waits until the canvas shows what the server holds now. */
async function expectCanvas(what) {
  const wanted = await expected()
  const deadline = Date.now() + 10_000
  let seen
  for (;;) {
    seen = await shown()
    if (JSON.stringify(seen) === JSON.stringify(wanted)) return wanted
    if (Date.now() > deadline) break
    await sleep(200)
  }
  assert.deepEqual(seen, wanted, what)
}

// The page's requests: the live-events stream it opens, and every page load.
const eventStreams = []
page.on('response', (response) => {
  if (response.url().startsWith(`${server}/events`)) eventStreams.push({ url: new URL(response.url()), status: response.status() })
})
let loads = 0
page.on('framenavigated', (frame) => {
  if (frame === page.mainFrame()) loads += 1
})

/**
 * Opens the server's own `/events` stream for the session; once it is open, returns
 * `{ frame }`, a promise of the first frame that `match`es (null if none came in time).
 */
async function nextEvent(match, seconds = 10) {
  const controller = new AbortController()
  const timer = setTimeout(() => controller.abort(), seconds * 1000)
  const response = await fetch(`${server}/events?session_id=${session}`, { signal: controller.signal })
  assert.equal(response.status, 200)
  const frame = (async () => {
    const decoder = new TextDecoder()
    let buffered = ''
    try {
      for await (const chunk of response.body) {
        buffered += decoder.decode(chunk, { stream: true })
        let end
        while ((end = buffered.indexOf('\n\n')) >= 0) {
          const block = buffered.slice(0, end)
          buffered = buffered.slice(end + 2)
          const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n')
          if (!data) continue
          const frame = JSON.parse(data)
          if (match(frame)) return frame
        }
      }
    } catch (error) {
      if (error.name !== 'AbortError') throw error
    } finally {
      clearTimeout(timer)
      controller.abort()
    }
    return null
  })()
  return { frame }
}

await check('the canvas shows the session\'s objects as nodes and its relations as edges, as the server holds them', async () => {
  await page.goto(`${studio}/`)
  const wanted = await expectCanvas('the canvas after connecting')
  assert.deepEqual(wanted.nodes, [
    'ada | Person: Ada Lovelace · 1 connection',
    'engine | Concept: Analytical Engine · 1 connection',
    'notes | Claim: Notes on the Engine · 2 connections',
  ])
  assert.deepEqual(wanted.edges, ['edge-ada->notes:wrote', 'edge-notes->engine:describes'])
  await assert.doesNotReject(page.locator('.react-flow__edge').filter({ hasText: 'describes' }).waitFor())
})

await check('a node\'s side panel shows its type, name, id and structure as the server has them', async () => {
  await node('ada').click()
  const { nodes } = await subgraph({ seed_ids: ['ada'], depth: 0 })
  const ada = nodes.find((n) => n.identity.id === 'ada')
  assert.ok(ada, JSON.stringify(nodes))
  const panel = page.locator('aside')
  await assert.doesNotReject(panel.getByRole('heading', { name: ada.identity.name, exact: true }).waitFor())
  await assert.doesNotReject(panel.getByText(ada.identity.type, { exact: true }).first().waitFor())
  await assert.doesNotReject(panel.getByText(ada.identity.id, { exact: true }).first().waitFor())
  for (const [key, value] of Object.entries(ada.structure)) {
    const row = panel.locator('div').filter({ has: page.getByText(`${key}:`, { exact: true }) }).last()
    assert.equal((await row.innerText()).trim(), `${key}: ${typeof value === 'string' ? value : JSON.stringify(value)}`)
  }
})

await check('the page follows the session\'s live events (/events)', async () => {
  // Open: the server answered the page's request for the session's stream.
  const ours = () => eventStreams.filter((s) => s.url.searchParams.get('session_id') === session)
  await until('the page to open the session\'s event stream', () => ours().length > 0)
  const stream = ours().at(-1)
  assert.equal(stream.status, 200)
  assert.ok(stream.url.searchParams.get('event_types').split(',').includes('VersionCreated'), stream.url.href)
})

await check('a commit made outside the browser (evolve_knowledge) shows up without a reload', async () => {
  await page.evaluate(() => { window.__sameDocument = true })
  const loadsBefore = loads
  const event = await nextEvent((f) => f.event === 'VersionCreated')
  const evolved = await call('evolve_knowledge', {
    session_id: session,
    operations: [
      { type: 'add_object', identity: { id: 'babbage', type: 'Person', name: 'Charles Babbage' } },
      { type: 'add_relation', identity: { id: 'babbage-designed-engine', type: 'Relation', name: 'designed' }, participants: ['babbage', 'engine'], relation_type: 'designed' },
    ],
  })
  assert.equal(evolved.evolved, true, JSON.stringify(evolved))
  const frame = await event.frame
  assert.ok(frame, 'the server sent no VersionCreated event for the commit')
  assert.equal(frame.session_id, session)
  assert.equal(frame.detail.version_id, evolved.version_id, JSON.stringify(frame))
  const wanted = await expectCanvas('the canvas after the external commit')
  assert.ok(wanted.nodes.includes('babbage | Person: Charles Babbage · 1 connection'), JSON.stringify(wanted.nodes))
  assert.ok(wanted.edges.includes('edge-babbage->engine:designed'))
  assert.equal(loads, loadsBefore, 'the page was reloaded')
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was reloaded')
})

await check('an external removal shows up too, and another session\'s commit changes nothing here', async () => {
  await call('evolve_knowledge', { session_id: other, operations: [{ type: 'add_object', identity: { id: 'y', type: 'Concept', name: 'Also elsewhere' } }] })
  await call('evolve_knowledge', { session_id: session, operations: [{ type: 'remove_relation', relation_id: 'babbage-designed-engine' }] })
  const wanted = await expectCanvas('the canvas after the external removal')
  assert.ok(!wanted.edges.includes('edge-babbage->engine:designed'))
  assert.ok(wanted.nodes.includes('babbage | Person: Charles Babbage'), JSON.stringify(wanted.nodes))
  assert.ok(!wanted.nodes.some((n) => n.startsWith('y ')))
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was reloaded')
})

let createdId
await check('"New object" commits an object to the server and puts it on the canvas', async () => {
  const before = new Set((await subgraph()).nodes.map((n) => n.identity.id))
  await page.getByRole('button', { name: 'New object', exact: true }).click()
  await page.locator('#new-node-name').fill('Difference Engine')
  await page.locator('#new-node-type').selectOption('Concept')
  await page.locator('#new-node-structure').fill('{"year": 1822, "status": "unfinished"}')
  await page.getByRole('button', { name: 'Create', exact: true }).click()
  await assert.doesNotReject(page.locator('#new-node-name').waitFor({ state: 'detached' }))
  const added = (await subgraph()).nodes.filter((n) => !before.has(n.identity.id))
  assert.equal(added.length, 1, JSON.stringify(added))
  createdId = added[0].identity.id
  assert.deepEqual(added[0].identity, { id: createdId, type: 'Concept', name: 'Difference Engine' })
  assert.deepEqual(added[0].structure, { year: 1822, status: 'unfinished' })
  const seeded = await subgraph({ seed_ids: [createdId], depth: 1 })
  assert.deepEqual(seeded.nodes.map((n) => n.identity.id), [createdId])
  await expectCanvas('the canvas after "New object"')
  // The new node is the selection: its side panel shows the server's id.
  await assert.doesNotReject(page.locator('aside').getByText(createdId, { exact: true }).first().waitFor())
})

await check('"New object" with a structure the server refuses shows the server\'s error and diagnostics, and commits nothing', async () => {
  const before = await expected()
  const versions = (await call('list_versions', { session_id: session })).versions.length
  const refused = page.waitForResponse(async (response) => response.url() === `${server}/mcp`
    && JSON.parse(response.request().postData()).params?.name === 'evolve_knowledge')
  await page.getByRole('button', { name: 'New object', exact: true }).click()
  await page.locator('#new-node-name').fill('Dangling')
  await page.locator('#new-node-structure').fill('{"participants": ["ada", "nowhere"], "relation_type": "knows"}')
  await page.getByRole('button', { name: 'Create', exact: true }).click()
  const answer = JSON.parse((await (await refused).json()).result.content[0].text)
  assert.equal(answer.error, 'validation_failed', JSON.stringify(answer))
  assert.ok(answer.diagnostics.length > 0, JSON.stringify(answer))
  const form = page.locator('form').filter({ has: page.getByRole('heading', { name: 'New object' }) })
  await assert.doesNotReject(form.locator('p.text-danger').filter({ hasText: answer.message }).waitFor())
  const shownDiagnostics = await form.locator('li').evaluateAll((items) => items.map((li) => li.textContent))
  assert.deepEqual(shownDiagnostics, answer.diagnostics.map((d) => `${d.severity}${d.message}${d.location ? ` (${d.location})` : ''}`))
  assert.ok(answer.diagnostics.some((d) => d.code === 'CKS-STRUCT-DANGLING-REF'), JSON.stringify(answer.diagnostics))
  // Nothing committed; the node the page showed while waiting is gone again.
  assert.equal((await call('list_versions', { session_id: session })).versions.length, versions)
  assert.deepEqual(await expected(), before)
  await expectCanvas('the canvas after a refused "New object"')
  await form.getByRole('button', { name: 'Cancel', exact: true }).click()
  await assert.doesNotReject(page.locator('#new-node-name').waitFor({ state: 'detached' }))
})

await check('"New relation" (source and target picked on the canvas) commits a relation to the server', async () => {
  await page.getByRole('button', { name: 'New relation', exact: true }).click()
  await node('babbage').click()
  await node(createdId).click()
  const form = page.locator('form').filter({ has: page.getByRole('heading', { name: 'New relation' }) })
  await assert.doesNotReject(form.getByText('Participants (2/2)').waitFor())
  await page.locator('#new-relation-type').fill('designed')
  await form.getByRole('button', { name: 'Create', exact: true }).click()
  await assert.doesNotReject(page.locator('#new-relation-type').waitFor({ state: 'detached' }))
  const seeded = await subgraph({ seed_ids: ['babbage'], depth: 1 })
  assert.deepEqual(seeded.edges.map((e) => [e.source, e.target, e.type]), [['babbage', createdId, 'designed']])
  assert.deepEqual(seeded.nodes.map((n) => n.identity.id).sort(), ['babbage', createdId].sort())
  const stored = JSON.parse((await call('serialize_knowledge', { session_id: session })).serialized).objects
    .filter((o) => o.structure?.relation_type === 'designed')
  assert.equal(stored.length, 1, JSON.stringify(stored))
  assert.equal(stored[0].identity.type, 'Relation')
  assert.deepEqual(stored[0].structure.participants, ['babbage', createdId])
  await expectCanvas('the canvas after "New relation"')
})

await check('every change above is a version of the session', async () => {
  const { versions } = await call('list_versions', { session_id: session })
  // Created, two external commits, the new object and the new relation.
  assert.equal(versions.length, 5, JSON.stringify(versions))
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was reloaded')
})

await finish()

async function until(what, probe, seconds = 10) {
  const deadline = Date.now() + seconds * 1000
  for (;;) {
    if (await probe()) return
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`)
    await sleep(200)
  }
}
