// Drives cks-studio's Agents page (the standalone processes: their list, the metrics strip, Request
// Stop) and its Pipeline page (the run history and the pipeline board), with runs started from the
// Graph page's "Start Pipeline", in Debian's Chromium against a running cks-mcp, and checks every
// step against the server's own answers. The server is expected to run the Critic (temporal
// conflicts only) and the pipeline, polling every second, with its model calls sent to
// PROVIDER_URL, where this check serves a scripted model (tests/studio/provider.mjs), as
// scripts/studio-check starts it with tests/studio/agents.env. Arguments come from the
// environment: STUDIO_URL (a running cks-studio), MCP_URL (our server's base URL), PROVIDER_URL
// (where to serve the model), CHROMIUM (the browser binary), SCREENSHOTS (a folder, optional).
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'

import { call, open, studio } from './harness.mjs'
import { startProvider } from './provider.mjs'

/** Polls until `probe` answers something truthy. */
async function until(what, probe, seconds = 20) {
  const deadline = Date.now() + seconds * 1000
  for (;;) {
    const answer = await probe()
    if (answer) return answer
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`)
    await sleep(200)
  }
}

// ---- The model: one answer per pipeline step; a step can be held until the check lets it answer ----

/** The JSON the prompt shows after `heading` (up to the next blank line). */
const shownAfter = (prompt, heading) => JSON.parse(prompt.split(`${heading}\n`)[1].split('\n\n')[0])
const held = new Map()
/** Holds the Researcher's call about `objectId`: `reached` once the call came, `release()` lets it answer. */
function hold(objectId) {
  const gate = {}
  gate.reached = new Promise((resolve) => { gate.arrived = resolve })
  gate.answered = new Promise((resolve) => { gate.release = resolve })
  held.set(objectId, gate)
  return gate
}
const failing = new Set()
const provider = await startProvider(process.env.PROVIDER_URL, async ({ system, prompt }) => {
  if (system.startsWith('You are the research step')) {
    const object = shownAfter(prompt, 'The object:')
    const gate = held.get(object.id)
    if (gate) {
      held.delete(object.id)
      gate.arrived()
      await gate.answered
    }
    if (failing.has(object.id)) {
      return { status: 500, body: { type: 'error', error: { type: 'api_error', message: 'scripted outage' } } }
    }
    return `${object.name} is a well documented body of the solar system.`
  }
  if (system.startsWith('You are the review step')) {
    const object = shownAfter(prompt, 'The object:')
    return ['earth', 'mars'].includes(object.id) ? 'APPROVE: accurate and specific.' : 'REJECT: too vague to check.'
  }
  if (system.startsWith('You are the synthesis step')) {
    return JSON.stringify({ objects: [{ id: 'orbit', type: 'Fact', name: 'Earth orbits the Sun' }] })
  }
  if (system.startsWith('You are the arbitration step')) {
    const contradictions = shownAfter(prompt, 'The contradictions:')
    return JSON.stringify(contradictions.map((c) => ({
      contradiction_id: c.contradiction_id,
      winner_relation_id: c.relation_ids.includes('s1') ? 's1' : c.relation_ids[0],
      reason: 'better sourced',
    })))
  }
  throw new Error(`an unexpected model call: ${system.slice(0, 80)}`)
})

// ---- The server's answers ----

const processes = async () => (await call('list_processes', {})).processes
const processStatus = (kind) => call('process_status', { process_kind: kind })
const runs = async (session) => (await call('list_pipeline_runs', { session_id: session })).runs
const run = async (session, runId) => (await runs(session)).find((r) => r.run_id === runId)
const objects = async (session) =>
  JSON.parse((await call('serialize_knowledge', { session_id: session })).serialized).objects
const object = (id, type, name, structure = {}) => ({ identity: { id, type, name }, structure })
const relation = (id, from, to, type) => object(id, 'Relation', id, { participants: [from, to], relation_type: type })

async function session(objects) {
  const created = await call('validate_knowledge', { json_data: JSON.stringify({ objects }) })
  assert.ok(created.session_id && created.valid, JSON.stringify(created))
  return created.session_id
}

// The pipeline's session: Earth, Mars (in no contradiction), the Moon, the Sun and a theory Earth
// both supports and contradicts, which a rule forbids (the Arbiter settles it). The Critic's: a fact that expired (a sweeper queues
// a temporal conflict, the Critic extends the fact). The Critic takes temporal conflicts only, so
// the contradiction stays for the pipeline.
const pipelineSession = await session([
  object('rule', 'MutualExclusionRule', 'supports or contradicts', { relation_type_a: 'supports', relation_type_b: 'contradicts' }),
  object('earth', 'Planet', 'Earth', { note: 'third planet' }),
  object('mars', 'Planet', 'Mars', { note: 'fourth planet' }),
  object('theory', 'Claim', 'Theory'),
  object('moon', 'Satellite', 'Moon'),
  object('sun', 'Star', 'Sun'),
  relation('s1', 'earth', 'theory', 'supports'),
  relation('c1', 'earth', 'theory', 'contradicts'),
])
const past = '2001-01-01T00:00:00Z'
const criticSession = await session([object('f1', 'Fact', 'An old fact', { valid_until: past })])

// The studio is connected to the pipeline's session (the Pipeline page shows that session's runs).
const { page, check, finish } = await open('agents', pipelineSession)

// ---- The page's parts ----

const processSection = page.locator('section').nth(1)
const processCard = (kind) =>
  processSection.locator('div.rounded.p-3').filter({ has: page.getByText(kind, { exact: true }) })
const chip = (label) => page.getByText(label, { exact: true }).locator('xpath=following-sibling::span')
/** Waits until a metrics chip shows `value` (the strip polls every 10 seconds). */
async function expectChip(label, value) {
  let shown
  try {
    await until(`${label}: ${value}`, async () => (shown = await chip(label).innerText()) === String(value), 15)
  } catch {
    assert.equal(shown, String(value), label)
  }
}
const time = (iso) => Date.parse(iso)

/**
 * Refreshes the Agents page until a process's card shows its newest heartbeat (at least
 * `server.last_heartbeat_at`), then checks the card against `server` (a process_status answer
 * fetched before): its kind, status, pid and host, start time, the task it works on, its button.
 */
async function expectCard(server, { stopRequested = false } = {}) {
  const card = processCard(server.process_kind)
  const heartbeat = card.locator('span', { hasText: /^heartbeat: / })
  await until(`the ${server.process_kind} card to show a heartbeat of ${server.last_heartbeat_at} or later`, async () => {
    await page.getByRole('button', { name: 'Refresh', exact: true }).click()
    await sleep(300)
    const shown = await heartbeat.getAttribute('title', { timeout: 5000 }).catch(() => null)
    return shown && time(shown) >= time(server.last_heartbeat_at)
  })
  const latest = await processStatus(server.process_kind)
  const shownHeartbeat = await heartbeat.getAttribute('title')
  assert.ok(time(shownHeartbeat) <= time(latest.last_heartbeat_at), `${shownHeartbeat} is newer than the server's`)
  assert.equal(latest.instance_id, server.instance_id)
  await assert.doesNotReject(card.locator(`span[title="${server.status}"]`).waitFor(), `${server.process_kind} shown ${server.status}`)
  await assert.doesNotReject(card.getByText(`pid ${server.pid} @ ${server.hostname}`, { exact: true }).waitFor())
  assert.match(await card.locator(`span[title="${server.started_at}"]`).innerText(), /^started: /)
  const working = card.getByText(/^working on task #/)
  if (server.current_task_id === null) {
    assert.equal(await working.count(), 0, `${server.process_kind} shown working`)
  } else {
    const type = server.current_task_type ? ` (${server.current_task_type})` : ''
    assert.equal(await working.innerText(), `working on task #${server.current_task_id}${type}`)
  }
  assert.equal(await card.getByText('stop requested — waiting for process to exit…').count(), stopRequested ? 1 : 0)
  const button = card.getByRole('button', { name: stopRequested ? 'Stop requested' : 'Request Stop' })
  assert.equal(await button.isEnabled(), server.status === 'alive' && !stopRequested, `${server.process_kind}: the stop button`)
}

const history = page.locator('div.max-h-80').filter({ has: page.getByRole('heading', { name: 'Run History' }) })
const runRow = (runId) => history.locator('div.border-b').filter({ has: page.getByText(runId, { exact: true }) })
const texts = async (locator) => (await locator.allInnerTexts()).map((t) => t.trim()).filter((t) => t !== '')
const RUN_LABELS = { queued: 'Queued', running: 'Running', completed: 'Completed', failed: 'Failed' }
const STEP_LABELS = { pending: 'Pending', active: 'Active', completed: 'Completed', failed: 'Failed' }
/**
 * Refreshes the Pipeline page's run history until the run's row shows the server's status, then
 * checks the row and, expanded, each step (name, status, times, error and dead-letter task)
 * against `server` (a list_pipeline_runs entry).
 */
async function expectRun(server) {
  const row = runRow(server.run_id)
  const button = row.locator('button').first()
  await until(`the run history to show run ${server.run_id} ${server.status}`, async () => {
    await history.getByRole('button', { name: 'Refresh', exact: true }).click()
    await sleep(300)
    return (await row.count()) === 1 && (await texts(button.locator('span'))).includes(RUN_LABELS[server.status])
  })
  const done = server.steps.filter((s) => s.status === 'completed').length
  const objects = `${server.object_ids.length} object${server.object_ids.length === 1 ? '' : 's'}`
  assert.deepEqual(await texts(button.locator('span')), [
    server.run_id, RUN_LABELS[server.status], server.updated_at, objects, `${done}/${server.steps.length} steps`,
  ])
  if ((await row.locator('div.space-y-1\\.5').count()) === 0) await button.click()
  const steps = row.locator('div.space-y-1\\.5 > div')
  assert.equal(await steps.count(), server.steps.length)
  for (const [i, step] of server.steps.entries()) {
    const shown = steps.nth(i)
    const times = step.started_at ? [`${step.started_at}${step.completed_at ? ` → ${step.completed_at}` : ''}`] : []
    assert.deepEqual(await texts(shown.locator('span')), [step.name, STEP_LABELS[step.status], ...times], `step ${step.name}`)
    if (step.error) {
      const dead = step.dead_letter_task_id != null ? ` (dead-letter task #${step.dead_letter_task_id})` : ''
      assert.equal((await shown.locator('p').innerText()).trim(), `${step.error}${dead}`, `step ${step.name}: its error`)
    } else {
      assert.equal(await shown.locator('p').count(), 0, `step ${step.name} shows an error`)
    }
  }
}

// The board's columns: the statuses the studio shows, with their labels.
const BOARD = {
  awaiting_research: 'Awaiting Research', awaiting_review: 'Awaiting Review', needs_research: 'Needs Research', resolved: 'Resolved',
}
const column = (status) => page.locator('div.w-56').filter({ hasText: new RegExp(`^${BOARD[status]}\\s*\\d`) })
const monitor = page.locator('div.h-full').filter({ has: page.getByRole('heading', { name: 'Pipeline Monitor' }) }).last()
/**
 * The board shows each object under its current_status, as serialize_knowledge has it: reloaded
 * every 5 seconds by itself, or (`refresh`) by its Refresh button.
 */
async function expectBoard({ refresh = false } = {}) {
  const serverObjects = await objects(pipelineSession)
  const wanted = Object.fromEntries(Object.keys(BOARD).map((status) => [
    status, serverObjects.filter((o) => o.structure?.current_status === status).map((o) => o.identity.name).sort(),
  ]))
  const shown = async () => Object.fromEntries(await Promise.all(Object.keys(BOARD).map(async (status) => [
    status, (await column(status).locator('button div.font-medium').allInnerTexts()).sort(),
  ])))
  let last
  try {
    await until('the board to show the server\'s statuses', async () => {
      if (refresh) await monitor.getByRole('button', { name: 'Refresh', exact: true }).click()
      return JSON.stringify(last = await shown()) === JSON.stringify(wanted)
    }, 15)
  } catch {
    assert.deepEqual(last, wanted, 'the board')
  }
  for (const status of Object.keys(BOARD)) {
    assert.equal(await column(status).locator('div.text-xs.font-medium > span.ml-auto').innerText(), String(wanted[status].length))
  }
  return serverObjects
}

const node = (type, name) => page.locator('.react-flow__node').filter({ has: page.locator(`[title^="${type}: ${name}"]`) })
/** Opens the Graph page on the pipeline's session and selects `objects` ([type, name] pairs). */
async function select(objects) {
  await page.goto(`${studio}/`)
  await page.getByPlaceholder('session_id').fill(pipelineSession)
  await page.getByRole('button', { name: 'Connect' }).click()
  for (const [i, [type, name]] of objects.entries()) {
    await node(type, name).click(i === 0 ? {} : { modifiers: ['Control'] })
  }
}
/** Presses "Start Pipeline" for the selection; the run id the page reports, checked against the server's. */
async function startFromGraph(count, objectIds) {
  await page.getByRole('button', { name: `Start Pipeline (${count})`, exact: true }).click()
  const message = page.getByText(/^Pipeline started with \d+ objects? \(run \w+\)\.$/)
  await assert.doesNotReject(message.waitFor())
  const [, shownCount, runId] = (await message.innerText()).match(/with (\d+) objects? \(run (\w+)\)/)
  assert.equal(Number(shownCount), count)
  const started = await run(pipelineSession, runId)
  assert.ok(started, `list_pipeline_runs has no run ${runId}`)
  assert.deepEqual([...started.object_ids].sort(), [...objectIds].sort())
  return started
}

// ---- The Agents page: the processes ----

await check('the Agents page lists the Critic and the pipeline as list_processes does; kinds never started are placeholders', async () => {
  await page.goto(`${studio}/agents`)
  await assert.doesNotReject(page.getByText('Standalone Processes').waitFor())
  const listed = await processes()
  assert.deepEqual(listed.map((p) => [p.process_kind, p.status]).sort(), [['critic', 'alive'], ['pipeline', 'alive']])
  for (const process of listed) await expectCard(process)
  const shownKinds = await processSection.locator('div.rounded.p-3 span.text-sm.font-medium').allInnerTexts()
  assert.deepEqual(shownKinds.sort(), ['Enrichment', 'Fork Resolution', 'critic', 'pipeline'])
  for (const label of ['Enrichment', 'Fork Resolution']) {
    const placeholder = processSection.locator('div.rounded.p-3').filter({ has: page.getByText(label, { exact: true }) })
    await assert.doesNotReject(placeholder.getByText('not running / no heartbeat yet').waitFor())
    assert.equal(await placeholder.getByRole('button').count(), 0)
  }
  await expectChip('Processes alive', listed.filter((p) => p.status === 'alive').length)
})

// ---- A run: started on the Graph page, followed on the Agents and Pipeline pages ----

let first
// The Researcher's call about the second object waits: the run is then under way, with work to show.
const researchTheory = hold('theory')
await check('the Graph page starts a run on three selected objects; list_pipeline_runs lists it', async () => {
  await select([['Planet', 'Earth'], ['Planet', 'Mars'], ['Claim', 'Theory']])
  first = await startFromGraph(3, ['earth', 'mars', 'theory'])
  assert.ok(['queued', 'running'].includes(first.status), JSON.stringify(first))
  assert.deepEqual(first.steps.map((s) => s.name), ['Researcher', 'Reviewer', 'Synthesizer', 'Arbiter'])
})

await check('while the Researcher waits for the model, the Agents page shows the pipeline on that task', async () => {
  await researchTheory.reached
  const working = await until('the pipeline to take the research task', async () => {
    const status = await processStatus('pipeline')
    return status.current_task_type === 'pipeline_research_request' && status
  })
  await page.goto(`${studio}/agents`)
  await expectCard(working)
  // It keeps its heartbeat while it waits.
  await sleep(2500)
  const later = await processStatus('pipeline')
  assert.ok(time(later.last_heartbeat_at) > time(working.last_heartbeat_at), 'no heartbeat while working')
  assert.equal(later.current_task_id, working.current_task_id)
  await expectCard(later)
})

await check('mid-run, the Pipeline page shows the run and its steps as list_pipeline_runs does', async () => {
  await page.goto(`${studio}/pipeline`)
  await assert.doesNotReject(page.getByText(`session: ${pipelineSession}`).waitFor())
  const now = await run(pipelineSession, first.run_id)
  assert.equal(now.status, 'running', JSON.stringify(now))
  const researcher = now.steps[0]
  assert.equal(researcher.status, 'active', JSON.stringify(researcher))
  await expectRun(now)
  await expectBoard()
})

await check('the run completes: the run history, its four steps and the board follow the server', async () => {
  researchTheory.release()
  const done = await until('the run to complete', async () => {
    const now = await run(pipelineSession, first.run_id)
    assert.notEqual(now.status, 'failed', JSON.stringify(now))
    return now.status === 'completed' && now
  }, 60)
  assert.deepEqual(done.steps.map((s) => s.status), ['completed', 'completed', 'completed', 'completed'])
  const reviewer = done.steps.find((s) => s.name === 'Reviewer')
  assert.deepEqual([[...reviewer.approved].sort(), reviewer.rejected], [['earth', 'mars'], ['theory']])
  await expectRun(done)
  const serverObjects = await expectBoard()
  // The board is not empty: the run leaves its objects where the reference's pipeline does, in a
  // column the studio shows (Earth and the rejected theory resolved by the Arbiter, which settles
  // their contradiction; Mars, approved and in no contradiction, resolved all the same), none left
  // awaiting a step that will not come.
  const ended = done.object_ids.map((id) => serverObjects.find((o) => o.identity.id === id)?.structure?.current_status)
  assert.deepEqual(ended, done.object_ids.map(() => 'resolved'), `the run's objects end ${JSON.stringify(ended)}`)
  const resolved = (await column('resolved').locator('button div.font-medium').allInnerTexts()).sort()
  assert.deepEqual(resolved, ['Earth', 'Mars', 'Theory'], 'the board\'s Resolved column')
  const mars = serverObjects.find((o) => o.identity.id === 'mars').structure.transition_log.at(-1)
  assert.deepEqual([mars.agent, mars.action, mars.transitioned_to], ['ArbiterAgent', 'uncontested', 'resolved'])
  // The Arbiter kept s1 (the scripted winner) and removed c1.
  const relations = serverObjects.filter((o) => o.identity.type === 'Relation').map((o) => o.identity.id)
  assert.ok(relations.includes('s1') && !relations.includes('c1'), JSON.stringify(relations))
  // An object's transition log, as the board shows it when the object is picked.
  const earth = serverObjects.find((o) => o.identity.id === 'earth')
  await column(earth.structure.current_status).getByRole('button', { name: /^Earth/ }).click()
  await assert.doesNotReject(page.getByRole('heading', { name: 'Transition log — Earth' }).waitFor())
  const log = [...earth.structure.transition_log].sort((a, b) => time(a.timestamp) - time(b.timestamp))
  assert.deepEqual(log.map((e) => e.agent), ['ResearcherAgent', 'ReviewerAgent', 'SynthesizerAgent', 'ArbiterAgent'])
  const entries = page.locator('ol > li')
  assert.equal(await entries.count(), log.length)
  for (const [i, entry] of log.entries()) {
    assert.deepEqual(await texts(entries.nth(i).locator('span')),
      [entry.timestamp, entry.agent, entry.action, `→ ${entry.transitioned_to}`])
  }
})

await check('after the run the pipeline is idle again; process_status counts its eight tasks and their tokens', async () => {
  const status = await processStatus('pipeline')
  const done = await run(pipelineSession, first.run_id)
  assert.equal(status.current_task_id, null)
  assert.equal(status.tasks_done, 8, JSON.stringify(status))
  assert.equal(status.tasks_failed, 0, JSON.stringify(status))
  assert.equal(status.tokens_spent, done.tokens_spent, JSON.stringify(status))
  assert.equal(done.tokens_spent, done.steps.reduce((sum, s) => sum + s.tokens_spent, 0))
  assert.equal(provider.calls.length, 8)
  await page.goto(`${studio}/agents`)
  await expectCard(status)
})

await check('a step the model keeps failing: the run fails, the step shows its error and its dead-letter task', async () => {
  failing.add('moon')
  await select([['Satellite', 'Moon']])
  const started = await startFromGraph(1, ['moon'])
  const failed = await until('the run to fail', async () => {
    const now = await run(pipelineSession, started.run_id)
    return now.status === 'failed' && now
  }, 60)
  const researcher = failed.steps[0]
  assert.equal(researcher.status, 'failed', JSON.stringify(researcher))
  assert.match(researcher.error, /LLM Researcher call failed/)
  assert.equal(typeof researcher.dead_letter_task_id, 'number', JSON.stringify(researcher))
  assert.deepEqual(failed.steps.slice(1).map((s) => s.status), ['pending', 'pending', 'pending'])
  await page.goto(`${studio}/pipeline`)
  await expectRun(failed)
  // Both runs listed, most recently updated first.
  const order = await history.locator('button span.font-mono').allInnerTexts()
  assert.deepEqual(order, (await runs(pipelineSession)).map((r) => r.run_id))
  assert.deepEqual(order, [started.run_id, first.run_id])
  const status = await processStatus('pipeline')
  assert.equal(status.tasks_failed, 2, JSON.stringify(status))
  await expectChip('Dead-letter tasks', (await call('list_dead_lettered_conflicts', {})).count)
})

// ---- Request Stop ----

await check('the Critic settled the conflict a sweeper queued; Request Stop stops it, for the page and process_status', async () => {
  const settled = await until('the Critic to settle the expired fact', async () => {
    const status = await processStatus('critic')
    return status.tasks_done >= 1 && status
  })
  assert.equal(settled.tasks_failed, 0, JSON.stringify(settled))
  const fact = (await objects(criticSession)).find((o) => o.identity.id === 'f1')
  assert.ok(time(fact.structure.valid_until) > Date.now(), `f1 valid until ${fact.structure.valid_until}`)
  const versions = (await call('list_versions', { session_id: criticSession })).versions
  assert.ok(versions.some((v) => v.metadata?.process === 'critic'), JSON.stringify(versions.map((v) => v.metadata)))

  await page.goto(`${studio}/agents`)
  await expectCard(await processStatus('critic'))
  await processCard('critic').getByRole('button', { name: 'Request Stop' }).click()
  const stopped = await until('the Critic to stop', async () => {
    const status = await processStatus('critic')
    return status.status === 'stopped' && status
  })
  assert.ok(stopped.stopped_at, JSON.stringify(stopped))
  assert.equal(stopped.current_task_id, null)
  await expectCard(stopped)
  const pipeline = await processStatus('pipeline')
  assert.equal(pipeline.status, 'alive', 'stopping the Critic stopped the pipeline')
  await expectCard(pipeline)
  await page.reload()
  await expectChip('Processes alive', (await processes()).filter((p) => p.status === 'alive').length)
  assert.equal(await chip('Processes alive').innerText(), '1')
  // A stopped Critic settles nothing more: a second expired fact stays expired.
  const ops = [{ type: 'add_object', identity: { id: 'f2', type: 'Fact', name: 'Another old fact' }, structure: { valid_until: past } }]
  assert.ok((await call('evolve_knowledge', { session_id: criticSession, operations: ops })).success !== false)
  const queued = await until('a sweeper to queue the expired fact', async () =>
    (await call('claim_conflict_task', { task_type: 'temporal_conflict' })).task)
  assert.deepEqual([queued.session_id, queued.payload.object_id], [criticSession, 'f2'], JSON.stringify(queued))
  assert.equal((await processStatus('critic')).tasks_done, stopped.tasks_done, 'a stopped Critic settled a task')
  const f2 = (await objects(criticSession)).find((o) => o.identity.id === 'f2')
  assert.equal(f2.structure.valid_until, past)
})

await check('Request Stop while the pipeline works: the page shows it waiting; it finishes the task in hand, then stops', async () => {
  const researchSun = hold('sun')
  await select([['Star', 'Sun']])
  const started = await startFromGraph(1, ['sun'])
  await researchSun.reached
  const working = await until('the pipeline to take the research task', async () => {
    const status = await processStatus('pipeline')
    return status.current_task_type === 'pipeline_research_request' && status
  })
  await page.goto(`${studio}/agents`)
  await expectCard(working)
  await processCard('pipeline').getByRole('button', { name: 'Request Stop' }).click()
  await assert.doesNotReject(processCard('pipeline').getByText('stop requested — waiting for process to exit…').waitFor())
  // Still at work on its task: alive, for the server and the page.
  const asked = await processStatus('pipeline')
  assert.deepEqual([asked.status, asked.current_task_id], ['alive', working.current_task_id], JSON.stringify(asked))
  await expectCard(asked, { stopRequested: true })

  researchSun.release()
  const stopped = await until('the pipeline to stop', async () => {
    const status = await processStatus('pipeline')
    return status.status === 'stopped' && status
  })
  assert.equal(stopped.current_task_id, null)
  assert.equal(stopped.tasks_done, working.tasks_done + 1, 'the task in hand was finished')
  await expectCard(stopped)
  await page.reload()
  await expectChip('Processes alive', 0)
  // The Researcher's work is in; the review it queued waits for a pipeline.
  await sleep(3000)
  const left = await run(pipelineSession, started.run_id)
  assert.deepEqual([left.status, ...left.steps.map((s) => s.status)], ['running', 'completed', 'pending', 'pending', 'pending'])
  await page.goto(`${studio}/pipeline`)
  await expectRun(left)
  await page.getByLabel('Auto (5s)').uncheck()
  const board = await expectBoard({ refresh: true })
  assert.equal(board.find((o) => o.identity.id === 'sun').structure.current_status, 'awaiting_review')
  await expectChip('Processes alive', 0)
})

await finish()
await provider.close()
