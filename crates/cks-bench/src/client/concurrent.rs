//! [`ConcurrentClient`]: many requests in flight on one stdio connection, their responses routed
//! by JSON-RPC id by a reader task.

use super::*;

/// Many requests in flight on one connection: [`ConcurrentClient::send_tool_call`] writes a request
/// and returns a receiver for its response, which a reader task routes by id.
#[derive(Debug)]
pub(crate) struct ConcurrentClient {
    pub(super) inner: Option<McpClient>,
    pub(super) stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    pub(super) pending: Pending,
    pub(super) reader: JoinHandle<()>,
    pub(super) next_id: Arc<std::sync::atomic::AtomicU64>,
    pub(super) framing: Option<usize>,
}

/// A request in flight.
#[derive(Debug)]
pub(crate) struct InFlight {
    id: u64,
    name: String,
    receiver: oneshot::Receiver<Result<Value, CallError>>,
}

impl InFlight {
    /// Waits (at most `timeout`) for the response and returns the tool's result object.
    pub(crate) async fn wait(self, timeout: Duration) -> Result<Value, CallError> {
        match tokio::time::timeout(timeout, self.receiver).await {
            Ok(Ok(Ok(result))) => tool_result(&self.name, &result),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(CallError::Failed("the response router stopped".into())),
            Err(_) => Err(CallError::Timeout(timeout)),
        }
    }
}

impl ConcurrentClient {
    /// Writes one `tools/call` request; its response is awaited with [`InFlight::wait`].
    pub(crate) async fn send_tool_call(&self, name: &str, arguments: Value) -> Result<InFlight, CallError> {
        // Ids far above those the sequential client used.
        let id = (1 << 32) + self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(id, sender);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}});
        let bytes = frame(&message, self.framing);
        let mut stdin = self.stdin.lock().await;
        let stdin = stdin.as_mut().ok_or_else(|| CallError::Failed("stdin closed".into()))?;
        stdin.write_all(&bytes).await.map_err(|e| CallError::Failed(format!("writing to the server: {e}")))?;
        stdin.flush().await.map_err(|e| CallError::Failed(format!("writing to the server: {e}")))?;
        Ok(InFlight { id, name: name.to_owned(), receiver })
    }

    /// Cancels a request in flight (`notifications/cancelled`); its response, if one still
    /// comes, is dropped.
    pub(crate) async fn cancel(&self, call: InFlight) -> Result<(), CallError> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&call.id);
        let message = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": call.id, "reason": "the client gave up"}});
        let bytes = frame(&message, self.framing);
        let mut stdin = self.stdin.lock().await;
        let stdin = stdin.as_mut().ok_or_else(|| CallError::Failed("stdin closed".into()))?;
        stdin.write_all(&bytes).await.map_err(|e| CallError::Failed(format!("writing to the server: {e}")))?;
        stdin.flush().await.map_err(|e| CallError::Failed(format!("writing to the server: {e}")))
    }

    /// One call, waited for.
    pub(crate) async fn call_tool(&self, name: &str, arguments: Value, timeout: Duration) -> Result<Value, CallError> {
        self.send_tool_call(name, arguments).await?.wait(timeout).await
    }

    /// Closes stdin, waits for the server to exit (see [`McpClient::shutdown`]) and returns its
    /// peak RSS (KiB).
    pub(crate) async fn shutdown(mut self, grace: Duration) -> Option<u64> {
        drop(self.stdin.lock().await.take());
        let inner = self.inner.take()?;
        let peak = inner.shutdown(grace).await;
        self.reader.abort();
        peak
    }

    /// Kills the server at once.
    pub(crate) async fn kill(mut self) -> Option<u64> {
        let inner = self.inner.take()?;
        let peak = inner.kill().await;
        self.reader.abort();
        peak
    }
}
