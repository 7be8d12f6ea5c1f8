//! A minimal MCP client over the real binary's stdio: newline-delimited JSON-RPC, the handshake,
//! requests answered by id (notifications kept aside) and tool results read from their text.

use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

pub(crate) struct Mcp {
    pub(crate) child: Child,
    pub(crate) stdin: ChildStdin,
    pub(crate) lines: Lines<BufReader<ChildStdout>>,
    pub(crate) next_id: u64,
    pub(crate) notifications: Vec<Value>,
}

impl Mcp {
    pub(crate) async fn start(data_dir: &std::path::Path, env: &[(&'static str, String)]) -> Mcp {
        Mcp::start_with_args(data_dir, env, &[]).await
    }

    /// [`Mcp::start`] with command-line arguments (e.g. `--http ADDR`, to serve HTTP as well).
    pub(crate) async fn start_with_args(
        data_dir: &std::path::Path,
        env: &[(&'static str, String)],
        args: &[String],
    ) -> Mcp {
        let mut mcp = Mcp::spawn(data_dir, env, args).await;
        let init = mcp
            .request("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}))
            .await;
        assert_eq!(init["result"]["serverInfo"]["name"], "cks-mcp");
        mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        mcp
    }

    /// The server, started without a handshake (as a client of the stateless revision starts it).
    pub(crate) async fn spawn(data_dir: &std::path::Path, env: &[(&'static str, String)], args: &[String]) -> Mcp {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cks-mcp"));
        command.args(args);
        command.env("CKS_MCP_DATA_DIR", data_dir).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.kill_on_drop(true).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Mcp { child, stdin, lines, next_id: 0, notifications: Vec::new() }
    }

    pub(crate) async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    pub(crate) async fn send_request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        id
    }

    pub(crate) async fn read(&mut self, timeout: Duration) -> Option<Value> {
        match tokio::time::timeout(timeout, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => Some(serde_json::from_str(&line).unwrap()),
            _ => None,
        }
    }

    pub(crate) async fn response(&mut self, id: u64) -> Value {
        loop {
            let message = self.read(Duration::from_secs(60)).await.expect("a response");
            if message.get("id") == Some(&json!(id)) {
                return message;
            }
            self.notifications.push(message);
        }
    }

    pub(crate) async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params).await;
        self.response(id).await
    }

    pub(crate) async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let reply = self.request("tools/call", json!({"name": tool, "arguments": arguments})).await;
        serde_json::from_str(reply["result"]["content"][0]["text"].as_str().expect("a tool result")).unwrap()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
