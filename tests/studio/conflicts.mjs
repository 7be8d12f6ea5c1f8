// Drives cks-studio's Dead Letter page and the sweepers of its Agents page in Debian's Chromium
// against a running cks-mcp, and checks every step against the server's own answers. The server is
// expected to sweep every few seconds (CKS_SWEEP_INTERVAL_SECONDS) and to dead-letter a task after
// few failures (CKS_TASK_MAX_RETRIES), as scripts/studio-check starts it. Arguments come from the
// environment: STUDIO_URL (a running cks-studio), MCP_URL (our server's base URL), CHROMIUM (the
// browser binary), SCREENSHOTS (a folder, optional).
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'

import { call, open, rpc, studio } from './harness.mjs'

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

/** The oldest pending task of a type, once a sweeper has queued it (or its retry delay has passed). */
const claim = (taskType) =>
  until(`a ${taskType} task`, async () => (await call('claim_conflict_task', { task_type: taskType })).task)

const objects = async (session) =>
  JSON.parse((await call('serialize_knowledge', { session_id: session })).serialized).objects
const object = async (session, id) => (await objects(session)).find((o) => o.identity.id === id)
const deadLetters = async (args = {}) => (await call('list_dead_lettered_conflicts', args)).tasks
const fact = (id, validUntil) => ({ identity: { id, type: 'Fact', name: `Fact ${id}` }, structure: { valid_until: validUntil } })
const relation = (id, from, to, type) => ({
  identity: { id, type: 'Relation', name: id },
  structure: { participants: [from, to], relation_type: type },
})

async function session(objects) {
  const created = await call('validate_knowledge', { json_data: JSON.stringify({ objects }) })
  assert.ok(created.session_id && created.valid, JSON.stringify(created))
  return created.session_id
}

// Session A: a contradiction (a MutualExclusionRule and both of its relation types between the same two
// objects) and two expired facts; session B: one expired fact. The sweepers queue four tasks.
const past = '2001-01-01T00:00:00Z'
const sessionA = await session([
  { identity: { id: 'rule', type: 'MutualExclusionRule', name: 'supports or contradicts' },
    structure: { relation_type_a: 'supports', relation_type_b: 'contradicts' } },
  { identity: { id: 'earth', type: 'Planet', name: 'Earth' } },
  { identity: { id: 'theory', type: 'Claim', name: 'Theory' } },
  relation('s1', 'earth', 'theory', 'supports'),
  relation('c1', 'earth', 'theory', 'contradicts'),
  fact('f1', past),
  fact('f2', past),
])
const sessionB = await session([fact('g1', past)])

// A worker claims the contradiction and fails it until it is dead-lettered (each retry after its delay).
let contradiction = await claim('contradiction_detected')
assert.equal(contradiction.session_id, sessionA, JSON.stringify(contradiction))
assert.deepEqual(contradiction.payload.relation_ids, ['c1', 's1'], JSON.stringify(contradiction))
for (;;) {
  const failed = await call('fail_conflict_task', {
    task_id: contradiction.task_id, retry_count: contradiction.retry_count + 1, error: 'unsure which relation holds',
  })
  assert.equal(failed.failed, true, JSON.stringify(failed))
  if (failed.dead_lettered) break
  contradiction = await claim('contradiction_detected')
}
// And gives up on each expired fact at once.
const expired = {}
for (let i = 0; i < 3; i += 1) {
  const task = await claim('temporal_conflict')
  expired[task.payload.object_id] = task
  const dead = await call('dead_letter_conflict_task', { task_id: task.task_id, error: 'needs a person' })
  assert.equal(dead.dead_lettered, true, JSON.stringify(dead))
}
assert.deepEqual(Object.keys(expired).sort(), ['f1', 'f2', 'g1'])
assert.equal(expired.g1.session_id, sessionB)
const ids = {
  contradiction: contradiction.task_id, f1: expired.f1.task_id, f2: expired.f2.task_id, g1: expired.g1.task_id,
}

// The studio is connected to session A (the Dead Letter page filters by the connected session).
const { page, check, finish } = await open('conflicts', sessionA)

// ---- The Dead Letter page ----

