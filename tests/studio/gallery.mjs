// Drives cks-studio's Gallery page (and the Graph page's "Publish to Gallery" and cross-graph link
// form) in Debian's Chromium against a running cks-mcp, and checks every step against the server's
// own answers. Arguments come from the environment: STUDIO_URL (a running cks-studio), MCP_URL (our
// server's base URL), CHROMIUM (the browser binary), SCREENSHOTS (a folder, optional).
import assert from 'node:assert/strict'

import { call, open, studio } from './harness.mjs'

async function graph(ids, relations = []) {
  const objects = ids.map((id) => ({ identity: { id, type: 'Concept', name: `Name ${id}` } }))
  for (const [id, from, to] of relations) {
    objects.push({ identity: { id, type: 'Relation', name: 'uses' }, structure: { participants: [from, to], relation_type: 'uses' } })
  }
  const created = await call('validate_knowledge', { json_data: JSON.stringify({ objects }) })
  assert.ok(created.session_id, JSON.stringify(created))
  return created.session_id
}

const run = Date.now().toString(36)
const named = (base) => `${base}-${run}`
const physics = await graph(['alpha', 'beta', 'shared'], [['alpha-uses-beta', 'alpha', 'beta']])
const biology = await graph(['gamma', 'shared'])
const lab = await graph(['delta'])
const secret = await graph(['epsilon'])
const unpublished = await graph(['zeta'])
await call('register_graph', { name: named('physics'), session_id: physics, description: 'Physics notes', tags: 'science,physics', public: true })
await call('register_graph', { name: named('biology'), session_id: biology, description: 'Cells and genes', tags: 'science,bio', public: true })
await call('register_graph', { name: named('lab'), session_id: lab, description: 'Team notes', tags: 'internal', visibility: 'team', team: `lab-${run}` })
await call('register_graph', { name: named('secret'), session_id: secret, description: 'Private notes', tags: 'science' })

const { page, check, finish } = await open('gallery')

const card = (name) => page.locator('div.rounded.p-3').filter({ has: page.getByRole('heading', { name, exact: true }) })
const cardNames = async () => (await page.locator('div.rounded.p-3 h3').allInnerTexts()).filter((n) => n.endsWith(run)).sort()
async function expectCards(names) {
  const wanted = [...names].sort()
  try {
    await page.waitForFunction(
      ([wanted, suffix]) => {
        const shown = [...document.querySelectorAll('div.rounded.p-3 h3')].map((h) => h.textContent)
        return JSON.stringify(shown.filter((n) => n.endsWith(suffix)).sort()) === JSON.stringify(wanted)
      },
      [wanted, run],
      { timeout: 10_000 },
    )
  } catch {
    assert.deepEqual(await cardNames(), wanted, 'the gallery cards')
  }
}

await check('the gallery lists the public graphs, newest first, and no private or team graph', async () => {
  await page.goto(`${studio}/gallery`)
  await expectCards([named('physics'), named('biology')])
  const order = (await page.locator('div.rounded.p-3 h3').allInnerTexts()).filter((n) => n.endsWith(run))
  assert.deepEqual(order, [named('biology'), named('physics')])
  await assert.doesNotReject(card(named('biology')).getByText('Cells and genes').waitFor())
  await assert.doesNotReject(card(named('physics')).getByText(physics).waitFor())
})

await check('search finds a graph by its description', async () => {
  await page.getByPlaceholder('Search by name / description / tags…').fill('genes')
  await page.getByRole('button', { name: 'Search' }).click()
  await expectCards([named('biology')])
  await page.getByPlaceholder('Search by name / description / tags…').fill('')
  await page.getByRole('button', { name: 'Search' }).click()
  await expectCards([named('physics'), named('biology')])
})

await check('a tag chip filters by tag', async () => {
  await page.getByRole('button', { name: 'physics', exact: true }).click()
  await expectCards([named('physics')])
  await page.getByRole('button', { name: 'physics', exact: true }).click()
  await expectCards([named('physics'), named('biology')])
})

await check('without "public only", a team namespace shows that team\'s graphs; private ones never show', async () => {
  await page.getByLabel('Public only').uncheck()
  await page.getByPlaceholder('team namespace').fill(`lab-${run}`)
  await page.getByRole('button', { name: 'Search' }).click()
  await expectCards([named('physics'), named('biology'), named('lab')])
  await assert.doesNotReject(card(named('lab')).getByText(`Team: lab-${run}`).waitFor())
  await page.getByPlaceholder('team namespace').fill('')
  await page.getByLabel('Public only').check()
  await page.getByRole('button', { name: 'Search' }).click()
  await expectCards([named('physics'), named('biology')])
})

await check('the health badge shows the server\'s score', async () => {
  const health = await call('check_graph_health', { name: named('physics') })
  assert.equal(typeof health.health_score, 'number', JSON.stringify(health))
  await card(named('physics')).getByRole('button', { name: 'Check health' }).click()
  await assert.doesNotReject(card(named('physics')).getByText(`Health: ${(health.health_score * 100).toFixed(0)}%`).waitFor())
})

