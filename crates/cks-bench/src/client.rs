//! A minimal MCP client over a child process's stdio: newline-delimited JSON-RPC, one request
//! at a time, as a real client would speak to `cks-mcp` (ours or the Python reference). Beside it:
//! [`ConcurrentClient`] (`client/concurrent.rs`), many requests in flight on one connection, and
//! [`HttpClient`] (`client/http.rs`).
//!
//! Requests over a configurable size can be sent with LSP-style `Content-Length:` framing instead
//! of as one line (the reference reads lines with asyncio's 64 KiB limit and dies on a longer one,
//! but reads a `Content-Length` body of any size); responses are read in either framing.

use std::collections::HashMap;
use std::path::Path;

use crate::host::vm_hwm_kib;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

mod concurrent;
mod http;

pub(crate) use concurrent::{ConcurrentClient, InFlight};
pub(crate) use http::{HttpClient, free_port};

/// The protocol version we offer in `initialize`; both servers accept it.
const PROTOCOL_VERSION: &str = "2025-06-18";

/// Why a call produced no result.
#[derive(Debug)]
pub(crate) enum CallError {
    /// No answer within the per-call timeout (given); the connection is no longer usable.
    Timeout(Duration),
    /// A JSON-RPC error, a business error (`{"error": ...}` result), a closed pipe, ...
    Failed(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Timeout(after) => write!(f, "timeout after {} s", after.as_secs()),
            CallError::Failed(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for CallError {}

impl From<anyhow::Error> for CallError {
    fn from(error: anyhow::Error) -> Self {
        CallError::Failed(format!("{error:#}"))
    }
}

/// How to start a server.
#[derive(Debug, Clone)]
pub(crate) struct ServerCommand {
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    /// Extra environment, on top of the inherited one and the data directory variables.
    pub(crate) env: HashMap<String, String>,
    /// Requests longer than this many bytes are sent with `Content-Length:` framing.
    pub(crate) content_length_over: Option<usize>,
}

impl ServerCommand {
    /// Splits a command line on whitespace, honouring single and double quotes and backslashes
    /// (no other shell syntax: the server is started directly, so its pid is the server's).
    pub(crate) fn parse(line: &str) -> anyhow::Result<ServerCommand> {
        let words = split_words(line)?;
        let (program, args) = words.split_first().ok_or_else(|| anyhow!("empty server command"))?;
        Ok(ServerCommand {
            program: program.clone(),
            args: args.to_vec(),
            env: HashMap::new(),
            content_length_over: None,
        })
    }

    pub(crate) fn with_env(mut self, vars: &[(&str, &str)]) -> ServerCommand {
        for (k, v) in vars {
            self.env.insert((*k).to_owned(), (*v).to_owned());
        }
        self
    }
}

fn split_words(line: &str) -> anyhow::Result<Vec<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => bail!("unterminated ' in server command"),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => w.push(chars.next().ok_or_else(|| anyhow!("trailing \\ in server command"))?),
                        Some(c) => w.push(c),
                        None => bail!("unterminated \" in server command"),
                    }
                }
            }
            '\\' => word
                .get_or_insert_with(String::new)
                .push(chars.next().ok_or_else(|| anyhow!("trailing \\ in server command"))?),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

/// A running server and the client side of its stdio.
#[derive(Debug)]
pub(crate) struct McpClient {
    child: Child,
    pid: u32,
    stdin: Option<ChildStdin>,
    /// `None` once handed to a [`ConcurrentClient`]'s reader task.
    stdout: Option<BufReader<ChildStdout>>,
    next_id: u64,
    timeout: Duration,
    content_length_over: Option<usize>,
    /// Set after a timeout or a broken pipe: later calls fail at once.
    broken: bool,
    /// How long writing the last request took (`None` while it is being written, or when
    /// writing it failed): the pipe takes a request whole only once the server has read it.
    sent_in: Option<Duration>,
    /// How long the last request took from its first byte written to its response read.
    exchanged_in: Option<Duration>,
    /// How long the last request took from its first byte written to its response's last byte
    /// received, before this client decoded the response.
    received_in: Option<Duration>,
    line: String,
    /// The highest VmHWM seen so far (KiB).
    pub(crate) peak_rss_kib: Option<u64>,
}

