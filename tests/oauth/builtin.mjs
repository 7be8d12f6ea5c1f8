// MCP hosts sign in to cks-mcp's own authorization server (CKS_MCP_AUTH=builtin) with the official
// MCP TypeScript SDK's OAuth client, as host.mjs does against oidc-provider: the SDK starts from
// cks-mcp's 401, reads its protected resource metadata and its authorization server metadata,
// registers itself (or names its metadata document), and sends the person to cks-mcp's sign-in
// page; Chromium signs them in there as a local user (`cks-mcp users add`) and comes back to the
// host's loopback callback with a code; the SDK trades it (PKCE S256, `resource`) and calls tools.
//
// 1. Alice's host registers itself (Dynamic Client Registration, RFC 7591) and signs her in; her
//    access token is one cks-mcp signed for itself. She makes a session and shares it with bob.
// 2. Bob's host is known by the URL of its metadata document (Client ID Metadata Documents), served
//    over https from loopback (a certificate of a test authority made here, which cks-mcp is told
//    to trust): it does not register; cks-mcp fetches the document. Bob reads alice's shared
//    session, and not her other one.
// 3. The sign-in page: a wrong password shows the form again; "deny" sends the host an error.
// 4. Alice's access token expires: cks-mcp answers 401, the SDK refreshes (the refresh token
//    rotates) and the call goes through without a new sign-in. The old refresh token, used again,
//    is refused and revokes the whole family.
// 5. Carol's host sends her to cks-mcp, which sends her on to an upstream OpenID Connect issuer
//    (oidc-provider, CKS_MCP_AUTH_UPSTREAM_ISSUER); she signs in there, comes back, allows the host,
//    and calls tools as the principal she is at that issuer.
// Usage: node builtin.mjs <path to cks-mcp>   (CHROMIUM: the browser; SCREENSHOTS: a folder, optional)
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { createHash, createPublicKey, randomBytes, verify } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { createServer as createSecureServer } from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

import { freePort } from '../interop/ts/net.mjs'
import { browser, check, open, summary } from '../page/harness.mjs'
import { call, claims, connect, graph, header, hostProvider, recording, refusedUntilSignedIn } from './sdk.mjs'
import { start as startProvider, UPSTREAM_CLIENT, USERS as UPSTREAM_USERS } from './provider.mjs'

// Short-lived access tokens, so that the check sees one expire; built-in tokens get no leeway.
const ACCESS_TOKEN_TTL = 2
// The scope cks-mcp's 401 names: a person's everyday use, never cks:admin.
const SCOPE = 'cks:read cks:write'
// The local users, made with `cks-mcp users add` before the server starts.
const USERS = {
  alice: { password: 'alice-password-for-tests-only', groups: ['team-a'] },
  bob: { password: 'bob-password-for-tests-only', groups: [] },
}
const WRONG_PASSWORD = 'not-alices-password-for-tests-only'

/**
 * A certificate authority and a certificate for 127.0.0.1 it signed, made with openssl in a new
 * folder: `{folder, ca, key, cert}` (paths of PEM files).
 */
