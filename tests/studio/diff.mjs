// Drives cks-studio's Diff page (VersionDiff: a past version of the connected session against its
// current state) in Debian's Chromium against a running cks-mcp, and checks every step against the
// server's own answers: the versions list_versions reports, and the added, removed, changed and
// renamed objects and relations that explain_diff and compare_versions report. Arguments come from
// the environment: STUDIO_URL (a running cks-studio), MCP_URL (our server's base URL), CHROMIUM
// (the browser binary), SCREENSHOTS (a folder, optional).
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'

import { call, open, studio } from './harness.mjs'

const object = (id, type, name, structure = {}) => ({ identity: { id, type, name }, structure })
const relation = (id, from, to, type) => object(id, 'Relation', type, { participants: [from, to], relation_type: type })

// Three versions: the session as created; a commit that changes, removes and adds objects and
// relations; a commit that only renames.
const created = await call('validate_knowledge', {
  json_data: JSON.stringify({
    objects: [
      object('alpha', 'Concept', 'Alpha', { status: 'draft', year: 1840 }),
      object('beta', 'Concept', 'Beta'),
      object('gamma', 'Claim', 'Gamma', { text: 'to be dropped' }),
      relation('alpha-uses-beta', 'alpha', 'beta', 'uses'),
      relation('gamma-about-beta', 'gamma', 'beta', 'about'),
    ],
  }),
})
assert.ok(created.session_id && created.valid, JSON.stringify(created))
const session = created.session_id
await sleep(20)
await call('evolve_knowledge', {
  session_id: session,
  operations: [
    { type: 'update_object', object_id: 'alpha', structure_patch: { status: 'final' } },
    { type: 'remove_object', object_id: 'gamma' },
    { type: 'add_object', identity: { id: 'delta', type: 'Definition', name: 'Delta' }, structure: { text: 'new here', rank: 2 } },
    { type: 'add_relation', identity: { id: 'beta-cites-delta', type: 'Relation', name: 'cites' }, participants: ['beta', 'delta'], relation_type: 'cites' },
  ],
})
await sleep(20)
await call('evolve_knowledge', { session_id: session, operations: [{ type: 'rename_object', object_id: 'beta', new_name: 'Beta renamed' }] })

const { versions } = await call('list_versions', { session_id: session })
assert.equal(versions.length, 3, JSON.stringify(versions))
const newestFirst = [...versions].sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at))
const [latest, previous, first] = newestFirst

const { page, check, finish } = await open('diff', session)

const picker = page.locator('button[aria-haspopup="listbox"]')
const label = (v, i) => page.evaluate(([v, i]) =>
  `${i === 0 ? '(latest) ' : ''}${v.version_id.slice(0, 10)}${v.version_id.length > 10 ? '…' : ''} — ${new Date(v.created_at).toLocaleString()}`, [v, i])
const summary = () => page.locator('div.max-w-3xl > p.text-sm')
const noChanges = () => page.locator('div.max-w-3xl > div.text-sm', { hasText: /^No changes detected\.$/ })
const badges = async () => (await page.locator('header span.border.rounded').allInnerTexts()).map((t) => t.trim())
const section = (title) => page.locator('div.space-y-2').filter({ has: page.getByRole('heading', { name: title, exact: true }) })
const rows = async (title) => (await section(title).locator(':scope > div.space-y-1\\.5 > div').allInnerTexts()).map((t) => t.trim())

/** The page's rows for a diff, as explain_diff's entries say they should read. */
function rowsOf(entries, kind) {
  const value = (v) => v === undefined || v === null ? '—' : typeof v === 'string' ? v : JSON.stringify(v)
  return entries.map((e) => {
    if (kind === 'added') {
      const fields = Object.entries(e.structure ?? {}).map(([k, v]) => `${k}: ${value(v)}`)
      return [`+ ${e.name} (${e.type})`, ...fields].join('\n')
    }
    if (kind === 'removed') return `− ${e.name} (${e.type})`
    const changes = Object.entries(e.changes ?? {}).map(([field, { from, to }]) => `${field}\n${value(from)}\n${value(to)}`)
    return [`~ ${e.name} (${e.type})`, ...changes].join('\n')
  })
}

/**
 * Checks the page against explain_diff of `version` (its badges, its object, relation and rename
 * rows, its summary), and explain_diff against compare_versions of the same two versions.
 */
