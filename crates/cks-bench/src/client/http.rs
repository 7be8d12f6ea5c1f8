//! [`HttpClient`]: MCP over HTTP in its bare JSON-RPC form.

use super::*;

/// MCP over HTTP in its bare JSON-RPC form (a server started with `--http`): tool calls, and any
/// body at all (the soak sends malformed ones that must get error answers).
pub(crate) struct HttpClient {
    pub(crate) client: reqwest::Client,
    base: String,
    url: String,
}

impl HttpClient {
    pub(crate) async fn new(port: u16) -> anyhow::Result<HttpClient> {
        // Plain HTTP on loopback, but reqwest wants a TLS provider chosen before any client exists.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let base = format!("http://127.0.0.1:{port}");
        let http = HttpClient { client: reqwest::Client::new(), url: format!("{base}/mcp"), base };
        // The listener comes up a moment after the process; wait for it.
        for _ in 0..300 {
            if http.client.get(format!("{}/health", http.base)).send().await.is_ok() {
                return Ok(http);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("the HTTP listener on port {port} did not come up")
    }

    pub(crate) async fn post(&self, body: String) -> Result<(u16, Value), CallError> {
        let response = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| CallError::Failed(format!("HTTP: {e}")))?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(|e| CallError::Failed(format!("HTTP body: {e}")))?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
    }

    pub(crate) async fn call(&self, name: &str, arguments: Value) -> Result<Value, CallError> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
        let (status, answer) = self.post(body.to_string()).await?;
        let text = answer["result"]["content"][0]["text"].as_str().unwrap_or_default();
        match serde_json::from_str::<Value>(text) {
            Ok(result) if status == 200 && result.get("error").is_none() => Ok(result),
            _ => Err(CallError::Failed(format!("{name} over HTTP: {status} {}", truncate(&answer.to_string(), 200)))),
        }
    }

    /// `http://127.0.0.1:PORT`, for the other routes (`/events`, `/health`).
    pub(crate) fn base(&self) -> &str {
        &self.base
    }
}

/// A loopback port free a moment ago.
pub(crate) fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
