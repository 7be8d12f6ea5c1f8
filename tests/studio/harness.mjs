// What the studio checks share: the server's tools called the way the studio calls them, the
// browser (Debian's Chromium) with the studio pointed at our server, numbered steps with a
// screenshot of a failed one, and the end of a run (no uncaught error in the page). Arguments come
// from the environment: STUDIO_URL (a running cks-studio), MCP_URL (our server's base URL),
// CHROMIUM (the browser binary), SCREENSHOTS (a folder, optional).
import assert from 'node:assert/strict'
import { chromium } from 'playwright-core'

export const studio = process.env.STUDIO_URL.replace(/\/$/, '')
export const server = process.env.MCP_URL.replace(/\/$/, '')
const screenshots = process.env.SCREENSHOTS

/** One JSON-RPC request the way the studio sends it: a bare POST, id 1, no handshake. */
export async function rpc(method, params) {
  const response = await fetch(`${server}/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  })
  assert.equal(response.status, 200, `${method}: HTTP ${response.status}`)
  const reply = await response.json()
  assert.ok(!reply.error, `${method} ${JSON.stringify(params)}: ${JSON.stringify(reply.error)}`)
  return reply.result
}

/** One tool call; its result object. */
export async function call(name, args) {
  const result = await rpc('tools/call', { name, arguments: args })
  return JSON.parse(result.content[0].text)
}

/**
 * Opens the browser on a page whose studio talks to our server (and, when given, is connected to
 * `session`). Returns the page, `check(title, body)` for numbered steps (a failed one leaves
 * `<name>-step-N.png` in SCREENSHOTS) and `finish()`.
 */
export async function open(name, session) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  })
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } })
  const pageErrors = []
  page.on('pageerror', (error) => pageErrors.push(error.message))
  await page.addInitScript(([url, session]) => {
    if (!localStorage.getItem('cks-studio:mcp-server-url')) localStorage.setItem('cks-studio:mcp-server-url', url)
    if (session && !localStorage.getItem('cks-studio:session-id')) localStorage.setItem('cks-studio:session-id', session)
  }, [server, session])

  let step = 0
  async function check(title, body) {
    step += 1
    try {
      await body()
      console.log(`ok ${step} - ${title}`)
    } catch (error) {
      console.log(`not ok ${step} - ${title}`)
      if (screenshots) await page.screenshot({ path: `${screenshots}/${name}-step-${step}.png`, fullPage: true })
      throw error
    }
  }

  async function finish() {
    // The dev server serves no service worker script; that failure is the studio's, not the server's.
    const errors = pageErrors.filter((message) => !message.startsWith('Failed to register a ServiceWorker'))
    assert.deepEqual(errors, [], 'uncaught errors in the page')
    await browser.close()
    console.log(`1..${step}`)
  }

  return { page, check, finish }
}
