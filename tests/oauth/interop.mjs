// cks-mcp as an OAuth resource server for oidc-provider's tokens: a reader reads and is refused a
// write (403, insufficient_scope), a writer writes and shares its session with the reader; no token
// is a 401 pointing at the metadata and naming the scope to ask for.
// Usage: node interop.mjs <path to cks-mcp>
import assert from 'node:assert/strict'
import { join } from 'node:path'

import { caller, clientToken, result, setUp } from './cks.mjs'

const { issuer, resource, base, cks, stop } = await setUp(process.argv[2])
const { call, tool } = caller(base)

try {
  const reader = await clientToken(issuer, resource, 'reader', 'reader-secret-for-tests-only', 'cks:read')
  const writer = await clientToken(issuer, resource, 'writer', 'writer-secret-for-tests-only', 'cks:read cks:write')

  // No token: a 401 naming the metadata, which names the issuer.
  const anonymous = await call(null, 'tools/list', {})
  assert.equal(anonymous.status, 401)
  const metadataUrl = `${base}/.well-known/oauth-protected-resource/mcp`
  assert.equal(anonymous.challenge, `Bearer resource_metadata="${metadataUrl}", scope="cks:read cks:write"`)
  const metadata = await (await fetch(metadataUrl)).json()
  assert.deepEqual(metadata.authorization_servers, [issuer])
  assert.equal(metadata.resource, resource)

  // The reader reads, and is refused a write.
  const listed = await call(reader, 'tools/list', {})
  assert.equal(listed.status, 200, listed.text)
  const names = JSON.parse(listed.text).result.tools.map((t) => t.name)
  assert.ok(names.includes('query_subgraph') && names.includes('find_tools'), listed.text)
  const graphs = await tool(reader, 'list_graphs', {})
  assert.equal(graphs.status, 200, graphs.text)
  const graph = JSON.stringify({ objects: [{ identity: { id: 'a', type: 'T', name: 'A' } }] })
  const refused = await tool(reader, 'validate_knowledge', { json_data: graph })
  assert.equal(refused.status, 403, refused.text)
  assert.equal(
    refused.challenge,
    `Bearer error="insufficient_scope", scope="cks:write", resource_metadata="${metadataUrl}"`,
  )

  // The writer writes.
  const created = await tool(writer, 'validate_knowledge', { json_data: graph })
  assert.equal(created.status, 200, created.text)
  const session = result(created).session_id
  assert.ok(session, created.text)
  const operations = [{ type: 'add_object', identity: { id: 'b', type: 'T', name: 'B' } }]
  const evolved = await tool(writer, 'evolve_knowledge', { session_id: session, operations })
  assert.equal(evolved.status, 200, evolved.text)
  assert.equal(result(evolved).error, undefined, evolved.text)
  // The session is the writer's: the reader finds it once it is shared (a client's subject is its id).
  const hidden = result(await tool(reader, 'list_versions', { session_id: session }))
  assert.equal(hidden.error, 'session_not_found', JSON.stringify(hidden))
  const shared = await tool(writer, 'share_session', { session_id: session, principals: ['reader'] })
  assert.deepEqual(result(shared).principals, ['reader'], shared.text)
  const versions = result(await tool(reader, 'list_versions', { session_id: session })).versions
  assert.equal(versions.length, 2)

  // Neither has cks:admin.
  const admin = await tool(writer, 'export_storage', { output_path: join(cks.data, 'backup.json') })
  assert.equal(admin.status, 403)
  assert.match(admin.challenge, /scope="cks:admin"/)

  // A tampered token is refused, and no token shows in the log.
  const tampered = `${writer.slice(0, -4)}AAAA`
  assert.equal((await call(tampered, 'tools/list', {})).status, 401)
  for (const t of [reader, writer, tampered]) assert.ok(!cks.log.includes(t), 'a token in the log')
  console.log('oauth interop: oidc-provider tokens: read ok, write refused without cks:write, write ok')
} finally {
  stop()
}
