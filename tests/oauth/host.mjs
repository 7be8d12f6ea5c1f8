// MCP hosts sign in to cks-mcp the way Claude, ChatGPT, VS Code and Cursor do: with the official
// MCP TypeScript SDK's OAuth client (its `auth()` behind StreamableHTTPClientTransport's
// `authProvider`). The SDK starts from cks-mcp's 401, reads its protected resource metadata and the
// issuer's metadata, registers itself, and sends the person to the issuer; Chromium signs them in
// there and comes back to the host's loopback callback with a code; the SDK trades it (PKCE S256,
// `resource`) and calls tools as that person.
//
// 1. Alice's host registers itself (Dynamic Client Registration, RFC 7591), makes a session and
//    shares it with bob.
// 2. Bob's host is known by the URL of its metadata document (Client ID Metadata Documents): it
//    does not register; the issuer fetches the document. Bob reads alice's shared session, and not
//    her other one.
// 3. Alice's access token expires: cks-mcp answers 401, the SDK refreshes (the refresh token
//    rotates) and the call goes through without a new sign-in. The old refresh token, used again,
//    is refused and revokes the grant.
// Usage: node host.mjs <path to cks-mcp>   (CHROMIUM: the browser; SCREENSHOTS: a folder, optional)
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { createServer } from 'node:http'

import { freePort } from '../interop/ts/net.mjs'
import { browser, check, open, summary } from '../page/harness.mjs'
import { call, claims, connect, graph, hostProvider, recording, refusedUntilSignedIn } from './sdk.mjs'
import { setUp } from './cks.mjs'
import { USERS } from './provider.mjs'

// The hosts' access tokens live a second; cks-mcp allows 60 seconds of clock skew past `exp`.
const ACCESS_TOKEN_TTL = 1
const LEEWAY = 60
// The scope cks-mcp's 401 names: a person's everyday use, never cks:admin.
const SCOPE = 'cks:read cks:write'

// The hosts' side: a loopback callback (where the issuer sends the browser back) and bob's host's
// client metadata document, which the issuer fetches at an https URL.
const hostPort = await freePort()
const hostBase = `http://127.0.0.1:${hostPort}`
const callbackUrl = `${hostBase}/callback`
const documentUrl = 'https://mcp-host.example/oauth/client-metadata.json'
const clientDocument = {
  client_id: documentUrl,
  client_name: 'A host known by its metadata document',
  redirect_uris: [callbackUrl],
  grant_types: ['authorization_code', 'refresh_token'],
  response_types: ['code'],
  token_endpoint_auth_method: 'none',
}
let answered = null
let documentFetches = 0
const host = createServer((req, res) => {
  const url = new URL(req.url, hostBase)
  if (url.pathname === '/callback') {
    answered?.(Object.fromEntries(url.searchParams))
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
    res.end('<!doctype html><title>Signed in</title><p id="done">Signed in. You may close this window.</p>')
  } else if (url.pathname === new URL(documentUrl).pathname) {
    documentFetches += 1
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=60' })
    res.end(JSON.stringify(clientDocument))
  } else {
    res.writeHead(404).end()
  }
})
host.listen(hostPort, '127.0.0.1')
await new Promise((resolve) => host.once('listening', resolve))

// The issuer fetches a metadata document at its https URL; here that URL is served from loopback.
// Nothing else may be fetched.
async function issuerFetch(url, options) {
  const target = new URL(url)
  assert.equal(target.origin, new URL(documentUrl).origin, `the issuer fetched ${target}`)
  const { dispatcher, ...rest } = options
  return fetch(`${hostBase}${target.pathname}`, rest)
}

const { issuer, resource, base, cks, provider, stop } = await setUp(process.argv[2], {}, {
  accessTokenTTL: ACCESS_TOKEN_TTL,
  fetch: issuerFetch,
})
const instance = await browser()

