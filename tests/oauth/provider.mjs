// An authorization server for cks-mcp: oidc-provider (OpenID Certified) with two machine clients
// (client credentials) and the three scopes, issuing JWT access tokens (RFC 9068) for one
// resource, cks-mcp's /mcp (RFC 8707 resource indicators). docs/authorization.md walks through it.
import { generateKeyPairSync } from 'node:crypto'
import Provider, { errors } from 'oidc-provider'

// `resource`: cks-mcp's canonical URL, CKS_MCP_PUBLIC_URL + '/mcp' (its default audience).
export function configuration(resource) {
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
    ],
    scopes: ['cks:read', 'cks:write', 'cks:admin'],
    ttl: { ClientCredentials: 600 },
    jwks: { keys: [signing] },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        // A token request that names no resource is for cks-mcp.
        defaultResource: () => resource,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, indicator) => {
          if (indicator !== resource) throw new errors.InvalidTarget()
          return {
            audience: resource,
            scope: 'cks:read cks:write cks:admin',
            accessTokenFormat: 'jwt',
            accessTokenTTL: 600,
            jwt: { sign: { alg: 'RS256' } },
          }
        },
      },
    },
  }
}

// Serves the authorization server at http://127.0.0.1:<port> (its issuer URL).
export async function start(port, resource) {
  const issuer = `http://127.0.0.1:${port}`
  const provider = new Provider(issuer, configuration(resource))
  const server = provider.listen(port, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  return { issuer, server }
}
