// An authorization server for cks-mcp: oidc-provider (OpenID Certified) with two machine clients
// (client credentials), two users in groups who sign in to the chat page (authorization code with
// PKCE, through the login form below), and the three scopes, issuing JWT access tokens (RFC 9068)
// for one resource, cks-mcp's /mcp (RFC 8707 resource indicators). docs/authorization.md walks
// through it. With `hosts`, MCP hosts register themselves too, as they do with a real issuer:
// Dynamic Client Registration (RFC 7591) and Client ID Metadata Documents; they get refresh
// tokens, rotated at each use.
import { generateKeyPairSync, timingSafeEqual } from 'node:crypto'
import { createServer } from 'node:http'
import Provider, { errors } from 'oidc-provider'

// The people who sign in, with their groups (the access token's `groups` claim).
export const USERS = {
  alice: { password: 'alice-password-for-tests-only', groups: ['curators'] },
  bob: { password: 'bob-password-for-tests-only', groups: ['visitors'] },
}

// The clients registered here; any other registered itself (a host).
const FIXED = new Set(['reader', 'writer', 'chat-page', 'cks-builtin'])

// The client cks-mcp's built-in issuer is here when people sign in through this one upstream
// (CKS_MCP_AUTH_UPSTREAM_*): a confidential client asking for `openid` only.
export const UPSTREAM_CLIENT = { id: 'cks-builtin', secret: 'cks-builtin-secret-for-tests-only' }

// `resource`: cks-mcp's canonical URL, CKS_MCP_PUBLIC_URL + '/mcp' (its default audience).
// `hosts`, optional: `{ accessTokenTTL, fetch, upstreamRedirect }`: open registration and client
// ID metadata documents on; the access tokens of clients that registered themselves live
// `accessTokenTTL` seconds; `fetch` is how the server fetches a client's metadata document;
// `upstreamRedirect`, where UPSTREAM_CLIENT comes back to.
export function configuration(resource, hosts) {
  // The signing key; a real server keeps its keys, and rotates them.
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 })
  const signing = { ...privateKey.export({ format: 'jwk' }), kid: 'interop-1', alg: 'RS256', use: 'sig' }
  return {
    clients: [
      {
        client_id: 'reader',
        client_secret: 'reader-secret-for-tests-only',
        grant_types: ['client_credentials'],
        redirect_uris: [],
        response_types: [],
        scope: 'cks:read',
      },
      {
        client_id: 'writer',
        client_secret: 'writer-secret-for-tests-only',
        grant_types: ['client_credentials'],
        redirect_uris: [],
        response_types: [],
        scope: 'cks:read cks:write',
      },
      {
        // cks-mcp's chat page (CKS_MCP_AUTH_PAGE_CLIENT_ID): a public client, which proves itself
        // with PKCE instead of a secret, coming back to the page at CKS_MCP_PUBLIC_URL + '/'.
        client_id: 'chat-page',
        token_endpoint_auth_method: 'none',
        application_type: 'web',
        grant_types: ['authorization_code'],
        response_types: ['code'],
        redirect_uris: [new URL('/', resource).href],
        scope: 'openid cks:read cks:write',
      },
      ...(hosts?.upstreamRedirect ? [{
        client_id: UPSTREAM_CLIENT.id,
        client_secret: UPSTREAM_CLIENT.secret,
        grant_types: ['authorization_code'],
        response_types: ['code'],
        redirect_uris: [hosts.upstreamRedirect],
        scope: 'openid',
      }] : []),
    ],
    scopes: ['openid', 'cks:read', 'cks:write', 'cks:admin'],
    claims: { openid: ['sub'], groups: ['groups'] },
    findAccount: (ctx, id) => USERS[id] && { accountId: id, claims: () => ({ sub: id, groups: USERS[id].groups }) },
    // A user's access tokens carry their groups, for cks-mcp's sharing and gallery teams.
    extraTokenClaims: (ctx, token) => (token.accountId && USERS[token.accountId] ? { groups: USERS[token.accountId].groups } : undefined),
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    ttl: {
      ClientCredentials: 600,
      // What the resource server's entry below says.
      AccessToken: (ctx, token) => token.resourceServer?.accessTokenTTL || 600,
      IdToken: 600,
      Interaction: 600,
      Session: 3600,
      Grant: 3600,
      RefreshToken: 3600,
    },
    // A client allowed the refresh_token grant gets a refresh token without asking for
    // offline_access (hosts do not ask for it), and a new one each time it uses it: a refresh
    // token used twice revokes the grant.
    issueRefreshToken: (ctx, client) => client.grantTypeAllowed('refresh_token'),
    rotateRefreshToken: true,
    ...(hosts && { fetch: hosts.fetch }),
    // The page trades its code at the token endpoint from its own origin: allowed for the origins
    // a client comes back to, and only those.
    clientBasedCORS: (ctx, origin, client) => client.redirectUris.some((uri) => new URL(uri).origin === origin),
    jwks: { keys: [signing] },
    pkce: { required: () => true },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      // Open registration: no initial access token.
      registration: { enabled: Boolean(hosts) },
      clientIdMetadataDocument: { enabled: Boolean(hosts), ...(hosts && { ack: 'draft-02' }) },
      resourceIndicators: {
        enabled: true,
        // A token request that names no resource is for cks-mcp; the built-in issuer's (an
        // OpenID Connect sign-in) is for no resource.
        defaultResource: (ctx, client) => (client?.clientId === UPSTREAM_CLIENT.id ? undefined : resource),
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, indicator, client) => {
          if (indicator !== resource) throw new errors.InvalidTarget()
          return {
            audience: resource,
            scope: 'cks:read cks:write cks:admin',
            accessTokenFormat: 'jwt',
            accessTokenTTL: hosts && !FIXED.has(client.clientId) ? hosts.accessTokenTTL : 600,
            jwt: { sign: { alg: 'RS256' } },
          }
        },
      },
    },
  }
}