const rowIds = 'div.relative.border-b span.text-sm.font-medium'
const row = (taskId) => page.locator('div.relative.border-b').filter({ has: page.getByText(`#${taskId}`, { exact: true }) })
const detail = page.locator('div.space-y-3.overflow-y-auto').filter({ has: page.locator('h3') })
/** Waits until the inbox lists exactly the server's dead letters (by task id), then compares each row. */
async function expectRows(serverTasks) {
  const wanted = serverTasks.map((t) => `#${t.task_id}`).sort()
  try {
    await page.waitForFunction(
      ([selector, wanted]) =>
        JSON.stringify([...document.querySelectorAll(selector)].map((s) => s.textContent).sort()) === JSON.stringify(wanted),
      [rowIds, wanted],
      { timeout: 10_000 },
    )
  } catch {
    assert.deepEqual((await page.locator(rowIds).allInnerTexts()).sort(), wanted, 'the dead-lettered tasks listed')
  }
  for (const task of serverTasks) {
    const text = await row(task.task_id).innerText()
    assert.ok(text.includes(task.task_type), `row #${task.task_id}: ${text}`)
    assert.ok(text.includes(`session: ${task.session_id}`), `row #${task.task_id}: ${text}`)
    const payload = JSON.stringify(task.payload)
    assert.ok(text.includes(payload.slice(0, 90)), `row #${task.task_id} shows the payload: ${text}`)
    const retries = task.retry_count === 0 ? null : `${task.retry_count} retr${task.retry_count === 1 ? 'y' : 'ies'}`
    if (retries) assert.ok(text.includes(retries), `row #${task.task_id} shows ${retries}: ${text}`)
  }
}
/** Opens a task's review and checks it against review_dead_letter; returns the server's review. */
async function openReview(taskId) {
  const review = await call('review_dead_letter', { task_id: taskId })
  assert.ok(review.proposed_resolution?.tool, JSON.stringify(review))
  await row(taskId).locator('button').first().click()
  await assert.doesNotReject(detail.getByRole('heading', { name: `Task #${taskId}`, exact: true }).waitFor())
  const retries = `${review.retry_count} retr${review.retry_count === 1 ? 'y' : 'ies'}`
  await assert.doesNotReject(detail.getByText(`${review.task_type} · session ${review.session_id} · ${retries}`).waitFor())
  if (review.last_error) await assert.doesNotReject(detail.getByText(review.last_error, { exact: true }).waitFor())
  const section = (label) => detail.locator(`div:has(> p:text-is("${label}")) > pre`)
  assert.deepEqual(JSON.parse(await section('Payload').innerText()), review.payload)
  assert.deepEqual(JSON.parse(await section('Proposed resolution').innerText()), review.proposed_resolution)
  return review
}

await check('connected to a session, the inbox lists that session\'s dead letters as the server does', async () => {
  await page.goto(`${studio}/dead-letter`)
  await assert.doesNotReject(page.getByText(`Filtering to session: ${sessionA}`).waitFor())
  const tasks = await deadLetters({ session_id: sessionA })
  assert.deepEqual(tasks.map((t) => t.task_id).sort(), [ids.contradiction, ids.f1, ids.f2].sort())
  await expectRows(tasks)
})

await check('"Current session only" off, it lists every session\'s dead letters', async () => {
  await page.getByLabel('Current session only').uncheck()
  const tasks = await deadLetters()
  assert.deepEqual(tasks.map((t) => t.task_id).sort(), Object.values(ids).sort())
  await expectRows(tasks)
})

await check('reviewing the dead contradiction shows the server\'s proposed resolution', async () => {
  const review = await openReview(ids.contradiction)
  assert.equal(review.proposed_resolution.tool, 'resolve_contradiction')
  assert.deepEqual(review.proposed_resolution.arguments.contradiction_ids, [contradiction.payload.location])
  assert.ok(review.last_error.startsWith('unsure which relation holds'), review.last_error)
})

