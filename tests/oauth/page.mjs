// The chat page signs in to cks-mcp through oidc-provider, in Debian's Chromium: authorization code
// with PKCE, as two users. A machine client (`writer`) makes three sessions and shares one with
// alice and one with her group; alice's page lists those two and not the third, bob's none of
// them. A wrong password stays at the issuer; a forged answer is refused; the sign-in lasts for
// the tab; no Content-Security-Policy violation.
// Usage: node page.mjs <path to cks-mcp>   (CHROMIUM: the browser; SCREENSHOTS: a folder, optional)
import assert from 'node:assert/strict'

import { browser, check, open, summary, until } from '../page/harness.mjs'
import { caller, clientToken, result, setUp } from './cks.mjs'
import { USERS } from './provider.mjs'

const { issuer, resource, base, cks, stop } = await setUp(process.argv[2], { CKS_MCP_AUTH_PAGE_CLIENT_ID: 'chat-page' })
const instance = await browser()

try {
  // The writer's sessions: one shared with alice, one with her group, one with no one.
  const { tool } = caller(base)
  const writer = await clientToken(issuer, resource, 'writer', 'writer-secret-for-tests-only', 'cks:read cks:write')
  async function session(name) {
    const graph = JSON.stringify({ objects: [{ identity: { id: name, type: 'Note', name } }] })
    const created = await tool(writer, 'validate_knowledge', { json_data: graph })
    assert.equal(created.status, 200, created.text)
    return result(created).session_id
  }
  const forAlice = await session('for-alice')
  const forCurators = await session('for-curators')
  const unshared = await session('unshared')
  assert.deepEqual(result(await tool(writer, 'share_session', { session_id: forAlice, principals: ['alice'] })).principals, ['alice'])
  assert.deepEqual(result(await tool(writer, 'share_session', { session_id: forCurators, groups: ['curators'] })).groups, ['curators'])

  const listed = (page) => page.locator('#session option').evaluateAll((options) => options.map((o) => o.value).filter(Boolean))

  /** Signs `user` in from the page's dialog; `password` may be wrong. */
  async function signIn(page, user, password) {
    await page.locator('#sign-in-go').click()
    await page.waitForURL((url) => url.href.startsWith(`${issuer}/interaction/`))
    await page.locator('input[name=login]').fill(user)
    await page.locator('input[name=password]').fill(password)
    await page.locator('button[type=submit]').click()
  }

  const alice = await open(instance)
  await check(alice.page, 'The page asks to sign in, not for a static token', async () => {
    await alice.page.goto(`${base}/`)
    await until('the sign-in dialog', () => alice.page.locator('#sign-in-dialog[open]').count())
    assert.equal(await alice.page.locator('#token-dialog[open]').count(), 0)
  })

  await check(alice.page, 'A wrong password stays at the issuer', async () => {
    await signIn(alice.page, 'alice', 'not-her-password')
    await until('the issuer refusing', async () => /wrong password/.test(await alice.page.locator('#problem').textContent()))
    assert.ok(alice.page.url().startsWith(`${issuer}/interaction/`), alice.page.url())
  })

  await check(alice.page, 'Alice signs in and sees what was shared with her and her group', async () => {
    await alice.page.locator('input[name=login]').fill('alice')
    await alice.page.locator('input[name=password]').fill(USERS.alice.password)
    await alice.page.locator('button[type=submit]').click()
    await alice.page.waitForURL(`${base}/`)
    const sessions = await until('alice\'s sessions', async () => {
      const values = await listed(alice.page)
      return values.length >= 2 && values
    })
    assert.deepEqual(new Set(sessions), new Set([forAlice, forCurators]))
    assert.ok(!alice.page.url().includes('code='), 'the code left the address bar')
    const stored = await alice.page.evaluate(() => sessionStorage.getItem('cks-page:token'))
    assert.equal(stored.split('.').length, 3, 'a JWT access token, kept for the tab')
    assert.ok(!cks.log.includes(stored), 'no token in the log')
  })

  await check(alice.page, 'The sign-in lasts for the tab, and the shared graph opens', async () => {
    await alice.page.reload()
    await until('the sessions again', async () => (await listed(alice.page)).length === 2)
    assert.equal(await alice.page.locator('#sign-in-dialog[open]').count(), 0)
    await alice.page.locator('#session').selectOption(forCurators)
    await until('the graph drawn', async () => /1 object/.test(await alice.page.locator('#graph-info').textContent()))
  })

  const bob = await open(instance)
  await check(bob.page, 'Bob signs in and sees none of them', async () => {
    await bob.page.goto(`${base}/`)
    await until('the sign-in dialog', () => bob.page.locator('#sign-in-dialog[open]').count())
    await signIn(bob.page, 'bob', USERS.bob.password)
    await bob.page.waitForURL(`${base}/`)
    await until('the empty list', async () => /^0 sessions/.test(await bob.page.locator('#status').textContent()))
    assert.deepEqual(await listed(bob.page), [])
  })

  const forger = await open(instance)
  await check(forger.page, 'An answer this tab did not ask for is refused', async () => {
    await forger.page.goto(`${base}/?code=forged&state=forged`)
    await until('the refusal', async () => /does not belong/.test(await forger.page.locator('#sign-in-error').textContent()))
    assert.equal(await forger.page.evaluate(() => sessionStorage.getItem('cks-page:token')), null)
    assert.ok(!forger.page.url().includes('code='), 'the forged code left the address bar')
  })

  for (const { problems } of [alice, bob, forger]) assert.deepEqual(problems, [])
  summary()
  console.log('oauth page: alice and bob signed in with authorization code and PKCE; each sees only what is theirs')
} finally {
  await instance.close()
  stop()
}
