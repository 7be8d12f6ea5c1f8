//! A small web server for tests that fetch pages: a route function answers every request (one per
//! connection, HTTP/1.1, `Connection: close`), with the status, headers, body, delay and framing a
//! test asks for, and every request is recorded. Its replies are written byte by byte, so a test can
//! send what a well-behaved server would not (a body without `Content-Length`, a slow answer).

use std::sync::Arc;

/// A request an [`HttpServer`] received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// What an [`HttpServer`] answers.
#[derive(Clone, Debug)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    length: bool,
    delay: Option<std::time::Duration>,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Reply { status, headers: Vec::new(), body: Vec::new(), length: true, delay: None }
    }

    /// A redirect (`{port}` in the location is the server's own port, as in a header or a text body).
    pub fn redirect(status: u16, location: &str) -> Self {
        Reply::status(status).header("Location", location)
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// No Content-Length: the body ends when the connection closes.
    pub fn without_length(mut self) -> Self {
        self.length = false;
        self
    }

    /// Answers only after `delay`.
    pub fn after(mut self, delay: std::time::Duration) -> Self {
        self.delay = Some(delay);
        self
    }
}

type Route = dyn Fn(&str, &str) -> Reply + Send + Sync;

/// A small HTTP/1.1 server on 127.0.0.1: `route(method, path)` answers every request (one per
/// connection), and every request is recorded.
#[derive(Debug)]
pub struct HttpServer {
    pub addr: std::net::SocketAddr,
    requests: Arc<std::sync::Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpServer {
    pub async fn start(route: impl Fn(&str, &str) -> Reply + Send + Sync + 'static) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let addr = listener.local_addr().expect("an address");
        let requests = Arc::new(std::sync::Mutex::new(Vec::new()));
        let route: Arc<Route> = Arc::new(route);
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer(stream, route.clone(), recorded.clone(), addr.port()));
            }
        });
        HttpServer { addr, requests, task }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(
    mut stream: tokio::net::TcpStream,
    route: Arc<Route>,
    recorded: Arc<std::sync::Mutex<Vec<Recorded>>>,
    port: u16,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let (method, path) = (request_line.next().unwrap_or_default(), request_line.next().unwrap_or_default());
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    recorded.lock().unwrap().push(Recorded { method: method.to_owned(), path: path.to_owned(), headers });
    let reply = route(method, path);
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    let own_port = |text: &str| text.replace("{port}", &port.to_string());
    let body = match std::str::from_utf8(&reply.body) {
        Ok(text) => own_port(text).into_bytes(),
        Err(_) => reply.body.clone(),
    };
    let mut out = format!("HTTP/1.1 {} Test\r\nConnection: close\r\n", reply.status);
    for (name, value) in &reply.headers {
        out.push_str(&format!("{name}: {}\r\n", own_port(value)));
    }
    if reply.length {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    if method != "HEAD" {
        bytes.extend_from_slice(&body);
    }
    let _ = stream.write_all(&bytes).await;
    let _ = stream.shutdown().await;
}
