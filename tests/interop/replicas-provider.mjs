// The model of the replicas check: the page check's scripted Anthropic server, answering a chat
// at once, or never when it is asked to take its time (a turn the check cancels). `GET /calls`
// says how many calls came and how many of them their client abandoned.
//
// Usage: node replicas-provider.mjs http://127.0.0.1:PORT STATUS_PORT
import { createServer } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'

import { startProvider } from '../page/provider.mjs'

const url = new URL(process.argv[2])
const provider = await startProvider(url.href, async (call) => {
  if (call.prompt.includes('take your time')) {
    await sleep(600_000, undefined, { ref: false })
    return 'too late'
  }
  return 'The graph holds a sun and a planet.'
})
const status = createServer((request, response) => {
  const abandoned = provider.calls.filter((call) => call.abandoned).length
  response.writeHead(200, { 'content-type': 'application/json' })
  response.end(JSON.stringify({ calls: provider.calls.length, abandoned }))
})
status.listen(Number(process.argv[3]), url.hostname)
