// What the page check needs around the browser: the server's tools called over the bare JSON-RPC
// form (as tests/studio/harness.mjs calls them, plus a bearer token), Debian's Chromium through
// playwright-core, numbered steps each with a screenshot, and the bytes a page load transferred.
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { chromium } from 'playwright-core'

/** A client of one server: `rpc(method, params)` and `call(tool, args)` (the tool's result object). */
export function client(base, token) {
  base = base.replace(/\/$/, '')
  async function rpc(method, params) {
    const headers = { 'content-type': 'application/json' }
    if (token) headers.authorization = `Bearer ${token}`
    const response = await fetch(`${base}/mcp`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
    })
    assert.equal(response.status, 200, `${method}: HTTP ${response.status}`)
    const reply = await response.json()
    assert.ok(!reply.error, `${method} ${JSON.stringify(params)}: ${JSON.stringify(reply.error)}`)
    return reply.result
  }
  async function call(name, args) {
    const result = await rpc('tools/call', { name, arguments: args })
    return JSON.parse(result.content[0].text)
  }
  return { base, rpc, call }
}

/** Polls until `probe` answers something truthy. */
export async function until(what, probe, seconds = 20) {
  const deadline = Date.now() + seconds * 1000
  for (;;) {
    const answer = await probe()
    if (answer) return answer
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`)
    await sleep(100)
  }
}

/** Starts the browser. `steps(name)` gives numbered steps for one page: see `open`. */
export async function browser() {
  const instance = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  })
  return instance
}

let stepCount = 0
let skipped = 0

/**
 * A new page in `instance`: returns `{page, check, transferred}`. `check(title, body)` runs one
 * numbered step and saves `NN-<slug>.png` in SCREENSHOTS after it (passed or failed);
 * `check.skip(title, why)` reports a step that cannot run here. `transferred()` is the bytes
 * the page has received so far (headers and bodies, as sent), by URL path.
 */
export async function open(instance, { width = 1400, height = 900 } = {}) {
  const context = await instance.newContext({ viewport: { width, height } })
  const page = await context.newPage()
  const problems = []
  page.on('pageerror', (error) => problems.push(`uncaught: ${error.message}`))
  page.on('console', (message) => {
    if (/Content Security Policy/i.test(message.text())) problems.push(`CSP: ${message.text()}`)
  })
  const cdp = await context.newCDPSession(page)
  await cdp.send('Network.enable')
  const urls = new Map()
  const received = []
  cdp.on('Network.requestWillBeSent', (e) => urls.set(e.requestId, e.request.url))
  cdp.on('Network.loadingFinished', (e) => received.push({ url: urls.get(e.requestId), bytes: e.encodedDataLength }))
  const transferred = () => received.map((r) => ({ ...r, path: r.url ? new URL(r.url).pathname : '?' }))
  transferred.reset = () => { received.length = 0 }
  return { page, context, problems, transferred }
}

export async function check(page, title, body) {
  stepCount += 1
  const slug = title.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '').slice(0, 60)
  const shot = `${process.env.SCREENSHOTS}/${String(stepCount).padStart(2, '0')}-${slug}.png`
  try {
    await body()
    if (process.env.SCREENSHOTS) await page.screenshot({ path: shot, fullPage: true })
    console.log(`ok ${stepCount} - ${title}`)
  } catch (error) {
    console.log(`not ok ${stepCount} - ${title}`)
    if (process.env.SCREENSHOTS) await page.screenshot({ path: shot.replace(/\.png$/, '-FAILED.png'), fullPage: true }).catch(() => {})
    throw error
  }
}

/** A screenshot in the middle of the current step: `NN-<step>-<label>.png`. */
check.shot = async (page, label) => {
  if (!process.env.SCREENSHOTS) return
  const slug = label.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '')
  await page.screenshot({ path: `${process.env.SCREENSHOTS}/${String(stepCount).padStart(2, '0')}-during-${slug}.png`, fullPage: true })
}

check.skip = (title, why) => {
  stepCount += 1
  skipped += 1
  console.log(`ok ${stepCount} - ${title} # SKIP ${why}`)
}

export function summary() {
  console.log(`1..${stepCount}${skipped ? ` (${skipped} skipped)` : ''}`)
}