await check('approving it applies the resolution: a relation goes, the task is completed', async () => {
  await detail.getByRole('button', { name: 'Approve', exact: true }).click()
  await assert.doesNotReject(page.getByText('Select a task to view its proposed resolution.').waitFor())
  await expectRows(await deadLetters())
  assert.ok(!(await deadLetters()).some((t) => t.task_id === ids.contradiction), 'still dead-lettered')
  const review = await call('review_dead_letter', { task_id: ids.contradiction })
  assert.equal(review.error, 'task_not_dead_lettered', JSON.stringify(review))
  const relations = (await objects(sessionA)).filter((o) => o.identity.type === 'Relation').map((o) => o.identity.id)
  assert.deepEqual(relations, ['s1'], 'the proposed resolution removes c1, the first of the two')
  assert.equal((await call('resolve_contradiction', { session_id: sessionA })).contradiction_count, 0)
  const versions = (await call('list_versions', { session_id: sessionA })).versions
  assert.ok(versions.some((v) => v.metadata?.tool === 'resolve_contradiction'), JSON.stringify(versions.map((v) => v.metadata)))
})

const reason = 'checked by hand: the fact still holds'
await check('rejecting a proposal keeps the task dead, with the reason as its last error', async () => {
  const review = await openReview(ids.f1)
  assert.equal(review.proposed_resolution.tool, 'resolve_temporal_conflict')
  await detail.getByRole('button', { name: 'Reject', exact: true }).click()
  await detail.getByPlaceholder('Reason (optional)').fill(reason)
  await detail.getByRole('button', { name: 'Confirm reject' }).click()
  await assert.doesNotReject(page.getByText('Select a task to view its proposed resolution.').waitFor())
  const tasks = await deadLetters()
  const f1 = tasks.find((t) => t.task_id === ids.f1)
  assert.equal(f1?.last_error, `Rejected by human: ${reason}`, JSON.stringify(f1))
  await expectRows(tasks)
  assert.equal((await object(sessionA, 'f1')).structure.valid_until, past, 'the rejected resolution changed nothing')
  await openReview(ids.f1)
  await assert.doesNotReject(detail.getByText(`Rejected by human: ${reason}`, { exact: true }).waitFor())
})

await check('retrying a dead letter puts it back in the queue', async () => {
  await row(ids.f2).getByRole('button', { name: 'Retry' }).click()
  await assert.doesNotReject(page.getByText(`Task #${ids.f2} was requeued.`).waitFor())
  const tasks = await deadLetters()
  assert.ok(!tasks.some((t) => t.task_id === ids.f2), 'still dead-lettered')
  await expectRows(tasks)
  const again = await claim('temporal_conflict')
  assert.deepEqual([again.task_id, again.retry_count, again.payload.object_id], [ids.f2, 0, 'f2'])
})

await check('approving a temporal conflict of another session extends the fact\'s validity', async () => {
  const review = await openReview(ids.g1)
  assert.equal(review.session_id, sessionB)
  assert.deepEqual(review.proposed_resolution.arguments, {
    action: 'bump', commit: true, extend_by_days: 30, object_id: 'g1', session_id: sessionB,
  })
  await detail.getByRole('button', { name: 'Approve', exact: true }).click()
  await assert.doesNotReject(page.getByText('Select a task to view its proposed resolution.').waitFor())
  const tasks = await deadLetters()
  assert.deepEqual(tasks.map((t) => t.task_id), [ids.f1])
  await expectRows(tasks)
  const validUntil = Date.parse((await object(sessionB, 'g1')).structure.valid_until)
  assert.ok(validUntil > Date.now() + 29 * 86_400_000, `g1 valid until ${new Date(validUntil).toISOString()}`)
})

// ---- The Agents page: the sweepers ----

const sweepers = page.locator('section').first()
const agentCard = (id) => sweepers.locator('div.rounded.p-3').filter({ has: page.getByText(id, { exact: true }) })
/** The card of a sweeper shows what agent_status says: running or not, its interval, which button is live. */
async function expectCard(status) {
  const card = agentCard(status.agent_id)
  const state = status.running ? 'running' : 'not running'
  await assert.doesNotReject(card.locator(`span[title="${state}"]`).waitFor(), `${status.agent_id} shown ${state}`)
  await assert.doesNotReject(card.getByText(`every ${status.interval_seconds}s`, { exact: true }).waitFor())
  assert.equal(await card.getByRole('button', { name: 'Start' }).isEnabled(), !status.running, `${status.agent_id}: Start`)
  assert.equal(await card.getByRole('button', { name: 'Stop' }).isEnabled(), status.running, `${status.agent_id}: Stop`)
}
const sweepsOf = async (id) => (await call('agent_status', { agent_id: id })).sweeps_completed

