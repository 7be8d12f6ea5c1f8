// What the host checks share: an MCP host as the official TypeScript SDK's OAuth client makes
// one (its OAuthClientProvider kept in memory, as a host keeps it in its store), the requests it
// sends, and tool calls through it.
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

/** A JWT's header and payload. */
export const header = (jwt) => JSON.parse(Buffer.from(jwt.split('.')[0], 'base64url').toString())
export const claims = (jwt) => JSON.parse(Buffer.from(jwt.split('.')[1], 'base64url').toString())

/** A one-object graph for validate_knowledge. */
export const graph = (name) => JSON.stringify({ objects: [{ identity: { id: name, type: 'Note', name } }] })

/**
 * A host's OAuthClientProvider coming back to `callbackUrl`: its client information, tokens,
 * code verifier, discovery state; `redirects` are the authorization URLs it was told to send the
 * person to, `saved` every token response it kept. `documentUrl`: its client id as a metadata
 * document's URL (the SDK's `clientMetadataUrl`); `client`: client information it starts with.
 */
export function hostProvider(name, callbackUrl, { documentUrl, client } = {}) {
  const kept = { redirects: [], saved: [], client }
  return {
    kept,
    clientMetadataUrl: documentUrl,
    get redirectUrl() { return callbackUrl },
    get clientMetadata() {
      return {
        client_name: name,
        redirect_uris: [callbackUrl],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
      }
    },
    state() {
      kept.state = randomBytes(16).toString('base64url')
      return kept.state
    },
    clientInformation: () => kept.client,
    saveClientInformation(information) { kept.client = information },
    tokens: () => kept.tokens,
    saveTokens(tokens) {
      kept.tokens = tokens
      kept.saved.push(tokens)
    },
    redirectToAuthorization(url) { kept.redirects.push(url) },
    saveCodeVerifier(verifier) { kept.verifier = verifier },
    codeVerifier: () => kept.verifier,
    discoveryState: () => kept.discovery,
    saveDiscoveryState(state) { kept.discovery = state },
    invalidateCredentials(what) {
      if (what === 'all' || what === 'client') delete kept.client
      if (what === 'all' || what === 'tokens') delete kept.tokens
      if (what === 'all' || what === 'verifier') delete kept.verifier
      if (what === 'all' || what === 'discovery') delete kept.discovery
    },
  }
}

/**
 * A fetch that notes what the SDK sent and got: `{method, url, status, challenge, grant,
 * resource}`, and `registration`, the answer to a registration at `registrationUrl`.
 */
export function recording(registrationUrl) {
  const seen = []
  const recorded = async (url, init = {}) => {
    const response = await fetch(url, init)
    const body = init.body instanceof URLSearchParams ? init.body : null
    seen.push({
      method: init.method || 'GET',
      url: String(url),
      status: response.status,
      challenge: response.headers.get('www-authenticate'),
      grant: body?.get('grant_type') ?? undefined,
      resource: body?.get('resource') ?? undefined,
      registration: String(url) === registrationUrl ? await response.clone().json() : undefined,
    })
    return response
  }
  return { seen, fetch: recorded }
}

/** Connects a new MCP client to `resource` through `authProvider`: `{client, transport}`. */
export async function connect(resource, authProvider, fetchFn) {
  const transport = new StreamableHTTPClientTransport(new URL(resource), { authProvider, fetch: fetchFn })
  const client = new Client({ name: 'host-check', version: '1.0.0' })
  await client.connect(transport)
  return { client, transport }
}

/** The first connection: refused until the person signs in; resolves to the authorization URL. */
export async function refusedUntilSignedIn(resource, authProvider, fetchFn) {
  const transport = new StreamableHTTPClientTransport(new URL(resource), { authProvider, fetch: fetchFn })
  const client = new Client({ name: 'host-check', version: '1.0.0' })
  await assert.rejects(client.connect(transport), UnauthorizedError)
  assert.equal(authProvider.kept.redirects.length, 1, 'one authorization URL')
  return { transport, url: authProvider.kept.redirects[0] }
}

/** A tool call's result object (the JSON of its text content). */
export async function call(client, name, args) {
  const answer = await client.callTool({ name, arguments: args })
  assert.ok(!answer.isError, `${name}: ${JSON.stringify(answer)}`)
  return JSON.parse(answer.content[0].text)
}