// Serves the authorization server at http://127.0.0.1:<port> (its issuer URL), with its own login
// form at /interaction/<uid>.
export async function start(port, resource, hosts) {
  const issuer = `http://127.0.0.1:${port}`
  const provider = new Provider(issuer, configuration(resource, hosts))
  const callback = provider.callback()
  const server = createServer((req, res) => {
    if (req.url.startsWith('/interaction/')) {
      interaction(provider, req, res).catch((error) => {
        res.writeHead(500, { 'content-type': 'text/plain' })
        res.end(String(error.message || error))
      })
    } else {
      callback(req, res)
    }
  })
  server.listen(port, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  return { issuer, server, provider }
}

// The sign-in: a user name and password checked against USERS; consent is implied (the chat page
// is this deployment's own client), so every scope asked for within the client's is granted.
async function interaction(provider, req, res) {
  const details = await provider.interactionDetails(req, res)
  const { prompt, uid, params, session, grantId } = details
  if (prompt.name === 'consent') {
    const grant = grantId
      ? await provider.Grant.find(grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id })
    if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '))
    if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims)
    for (const [indicator, scopes] of Object.entries(prompt.details.missingResourceScopes || {})) {
      grant.addResourceScope(indicator, scopes.join(' '))
    }
    await provider.interactionFinished(req, res, { consent: { grantId: await grant.save() } }, { mergeWithLastSubmission: true })
    return
  }
  let problem = ''
  if (req.method === 'POST') {
    const form = new URLSearchParams(await body(req))
    const user = USERS[form.get('login')]
    if (user && same(form.get('password') || '', user.password)) {
      await provider.interactionFinished(req, res, { login: { accountId: form.get('login') } }, { mergeWithLastSubmission: false })
      return
    }
    problem = 'Unknown user name or wrong password.'
  }
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' })
  res.end(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign in</title><link rel="icon" href="data:,"></head><body>
<h1>Sign in</h1><p id="problem" role="alert">${problem}</p>
<form method="post" action="/interaction/${uid}">
<label>User name <input name="login" autocomplete="username" required></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required></label>
<button type="submit">Sign in</button></form></body></html>`)
}

function body(req) {
  return new Promise((resolve, reject) => {
    let text = ''
    req.setEncoding('utf8')
    req.on('data', (chunk) => { text += chunk })
    req.on('end', () => resolve(text))
    req.on('error', reject)
  })
}

function same(given, expected) {
  const a = Buffer.from(given)
  const b = Buffer.from(expected)
  return a.length === b.length && timingSafeEqual(a, b)
}