/** Chromium at the authorization URL: `user` signs in at the issuer; the callback's parameters. */
async function signIn(page, url, user) {
  const callback = new Promise((resolve) => { answered = resolve })
  await page.goto(url.href)
  await page.waitForURL((at) => at.href.startsWith(`${issuer}/interaction/`))
  await page.locator('input[name=login]').fill(user)
  await page.locator('input[name=password]').fill(USERS[user].password)
  await page.locator('button[type=submit]').click()
  await page.waitForURL((at) => at.href.startsWith(callbackUrl))
  await page.locator('#done').waitFor()
  return callback
}

/** The authorization request the SDK built: code, PKCE S256, the resource, the 401's scope. */
function checkAuthorizationUrl(url, clientId, { state, verifier }) {
  assert.equal(url.origin + url.pathname, `${issuer}/auth`)
  const p = url.searchParams
  assert.equal(p.get('response_type'), 'code')
  assert.equal(p.get('client_id'), clientId)
  assert.equal(p.get('redirect_uri'), callbackUrl)
  assert.equal(p.get('code_challenge_method'), 'S256')
  assert.equal(p.get('code_challenge'), createHash('sha256').update(verifier).digest('base64url'))
  assert.equal(p.get('resource'), resource)
  assert.equal(p.get('scope'), SCOPE)
  assert.equal(p.get('state'), state)
}

/** An access token for `user`, through `clientId`, for cks-mcp, with the 401's scope. */
function checkAccessToken(token, user, clientId) {
  const c = claims(token)
  assert.equal(c.iss, issuer)
  assert.deepEqual([c.aud].flat(), [resource])
  assert.equal(c.sub, user)
  assert.equal(c.client_id, clientId)
  assert.equal(c.scope, SCOPE)
  assert.deepEqual(c.groups, USERS[user].groups)
  assert.ok(c.exp - c.iat === ACCESS_TOKEN_TTL, `lives ${c.exp - c.iat} s`)
  return c
}