impl McpClient {
    /// Starts `command` with `CKS_MCP_DATA_DIR=data_dir` and `CKS_MCP_DB_PATH=data_dir/cks_mcp.db`;
    /// the server's stderr goes to `stderr_log` (appended).
    pub(crate) fn spawn(
        command: &ServerCommand,
        data_dir: &Path,
        stderr_log: &Path,
        timeout: Duration,
    ) -> anyhow::Result<McpClient> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(stderr_log)
            .with_context(|| format!("opening {}", stderr_log.display()))?;
        let mut cmd = Command::new(&command.program);
        cmd.args(&command.args)
            .env("CKS_MCP_DATA_DIR", data_dir)
            .env("CKS_MCP_DB_PATH", data_dir.join("cks_mcp.db"))
            .envs(&command.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        let mut child = cmd.spawn().with_context(|| format!("starting {}", command.program))?;
        let pid = child.id().ok_or_else(|| anyhow!("the server exited at once"))?;
        let stdin = child.stdin.take();
        let stdout = Some(BufReader::with_capacity(1 << 20, child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?));
        Ok(McpClient {
            child,
            pid,
            stdin,
            stdout,
            next_id: 1,
            timeout,
            content_length_over: command.content_length_over,
            broken: false,
            sent_in: None,
            exchanged_in: None,
            received_in: None,
            line: String::new(),
            peak_rss_kib: None,
        })
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// `initialize` then `notifications/initialized`.
    pub(crate) async fn initialize(&mut self) -> Result<Value, CallError> {
        let result = self
            .request(
                "initialize",
                json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "cks-bench", "version": env!("CARGO_PKG_VERSION")},
                }),
            )
            .await?;
        self.notify("notifications/initialized", json!({})).await?;
        Ok(result)
    }

    /// The tool names of `tools/list`.
    pub(crate) async fn list_tools(&mut self) -> Result<Vec<String>, CallError> {
        let result = self.request("tools/list", json!({})).await?;
        let tools = result["tools"].as_array().ok_or_else(|| CallError::Failed("tools/list: no tools".into()))?;
        Ok(tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect())
    }

    /// Calls a tool and returns its result object (the JSON text of `content[0]`). A result with
    /// an `error` member, or `isError`, is a failure.
    pub(crate) async fn call_tool(&mut self, name: &str, arguments: Value) -> Result<Value, CallError> {
        let result = self.request("tools/call", json!({"name": name, "arguments": arguments})).await?;
        tool_result(name, &result)
    }

    /// Calls a tool and returns the text of `content[0]` once the answer is read and known not to
    /// be a failure (as for [`Self::call_tool`]), without building a value of the text: what a
    /// client waits for that hands the text on, as MCP clients hand it to a model. Timing a call
    /// that answers a large document then times the answer, not this client decoding it.
    pub(crate) async fn call_tool_text(&mut self, name: &str, arguments: Value) -> Result<String, CallError> {
        let mut result = self.request("tools/call", json!({"name": name, "arguments": arguments})).await?;
        let text = match result["content"][0]["text"].take() {
            Value::String(text) => text,
            _ => String::new(),
        };
        check_tool_result(name, &result, &text)?;
        Ok(text)
    }

    /// Hands the connection to a [`ConcurrentClient`] (after `initialize`).
    pub(crate) fn into_concurrent(mut self) -> ConcurrentClient {
        let pending: Pending = Arc::default();
        let stdin = Arc::new(tokio::sync::Mutex::new(self.stdin.take()));
        let framing = self.content_length_over;
        let reader = match self.stdout.take() {
            Some(stdout) => tokio::spawn(route_responses(stdout, Arc::clone(&pending), Arc::clone(&stdin), framing)),
            None => tokio::spawn(async {}),
        };
        ConcurrentClient { inner: Some(self), stdin, pending, reader, next_id: Arc::default(), framing }
    }

    async fn notify(&mut self, method: &str, params: Value) -> Result<(), CallError> {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send(&message).await
    }

    async fn send(&mut self, message: &Value) -> Result<(), CallError> {
        let bytes = frame(message, self.content_length_over);
        self.send_framed(&bytes).await
    }

    async fn send_framed(&mut self, bytes: &[u8]) -> Result<(), CallError> {
        if self.broken {
            return Err(CallError::Failed("connection unusable after an earlier failure".into()));
        }
        let stdin = self.stdin.as_mut().ok_or_else(|| CallError::Failed("stdin closed".into()))?;
        if let Err(e) = stdin.write_all(bytes).await {
            self.broken = true;
            return Err(CallError::Failed(format!("writing to the server: {e}")));
        }
        stdin.flush().await.map_err(|e| CallError::Failed(format!("writing to the server: {e}")))
    }

    /// Sends one request and waits for its response, at most the per-call timeout from the start
    /// of the write (a server that stops reading its stdin cannot hold the call forever); server
    /// notifications are skipped, server requests are refused.
    pub(crate) async fn request(&mut self, method: &str, params: Value) -> Result<Value, CallError> {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        // Encoded before the clock starts: a large request's encoding is this client's work.
        let bytes = frame(&message, self.content_length_over);
        drop(message);
        let timeout = self.timeout;
        self.sent_in = None;
        self.exchanged_in = None;
        self.received_in = None;
        let exchange = async {
            let started = Instant::now();
            self.send_framed(&bytes).await?;
            self.sent_in = Some(started.elapsed());
            let response = self.read_response(id, started).await;
            self.exchanged_in = Some(started.elapsed());
            response
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                self.broken = true;
                Err(CallError::Timeout(timeout))
            }
        }
    }

    /// Changes the per-call timeout of the calls from now on.
    pub(crate) fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// How long writing the last request took; `None` when it was not written whole (a timeout
    /// while writing: the server had not read all of it).
    pub(crate) fn sent_in(&self) -> Option<Duration> {
        self.sent_in
    }

    /// How long the last request took from the first byte written to its response read; `None`
    /// when it got none.
    pub(crate) fn exchanged_in(&self) -> Option<Duration> {
        self.exchanged_in
    }

    /// How long the last request took from the first byte written to its response's last byte
    /// received: the server's time, without this client's decoding of the response (for an
    /// 8 MB line dense in escapes, longer than the server took to write it). `None` when it got
    /// no response.
    pub(crate) fn received_in(&self) -> Option<Duration> {
        self.received_in
    }

    /// Reads messages until the response to `id` (a request whose first byte was written at
    /// `started`).
    async fn read_response(&mut self, id: u64, started: Instant) -> Result<Value, CallError> {
        loop {
            let stdout = self.stdout.as_mut().ok_or_else(|| CallError::Failed("stdout handed over".into()))?;
            let read = read_message(stdout, &mut self.line).await.map_err(|e| {
                self.broken = true;
                CallError::Failed(format!("reading from the server: {e}"))
            })?;
            let Some(message) = read else {
                self.broken = true;
                return Err(CallError::Failed("the server closed its stdout".into()));
            };
            let received = started.elapsed();
            let Ok(mut message) = serde_json::from_str::<Value>(&message) else { continue };
            if message.get("method").is_some() {
                if let Some(request_id) = message.get("id").cloned() {
                    let refusal = json!({"jsonrpc": "2.0", "id": request_id,
                        "error": {"code": -32601, "message": "cks-bench answers no requests"}});
                    self.send(&refusal).await?;
                }
                continue;
            }
            if message.get("id").and_then(Value::as_u64) != Some(id) {
                continue;
            }
            self.received_in = Some(received);
            if let Some(error) = message.get("error") {
                return Err(CallError::Failed(format!("JSON-RPC error: {error}")));
            }
            return Ok(message.get_mut("result").map_or(Value::Null, Value::take));
        }
    }

    /// Samples VmHWM now (and keeps the maximum).
    pub(crate) fn sample_rss(&mut self) -> Option<u64> {
        if let Some(kib) = vm_hwm_kib(self.pid) {
            self.peak_rss_kib = Some(self.peak_rss_kib.map_or(kib, |p| p.max(kib)));
        }
        self.peak_rss_kib
    }

    /// Starts a new peak: keeps the peak so far (for [`McpClient::shutdown`]) and resets the
    /// server's `VmHWM` to its current RSS (Linux's `clear_refs`, value 5), so that a later
    /// [`vm_hwm_kib`] is the peak of what ran in between. False where that cannot be done.
    pub(crate) fn start_new_peak(&mut self) -> bool {
        self.sample_rss();
        std::fs::write(format!("/proc/{}/clear_refs", self.pid), "5").is_ok()
    }

    /// Closes stdin and waits for the server to exit (killing it after `grace`), sampling VmHWM
    /// until the process is gone. Returns the peak seen (KiB).
    pub(crate) async fn shutdown(mut self, grace: Duration) -> Option<u64> {
        self.sample_rss();
        drop(self.stdin.take());
        let deadline = Instant::now() + grace;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) => {}
            }
            self.sample_rss();
            if Instant::now() >= deadline {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.peak_rss_kib
    }

    /// Kills the server at once (after a timeout).
    pub(crate) async fn kill(mut self) -> Option<u64> {
        self.sample_rss();
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        self.peak_rss_kib
    }
}