function certificates() {
  const folder = mkdtempSync(join(tmpdir(), 'cks-builtin-tls-'))
  const at = (name) => join(folder, name)
  const openssl = (...args) => {
    const done = spawnSync('openssl', args, { encoding: 'utf8' })
    assert.equal(done.status, 0, `openssl ${args.join(' ')}:\n${done.stderr}`)
  }
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes']
  openssl('req', '-x509', ...ec, '-keyout', at('ca.key'), '-out', at('ca.pem'), '-days', '1', '-subj', '/CN=cks-mcp test authority',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign')
  openssl('req', ...ec, '-keyout', at('host.key'), '-out', at('host.csr'), '-subj', '/CN=127.0.0.1')
  writeFileSync(at('host.ext'), 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n')
  openssl('x509', '-req', '-in', at('host.csr'), '-CA', at('ca.pem'), '-CAkey', at('ca.key'), '-CAcreateserial',
    '-out', at('host.pem'), '-days', '1', '-extfile', at('host.ext'))
  return { folder, ca: at('ca.pem'), key: at('host.key'), cert: at('host.pem') }
}
const tls = certificates()

/**
 * cks-mcp's environment: its own authorization server, a SQLite store that the users command
 * shares, and a fetcher allowed to reach loopback, where bob's host serves its metadata document
 * with a certificate of the test authority, which it trusts (SSL_CERT_FILE).
 */
function environment(base, data, upstream) {
  return {
    SSL_CERT_FILE: tls.ca,
    CKS_MCP_AUTH_UPSTREAM_ISSUER: upstream,
    CKS_MCP_AUTH_UPSTREAM_CLIENT_ID: UPSTREAM_CLIENT.id,
    CKS_MCP_AUTH_UPSTREAM_CLIENT_SECRET: UPSTREAM_CLIENT.secret,
    PATH: process.env.PATH,
    HOME: data,
    CKS_MCP_DATA_DIR: data,
    CKS_MCP_DB_PATH: join(data, 'cks.db'),
    CKS_MCP_AUTH: 'builtin',
    CKS_MCP_PUBLIC_URL: base,
    CKS_MCP_AUTH_ACCESS_TOKEN_SECONDS: String(ACCESS_TOKEN_TTL),
    CKS_FETCH_ALLOWED_NETWORKS: '127.0.0.1',
    CKS_SWEEPERS: 'off',
    CKS_EMBEDDING_PROVIDER: 'none',
    CKS_MCP_LOG: 'info',
  }
}

/** `cks-mcp users add` for each of USERS, the password on stdin as an operator types it. */
function addUsers(binary, env) {
  for (const [name, { password, groups }] of Object.entries(USERS)) {
    const args = ['users', 'add', name, '--scope', 'cks:write', ...groups.flatMap((g) => ['--group', g])]
    const done = spawnSync(binary, args, { env, input: `${password}\n`, encoding: 'utf8' })
    assert.equal(done.status, 0, `cks-mcp ${args.join(' ')}:\n${done.stdout}${done.stderr}`)
  }
}

/** `cks-mcp --http` on 127.0.0.1:`port` with its own authorization server; resolves once it answers. */
async function startCks(binary, port, upstream) {
  const base = `http://127.0.0.1:${port}`
  const data = mkdtempSync(join(tmpdir(), 'cks-builtin-'))
  const env = environment(base, data, upstream)
  const server = { base, data, log: '' }
  let child
  server.stop = () => {
    child?.kill()
    rmSync(data, { recursive: true, force: true })
  }
  try {
    addUsers(binary, env)
  } catch (error) {
    server.stop()
    throw error
  }
  child = spawn(binary, ['--http', `127.0.0.1:${port}`, '--no-stdio'], { env, stdio: ['ignore', 'ignore', 'pipe'] })
  child.stderr.on('data', (chunk) => { server.log += chunk })
  for (let i = 0; ; i++) {
    try {
      await fetch(`${base}/health`)
      return server
    } catch {
      if (i > 300 || child.exitCode !== null) {
        server.stop()
        throw new Error(`cks-mcp did not come up:\n${server.log}`)
      }
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }
}

// The hosts' side: a loopback callback (where the sign-in page sends the browser back) and bob's
// host's client metadata document, at an https URL, which cks-mcp fetches.
const hostPort = await freePort()
const hostBase = `http://127.0.0.1:${hostPort}`
const callbackUrl = `${hostBase}/callback`
const documentPort = await freePort()
const documentUrl = `https://127.0.0.1:${documentPort}/oauth/client-metadata.json`
const clientDocument = {
  client_id: documentUrl,
  client_name: 'Bob\'s host',
  redirect_uris: [callbackUrl],
  grant_types: ['authorization_code', 'refresh_token'],
  response_types: ['code'],
  token_endpoint_auth_method: 'none',
}
let answered = null
let callbacks = 0
let documentFetches = 0
const host = createServer((req, res) => {
  const url = new URL(req.url, hostBase)
  if (url.pathname === '/callback') {
    callbacks += 1
    answered?.(Object.fromEntries(url.searchParams))
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
    // An empty icon, so that the browser asks for no /favicon.ico here.
    res.end('<!doctype html><title>Signed in</title><link rel="icon" href="data:,"><p id="done">Signed in. You may close this window.</p>')
  } else {
    res.writeHead(404).end()
  }
})
host.listen(hostPort, '127.0.0.1')
await new Promise((resolve) => host.once('listening', resolve))
const documents = createSecureServer({ key: readFileSync(tls.key), cert: readFileSync(tls.cert) }, (req, res) => {
  if (new URL(req.url, documentUrl).pathname === new URL(documentUrl).pathname) {
    documentFetches += 1
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=60' })
    res.end(JSON.stringify(clientDocument))
  } else {
    res.writeHead(404).end()
  }
})
documents.listen(documentPort, '127.0.0.1')
await new Promise((resolve) => documents.once('listening', resolve))

// The upstream issuer people may sign in at instead, and cks-mcp, its client there.
const cksPort = await freePort()
const upstream = await startProvider(await freePort(), `http://127.0.0.1:${cksPort}/mcp`, {
  upstreamRedirect: `http://127.0.0.1:${cksPort}/oauth/upstream`,
})
const cks = await startCks(process.argv[2], cksPort, upstream.issuer)
const { base } = cks
// cks-mcp is its own issuer; its resource is /mcp.
const issuer = base
const resource = `${base}/mcp`
const metadataUrl = `${base}/.well-known/oauth-protected-resource/mcp`
const instance = await browser()

/** Whether `jwt`'s ES256 signature checks with a key of cks-mcp's JWKS. */
async function signedByIssuer(jwt) {
  const { keys } = await (await fetch(`${base}/oauth/jwks`)).json()
  const { kid } = header(jwt)
  const [head, payload, signature] = jwt.split('.')
  return keys.filter((key) => !kid || key.kid === kid).some((jwk) => verify('sha256', Buffer.from(`${head}.${payload}`),
    { key: createPublicKey({ key: jwk, format: 'jwk' }), dsaEncoding: 'ieee-p1363' }, Buffer.from(signature, 'base64url')))
}

/** The answer to the sign-in form's next POST, while `act` submits it. */
async function submitted(page, act) {
  const [response] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST' && r.url().startsWith(`${base}/oauth/authorize`), { timeout: 10_000 }),
    act(),
  ])
  return response
}

/**
 * Chromium at the authorization URL: the sign-in page names `clientName`; `user` signs in and
 * allows. Resolves to the callback's parameters.
 */
async function signIn(page, url, user, clientName) {
  const callback = new Promise((resolve) => { answered = resolve })
  const shown = await page.goto(url.href)
  assert.equal(shown.status(), 200)
  await page.locator('#sign-in').waitFor()
  assert.match(await page.locator('#client').innerText(), new RegExp(clientName))
  await page.locator('input[name=username]').fill(user)
  await page.locator('input[name=password]').fill(USERS[user].password)
  const response = await submitted(page, () => page.locator('button[name=decision][value=allow]').click())
  assert.equal(response.status(), 303)
  assert.ok(response.headers().location.startsWith(`${callbackUrl}?`), response.headers().location)
  await page.waitForURL((at) => at.href.startsWith(callbackUrl))
  await page.locator('#done').waitFor()
  return callback
}

/** The authorization request the SDK built: code, PKCE S256, the resource, the 401's scope. */
function checkAuthorizationUrl(url, clientId, { state, verifier }) {
  assert.equal(url.origin + url.pathname, `${issuer}/oauth/authorize`)
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

/** An access token cks-mcp signed for `user`, through `clientId`, for its /mcp, with the 401's scope. */
async function checkAccessToken(token, user, clientId) {
  const h = header(token)
  assert.equal(h.alg, 'ES256')
  assert.equal(h.typ, 'at+jwt')
  assert.ok(await signedByIssuer(token), 'signed with a key of /oauth/jwks')
  const c = claims(token)
  assert.equal(c.iss, issuer)
  assert.deepEqual([c.aud].flat(), [resource])
  assert.equal(c.sub, user)
  assert.equal(c.client_id, clientId)
  assert.equal(c.scope, SCOPE)
  assert.deepEqual(c.groups ?? [], USERS[user].groups)
  assert.ok(c.jti, 'a jti')
  assert.ok(c.exp - c.iat === ACCESS_TOKEN_TTL, `lives ${c.exp - c.iat} s`)
  return c
}

/** A refresh at the token endpoint, as a host would send it: the response's status and body. */
async function refresh(token, clientId) {
  const response = await fetch(`${base}/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: token, client_id: clientId, resource }),
  })
  return { status: response.status, body: await response.json() }
}

/** Console errors in a tab, next to the harness's uncaught errors and CSP reports. */
function consoleErrors(tab) {
  tab.page.on('console', (message) => {
    if (message.type() === 'error') tab.problems.push(`console: ${message.text()} (${message.location().url})`)
  })
  return tab
}

// Every code the callback got: none may appear in the log.
const codes = []

try {
  const alice = hostProvider('Alice\'s host', callbackUrl)
  const aliceNet = recording(`${base}/oauth/register`)
  const aliceTab = consoleErrors(await open(instance))
  let aliceFirst
  let aliceClient
  let shared
  let unshared

  await check(aliceTab.page, 'A host without a token is sent to cks-mcp\'s own sign-in, and registers itself there', async () => {
    aliceFirst = await refusedUntilSignedIn(resource, alice, aliceNet.fetch)
    const { url } = aliceFirst
    const [first, ...rest] = aliceNet.seen
    assert.deepEqual([first.method, first.url, first.status], ['POST', resource, 401])
    assert.equal(first.challenge, `Bearer resource_metadata="${metadataUrl}", scope="${SCOPE}"`)
    const at = (method, url) => rest.find((r) => r.method === method && r.url === url)
    assert.equal(at('GET', metadataUrl)?.status, 200)
    assert.equal(at('GET', `${base}/.well-known/oauth-authorization-server`)?.status, 200, 'the authorization server\'s metadata')
    // The documents the SDK read, as the spec names them.
    const resourceMetadata = await (await fetch(metadataUrl)).json()
    assert.equal(resourceMetadata.resource, resource)
    assert.deepEqual(resourceMetadata.authorization_servers, [issuer])
    const server = await (await fetch(`${base}/.well-known/oauth-authorization-server`)).json()
    assert.equal(server.issuer, issuer)
    assert.equal(server.authorization_endpoint, `${issuer}/oauth/authorize`)
    assert.equal(server.token_endpoint, `${issuer}/oauth/token`)
    assert.equal(server.registration_endpoint, `${issuer}/oauth/register`)
    assert.equal(server.jwks_uri, `${issuer}/oauth/jwks`)
    assert.deepEqual(server.response_types_supported, ['code'])
    assert.deepEqual(server.grant_types_supported, ['authorization_code', 'refresh_token'])
    assert.deepEqual(server.code_challenge_methods_supported, ['S256'])
    assert.deepEqual(server.token_endpoint_auth_methods_supported, ['none', 'client_secret_basic', 'client_secret_post'])
    assert.deepEqual(server.scopes_supported, ['cks:read', 'cks:write', 'cks:admin'])
    assert.equal(server.client_id_metadata_document_supported, true)
    assert.equal(server.authorization_response_iss_parameter_supported, true)
    // What cks-mcp registered: a public client coming back to the host's callback.
    assert.equal(at('POST', `${base}/oauth/register`)?.status, 201, 'registered')
    const registered = alice.kept.client
    assert.ok(registered.client_id && !registered.client_secret, JSON.stringify(registered))
    assert.deepEqual(registered.redirect_uris, [callbackUrl])
    const { registration } = at('POST', `${base}/oauth/register`)
    assert.equal(registration.client_id, registered.client_id)
    assert.ok(Number.isInteger(registration.client_id_issued_at), JSON.stringify(registration))
    assert.equal(registration.client_name, 'Alice\'s host')
    assert.equal(registration.token_endpoint_auth_method, 'none')
    assert.deepEqual([...registration.grant_types].sort(), ['authorization_code', 'refresh_token'])
    assert.deepEqual(registration.response_types, ['code'])
    assert.equal(registration.client_secret, undefined)
    checkAuthorizationUrl(url, registered.client_id, alice.kept)
    assert.equal(alice.kept.tokens, undefined)
  })

  await check(aliceTab.page, 'Alice signs in on cks-mcp\'s page; the host trades the code for tokens cks-mcp signed', async () => {
    const { transport } = aliceFirst
    const answer = await signIn(aliceTab.page, alice.kept.redirects[0], 'alice', 'Alice\'s host')
    assert.equal(answer.state, alice.kept.state)
    assert.equal(answer.iss, issuer)
    assert.ok(answer.code && !answer.error, JSON.stringify(answer))
    codes.push(answer.code)
    const before = aliceNet.seen.length
    await transport.finishAuth(answer.code)
    const exchange = aliceNet.seen.slice(before).find((r) => r.grant === 'authorization_code')
    assert.equal(exchange.url, `${base}/oauth/token`)
    assert.equal(exchange.status, 200)
    assert.equal(exchange.resource, resource)
    const { tokens } = alice.kept
    // At once, while the two-second token lives: cks:admin was not asked for, so an
    // administrative call is refused, naming the scope it needs.
    const refused = await fetch(resource, {
      method: 'POST',
      headers: { authorization: `Bearer ${tokens.access_token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'export_storage', arguments: { output_path: `${cks.data}/backup.json` } } }),
    })
    assert.equal(refused.status, 403)
    assert.equal(refused.headers.get('www-authenticate'), `Bearer error="insufficient_scope", scope="cks:admin", resource_metadata="${metadataUrl}"`)
    assert.equal(tokens.token_type.toLowerCase(), 'bearer')
    assert.equal(tokens.scope, SCOPE)
    assert.equal(tokens.expires_in, ACCESS_TOKEN_TTL)
    assert.ok(tokens.refresh_token, 'a refresh token')
    await checkAccessToken(tokens.access_token, 'alice', alice.kept.client.client_id)
  })

  await check(aliceTab.page, 'Alice\'s host lists tools and makes a session that is hers', async () => {
    // Her two-second token may lapse in here: the SDK then refreshes it on its own.
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
  })

  // Bob's host names its document (the SDK's `clientMetadataUrl`): the SDK uses it as the client
  // id, since cks-mcp's metadata says it takes one.
  const bob = hostProvider('Bob\'s host', callbackUrl, { documentUrl })
  const bobNet = recording(`${base}/oauth/register`)
  const bobTab = consoleErrors(await open(instance))
  await check(bobTab.page, 'Bob\'s host, known by its metadata document\'s URL, signs him in without registering', async () => {
    const { url, transport } = await refusedUntilSignedIn(resource, bob, bobNet.fetch)
    assert.ok(!bobNet.seen.some((r) => r.url === `${base}/oauth/register`), 'no registration')
    assert.equal(bob.kept.client.client_id, documentUrl)
    checkAuthorizationUrl(url, documentUrl, bob.kept)
    const answer = await signIn(bobTab.page, url, 'bob', clientDocument.client_name)
    assert.ok(documentFetches >= 1, 'cks-mcp fetched the document')
    assert.equal(answer.state, bob.kept.state)
    assert.equal(answer.iss, issuer)
    assert.ok(answer.code && !answer.error, JSON.stringify(answer))
    codes.push(answer.code)
    await transport.finishAuth(answer.code)
    assert.ok(bob.kept.tokens.refresh_token, 'a refresh token')
    await checkAccessToken(bob.kept.tokens.access_token, 'bob', documentUrl)
  })

  await check(bobTab.page, 'Bob reads the session alice shared with him, and not her other one', async () => {
    const { client } = await connect(resource, bob, bobNet.fetch)
    const { versions } = await call(client, 'list_versions', { session_id: shared })
    assert.equal(versions.length, 1)
    const hidden = await client.callTool({ name: 'list_versions', arguments: { session_id: unshared } })
    assert.equal(JSON.parse(hidden.content[0].text).error, 'session_not_found', JSON.stringify(hidden))
    await client.close()
  })

  await check(aliceTab.page, 'A wrong password shows the form again; "deny" sends the host access_denied', async () => {
    const clientId = alice.kept.client.client_id
    const state = randomBytes(16).toString('base64url')
    const request = (changes = {}) => new URL(`${base}/oauth/authorize?${new URLSearchParams({
      response_type: 'code', client_id: clientId, redirect_uri: callbackUrl,
      code_challenge: createHash('sha256').update(randomBytes(32).toString('base64url')).digest('base64url'),
      code_challenge_method: 'S256', state, scope: SCOPE, resource, ...changes,
    })}`)
    // A redirect_uri the client did not register, or an unknown client, gets a page, never a redirect.
    for (const changes of [{ redirect_uri: `${hostBase}/elsewhere` }, { client_id: 'no-such-client' }]) {
      const response = await fetch(request(changes), { redirect: 'manual' })
      assert.equal(response.status, 400, JSON.stringify(changes))
      assert.match(response.headers.get('content-type'), /^text\/html/)
    }
    const page = aliceTab.page
    const callbacksBefore = callbacks
    await page.goto(request().href)
    await page.locator('input[name=username]').fill('alice')
    await page.locator('input[name=password]').fill(WRONG_PASSWORD)
    const wrong = await submitted(page, () => page.locator('button[name=decision][value=allow]').click())
    assert.equal(wrong.status(), 200)
    await page.locator('#problem').waitFor()
    assert.ok((await page.locator('#problem').innerText()).trim(), 'the problem is said')
    await page.locator('#sign-in').waitFor()
    assert.ok(page.url().startsWith(`${base}/oauth/authorize`), page.url())
    assert.equal(callbacks, callbacksBefore, 'no redirect to the host')
    // Saying no needs no password.
    const callback = new Promise((resolve) => { answered = resolve })
    const denied = await submitted(page, () => page.locator('button[name=decision][value=deny]').click())
    assert.equal(denied.status(), 303)
    await page.waitForURL((at) => at.href.startsWith(callbackUrl))
    const answer = await callback
    assert.equal(answer.error, 'access_denied', JSON.stringify(answer))
    assert.equal(answer.state, state)
    assert.equal(answer.iss, issuer)
    assert.equal(answer.code, undefined)
  })

  await check(aliceTab.page, 'Alice\'s access token expires: the host refreshes it and calls again, without a new sign-in', async () => {
    const expired = alice.kept.tokens.access_token
    const expiring = claims(expired)
    const oldRefresh = alice.kept.tokens.refresh_token
    // No leeway: refused from `exp` on; a second more for the clocks' rounding.
    const wait = (expiring.exp + 1) * 1000 - Date.now()
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
    const before = aliceNet.seen.length
    const redirects = alice.kept.redirects.length
    const { versions } = await call(aliceClient, 'list_versions', { session_id: shared })
    assert.equal(versions.length, 1)
    const after = aliceNet.seen.slice(before)
    const posts = after.filter((r) => (r.method === 'POST' && r.url === resource) || r.grant)
    assert.deepEqual(posts.map((r) => [r.method, r.url === resource ? 'mcp' : r.url, r.status, r.grant]), [
      ['POST', 'mcp', 401, undefined],
      ['POST', `${base}/oauth/token`, 200, 'refresh_token'],
      ['POST', 'mcp', 200, undefined],
    ])
    assert.match(posts[0].challenge, new RegExp(`^Bearer error="invalid_token"(, error_description="[^"]*")?, resource_metadata="${metadataUrl}", scope="${SCOPE}"$`))
    assert.equal(after.find((r) => r.grant === 'refresh_token').resource, resource)
    assert.equal(alice.kept.redirects.length, redirects, 'no new sign-in')
    const { tokens } = alice.kept
    assert.notEqual(tokens.access_token, expired)
    assert.ok(tokens.refresh_token && tokens.refresh_token !== oldRefresh, 'the refresh token rotated')
    const renewed = await checkAccessToken(tokens.access_token, 'alice', alice.kept.client.client_id)
    assert.ok(renewed.exp > expiring.exp)
    // The old refresh token, used again, is refused, and its whole family with it.
    const reused = await refresh(oldRefresh, alice.kept.client.client_id)
    assert.deepEqual([reused.status, reused.body.error], [400, 'invalid_grant'], JSON.stringify(reused))
    const revoked = await refresh(tokens.refresh_token, alice.kept.client.client_id)
    assert.deepEqual([revoked.status, revoked.body.error], [400, 'invalid_grant'], JSON.stringify(revoked))
    await aliceClient.close()
  })

  const carol = hostProvider('Carol\'s host', callbackUrl)
  const carolTab = consoleErrors(await open(instance))
  await check(carolTab.page, 'Carol signs in at the upstream issuer, allows her host on cks-mcp\'s page, and calls tools as herself there', async () => {
    const { url, transport } = await refusedUntilSignedIn(resource, carol, recording(`${base}/oauth/register`).fetch)
    const page = carolTab.page
    const callback = new Promise((resolve) => { answered = resolve })
    await page.goto(url.href)
    await page.locator('#upstream').click()
    await page.waitForURL((at) => at.href.startsWith(`${upstream.issuer}/interaction/`))
    // Carol is bob at the upstream issuer: another principal than cks-mcp's local bob.
    await page.locator('input[name=login]').fill('bob')
    await page.locator('input[name=password]').fill(UPSTREAM_USERS.bob.password)
    await page.locator('button[type=submit]').click()
    await page.waitForURL((at) => at.href.startsWith(`${base}/oauth/upstream`))
    await page.locator('#consent').waitFor()
    assert.equal(await page.locator('#person').innerText(), 'bob')
    assert.match(await page.locator('#client').innerText(), /Carol's host/)
    assert.equal(await page.locator('input[name=password]').count(), 0, 'no password asked again')
    await page.locator('button[name=decision][value=allow]').click()
    await page.waitForURL((at) => at.href.startsWith(callbackUrl))
    const answer = await callback
    assert.equal(answer.state, carol.kept.state)
    assert.equal(answer.iss, issuer)
    codes.push(answer.code)
    await transport.finishAuth(answer.code)
    const c = claims(carol.kept.tokens.access_token)
    assert.deepEqual([c.iss, c.sub, c.cks_identity_issuer, c.scope], [issuer, 'bob', upstream.issuer, SCOPE])
    assert.ok(await signedByIssuer(carol.kept.tokens.access_token))
    const { client } = await connect(resource, carol, recording(`${base}/oauth/register`).fetch)
    const mine = (await call(client, 'validate_knowledge', { json_data: graph('carol') })).session_id
    const { versions } = await call(client, 'list_versions', { session_id: mine })
    assert.deepEqual(versions[0].metadata.principal, { issuer: upstream.issuer, subject: 'bob' })
    // Alice shared her session with the subject bob of her own issuer, not this one.
    const hidden = await client.callTool({ name: 'list_versions', arguments: { session_id: unshared } })
    assert.equal(JSON.parse(hidden.content[0].text).error, 'session_not_found')
    await client.close()
  })

  await check(aliceTab.page, 'No token, code or password in cks-mcp\'s log; no problems in the tabs', async () => {
    const secrets = [...alice.kept.saved, ...bob.kept.saved, ...carol.kept.saved].flatMap((t) => [t.access_token, t.refresh_token])
    for (const secret of [...secrets, ...codes, ...Object.values(USERS).map((u) => u.password), WRONG_PASSWORD]) {
      assert.ok(secret && !cks.log.includes(secret), 'a secret in the log')
    }
    assert.ok(!cks.log.includes(UPSTREAM_CLIENT.secret), 'the upstream client secret in the log')
    for (const { problems } of [aliceTab, bobTab, carolTab]) assert.deepEqual(problems, [])
  })

  summary()
  console.log('oauth builtin: the MCP SDK\'s OAuth client registered (DCR and a metadata document) at cks-mcp\'s own authorization server, signed alice and bob in (and carol through an upstream issuer), called tools as each, and refreshed')
} finally {
  await instance.close()
  host.close()
  documents.close()
  cks.stop()
  rmSync(tls.folder, { recursive: true, force: true })
  upstream.server.close()
}