const metadataUrl = `${base}/.well-known/oauth-protected-resource/mcp`
try {
  const alice = hostProvider('Alice\'s host', callbackUrl)
  const aliceNet = recording(`${issuer}/reg`)
  const aliceTab = await open(instance)
  let aliceFirst
  let aliceClient
  let shared
  let unshared

  await check(aliceTab.page, 'A host without a token is sent to the issuer, and registers itself there', async () => {
    aliceFirst = await refusedUntilSignedIn(resource, alice, aliceNet.fetch)
    const { url } = aliceFirst
    const [first, ...rest] = aliceNet.seen
    assert.deepEqual([first.method, first.url, first.status], ['POST', resource, 401])
    assert.equal(first.challenge, `Bearer resource_metadata="${metadataUrl}", scope="${SCOPE}"`)
    const at = (method, url) => rest.find((r) => r.method === method && r.url === url)
    assert.equal(at('GET', metadataUrl)?.status, 200)
    assert.ok(rest.some((r) => r.url.startsWith(`${issuer}/.well-known/`) && r.status === 200), 'the issuer\'s metadata')
    assert.equal(at('POST', `${issuer}/reg`)?.status, 201, 'registered')
    // What the issuer registered: a public client coming back to the host's callback.
    const registered = alice.kept.client
    assert.ok(registered.client_id && !registered.client_secret, JSON.stringify(registered))
    assert.deepEqual(registered.redirect_uris, [callbackUrl])
    // The client's configuration as the issuer keeps it (RFC 7592).
    const { registration } = at('POST', `${issuer}/reg`)
    assert.equal(registration.client_id, registered.client_id)
    const read = await fetch(registration.registration_client_uri, {
      headers: { authorization: `Bearer ${registration.registration_access_token}` },
    })
    assert.equal(read.status, 200)
    const stored = await read.json()
    assert.deepEqual(stored.redirect_uris, [callbackUrl])
    assert.equal(stored.token_endpoint_auth_method, 'none')
    assert.deepEqual(stored.grant_types.sort(), ['authorization_code', 'refresh_token'])
    assert.equal(stored.scope, SCOPE)
    checkAuthorizationUrl(url, registered.client_id, alice.kept)
    assert.equal(alice.kept.tokens, undefined)
  })

  await check(aliceTab.page, 'Alice signs in at the issuer; the host trades the code for tokens for cks-mcp', async () => {
    const { transport } = aliceFirst
    const answer = await signIn(aliceTab.page, alice.kept.redirects[0], 'alice')
    assert.equal(answer.state, alice.kept.state)
    assert.equal(answer.iss, issuer)
    assert.ok(answer.code && !answer.error, JSON.stringify(answer))
    const before = aliceNet.seen.length
    await transport.finishAuth(answer.code)
    const exchange = aliceNet.seen.slice(before).find((r) => r.grant === 'authorization_code')
    assert.equal(exchange.status, 200)
    assert.equal(exchange.resource, resource)
    const { tokens } = alice.kept
    assert.equal(tokens.token_type.toLowerCase(), 'bearer')
    assert.equal(tokens.scope, SCOPE)
    assert.ok(tokens.refresh_token, 'a refresh token')
    checkAccessToken(tokens.access_token, 'alice', alice.kept.client.client_id)
  })

  await check(aliceTab.page, 'Alice\'s host lists tools and makes a session that is hers', async () => {
    ;({ client: aliceClient } = await connect(resource, alice, aliceNet.fetch))
    const names = (await aliceClient.listTools()).tools.map((t) => t.name)
    for (const name of ['validate_knowledge', 'list_versions', 'find_tools']) assert.ok(names.includes(name), name)
    shared = (await call(aliceClient, 'validate_knowledge', { json_data: graph('for-bob') })).session_id
    unshared = (await call(aliceClient, 'validate_knowledge', { json_data: graph('alice-only') })).session_id
    assert.ok(shared && unshared && shared !== unshared)
    const { versions } = await call(aliceClient, 'list_versions', { session_id: shared })
    assert.equal(versions.length, 1)
    assert.deepEqual(versions[0].metadata.principal, { issuer, subject: 'alice' })
    const sharing = await call(aliceClient, 'share_session', { session_id: shared, principals: ['bob'] })
    assert.deepEqual(sharing.owner, { issuer, subject: 'alice' })
    assert.deepEqual(sharing.principals, ['bob'])
    // cks:admin was not asked for, so an administrative call is refused, naming the scope it needs.
    const refused = await fetch(`${base}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${alice.kept.tokens.access_token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'export_storage', arguments: { output_path: `${cks.data}/backup.json` } } }),
    })
    assert.equal(refused.status, 403)
    assert.equal(refused.headers.get('www-authenticate'), `Bearer error="insufficient_scope", scope="cks:admin", resource_metadata="${metadataUrl}"`)
  })

  const bob = hostProvider('Bob\'s host', callbackUrl, { documentUrl })
  const bobNet = recording(`${issuer}/reg`)
  const bobTab = await open(instance)
  await check(bobTab.page, 'Bob\'s host, known by its metadata document\'s URL, signs him in without registering', async () => {
    const { url, transport } = await refusedUntilSignedIn(resource, bob, bobNet.fetch)
    assert.ok(!bobNet.seen.some((r) => r.url === `${issuer}/reg`), 'no registration')
    assert.equal(bob.kept.client.client_id, documentUrl)
    checkAuthorizationUrl(url, documentUrl, bob.kept)
    const answer = await signIn(bobTab.page, url, 'bob')
    assert.equal(answer.state, bob.kept.state)
    assert.ok(documentFetches >= 1, 'the issuer fetched the document')
    await transport.finishAuth(answer.code)
    assert.ok(bob.kept.tokens.refresh_token, 'a refresh token')
    checkAccessToken(bob.kept.tokens.access_token, 'bob', documentUrl)
  })

  await check(bobTab.page, 'Bob reads the session alice shared with him, and not her other one', async () => {
    const { client } = await connect(resource, bob, bobNet.fetch)
    const { versions } = await call(client, 'list_versions', { session_id: shared })
    assert.equal(versions.length, 1)
    const hidden = await client.callTool({ name: 'list_versions', arguments: { session_id: unshared } })
    assert.equal(JSON.parse(hidden.content[0].text).error, 'session_not_found', JSON.stringify(hidden))
    await client.close()
  })

  // The document at `…?v=2` is the same one, naming the client id without `?v=2`.
  await check(bobTab.page, 'A metadata document naming another client id than its URL is refused', async () => {
    const fetches = documentFetches
    const params = new URLSearchParams({ response_type: 'code', client_id: `${documentUrl}?v=2`, redirect_uri: callbackUrl,
      code_challenge: 'A'.repeat(43), code_challenge_method: 'S256', scope: SCOPE, resource })
    const response = await fetch(`${issuer}/auth?${params}`, { redirect: 'manual' })
    assert.ok(documentFetches > fetches, 'the issuer fetched it')
    assert.equal(response.status, 400)
    const page = await response.text()
    assert.match(page, /invalid_client_metadata/)
    assert.match(page, /client_id metadata document client_id does not match/)
  })

  await check(aliceTab.page, 'Alice\'s access token expires: the host refreshes it and calls again, without a new sign-in', async () => {
    const expired = alice.kept.tokens.access_token
    const expiring = claims(expired)
    const oldRefresh = alice.kept.tokens.refresh_token
    const wait = (expiring.exp + LEEWAY + 1) * 1000 - Date.now()
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
    const before = aliceNet.seen.length
    const redirects = alice.kept.redirects.length
    const { versions } = await call(aliceClient, 'list_versions', { session_id: shared })
    assert.equal(versions.length, 1)
    const after = aliceNet.seen.slice(before)
    const posts = after.filter((r) => (r.method === 'POST' && r.url === resource) || r.grant)
    assert.deepEqual(posts.map((r) => [r.method, r.url === resource ? 'mcp' : r.url, r.status, r.grant]), [
      ['POST', 'mcp', 401, undefined],
      ['POST', `${issuer}/token`, 200, 'refresh_token'],
      ['POST', 'mcp', 200, undefined],
    ])
    assert.match(posts[0].challenge, /^Bearer error="invalid_token", error_description="it has expired", resource_metadata="[^"]+", scope="cks:read cks:write"$/)
    assert.equal(after.find((r) => r.grant === 'refresh_token').resource, resource)
    assert.equal(alice.kept.redirects.length, redirects, 'no new sign-in')
    const { tokens } = alice.kept
    assert.notEqual(tokens.access_token, expired)
    assert.ok(tokens.refresh_token && tokens.refresh_token !== oldRefresh, 'the refresh token rotated')
    const renewed = checkAccessToken(tokens.access_token, 'alice', alice.kept.client.client_id)
    assert.ok(renewed.exp > expiring.exp)
    // The old refresh token, used again, is refused, and the grant behind it is revoked.
    const refresh = (token) => fetch(`${issuer}/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: token, client_id: alice.kept.client.client_id, resource }),
    })
    const reused = await refresh(oldRefresh)
    assert.equal(reused.status, 400)
    assert.equal((await reused.json()).error, 'invalid_grant')
    const revoked = await refresh(tokens.refresh_token)
    assert.equal(revoked.status, 400)
    assert.equal((await revoked.json()).error, 'invalid_grant')
    await aliceClient.close()
  })

  for (const { problems } of [aliceTab, bobTab]) assert.deepEqual(problems, [])
  for (const { tokens } of [alice.kept, bob.kept]) {
    assert.ok(!cks.log.includes(tokens.access_token) && !cks.log.includes(tokens.refresh_token), 'a token in the log')
  }
  summary()
  console.log('oauth host: the MCP SDK\'s OAuth client registered (DCR and a metadata document), signed alice and bob in, called tools as each, and refreshed')
} finally {
  await instance.close()
  host.close()
  stop()
}