/// The result object of a `tools/call` response (the JSON text of `content[0]`); a result with an
/// `error` member, or `isError`, is a failure.
fn tool_result(name: &str, result: &Value) -> Result<Value, CallError> {
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    flagged_as_error(name, result, text)?;
    let value: Value = serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
    match value.get("error") {
        Some(error) => Err(failed(name, error, value.get("message"))),
        None => Ok(value),
    }
}

/// The members of a tool's result object that say it failed; the others are skipped unread.
#[derive(serde::Deserialize)]
struct FailureProbe {
    error: Option<Value>,
    message: Option<Value>,
}

/// Whether a tool's answer (`result`, its text taken out as `text`) is a failure, as
/// [`tool_result`] judges, without building a value of the text.
fn check_tool_result(name: &str, result: &Value, text: &str) -> Result<(), CallError> {
    flagged_as_error(name, result, text)?;
    // Only an object can fail (a derived struct would also read a list, by position).
    if !text.trim_start().starts_with('{') {
        return Ok(());
    }
    match serde_json::from_str::<FailureProbe>(text) {
        Ok(FailureProbe { error: Some(error), message }) => Err(failed(name, &error, message.as_ref())),
        _ => Ok(()),
    }
}

fn flagged_as_error(name: &str, result: &Value, text: &str) -> Result<(), CallError> {
    match result["isError"].as_bool() {
        Some(true) => Err(CallError::Failed(format!("{name}: isError: {}", truncate(text, 300)))),
        _ => Ok(()),
    }
}