await check('a lifecycle change is offered from the badge and saved', async () => {
  await card(named('physics')).getByRole('button', { name: 'Published' }).click()
  await card(named('physics')).getByRole('button', { name: 'Active' }).click()
  await assert.doesNotReject(card(named('physics')).getByRole('button', { name: 'Active' }).waitFor())
  const entry = await call('get_graph', { name: named('physics') })
  assert.equal(entry.lifecycle_state, 'active', JSON.stringify(entry))
})

await check('two graphs compared side by side', async () => {
  await page.getByRole('button', { name: 'Compare graphs' }).click()
  await page.getByLabel(`Select ${named('physics')} for comparison`).check()
  await page.getByLabel(`Select ${named('biology')} for comparison`).check()
  await page.getByRole('button', { name: 'Compare selected' }).click()
  const dialog = page.getByRole('dialog')
  await assert.doesNotReject(dialog.getByText(`Only in ${named('physics')}`).first().waitFor())
  const expected = await call('compare_graphs', { graph_a_name: named('physics'), graph_b_name: named('biology'), include_relations: true })
  const counts = await dialog.locator('div.grid-cols-3 > div > div:first-child').allInnerTexts()
  assert.deepEqual(counts.map(Number), [expected.shared_object_count, expected.only_in_a_count, expected.only_in_b_count])
  assert.deepEqual(counts.map(Number), [1, 3, 1], 'shared: "shared"; only in physics: alpha, beta and their relation; only in biology: gamma')
  await dialog.getByRole('button', { name: 'Close' }).first().click()
  await page.getByRole('button', { name: 'Exit compare' }).click()
})

await check('clone copies a graph into a new session and opens it', async () => {
  await card(named('biology')).getByRole('button', { name: 'Clone' }).click()
  await page.waitForURL(`${studio}/`)
  const session = await page.evaluate(() => localStorage.getItem('cks-studio:session-id'))
  assert.ok(session && session !== biology, `the studio's session after the clone: ${session}`)
  const copy = JSON.parse((await call('serialize_knowledge', { session_id: session })).serialized)
  const ids = copy.objects.map((o) => o.identity.id).sort()
  assert.deepEqual(ids, ['gamma', 'shared'])
})

await check('the Graph page publishes a session to the gallery', async () => {
  await page.getByPlaceholder('session_id').fill(unpublished)
  await page.getByRole('button', { name: 'Connect' }).click()
  await assert.doesNotReject(page.locator('.react-flow__node').filter({ hasText: 'Name zeta' }).waitFor())
  await page.getByRole('button', { name: 'Publish to Gallery' }).click()
  await page.getByPlaceholder('e.g. onboarding-flow-v2').fill(named('published'))
  await page.getByPlaceholder('What does this graph contain?').fill('Published from the graph page')
  await page.getByPlaceholder('demo, onboarding').fill('science, fresh')
  await page.getByLabel(/^Public — everyone/).check()
  await page.getByRole('dialog').getByRole('button', { name: /Publish/ }).last().click()
  await assert.doesNotReject(page.getByRole('dialog').waitFor({ state: 'detached' }))
  const entry = await call('get_graph', { name: named('published') })
  assert.equal(entry.session_id, unpublished, JSON.stringify(entry))
  assert.equal(entry.visibility, 'public')
  assert.equal(entry.description, 'Published from the graph page')
  await page.goto(`${studio}/gallery`)
  await expectCards([named('physics'), named('biology'), named('published')])
})

await check('the cross-graph link form links an object to an object of another registered graph', async () => {
  await page.goto(`${studio}/`)
  await page.getByPlaceholder('session_id').fill(physics)
  await page.getByRole('button', { name: 'Connect' }).click()
  const alpha = page.locator('.react-flow__node').filter({ hasText: 'Name alpha' })
  await alpha.click()
  await page.getByRole('button', { name: 'Cross-graph link' }).click()
  await page.locator('#cross-link-target-graph').selectOption(named('biology'))
  await page.locator('#cross-link-target-object').selectOption('gamma')
  await page.getByPlaceholder('e.g. depends_on, references').fill('references')
  await page.getByRole('button', { name: 'Create link' }).click()
  // The form closes itself once the link is made; the canvas then shows the new relation.
  await assert.doesNotReject(page.locator('#cross-link-target-graph').waitFor({ state: 'detached' }))
  await assert.doesNotReject(page.locator('.react-flow__edge').filter({ hasText: 'references' }).waitFor())
  for (const session of [physics, biology]) {
    const objects = JSON.parse((await call('serialize_knowledge', { session_id: session })).serialized).objects
    const links = objects.filter((o) => o.structure?.relation_type === 'references')
    assert.deepEqual(links.map((o) => o.structure.participants), [['alpha', 'gamma']], `the link in ${session}`)
  }
})

await check('removing a graph from the gallery keeps its session', async () => {
  await page.goto(`${studio}/gallery`)
  await expectCards([named('physics'), named('biology'), named('published')])
  await card(named('published')).getByRole('button', { name: 'Delete from gallery' }).click()
  await card(named('published')).getByRole('button', { name: 'Remove' }).click()
  await expectCards([named('physics'), named('biology')])
  const entry = await call('get_graph', { name: named('published') })
  assert.deepEqual(entry, { found: false })
  const kept = JSON.parse((await call('serialize_knowledge', { session_id: unpublished })).serialized).objects
  assert.deepEqual(kept.map((o) => o.identity.id), ['zeta'])
})

await finish()
