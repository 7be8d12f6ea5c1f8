// The chat page of cks-mcp. It talks to the server that served it, only through MCP JSON-RPC
// (`POST /mcp`: tools/call and resources/read), the runtime events (`GET /events/{session}`) and
// the chat stream (`POST /chat/stream`, when the server has it). Everything is read with fetch(),
// so the access token, when the server asks for one, travels as a bearer header on every request.
// Where the server signs callers in with OAuth, the page gets its token itself: the authorization
// code flow with PKCE, against the issuer `GET /sign-in` names.
// No framework, no build step; the DOM is built with textContent only (no HTML from data).
'use strict'
;(() => {
  const MAX_OBJECTS = 300 // the graph panel draws at most this many objects
  const TOKEN_KEY = 'cks-page:token' // sessionStorage: this tab only
  const SIGN_IN_KEY = 'cks-page:sign-in' // sessionStorage: a sign-in's state and PKCE verifier
  const MODEL_KEY = 'cks-page:model'
  const SESSION_KEY = 'cks-page:session'

  const $ = (id) => document.getElementById(id)

  /** An element with attributes (`text` sets textContent, `class` the class list) and children. */
  function el(tag, attributes = {}, ...children) {
    const node = document.createElement(tag)
    for (const [key, value] of Object.entries(attributes)) {
      if (value === undefined || value === null || value === false) continue
      if (key === 'text') node.textContent = value
      else if (key === 'class') node.className = value
      else if (key.startsWith('on')) node.addEventListener(key.slice(2), value)
      else node.setAttribute(key, value === true ? '' : value)
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child)
    return node
  }

  const short = (id) => (id && id.length > 12 ? `${id.slice(0, 8)}…` : id || '')
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
  function when(text) {
    const date = new Date(text)
    return Number.isNaN(date.getTime()) ? text || '' : date.toLocaleString()
  }
  function pretty(value, limit = 20000) {
    let text = typeof value === 'string' ? value : JSON.stringify(value, null, 2)
    if (text === undefined) text = ''
    return text.length > limit ? `${text.slice(0, limit)}\n… (${text.length - limit} more characters)` : text
  }

  // ---------------------------------------------------------------------------------------------
  // Server-Sent Events read from a fetch() body. EventSource cannot send an Authorization header;
  // this reads the same wire format from any ReadableStream of bytes. Kept apart from the rest of
  // the page (and exported as `cksPage`) so the chat stream's reading can be tested on its own.

  /** A push parser: feed it text with `push`, call `end()` at the end; `onEvent({event, data, id})`. */
  function sseParser(onEvent) {
    let buffer = ''
    let event = ''
    let data = []
    let id = null
    function line(text) {
      if (text === '') {
        if (data.length) onEvent({ event: event || 'message', data: data.join('\n'), id })
        event = ''
        data = []
        return
      }
      if (text.startsWith(':')) return // a comment (keep-alive)
      const colon = text.indexOf(':')
      const field = colon < 0 ? text : text.slice(0, colon)
      let value = colon < 0 ? '' : text.slice(colon + 1)
      if (value.startsWith(' ')) value = value.slice(1)
      if (field === 'event') event = value
      else if (field === 'data') data.push(value)
      else if (field === 'id') id = value
    }
    return {
      push(text) {
        buffer += text
        for (;;) {
          const match = /\r\n|\r|\n/.exec(buffer)
          if (!match) return
          // A lone CR at the end may be the first half of CRLF: wait for the next chunk.
          if (match[0] === '\r' && match.index === buffer.length - 1) return
          line(buffer.slice(0, match.index))
          buffer = buffer.slice(match.index + match[0].length)
        }
      },
      end() {
        if (buffer) line(buffer.replace(/\r$/, ''))
        buffer = ''
        line('')
      },
    }
  }

  /** Reads a whole SSE body (a ReadableStream of bytes), calling `onEvent` for each event. */
  async function readSse(body, onEvent) {
    const parser = sseParser(onEvent)
    const reader = body.getReader()
    const decoder = new TextDecoder()
    try {
      for (;;) {
        const { value, done } = await reader.read()
        if (done) break
        parser.push(decoder.decode(value, { stream: true }))
      }
      parser.push(decoder.decode())
      parser.end()
    } finally {
      reader.releaseLock()
    }
  }

  /**
   * One chat turn over `POST /chat/stream` (body: ai_chat's arguments; answer: text/event-stream
   * with text_delta, tool_call_started, tool_call_completed and done). `on` gets the events as
   * they come. Resolves to `{result}` (done's object: exactly what ai_chat returns), or to
   * `{unavailable: true}` when the server has no such endpoint.
   */
  async function chatStream(args, on) {
    const response = await authFetch('/chat/stream', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify(args),
    })
    const type = response.headers.get('content-type') || ''
    if ((response.status === 404 || response.status === 405) && !type.includes('text/event-stream')) {
      await response.body?.cancel()
      return { unavailable: true }
    }
    if (!response.ok) throw await httpError(response)
    if (!type.includes('text/event-stream')) {
      // An answer whole, as JSON: take it as the final object.
      return { result: await response.json() }
    }
    let result = null
    await readSse(response.body, ({ event, data }) => {
      let payload
      try {
        payload = JSON.parse(data)
      } catch {
        payload = { text: data }
      }
      if (event === 'text_delta') on.textDelta?.(payload.text ?? '')
      else if (event === 'tool_call_started') on.toolStarted?.(payload)
      else if (event === 'tool_call_completed') on.toolCompleted?.(payload)
      else if (event === 'done') result = payload
      else if (event === 'error' && !result) {
        result = { error: payload.error || 'stream_error', message: payload.message || String(data) }
      }
    })
    if (!result) throw new Error('The answer stream ended before the turn finished.')
    return { result }
  }

  // ---------------------------------------------------------------------------------------------
  // Requests. Every one carries the token when there is one; a 401 asks for it and tries again.
  // A 401 whose challenge names the resource metadata (RFC 9728) means OAuth: the page signs in.

  let token = sessionStorage.getItem(TOKEN_KEY) || ''
  let oauth = false

  class AuthNeeded extends Error {}

  async function httpError(response) {
    let detail = ''
    try {
      const text = await response.text()
      try {
        const body = JSON.parse(text)
        detail = body.message || body.error?.message || body.error || text
      } catch {
        detail = text
      }
    } catch {
      // the body could not be read; the status says enough
    }
    const why = {
      403: 'The server refused this page (its Host or Origin is not allowed).',
      413: 'The request was larger than the server accepts.',
    }[response.status]
    return new Error(why || `The server answered HTTP ${response.status}${detail ? `: ${detail}` : ''}`)
  }

  async function authFetch(url, init = {}) {
    for (;;) {
      const headers = new Headers(init.headers || {})
      const sent = token
      if (sent) headers.set('authorization', `Bearer ${sent}`)
      const response = await fetch(url, { ...init, headers, cache: 'no-store', credentials: 'omit' })
      if (response.status !== 401) return response
      await response.body?.cancel()
      if (/resource_metadata=/.test(response.headers.get('www-authenticate') || '')) useOAuth()
      // Once the dialog was dismissed, requests fail quietly until "Enter token" is chosen.
      if (token && sent !== token) continue // a new token was given meanwhile
      if (oauth && sent) forgetToken() // expired, or refused: only a new sign-in helps
      const refused = oauth ? 'Your sign-in has ended; sign in again.' : 'That token was refused; try again.'
      const asked = !accessDeclined && await askAccess(signInProblem || (sent ? refused : ''))
      if (!asked) throw new AuthNeeded(accessNeeded())
    }
  }

  function useOAuth() {
    oauth = true
    $('token-open').textContent = 'Sign in'
  }
  function forgetToken() {
    token = ''
    sessionStorage.removeItem(TOKEN_KEY)
  }
  const accessNeeded = () => oauth
    ? 'This server needs you to sign in: choose “Sign in”.'
    : 'This server needs its access token: choose “Enter token”.'

  // ---------------------------------------------------------------------------------------------
  // OAuth sign-in: the authorization code flow with PKCE (RFC 7636), in this tab. The browser
  // goes to the issuer and comes back to `/` with a code, which the page trades for an access
  // token at the issuer's token endpoint. The token is kept like a static one: in this tab only.

  let signInProblem = ''

  const base64url = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)))
    .replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')
  const randomText = (size) => base64url(crypto.getRandomValues(new Uint8Array(size)))

  /** What `GET /sign-in` says: the issuer, its endpoints, this page's client id, scope and resource. */
  async function signInSettings() {
    const response = await fetch('/sign-in', { cache: 'no-store', credentials: 'omit' })
    if (!response.ok) throw await httpError(response)
    return response.json()
  }

  /** Sends the browser to the issuer to sign in. */
  async function signIn() {
    const settings = await signInSettings()
    if (new URL(settings.redirect_uri).origin !== location.origin) {
      // The issuer sends the browser back to the server's public URL: sign in from there, where
      // the answer finds the sign-in this tab started.
      location.assign(settings.redirect_uri)
      return
    }
    const verifier = randomText(32)
    const challenge = base64url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)))
    const pending = { state: randomText(16), verifier }
    sessionStorage.setItem(SIGN_IN_KEY, JSON.stringify(pending))
    const url = new URL(settings.authorization_endpoint)
    const query = {
      response_type: 'code',
      client_id: settings.client_id,
      redirect_uri: settings.redirect_uri,
      scope: settings.scope,
      resource: settings.resource,
      state: pending.state,
      code_challenge: challenge,
      code_challenge_method: 'S256',
    }
    for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value)
    location.assign(url.href)
  }

  /** Back from the issuer: trades the code for an access token. Throws what went wrong. */
  async function finishSignIn() {
    const answer = new URLSearchParams(location.search)
    if (!answer.has('code') && !answer.has('error')) return
    useOAuth()
    // The code leaves the address bar and the history at once; it is good for one exchange only.
    history.replaceState(null, '', location.pathname)
    const pending = JSON.parse(sessionStorage.getItem(SIGN_IN_KEY) || 'null')
    sessionStorage.removeItem(SIGN_IN_KEY)
    if (answer.has('error')) {
      throw new Error(`the issuer answered “${answer.get('error_description') || answer.get('error')}”`)
    }
    if (!pending || answer.get('state') !== pending.state) {
      throw new Error('the answer does not belong to a sign-in this tab started')
    }
    const settings = await signInSettings()
    if (answer.has('iss') && answer.get('iss') !== settings.issuer) {
      throw new Error('the answer came from another issuer') // RFC 9207: a mix-up
    }
    const response = await fetch(settings.token_endpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'authorization_code',
        code: answer.get('code'),
        redirect_uri: settings.redirect_uri,
        client_id: settings.client_id,
        code_verifier: pending.verifier,
        resource: settings.resource,
      }),
      cache: 'no-store',
      credentials: 'omit',
    })
    const body = await response.json().catch(() => ({}))
    if (!response.ok || typeof body.access_token !== 'string') {
      throw new Error(`the issuer gave no token (${body.error_description || body.error || `HTTP ${response.status}`})`)
    }
    token = body.access_token
    sessionStorage.setItem(TOKEN_KEY, token)
  }

  let rpcId = 0
  async function rpc(method, params) {
    const response = await authFetch('/mcp', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: ++rpcId, method, params }),
    })
    if (!response.ok) throw await httpError(response)
    const reply = await response.json()
    if (reply.error) throw new Error(reply.error.message || 'The server answered with an error.')
    return reply.result
  }

  /** A tool's result object (a business error is `{error, message}`). */
  async function callTool(name, args) {
    const result = await rpc('tools/call', { name, arguments: args })
    if (result && result.structuredContent && typeof result.structuredContent === 'object') {
      return result.structuredContent
    }
    const text = result?.content?.[0]?.text ?? ''
    try {
      return JSON.parse(text)
    } catch {
      return result?.isError ? { error: 'tool_error', message: text } : { text }
    }
  }

  // ---------------------------------------------------------------------------------------------
  // The token dialog, or with OAuth the sign-in dialog.

  let accessPrompt = null
  let accessDeclined = false
  /**
   * Asks for the token, or whether to sign in (one dialog however many requests wait); true once
   * a token was given or signing in began.
   */
  function askAccess(message) {
    if (accessPrompt) return accessPrompt
    const [dialog, error, cancel, focus] = oauth
      ? [$('sign-in-dialog'), $('sign-in-error'), $('sign-in-cancel'), $('sign-in-go')]
      : [$('token-dialog'), $('token-error'), $('token-cancel'), $('token-input')]
    error.textContent = message
    $('token-input').value = ''
    accessPrompt = new Promise((resolve) => {
      const done = (given) => {
        dialog.removeEventListener('close', onClose)
        accessPrompt = null
        if (dialog.open) dialog.close()
        $('token-open').hidden = given
        accessDeclined = !given
        if (!given) setStatus(accessNeeded())
        resolve(given)
      }
      const onClose = () => done(false)
      dialog.addEventListener('close', onClose)
      dialog.onsubmit = (event) => {
        event.preventDefault()
        if (oauth) {
          signIn().catch((failure) => {
            error.textContent = `Signing in could not start: ${failure.message}`
          })
          return
        }
        const value = $('token-input').value.trim()
        if (!value) return
        token = value
        sessionStorage.setItem(TOKEN_KEY, token)
        done(true)
      }
      cancel.onclick = () => done(false)
      dialog.showModal()
      focus.focus()
    })
    return accessPrompt
  }

  /** Asks a yes/no question in a dialog (Escape or Cancel: no). */
  function confirmDialog(text, yes = 'Delete') {
    const dialog = $('confirm-dialog')
    $('confirm-text').textContent = text
    $('confirm-yes').textContent = yes
    return new Promise((resolve) => {
      const opener = document.activeElement
      const done = (answer) => {
        dialog.removeEventListener('close', onClose)
        if (dialog.open) dialog.close()
        opener?.focus?.()
        resolve(answer)
      }
      const onClose = () => done(false)
      dialog.addEventListener('close', onClose)
      dialog.onsubmit = (event) => {
        event.preventDefault()
        done(true)
      }
      $('confirm-no').onclick = () => done(false)
      dialog.showModal()
      $('confirm-no').focus()
    })
  }

  // ---------------------------------------------------------------------------------------------
  // Status line.

  function setStatus(text) {
    $('status').textContent = text
  }
  function failed(what, error) {
    if (error instanceof AuthNeeded) setStatus(error.message)
    else setStatus(`${what}: ${error.message || error}`)
  }

  // ---------------------------------------------------------------------------------------------
  // Sessions, provider and models.

  const state = { session: '', events: null }

  async function loadSessions() {
    const select = $('session')
    let sessions
    try {
      const result = await rpc('resources/read', { uri: 'cks://sessions' })
      sessions = JSON.parse(result.contents[0].text)
    } catch (error) {
      failed('Could not list the sessions', error)
      return
    }
    sessions.sort((a, b) => String(b.created ?? '').localeCompare(String(a.created ?? '')))
    const wanted = state.session || new URLSearchParams(location.hash.slice(1)).get('session') ||
      localStorage.getItem(SESSION_KEY) || ''
    select.replaceChildren(el('option', { value: '', text: sessions.length ? 'Choose a session…' : 'No sessions yet' }))
    for (const s of sessions) {
      const versions = `${s.version_count} version${s.version_count === 1 ? '' : 's'}`
      select.append(el('option', { value: s.session_id, text: `${short(s.session_id)} · ${versions} · ${when(s.created)}` }))
    }
    const known = sessions.some((s) => s.session_id === wanted)
    select.value = known ? wanted : ''
    if (known && wanted !== state.session) await chooseSession(wanted)
    if (!known && state.session) await chooseSession('')
    setStatus(`${sessions.length} session${sessions.length === 1 ? '' : 's'}.`)
  }

  async function loadProvider() {
    const info = $('provider-info')
    try {
      const status = await callTool('get_llm_status', {})
      if (status.error) {
        info.textContent = status.message
      } else {
        const parts = [`Provider: ${status.provider}`]
        if (status.model) parts.push(`default model ${status.model}`)
        if (status.provider !== 'none') parts.push(status.reachable ? 'reachable' : 'not reachable')
        info.textContent = parts.join(' · ') + (status.message ? ` — ${status.message}` : '')
        const first = $('model').options[0]
        first.textContent = status.model ? `Default (${status.model})` : 'Provider default'
      }
    } catch (error) {
      info.textContent = `Provider status unavailable: ${error.message}`
      return
    }
    try {
      const list = await callTool('list_llm_models', {})
      const select = $('model')
      while (select.options.length > 1) select.remove(1)
      const saved = localStorage.getItem(MODEL_KEY) || ''
      for (const m of list.models || []) {
        select.append(el('option', { value: m.name, text: m.display_name ? `${m.display_name} (${m.name})` : m.name }))
      }
      if ([...select.options].some((o) => o.value === saved)) select.value = saved
    } catch {
      // Only the default then; the status line already says what the provider is.
    }
  }

  async function chooseSession(sessionId) {
    state.session = sessionId
    $('session').value = sessionId
    const params = new URLSearchParams(location.hash.slice(1))
    if (sessionId) {
      params.set('session', sessionId)
      localStorage.setItem(SESSION_KEY, sessionId)
    } else {
      params.delete('session')
    }
    history.replaceState(null, '', `${location.pathname}${location.search}${params.size ? `#${params}` : ''}`)
    $('session-info').textContent = sessionId ? `Session ${sessionId}` : ''
    newChat()
    watchEvents(sessionId)
    graph.nodes = []
    graph.edges = []
    graph.positions.clear()
    if (!sessionId) {
      graph.info = 'Choose a session to see its graph.'
      drawGraph()
      renderChatList([])
      return
    }
    await Promise.all([refreshGraph('session'), refreshChats()])
  }

  // ---------------------------------------------------------------------------------------------
  // The graph: the session's objects and relations (query_subgraph, compact), laid out by a few
  // hundred steps of a force simulation and drawn on the canvas. Redrawn on each new version.

  const graph = { nodes: [], edges: [], positions: new Map(), info: '', draws: 0, seq: 0, hover: null, timer: null }

  async function refreshGraph(reason) {
    const sessionId = state.session
    if (!sessionId) return
    const seq = ++graph.seq
    let result
    try {
      result = await callTool('query_subgraph', { session_id: sessionId, compact_mode: true, max_objects: MAX_OBJECTS })
    } catch (error) {
      failed('Could not read the graph', error)
      return
    }
    if (seq !== graph.seq || sessionId !== state.session) return
    if (result.error) {
      graph.nodes = []
      graph.edges = []
      graph.info = result.message
      drawGraph()
      return
    }
    const sub = typeof result.subgraph === 'string' ? JSON.parse(result.subgraph) : result.subgraph
    const nodes = (sub.nodes || []).map((n) => ({ id: n.identity.id, name: n.identity.name || n.identity.id, type: n.identity.type }))
    const ids = new Set(nodes.map((n) => n.id))
    const edges = []
    for (const e of sub.edges || []) {
      const [first, ...rest] = e.participants || [e.source, e.target]
      for (const other of rest) if (ids.has(first) && ids.has(other)) edges.push({ from: first, to: other, type: e.type })
    }
    graph.nodes = nodes
    graph.edges = edges
    const cut = result.is_truncated ? ` (the first ${nodes.length} of ${result.total_found_nodes})` : ''
    graph.info = `${nodes.length} object${nodes.length === 1 ? '' : 's'}${cut}, ${edges.length} relation${edges.length === 1 ? '' : 's'}`
    layout()
    const canvas = $('graph')
    canvas.dataset.nodes = String(nodes.length)
    canvas.dataset.edges = String(edges.length)
    canvas.dataset.reason = reason
    drawGraph()
  }

  function scheduleGraphRefresh(reason) {
    clearTimeout(graph.timer)
    graph.timer = setTimeout(() => refreshGraph(reason), 150)
  }

  /** Fruchterman–Reingold in a 1000×700 box; objects seen before keep their place. */
  function layout() {
    const { nodes, edges, positions } = graph
    const n = nodes.length
    if (!n) return
    const width = 1000
    const height = 700
    const fresh = nodes.filter((node) => !positions.has(node.id))
    const neighbours = new Map(nodes.map((node) => [node.id, []]))
    for (const e of edges) {
      neighbours.get(e.from).push(e.to)
      neighbours.get(e.to).push(e.from)
    }
    fresh.forEach((node, i) => {
      const near = neighbours.get(node.id).map((id) => positions.get(id)).find(Boolean)
      const angle = (2 * Math.PI * i) / Math.max(1, fresh.length)
      positions.set(node.id, near
        ? { x: near.x + 40 * Math.cos(angle), y: near.y + 40 * Math.sin(angle) }
        : { x: width / 2 + (width / 3) * Math.cos(angle), y: height / 2 + (height / 3) * Math.sin(angle) })
    })
    for (const id of [...positions.keys()]) if (!neighbours.has(id)) positions.delete(id)
    const k = Math.sqrt((width * height) / n) * 0.6
    const settled = fresh.length < n
    const steps = settled ? 60 : n > 150 ? 120 : 250
    let temperature = settled ? width / 40 : width / 10
    const list = nodes.map((node) => positions.get(node.id))
    const index = new Map(nodes.map((node, i) => [node.id, i]))
    const pairs = edges.map((e) => [index.get(e.from), index.get(e.to)])
    for (let step = 0; step < steps; step += 1) {
      const dx = new Float64Array(n)
      const dy = new Float64Array(n)
      for (let i = 0; i < n; i += 1) {
        for (let j = i + 1; j < n; j += 1) {
          let x = list[i].x - list[j].x
          let y = list[i].y - list[j].y
          let d = Math.hypot(x, y)
          if (d < 0.01) {
            x = (i - j) * 0.1
            y = 0.1
            d = Math.hypot(x, y)
          }
          const force = (k * k) / d
          dx[i] += (x / d) * force
          dy[i] += (y / d) * force
          dx[j] -= (x / d) * force
          dy[j] -= (y / d) * force
        }
      }
      for (const [a, b] of pairs) {
        if (a === b) continue
        const x = list[a].x - list[b].x
        const y = list[a].y - list[b].y
        const d = Math.max(0.01, Math.hypot(x, y))
        const force = (d * d) / k
        dx[a] -= (x / d) * force
        dy[a] -= (y / d) * force
        dx[b] += (x / d) * force
        dy[b] += (y / d) * force
      }
      for (let i = 0; i < n; i += 1) {
        // A pull to the middle keeps unconnected parts in view.
        dx[i] += (width / 2 - list[i].x) * 0.02 * k / 10
        dy[i] += (height / 2 - list[i].y) * 0.02 * k / 10
        const d = Math.max(0.01, Math.hypot(dx[i], dy[i]))
        const move = Math.min(d, temperature)
        list[i].x += (dx[i] / d) * move
        list[i].y += (dy[i] / d) * move
      }
      temperature = Math.max(0.5, temperature * 0.97)
    }
  }

  function typeColour(type) {
    let hash = 0
    for (const c of String(type)) hash = (hash * 31 + c.codePointAt(0)) >>> 0
    return `hsl(${hash % 360} 60% 50%)`
  }

  /** Where each object is on the canvas (CSS pixels), fitted to its size. */
  function placed(width, height) {
    const points = graph.nodes.map((node) => graph.positions.get(node.id))
    if (!points.length) return new Map()
    const xs = points.map((p) => p.x)
    const ys = points.map((p) => p.y)
    const [minX, maxX, minY, maxY] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)]
    // Room on the right for the names written beside the objects.
    const pad = 24
    const right = graph.nodes.length <= 60 ? Math.min(110, width / 4) : pad
    const scale = Math.min((width - pad - right) / Math.max(1, maxX - minX), (height - 2 * pad) / Math.max(1, maxY - minY), 1.5)
    const offsetX = pad + (width - pad - right - (maxX - minX) * scale) / 2
    const offsetY = (height - (maxY - minY) * scale) / 2
    return new Map(graph.nodes.map((node, i) => [node.id, {
      x: offsetX + (points[i].x - minX) * scale,
      y: offsetY + (points[i].y - minY) * scale,
    }]))
  }

  function drawGraph() {
    const canvas = $('graph')
    const rect = canvas.getBoundingClientRect()
    const ratio = window.devicePixelRatio || 1
    const width = Math.max(1, rect.width)
    const height = Math.max(1, rect.height)
    canvas.width = Math.round(width * ratio)
    canvas.height = Math.round(height * ratio)
    const ctx = canvas.getContext('2d')
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0)
    const style = getComputedStyle(document.documentElement)
    const text = style.getPropertyValue('--text').trim() || '#222'
    const muted = style.getPropertyValue('--muted').trim() || '#666'
    const line = style.getPropertyValue('--line').trim() || '#ccc'
    ctx.clearRect(0, 0, width, height)
    ctx.font = '12px system-ui, sans-serif'
    ctx.textBaseline = 'middle'
    const where = placed(width, height)
    graph.where = where
    if (!graph.nodes.length) {
      ctx.fillStyle = muted
      ctx.textAlign = 'center'
      ctx.fillText(state.session ? 'No objects yet.' : 'Choose a session.', width / 2, height / 2)
    }
    ctx.strokeStyle = line
    ctx.lineWidth = 1.2
    ctx.fillStyle = muted
    ctx.textAlign = 'center'
    for (const e of graph.edges) {
      const a = where.get(e.from)
      const b = where.get(e.to)
      ctx.beginPath()
      ctx.moveTo(a.x, a.y)
      ctx.lineTo(b.x, b.y)
      ctx.stroke()
      if (graph.edges.length <= 40) ctx.fillText(e.type, (a.x + b.x) / 2, (a.y + b.y) / 2 - 7)
    }
    const labels = graph.nodes.length <= 60
    ctx.textAlign = 'left'
    for (const node of graph.nodes) {
      const p = where.get(node.id)
      const hovered = graph.hover === node.id
      ctx.beginPath()
      ctx.arc(p.x, p.y, hovered ? 8 : 6, 0, 2 * Math.PI)
      ctx.fillStyle = typeColour(node.type)
      ctx.fill()
      if (labels || hovered) {
        ctx.fillStyle = text
        const name = node.name.length > 28 ? `${node.name.slice(0, 27)}…` : node.name
        ctx.fillText(hovered ? `${node.name} (${node.type})` : name, p.x + 9, p.y)
      }
    }
    graph.draws += 1
    canvas.dataset.draws = String(graph.draws)
    const names = graph.nodes.slice(0, 20).map((node) => node.name).join(', ')
    canvas.setAttribute('aria-label', state.session
      ? `Graph of session ${short(state.session)}: ${graph.info}${names ? `. Objects: ${names}${graph.nodes.length > 20 ? ', …' : ''}` : ''}`
      : 'No session chosen')
    $('graph-info').textContent = graph.info
  }

  function hoverGraph(event) {
    const canvas = $('graph')
    const rect = canvas.getBoundingClientRect()
    const x = event.clientX - rect.left
    const y = event.clientY - rect.top
    let best = null
    let bestDistance = 12
    for (const [id, p] of graph.where || []) {
      const d = Math.hypot(p.x - x, p.y - y)
      if (d < bestDistance) {
        best = id
        bestDistance = d
      }
    }
    if (best !== graph.hover) {
      graph.hover = best
      const node = graph.nodes.find((n) => n.id === best)
      canvas.title = node ? `${node.name} (${node.type}, ${node.id})` : ''
      drawGraph()
    }
  }

  /** Follows the session's events; a new version redraws the graph. Reconnects with backoff. */
  function watchEvents(sessionId) {
    state.events?.abort()
    state.events = null
    if (!sessionId) return
    const controller = new AbortController()
    state.events = controller
    ;(async () => {
      let delay = 1000
      let first = true
      while (!controller.signal.aborted) {
        try {
          const url = `/events/${encodeURIComponent(sessionId)}?event_types=VersionCreated,SessionClosed`
          const response = await authFetch(url, { headers: { accept: 'text/event-stream' }, signal: controller.signal })
          if (!response.ok) throw await httpError(response)
          $('graph').dataset.live = 'true'
          if (!first) scheduleGraphRefresh('reconnect') // versions made while the stream was down
          first = false
          delay = 1000
          await readSse(response.body, ({ data }) => {
            let frame = {}
            try {
              frame = JSON.parse(data)
            } catch {
              return
            }
            if (frame.event === 'VersionCreated') scheduleGraphRefresh('event')
            if (frame.event === 'SessionClosed') {
              setStatus('This session was closed.')
              loadSessions()
            }
          })
        } catch (error) {
          if (controller.signal.aborted || error instanceof AuthNeeded) return
        }
        $('graph').dataset.live = 'false'
        await sleep(delay)
        delay = Math.min(delay * 2, 15000)
      }
    })()
  }

  // ---------------------------------------------------------------------------------------------
  // The conversation.

  const chat = { id: null, title: '', busy: false }
  let streaming = 'unknown' // 'unknown', 'yes' or 'no': whether the server has POST /chat/stream

  function scrollLog() {
    const log = $('log')
    log.scrollTop = log.scrollHeight
  }

  function appendMessage(role, text) {
    const body = el('div', { class: `msg ${role}` }, el('span', { class: 'who', text: role === 'user' ? 'You' : 'Assistant' }))
    const content = el('span', { class: 'content', text })
    body.append(content)
    if (role === 'user') {
      const button = el('button', { type: 'button', class: 'remember', text: 'Remember', title: 'Remember this message in the graph',
        onclick: () => rememberMessage(text, button) })
      body.append(button)
    }
    $('log').append(el('li', {}, body))
    scrollLog()
    return { body, content }
  }

  /** `remember`: the message's people, places and facts into the session's graph. */
  async function rememberMessage(text, button) {
    button.disabled = true
    notice('warn', 'Remembering…')
    try {
      const result = await callTool('remember', { session_id: state.session, text })
      if (result.error) throw new Error(`${result.error}: ${result.message}`)
      if (result.already_remembered) {
        notice('remembered', 'Already remembered: nothing changed.')
        return
      }
      const count = (key) => (result[key] || []).length
      notice('remembered', `Remembered: ${count('created')} new, ${count('matched')} already known, ` +
        `${count('facts_added')} facts, ${count('superseded')} ended, ${count('review')} to review.`)
      scheduleGraphRefresh('remember')
    } catch (error) {
      notice('failure', `Not remembered: ${error.message || error}`)
    } finally {
      button.disabled = false
    }
  }

  /** A collapsible card for one tool call; `update` fills in its result. */
  function toolCard(call) {
    const stateLabel = el('span', { class: 'state', text: 'running' })
    const args = el('pre', { text: pretty(call.arguments ?? {}) })
    const result = el('pre', { text: '…' })
    const pinned = el('p', { class: 'pinned' })
    const summary = el('summary', {}, 'Tool call ', el('code', { text: call.name }), stateLabel)
    const details = el('details', { class: 'tool' }, summary,
      el('div', { class: 'body' }, el('h3', { text: 'Arguments' }), pinned, args, el('h3', { text: 'Result' }), result))
    const item = el('li', { class: 'tool-call' }, details)
    item.dataset.name = call.name
    function setArguments(value) {
      args.textContent = pretty(value ?? {})
      const names = Object.keys(value || {}).filter((key) => /(^|_)session(_id)?$/.test(key))
      pinned.textContent = names.length ? `${names.join(', ')} pinned to this chat's session` : ''
    }
    function update({ arguments: given, result: value, is_error: isError }) {
      if (given !== undefined) setArguments(given)
      if (value !== undefined) result.textContent = pretty(value)
      stateLabel.textContent = isError ? 'error' : 'done'
      stateLabel.className = `state ${isError ? 'failed' : 'ok'}`
      item.dataset.state = isError ? 'error' : 'done'
    }
    setArguments(call.arguments)
    item.dataset.state = 'running'
    if ('result' in call || 'is_error' in call) update(call)
    $('log').append(item)
    scrollLog()
    return { update }
  }

  /** What one turn shows: the streamed text, its tool cards, and at the end the whole result. */
  function turnView() {
    let bubble = null
    const bubbles = []
    let textSinceTool = ''
    let streamed = false
    const cards = new Map()
    const log = $('log')
    return {
      textDelta(text) {
        streamed = true
        if (!bubble) {
          bubble = appendMessage('assistant', '')
          bubbles.push(bubble)
          bubble.body.classList.add('streaming')
          log.setAttribute('aria-busy', 'true')
        }
        bubble.content.textContent += text
        textSinceTool += text
        scrollLog()
      },
      toolStarted(call) {
        streamed = true
        bubble?.body.classList.remove('streaming')
        bubble = null
        textSinceTool = ''
        cards.set(call.index, toolCard({ name: call.name, arguments: call.arguments }))
      },
      toolCompleted(call) {
        streamed = true
        const card = cards.get(call.index) || toolCard({ name: call.name, arguments: call.arguments })
        cards.set(call.index, card)
        card.update({ arguments: call.arguments, result: call.result_summary, is_error: call.is_error })
      },
      /** The final object: full results for the cards, and the reply when it was not streamed. */
      complete(result) {
        bubble?.body.classList.remove('streaming')
        log.removeAttribute('aria-busy')
        const calls = Array.isArray(result.tool_calls) ? result.tool_calls : []
        calls.forEach((call, i) => {
          const card = cards.get(i)
          if (card) card.update(call)
          else if (!streamed) cards.set(i, toolCard(call))
        })
        // The reply is the turn's last text: shown already when it was streamed, else added (or,
        // when the streamed text after the last tool call differs, that text is replaced by it).
        const reply = String(result.reply ?? '').trim()
        if (!reply || bubbles.some((b) => b.content.textContent.trim() === reply)) return
        if (bubble && textSinceTool.trim()) bubble.content.textContent = result.reply
        else appendMessage('assistant', result.reply)
      },
      abandon() {
        bubble?.body.classList.remove('streaming')
        log.removeAttribute('aria-busy')
      },
    }
  }

  function clearNotices() {
    $('notices').replaceChildren()
  }

  function notice(kind, text, ...controls) {
    const box = el('div', { class: `notice ${kind}`, role: kind === 'failure' ? 'alert' : 'status' },
      el('p', { text }), ...controls)
    $('notices').replaceChildren(box)
    return box
  }

  const TRUNCATION = {
    max_iterations: 'it used every model round trip a turn may make (CKS_AI_CHAT_MAX_ITERATIONS)',
    deadline: 'it ran out of time (CKS_AI_CHAT_TIMEOUT_SECONDS)',
    token_budget: 'it used up its token budget (CKS_AI_CHAT_MAX_TOKENS)',
    repeated_tool_calls: 'the model kept repeating tool calls it had already made',
    result_max_bytes: 'its tool results grew past the size a turn keeps (CKS_AI_CHAT_RESULT_MAX_BYTES)',
  }

  const FAILURES = {
    llm_call_failed: 'The model provider failed',
    llm_provider_unavailable: 'No model provider is usable',
    chat_busy: 'Another turn of this chat is running',
    chat_not_found: 'This chat is not there any more',
  }

  function showFailure(text, retry) {
    const button = el('button', { type: 'button', class: 'primary', text: 'Retry', onclick: () => { clearNotices(); retry() } })
    notice('failure', text, button)
    button.focus()
  }

  function showTruncated(reason) {
    const why = TRUNCATION[reason] || reason || 'it hit a limit'
    const button = el('button', { type: 'button', class: 'primary', text: 'Continue', onclick: () => {
      clearNotices()
      appendMessage('user', 'Continue.')
      runTurn({ prompt: 'Continue.' })
    } })
    notice('warn', `The turn stopped early: ${why}.`, button)
    button.focus()
  }

  function showApproval(pending) {
    const reason = el('input', { id: 'approval-reason', type: 'text', autocomplete: 'off' })
    const decide = (decision) => {
      clearNotices()
      const note = reason.value.trim()
      appendMessage('user', decision === 'approve' ? `Approved ${pending.name}.` : `Rejected ${pending.name}${note ? `: ${note}` : '.'}`)
      const approval = { decision }
      if (decision === 'reject' && note) approval.reason = note
      runTurn({ approval })
    }
    const approve = el('button', { type: 'button', class: 'primary', text: 'Approve', onclick: () => decide('approve') })
    const box = notice('approval', `The model asks to run ${pending.name} with these arguments:`,
      el('pre', { text: pretty(pending.arguments ?? {}) }),
      el('label', { for: 'approval-reason', text: 'Reason (optional, sent with a rejection)' }), reason,
      el('div', { class: 'buttons' }, approve,
        el('button', { type: 'button', class: 'danger', text: 'Reject', onclick: () => decide('reject') })))
    box.setAttribute('role', 'group')
    box.setAttribute('aria-label', 'Approval needed')
    approve.focus()
  }

  function setBusy(busy) {
    chat.busy = busy
    $('send').disabled = busy
    $('new-chat').disabled = busy
    $('session').disabled = busy
    for (const button of $('chat-list').querySelectorAll('button')) button.disabled = busy
  }

  /** One turn: over the chat stream when the server has it, else ai_chat's whole answer at once. */
  async function runTurn(input) {
    if (!state.session || chat.busy) return
    clearNotices()
    const args = { session_id: state.session, approvals: true, ...input }
    if (chat.id) args.chat_id = chat.id
    else args.new_chat = true
    const model = $('model').value
    if (model) args.model = model
    const sessionId = state.session
    setBusy(true)
    setStatus('The model is working…')
    const view = turnView()
    let result
    try {
      if (streaming !== 'no') {
        const answer = await chatStream(args, view)
        if (answer.unavailable) streaming = 'no'
        else {
          streaming = 'yes'
          result = answer.result
        }
      }
      if (!result) result = await callTool('ai_chat', args)
    } catch (error) {
      view.abandon()
      setBusy(false)
      setStatus('')
      showFailure(error instanceof AuthNeeded ? error.message : `The request failed: ${error.message}`, () => runTurn(input))
      return
    }
    setBusy(false)
    if (sessionId !== state.session) return
    view.complete(result)
    if (result.chat_id && result.chat_id !== chat.id) {
      chat.id = result.chat_id
      chat.title = String(input.prompt || '').split('\n')[0].slice(0, 80)
      $('chat-name').textContent = chat.title
    }
    if (chat.id) refreshChats()
    if (result.error) {
      setStatus('')
      const what = FAILURES[result.error] || `The turn failed (${result.error})`
      showFailure(`${what}: ${result.message}`, () => runTurn(input))
      return
    }
    const usage = result.usage ? ` (${result.usage.input_tokens} tokens in, ${result.usage.output_tokens} out)` : ''
    setStatus(`Answered${result.model ? ` by ${result.model}` : ''}${usage}.`)
    if (result.pending_approval) showApproval(result.pending_approval)
    else if (result.truncated) showTruncated(result.truncation_reason)
  }

  function newChat() {
    chat.id = null
    chat.title = ''
    $('chat-name').textContent = ''
    $('log').replaceChildren()
    clearNotices()
    markCurrentChat()
  }

  // ---------------------------------------------------------------------------------------------
  // Past chats.

  async function refreshChats() {
    const sessionId = state.session
    if (!sessionId) return
    try {
      const result = await callTool('list_chats', { session_id: sessionId, limit: 50 })
      if (sessionId !== state.session) return
      if (result.error) {
        $('chat-list-info').textContent = result.message
        return
      }
      renderChatList(result.chats || [])
    } catch (error) {
      $('chat-list-info').textContent = `Could not list the chats: ${error.message}`
    }
  }

  function renderChatList(chats) {
    const list = $('chat-list')
    list.replaceChildren(...chats.map((c) => {
      const title = c.title || 'Untitled chat'
      const open = el('button', { type: 'button', class: 'open', onclick: () => openChat(c.chat_id) },
        el('span', { text: title }),
        el('small', { text: `${c.message_count} messages · ${when(c.updated_at)}` }))
      const remove = el('button', { type: 'button', class: 'delete', 'aria-label': `Delete chat “${title}”`, title: 'Delete', text: '✕',
        onclick: () => deleteChat(c.chat_id, title) })
      const item = el('li', {}, open, remove)
      item.dataset.chatId = c.chat_id
      return item
    }))
    $('chat-list-info').textContent = chats.length ? '' : 'No chats in this session yet.'
    markCurrentChat()
    if (chat.busy) setBusy(true)
  }

  function markCurrentChat() {
    for (const item of $('chat-list').children) {
      if (item.dataset.chatId === chat.id) item.setAttribute('aria-current', 'true')
      else item.removeAttribute('aria-current')
    }
  }

  async function openChat(chatId) {
    if (chat.busy) return
    let stored
    try {
      stored = await callTool('get_chat', { chat_id: chatId })
    } catch (error) {
      failed('Could not open the chat', error)
      return
    }
    if (stored.error) {
      setStatus(stored.message)
      refreshChats()
      return
    }
    newChat()
    chat.id = stored.chat_id
    chat.title = stored.title
    $('chat-name').textContent = stored.title
    renderHistory(stored.messages || [])
    markCurrentChat()
    setStatus(`Opened “${stored.title}” (${stored.message_count} messages).`)
    $('prompt').focus()
  }

  const textOf = (content) =>
    typeof content === 'string' ? content : (content || []).filter((b) => b.type === 'text').map((b) => b.text).join('\n')

  /** Draws a stored conversation: user and assistant text, and a card for each tool call. */
  function renderHistory(messages) {
    const results = new Map()
    for (const m of messages) {
      if (Array.isArray(m.content)) {
        for (const block of m.content) if (block.type === 'tool_result') results.set(block.tool_use_id, block)
      }
    }
    for (const m of messages) {
      if (m.role === 'user') {
        const text = textOf(m.content)
        if (text.trim()) appendMessage('user', text)
        continue
      }
      for (const block of typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : m.content || []) {
        if (block.type === 'text' && block.text.trim()) appendMessage('assistant', block.text)
        if (block.type === 'tool_use') {
          const answer = results.get(block.id)
          let result = answer?.content
          try {
            result = JSON.parse(result)
          } catch {
            // text as the model saw it
          }
          toolCard({ name: block.name, arguments: block.input, ...(answer ? { result, is_error: !!answer.is_error } : {}) })
        }
      }
    }
  }

  async function deleteChat(chatId, title) {
    if (chat.busy) return
    if (!(await confirmDialog(`Delete the chat “${title}”? The graph changes it made stay.`))) return
    try {
      const result = await callTool('delete_chat', { chat_id: chatId })
      if (result.error) setStatus(result.message)
      else setStatus(result.deleted ? `Deleted “${title}”.` : 'That chat was already gone.')
    } catch (error) {
      failed('Could not delete the chat', error)
    }
    if (chat.id === chatId) newChat()
    refreshChats()
  }

  // ---------------------------------------------------------------------------------------------
  // Wiring.

  function send() {
    const box = $('prompt')
    const text = box.value.trim()
    if (!text || chat.busy) return
    if (!state.session) {
      setStatus('Choose a session first.')
      $('session').focus()
      return
    }
    box.value = ''
    appendMessage('user', text)
    runTurn({ prompt: text })
  }

  function start() {
    $('composer').addEventListener('submit', (event) => {
      event.preventDefault()
      send()
    })
    $('prompt').addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
        event.preventDefault()
        send()
      }
    })
    $('session').addEventListener('change', (event) => chooseSession(event.target.value))
    $('sessions-refresh').addEventListener('click', () => loadSessions())
    $('model').addEventListener('change', (event) => localStorage.setItem(MODEL_KEY, event.target.value))
    $('new-chat').addEventListener('click', () => {
      newChat()
      setStatus('A new chat: the first message starts it.')
      $('prompt').focus()
    })
    $('token-open').addEventListener('click', async () => {
      accessDeclined = false
      if (await askAccess('')) boot()
    })
    const canvas = $('graph')
    canvas.addEventListener('mousemove', hoverGraph)
    canvas.addEventListener('mouseleave', () => {
      graph.hover = null
      drawGraph()
    })
    new ResizeObserver(() => drawGraph()).observe(canvas)
    boot()
  }

  async function boot() {
    setStatus('Connecting…')
    try {
      await finishSignIn()
    } catch (error) {
      signInProblem = `Signing in failed: ${error.message}.`
      setStatus(signInProblem)
    }
    await loadSessions()
    await loadProvider()
  }

  window.cksPage = Object.freeze({ sseParser, readSse, chatStream })
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start)
  else start()
})()