fn failed(name: &str, error: &Value, message: Option<&Value>) -> CallError {
    let message = message.and_then(Value::as_str).unwrap_or_default();
    CallError::Failed(format!("{name}: {error}: {}", truncate(message, 300)))
}

/// `message` as one line, or with a `Content-Length:` header when it is longer than `content_length_over`.
fn frame(message: &Value, content_length_over: Option<usize>) -> Vec<u8> {
    let body = message.to_string();
    match content_length_over {
        Some(limit) if body.len() > limit => {
            let mut bytes = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
            bytes.extend_from_slice(body.as_bytes());
            bytes
        }
        _ => {
            let mut bytes = body.into_bytes();
            bytes.push(b'\n');
            bytes
        }
    }
}

/// The next message from the server, newline-delimited or `Content-Length:`-framed (detected per
/// message); `None` at end of file. `line` is a reusable buffer.
async fn read_message<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut String,
) -> std::io::Result<Option<String>> {
    loop {
        line.clear();
        if reader.read_line(line).await? == 0 {
            return Ok(None);
        }
        let Some(length) = content_length(line) else {
            if line.trim().is_empty() {
                continue;
            }
            return Ok(Some(std::mem::take(line)));
        };
        let mut length = length?;
        // Further headers up to the blank line.
        loop {
            line.clear();
            if reader.read_line(line).await? == 0 {
                return Ok(None);
            }
            match content_length(line) {
                Some(other) => length = other?,
                None if line.trim().is_empty() => break,
                None => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await?;
        return String::from_utf8(body).map(Some).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e));
    }
}

