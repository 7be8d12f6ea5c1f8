// What the OAuth checks share: the authorization server and cks-mcp started for it, machine clients' tokens, calls.
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import assert from 'node:assert/strict'

import { freePort } from '../interop/ts/net.mjs'
import { start } from './provider.mjs'

/** `cks-mcp --http` on 127.0.0.1:`port` for `issuer`, with `variables` added; resolves once it answers. */
async function startCks(binary, port, issuer, variables = {}) {
  const base = `http://127.0.0.1:${port}`
  const data = mkdtempSync(join(tmpdir(), 'cks-oauth-'))
  const server = { base, data, log: '' }
  const child = spawn(binary, ['--http', `127.0.0.1:${port}`, '--no-stdio'], {
    env: {
      PATH: process.env.PATH,
      HOME: data,
      CKS_MCP_DATA_DIR: data,
      CKS_MCP_DB_PATH: ':memory:',
      CKS_SWEEPERS: 'off',
      CKS_EMBEDDING_PROVIDER: 'none',
      CKS_MCP_LOG: 'info',
      CKS_MCP_AUTH_ISSUER: issuer,
      CKS_MCP_PUBLIC_URL: base,
      ...variables,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  child.stderr.on('data', (chunk) => { server.log += chunk })
  server.stop = () => {
    child.kill()
    rmSync(data, { recursive: true, force: true })
  }
  for (let i = 0; ; i++) {
    try {
      await fetch(`${base}/health`)
      return server
    } catch {
      if (i > 300) throw new Error(`cks-mcp did not come up:\n${server.log}`)
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }
}

/**
 * The authorization server and cks-mcp for it, each on a free port: `{issuer, resource, base, cks,
 * provider, stop}`, cks-mcp started with `variables` added, the authorization server with `hosts`
 * (see provider.mjs's `configuration`).
 */
export async function setUp(binary, variables = {}, hosts = undefined) {
  const port = await freePort()
  const base = `http://127.0.0.1:${port}`
  const resource = `${base}/mcp`
  const { issuer, server, provider } = await start(await freePort(), resource, hosts)
  const cks = await startCks(binary, port, issuer, variables).catch((error) => {
    server.close()
    throw error
  })
  const stop = () => {
    cks.stop()
    server.close()
  }
  return { issuer, resource, base, cks, provider, stop }
}

/** A machine client's access token for `resource` (client credentials). */
export async function clientToken(issuer, resource, client, secret, scope) {
  const response = await fetch(`${issuer}/token`, {
    method: 'POST',
    headers: {
      authorization: `Basic ${Buffer.from(`${client}:${secret}`).toString('base64')}`,
      'content-type': 'application/x-www-form-urlencoded',
    },
    body: new URLSearchParams({ grant_type: 'client_credentials', scope, resource }),
  })
  const body = await response.json()
  assert.equal(response.status, 200, JSON.stringify(body))
  assert.equal(body.access_token.split('.').length, 3, 'a JWT access token')
  return body.access_token
}

/** Calls on `base`'s /mcp: `call(token, method, params)` answers `{status, challenge, text}`. */
export function caller(base) {
  let id = 0
  async function call(accessToken, method, params) {
    const headers = { 'content-type': 'application/json' }
    if (accessToken) headers.authorization = `Bearer ${accessToken}`
    const response = await fetch(`${base}/mcp`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ jsonrpc: '2.0', id: ++id, method, params }),
    })
    const text = await response.text()
    return { status: response.status, challenge: response.headers.get('www-authenticate'), text }
  }
  const tool = (accessToken, name, args) => call(accessToken, 'tools/call', { name, arguments: args })
  return { call, tool }
}

/** A tool's result object from a `call` answer. */
export const result = (answer) => JSON.parse(JSON.parse(answer.text).result.content[0].text)