await check('the Agents page lists the server\'s sweepers with their status', async () => {
  await page.goto(`${studio}/agents`)
  const agents = (await call('list_agents', {})).agents
  assert.deepEqual(agents.map((a) => a.agent_id).sort(), [
    'contradiction', 'duplicates', 'graph_auto_update', 'graph_freshness', 'graph_health', 'inference_staleness',
    'provenance_staleness', 'temporal_staleness',
  ])
  await assert.doesNotReject(agentCard(agents[0].agent_id).waitFor())
  const shown = await sweepers.locator('div.rounded.p-3 span.text-sm.font-medium').allInnerTexts()
  assert.deepEqual(shown.sort(), agents.map((a) => a.agent_id).sort())
  for (const agent of agents) {
    assert.equal(agent.running, true, JSON.stringify(agent))
    await expectCard(agent)
  }
})

await check('stopping a sweeper: the page and agent_status agree it stopped, and it sweeps no more', async () => {
  await agentCard('contradiction').getByRole('button', { name: 'Stop' }).click()
  const status = await until('the contradiction sweeper to stop', async () => {
    const status = await call('agent_status', { agent_id: 'contradiction' })
    return !status.running && status
  })
  await expectCard(status)
  const sweeps = await sweepsOf('contradiction')
  await sleep(2.5 * status.interval_seconds * 1000)
  assert.equal(await sweepsOf('contradiction'), sweeps, 'a stopped sweeper swept')
  for (const agent of (await call('list_agents', {})).agents) {
    assert.equal(agent.running, agent.agent_id !== 'contradiction', JSON.stringify(agent))
    await expectCard(agent)
  }
  // Still stopped for the page after a reload (the page reads it back from the server).
  await page.reload()
  await expectCard(await call('agent_status', { agent_id: 'contradiction' }))
})

await check('starting it again: running for both, and it sweeps at once', async () => {
  const sweeps = await sweepsOf('contradiction')
  await agentCard('contradiction').getByRole('button', { name: 'Start' }).click()
  const status = await until('the contradiction sweeper to sweep', async () => {
    const status = await call('agent_status', { agent_id: 'contradiction' })
    return status.running && status.sweeps_completed > sweeps && status
  })
  await expectCard(status)
})

const chip = (label) => page.getByText(label, { exact: true }).locator('xpath=following-sibling::span')
await check('the metrics strip counts what the server answers', async () => {
  await page.reload()
  const running = (await call('list_agents', {})).agents.filter((a) => a.running).length
  const dead = (await call('list_dead_lettered_conflicts', {})).count
  const graphs = (await call('list_graphs', { public_only: false })).graphs.length
  for (const [label, value] of [['Agents running', running], ['Dead-letter tasks', dead], ['Graphs', graphs]]) {
    let shown
    try {
      await until(`${label}: ${value}`, async () => (shown = await chip(label).innerText()) === String(value), 15)
    } catch {
      assert.equal(shown, String(value), label)
    }
  }
})

await check('the standalone processes part answers for itself and leaves the sweepers usable', async () => {
  // Listed or not: a server's list may offer a few tools and find the rest (find_tools).
  const listed = (await rpc('tools/list', {})).tools.map((t) => t.name)
  const found = listed.includes('find_tools') ? (await call('find_tools', {})).tools.map((t) => t.name) : []
  if ([...listed, ...found].includes('list_processes')) {
    await assert.doesNotReject(page.getByText('Standalone Processes').waitFor())
    assert.equal(await page.getByText('Unable to fetch process status').count(), 0)
  } else {
    // The server has no list_processes: the section says so and the metric is blank, nothing else breaks.
    await assert.doesNotReject(
      page.getByText('Unable to fetch process status: MCP error -32601: Unknown tool: list_processes').waitFor(),
    )
    assert.equal(await chip('Processes alive').innerText(), '—')
  }
  for (const agent of (await call('list_agents', {})).agents) await expectCard(agent)
})

await finish()