async function expectDiff(version) {
  const diff = await call('explain_diff', { session_id: session, target_version_id: version.version_id })
  assert.ok(diff.details, JSON.stringify(diff))
  const d = diff.details
  const count = (k) => d[k]?.length ?? 0
  const wantedBadges = [
    ['+obj', count('added_objects')], ['-obj', count('removed_objects')], ['~obj', count('modified_objects')],
    ['+rel', count('added_relations')], ['-rel', count('removed_relations')], ['~rel', count('modified_relations')],
  ].filter(([, n]) => n > 0).map(([k, n]) => `${k}: ${n}`)
  await summary().filter({ hasText: diff.summary }).waitFor()
  assert.equal((await summary().innerText()).trim(), diff.summary)
  assert.deepEqual(await badges(), wantedBadges)
  const sectionRows = (added, removed, modified) =>
    [...rowsOf(d[added] ?? [], 'added'), ...rowsOf(d[removed] ?? [], 'removed'), ...rowsOf(d[modified] ?? [], 'modified')]
  assert.deepEqual(await rows('Objects'), sectionRows('added_objects', 'removed_objects', 'modified_objects'))
  assert.deepEqual(await rows('Relations'), sectionRows('added_relations', 'removed_relations', 'modified_relations'))
  assert.deepEqual(await rows('Renamed'), (d.renamed_objects ?? []).map((r) => `${r.id} → ${r.new_name}`))
  const total = Object.values(d).reduce((n, entries) => n + (Array.isArray(entries) ? entries.length : 0), 0)
  assert.equal(await noChanges().count(), total === 0 ? 1 : 0)

  // compare_versions, between the same two versions, reports the same changes as operations
  // (a changed object as its removal and addition).
  const compared = await call('compare_versions', { session_id: session, target_version_id: version.version_id })
  assert.equal(compared.base_version_id, version.version_id)
  const head = (await call('list_versions', { session_id: session })).versions
    .reduce((a, b) => (Date.parse(b.created_at) > Date.parse(a.created_at) ? b : a))
  assert.equal(compared.current_version_id, head.version_id)
  const ids = (type) => new Set(compared.operations.filter((o) => o.type === type).map((o) => o.identity?.id ?? o.object_id ?? o.relation_id))
  const [addedO, removedO, addedR, removedR] = [ids('add_object'), ids('remove_object'), ids('add_relation'), ids('remove_relation')]
  const of = (entries) => (entries ?? []).map((e) => e.id).sort()
  const only = (a, b) => [...a].filter((id) => !b.has(id)).sort()
  const both = (a, b) => [...a].filter((id) => b.has(id)).sort()
  assert.deepEqual(of(d.added_objects), only(addedO, removedO), 'added objects')
  assert.deepEqual(of(d.removed_objects), only(removedO, addedO), 'removed objects')
  // Changed: in explain_diff, a structure or type change (modified) or a new name (renamed).
  const changed = [...new Set([...of(d.modified_objects), ...of(d.renamed_objects)])].sort()
  assert.deepEqual(changed, both(addedO, removedO), 'changed objects')
  assert.deepEqual(of(d.added_relations), only(addedR, removedR), 'added relations')
  assert.deepEqual(of(d.removed_relations), only(removedR, addedR), 'removed relations')
  assert.equal(compared.summary.renamed_objects, count('renamed_objects'))
  return d
}

await check('the version picker lists the session\'s versions, newest first, and compares the previous one by default', async () => {
  await page.goto(`${studio}/diff`)
  await assert.doesNotReject(picker.filter({ hasText: await label(previous, 1) }).waitFor())
  await picker.click()
  const options = await page.getByRole('option').allInnerTexts()
  assert.deepEqual(options, await Promise.all(newestFirst.map((v, i) => label(v, i))))
  await page.keyboard.press('Escape')
})

await check('against the previous version: only the rename, as explain_diff and compare_versions report it', async () => {
  const d = await expectDiff(previous)
  assert.deepEqual(d.renamed_objects.map((r) => [r.id, r.new_name]), [['beta', 'Beta renamed']])
  assert.deepEqual(await badges(), [])
})

await check('against the first version: the added, removed and changed objects and relations', async () => {
  await picker.click()
  await page.getByRole('option', { name: await label(first, 2) }).click()
  await assert.doesNotReject(picker.filter({ hasText: await label(first, 2) }).waitFor())
  const d = await expectDiff(first)
  assert.deepEqual(d.added_objects.map((e) => e.id), ['delta'])
  assert.deepEqual(d.removed_objects.map((e) => e.id), ['gamma'])
  assert.deepEqual(d.modified_objects.map((e) => [e.id, e.changes]), [['alpha', { status: { from: 'draft', to: 'final' } }]])
  assert.deepEqual(d.added_relations.map((e) => e.id), ['beta-cites-delta'])
  assert.deepEqual(d.removed_relations.map((e) => e.id), ['gamma-about-beta'])
  assert.deepEqual(await badges(), ['+obj: 1', '-obj: 1', '~obj: 1', '+rel: 1', '-rel: 1'])
})

await check('against the latest version: no changes', async () => {
  await picker.click()
  await page.getByRole('option', { name: await label(latest, 0) }).click()
  await expectDiff(latest)
  await assert.doesNotReject(noChanges().waitFor())
})

await check('a commit made since is in the picker once the page is opened again', async () => {
  await call('evolve_knowledge', { session_id: session, operations: [{ type: 'remove_relation', relation_id: 'alpha-uses-beta' }] })
  const now = (await call('list_versions', { session_id: session })).versions
    .sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at))
  assert.equal(now.length, 4)
  await page.reload()
  // The default is the version before the newest: the latest above.
  await assert.doesNotReject(picker.filter({ hasText: await label(now[1], 1) }).waitFor())
  assert.equal(now[1].version_id, latest.version_id)
  const d = await expectDiff(now[1])
  assert.deepEqual(d.removed_relations.map((e) => e.id), ['alpha-uses-beta'])
})

await finish()
