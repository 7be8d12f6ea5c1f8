// The host's side of the MCP Apps check, run in the browser: the extension's own AppBridge and
// PostMessageTransport (bundled from @modelcontextprotocol/ext-apps/app-bridge by view.mjs) load a
// view's HTML into a sandboxed frame under the policy a host applies, complete the view's
// handshake, and send it a tool's input and result. A tool call the view makes goes to the server
// through the check (`window.callServerTool`, which view.mjs provides).
import { AppBridge, PostMessageTransport } from './app-bridge.js'

/**
 * The Content-Security-Policy a host builds from the resource's `_meta.ui.csp` (the extension's
 * "Content Security Policy Enforcement"). With no domains declared: its restrictive default,
 * which hosts apply to a view that declares nothing, plus no frames, plugins or other bases.
 */
export function policy(csp = {}) {
  const list = (domains, otherwise) => (domains?.length ? domains.join(' ') : otherwise)
  const resources = list(csp.resourceDomains, '')
  return [
    "default-src 'none'",
    `script-src 'self' 'unsafe-inline' ${resources}`,
    `style-src 'self' 'unsafe-inline' ${resources}`,
    `img-src 'self' data: ${resources}`,
    `font-src 'self' ${resources}`,
    `media-src 'self' data: ${resources}`,
    `connect-src ${list(csp.connectDomains, "'none'")}`,
    `frame-src ${list(csp.frameDomains, "'none'")}`,
    "object-src 'none'",
    `base-uri ${list(csp.baseUriDomains, "'self'")}`,
  ].map((directive) => directive.trim()).join('; ')
}

/**
 * The view's HTML with the policy as its first `<head>` element, then the check's `probe` (a
 * script that listens for what the policy refuses, itself under the policy).
 */
function withPolicy(html, csp, probe) {
  const meta = `<meta http-equiv="Content-Security-Policy" content="${policy(csp).replaceAll('"', '&quot;')}">` +
    (probe ? `<script>${probe}</script>` : '')
  const head = /<head[^>]*>/i.exec(html)
  return head ? html.slice(0, head.index + head[0].length) + meta + html.slice(head.index + head[0].length) : meta + html
}

const views = new Map()

/**
 * Loads `html` in a new frame named `name` and waits for the view's `ui/notifications/initialized`;
 * then sends the tool's input. Answers what the view said of itself.
 */
window.openView = async ({ name, html, csp, probe, tool, args, width = 1000 }) => {
  const frame = document.createElement('iframe')
  frame.name = name
  frame.title = name
  // As hosts do: scripts run, in an origin of their own (none of the host's).
  frame.setAttribute('sandbox', 'allow-scripts')
  frame.style.cssText = `display: block; width: ${width}px; height: 120px; border: 1px solid #c9cdd4; margin: 8px 0`
  frame.srcdoc = withPolicy(html, csp, probe)
  const sizes = []
  const bridge = new AppBridge(
    null,
    { name: 'cks-apps-check', version: '1.0.0' },
    { serverTools: {}, logging: {} },
    {
      hostContext: {
        theme: 'light',
        platform: 'web',
        displayMode: 'inline',
        availableDisplayModes: ['inline'],
        containerDimensions: { width, maxHeight: 800 },
        toolInfo: { tool },
      },
    },
  )
  bridge.onsizechange = ({ height }) => {
    sizes.push(height)
    if (height) frame.style.height = `${height}px`
  }
  bridge.oncalltool = async (params) => window.callServerTool(params)
  const initialized = new Promise((resolve) => {
    bridge.oninitialized = resolve
  })
  document.body.append(frame)
  // The newest view is the one in sight, as in a chat (a frame out of sight is not painted).
  frame.scrollIntoView()
  // Listening before the frame's document runs: its first message is `ui/initialize`.
  await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow))
  await Promise.race([
    initialized,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`${name}: no ui/notifications/initialized`)), 10000)),
  ])
  await bridge.sendToolInput({ arguments: args })
  views.set(name, { bridge, frame, sizes })
  return { app: bridge.getAppVersion(), capabilities: bridge.getAppCapabilities() }
}

/** Sends the tool's result to the view `name`. */
window.sendResult = async (name, result) => {
  await views.get(name).bridge.sendToolResult(result)
}

/** The heights the view `name` asked for, and its frame's. */
window.viewSize = (name) => {
  const { frame, sizes } = views.get(name)
  return { sizes, height: frame.getBoundingClientRect().height }
}

/** A frame that breaks the policy on purpose (`eval`): the check's listeners must hear it. */
window.openBreakingFrame = (html, probe) => {
  const frame = document.createElement('iframe')
  frame.name = 'breaks-policy'
  frame.setAttribute('sandbox', 'allow-scripts')
  frame.srcdoc = withPolicy(html, {}, probe)
  document.body.append(frame)
}