/// The length of a `Content-Length:` header line; `None` when `line` is not one.
fn content_length(line: &str) -> Option<std::io::Result<usize>> {
    let (name, value) = line.split_once(':')?;
    if !name.trim().eq_ignore_ascii_case("content-length") {
        return None;
    }
    Some(value.trim().parse().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, CallError>>>>>;

/// Reads responses until end of file and hands each to the waiter of its id.
async fn route_responses(
    mut stdout: BufReader<ChildStdout>,
    pending: Pending,
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    framing: Option<usize>,
) {
    let mut line = String::new();
    while let Ok(Some(text)) = read_message(&mut stdout, &mut line).await {
        let Ok(message) = serde_json::from_str::<Value>(&text) else { continue };
        if message.get("method").is_some() {
            if let Some(request_id) = message.get("id").cloned() {
                let refusal = json!({"jsonrpc": "2.0", "id": request_id,
                    "error": {"code": -32601, "message": "cks-bench answers no requests"}});
                let bytes = frame(&refusal, framing);
                if let Some(stdin) = stdin.lock().await.as_mut() {
                    let _ = stdin.write_all(&bytes).await;
                    let _ = stdin.flush().await;
                }
            }
            continue;
        }
        let Some(id) = message.get("id").and_then(Value::as_u64) else { continue };
        let Some(waiter) = pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id) else { continue };
        let outcome = match message.get("error") {
            Some(error) => Err(CallError::Failed(format!("JSON-RPC error: {error}"))),
            None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
        };
        let _ = waiter.send(outcome);
    }
    // The server closed its stdout: every waiter fails.
    for (_, waiter) in pending.lock().unwrap_or_else(|e| e.into_inner()).drain() {
        let _ = waiter.send(Err(CallError::Failed("the server closed its stdout".into())));
    }
}

pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_split_like_a_shell() {
        let c = ServerCommand::parse("  /a/b/cks-mcp --x 'y z' \"q\\\"r\" s\\ t ").unwrap();
        assert_eq!(c.program, "/a/b/cks-mcp");
        assert_eq!(c.args, vec!["--x", "y z", "q\"r", "s t"]);
        assert!(ServerCommand::parse("   ").is_err());
        assert!(ServerCommand::parse("a 'b").is_err());
    }

    #[tokio::test]
    async fn messages_are_read_in_either_framing() {
        let big = json!({"id": 1, "text": "x".repeat(100)});
        let small = json!({"id": 2});
        let mut wire = frame(&big, Some(50));
        assert!(wire.starts_with(b"Content-Length: "));
        wire.extend(frame(&small, Some(50)));
        assert_eq!(*wire.last().unwrap(), b'\n');
        wire.extend(b"\ncontent-length: 8\r\nContent-Type: application/json\r\n\r\n{\"id\":3}");
        let mut reader = BufReader::new(&wire[..]);
        let mut line = String::new();
        let mut read = Vec::new();
        while let Some(text) = read_message(&mut reader, &mut line).await.unwrap() {
            read.push(serde_json::from_str::<Value>(&text).unwrap());
        }
        assert_eq!(read, vec![big, small, json!({"id": 3})]);
        assert!(read_message(&mut BufReader::new(&b"Content-Length: 9\r\n\r\n{}"[..]), &mut line).await.is_err());
    }

    #[tokio::test]
    async fn a_response_counts_as_received_only_when_it_answers_the_request() {
        // Answers the first request after a notification and another id's response, and never
        // the second.
        let script = r#"read request; echo '{"jsonrpc":"2.0","method":"notifications/message","params":{}}'; echo '{"jsonrpc":"2.0","id":7,"result":{}}'; echo '{"jsonrpc":"2.0","id":1,"result":{"answered":true}}'; read request; sleep 5"#;
        let command = ServerCommand {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            env: HashMap::new(),
            content_length_over: None,
        };
        let dir = tempfile::tempdir().unwrap();
        let mut client =
            McpClient::spawn(&command, dir.path(), &dir.path().join("stderr.log"), Duration::from_secs(30)).unwrap();
        assert_eq!(client.request("ping", json!({})).await.unwrap(), json!({"answered": true}));
        let (received, exchanged) = (client.received_in().unwrap(), client.exchanged_in().unwrap());
        assert!(received <= exchanged, "{received:?} after {exchanged:?}");
        client.set_timeout(Duration::from_millis(200));
        assert!(matches!(client.request("ping", json!({})).await, Err(CallError::Timeout(_))));
        assert_eq!(client.received_in(), None);
        client.kill().await;
    }

    #[test]
    fn a_failure_is_seen_with_or_without_decoding_the_text() {
        let answer =
            |text: &str, is_error: bool| json!({"content": [{"type": "text", "text": text}], "isError": is_error});
        let document = json!({"format": "json", "data": "{\"error\": \"inside the data\"}"}).to_string();
        let cases = [
            (document.as_str(), false, None),
            ("plain text", false, None),
            ("[1, 2]", false, None),
            (r#"{"error": "session_not_found", "message": "no such session"}"#, false, Some("no such session")),
            (r#"{"error": "bad", "message": 3}"#, false, Some("bad")),
            ("anything", true, Some("isError")),
        ];
        for (text, is_error, failure) in cases {
            let result = answer(text, is_error);
            let decoded = tool_result("t", &result).err().map(|e| e.to_string());
            let probed = check_tool_result("t", &result, text).err().map(|e| e.to_string());
            assert_eq!(decoded, probed, "{text}");
            match failure {
                Some(part) => assert!(probed.as_deref().is_some_and(|m| m.contains(part)), "{text}: {probed:?}"),
                None => assert_eq!(probed, None, "{text}"),
            }
        }
        assert_eq!(tool_result("t", &answer(&document, false)).unwrap()["format"], "json");
    }

    #[test]
    fn own_peak_rss_is_readable() {
        if cfg!(target_os = "linux") {
            assert!(vm_hwm_kib(std::process::id()).unwrap() > 0);
        }
    }
}
