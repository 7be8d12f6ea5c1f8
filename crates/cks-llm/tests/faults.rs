//! Fault tests per class and provider against `cks-testkit`: what is retried, how often, with which error;
//! and the redaction check over every error, log line and result the suite produces.
//!
//! `fault_matrix` prints the class × provider table (run with `--nocapture` to see it).

mod common;

use std::time::{Duration, Instant};

use cks_llm::{ChatOptions, ErrorKind, LlmClient, LlmConfig, LlmError, Message, ProviderKind};
use cks_testkit::{ProviderServer, Reply, ToolCall};
use common::*;
use serde_json::json;

/// What a row expects: an answer, or an error of this class, after this many requests.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Ok(usize),
    Err(ErrorKind, usize),
}

struct Row {
    name: &'static str,
    script: Vec<Reply>,
    stream: bool,
    expect: Expect,
    /// Tweak the client's configuration (e.g. a short timeout).
    tweak: fn(&mut LlmConfig),
    /// The wait the retry must have honoured, at least.
    min_elapsed: Duration,
}

fn row(name: &'static str, script: Vec<Reply>, expect: Expect) -> Row {
    Row { name, script, stream: false, expect, tweak: |_| {}, min_elapsed: Duration::ZERO }
}

fn times(r: Reply, n: usize) -> Vec<Reply> {
    vec![r; n]
}

fn status(status: u16, headers: Vec<(&str, &str)>, body: &str) -> Reply {
    Reply::Status {
        status,
        headers: headers.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect(),
        body: body.to_owned(),
    }
}

fn ok() -> Reply {
    Reply::text("fine")
}

fn rows(kind: ProviderKind) -> Vec<Row> {
    use ErrorKind::*;
    let leaky = format!(
        r#"{{"error": {{"message": "invalid key {}", "type": "authentication_error"}}}}"#,
        secret("ANTHROPIC_API_KEY")
    );
    let leaky: &'static str = Box::leak(leaky.into_boxed_str());
    let mut rows = vec![
        row("429, then ok", vec![Reply::RateLimited { retry_after_secs: None }, ok()], Expect::Ok(2)),
        row("429 persistent", times(Reply::RateLimited { retry_after_secs: None }, 4), Expect::Err(RateLimited, 4)),
        Row {
            min_elapsed: Duration::from_millis(950),
            ..row(
                "429 retry-after 1 s, then ok",
                vec![Reply::RateLimited { retry_after_secs: Some(1) }, ok()],
                Expect::Ok(2),
            )
        },
        row(
            "429 retry-after 3600 s",
            vec![Reply::RateLimited { retry_after_secs: Some(3600) }],
            Expect::Err(RateLimited, 1),
        ),
        row("overloaded (529/503), then ok", vec![Reply::Overloaded, ok()], Expect::Ok(2)),
        row("overloaded persistent", times(Reply::Overloaded, 4), Expect::Err(Overloaded, 4)),
        row("500 persistent", times(Reply::ServerError, 4), Expect::Err(Server, 4)),
        row("502, then ok", vec![status(502, vec![], "bad gateway"), ok()], Expect::Ok(2)),
        row("408, then ok", vec![status(408, vec![], ""), ok()], Expect::Ok(2)),
        row(
            "500 x-should-retry: false",
            vec![status(500, vec![("x-should-retry", "false")], "{}")],
            Expect::Err(Server, 1),
        ),
        row("401 (body echoes a key)", vec![status(401, vec![], leaky)], Expect::Err(Auth, 1)),
        row("403", vec![status(403, vec![], "{}")], Expect::Err(Auth, 1)),
        row("400", vec![status(400, vec![], r#"{"error": "bad"}"#)], Expect::Err(BadRequest, 1)),
        row("404 model", vec![status(404, vec![], r#"{"error": "model not found"}"#)], Expect::Err(BadRequest, 1)),
        row("garbage 200 body", vec![Reply::Garbage], Expect::Err(MalformedResponse, 1)),
        row("truncated 200 body", vec![Reply::Truncated], Expect::Err(MalformedResponse, 1)),
        row("dropped connection, then ok", vec![Reply::DropConnection, ok()], Expect::Ok(2)),
        row("dropped connection persistent", times(Reply::DropConnection, 4), Expect::Err(Unavailable, 4)),
        Row {
            tweak: |c| c.http.request_timeout = Duration::from_millis(300),
            ..row("slow answer (timeout), then ok", vec![ok().delayed(Duration::from_secs(1)), ok()], Expect::Ok(2))
        },
        Row {
            tweak: |c| c.http.request_timeout = Duration::from_millis(200),
            ..row("slow answer persistent", times(ok().delayed(Duration::from_millis(600)), 4), Expect::Err(Timeout, 4))
        },
        Row { stream: true, ..row("stream: error event, then ok", vec![Reply::ErrorMidStream, ok()], Expect::Ok(2)) },
        Row {
            stream: true,
            ..row("stream: error event persistent", times(Reply::ErrorMidStream, 4), Expect::Err(StreamError, 4))
        },
        Row {
            stream: true,
            ..row("stream: truncated persistent", times(Reply::Truncated, 4), Expect::Err(StreamError, 4))
        },
        Row { stream: true, ..row("stream: garbage", vec![Reply::Garbage], Expect::Err(MalformedResponse, 1)) },
    ];
    // Inside a 200 without streaming: the provider's error object as the body; classified by its content.
    let in_200 = match kind {
        ProviderKind::Ollama | ProviderKind::OpenaiCompatible => Expect::Err(Server, 4),
        ProviderKind::Anthropic | ProviderKind::Google => Expect::Err(Overloaded, 4),
    };
    rows.push(row("error object inside a 200 body", times(Reply::ErrorMidStream, 4), in_200));
    match kind {
        ProviderKind::OpenaiCompatible => {
            rows.push(row(
                "429 insufficient_quota",
                vec![status(429, vec![], r#"{"error":{"message":"You exceeded your quota","type":"insufficient_quota","code":"insufficient_quota"}}"#)],
                Expect::Err(RateLimited, 1),
            ));
            rows.push(row(
                "400 tool_use_failed (Groq), then ok",
                vec![status(400, vec![], r#"{"error":{"message":"Failed to call a function","type":"invalid_request_error","code":"tool_use_failed"}}"#), ok()],
                Expect::Ok(2),
            ));
            rows.push(row(
                "400 tool_use_failed twice",
                times(status(400, vec![], r#"{"error":{"message":"Failed","code":"tool_use_failed"}}"#), 2),
                Expect::Err(BadRequest, 2),
            ));
        }
        ProviderKind::Google => {
            rows.push(row(
                "429 daily quota",
                vec![status(429, vec![], r#"{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}]}}"#)],
                Expect::Err(RateLimited, 1),
            ));
            rows.push(row(
                "429 RetryInfo 0.05 s in body, then ok",
                vec![status(429, vec![], r#"{"error":{"code":429,"message":"slow down","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"0.05s"}]}}"#), ok()],
                Expect::Ok(2),
            ));
        }
        ProviderKind::Anthropic => rows.push(row(
            "429 retry-after-ms 20, then ok",
            vec![
                status(
                    429,
                    vec![("retry-after-ms", "20")],
                    r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}"#,
                ),
                ok(),
            ],
            Expect::Ok(2),
        )),
        ProviderKind::Ollama => {}
    }
    rows
}

/// Runs one row; returns the observed behaviour and the error, if any.
async fn run_row(kind: ProviderKind, r: &Row) -> (Expect, Duration, Option<LlmError>) {
    let server = ProviderServer::start().await;
    server.push_all(r.script.clone());
    let mut config = config_for(kind, &server.base_url());
    (r.tweak)(&mut config);
    let client = LlmClient::new(config).unwrap();
    let started = Instant::now();
    let result = client
        .chat_with(request(vec![Message::user("Hi")]), ChatOptions { stream: r.stream, ..ChatOptions::default() })
        .await;
    let elapsed = started.elapsed();
    let attempts = chat_requests(&server).len();
    assert_requests_valid(&server);
    match result {
        Ok(resp) => {
            assert_no_secret("response", &serde_json::to_string(&resp).unwrap());
            (Expect::Ok(attempts), elapsed, None)
        }
        Err(e) => {
            assert_eq!(e.context().attempts as usize, attempts, "{kind} {}: attempts in the error", r.name);
            (Expect::Err(e.kind(), attempts), elapsed, Some(e))
        }
    }
}

fn describe(e: Expect, elapsed: Duration) -> String {
    let t =
        if elapsed >= Duration::from_millis(500) { format!(", {:.1} s", elapsed.as_secs_f64()) } else { String::new() };
    match e {
        Expect::Ok(1) => format!("ok{t}"),
        Expect::Ok(n) => format!("ok after {} retr{}{t}", n - 1, if n == 2 { "y" } else { "ies" }),
        Expect::Err(k, 1) => format!("{k:?}, not retried{t}"),
        Expect::Err(k, n) => format!("{k:?} after {n} attempts{t}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_matrix() {
    let logs = capture_logs();
    let tasks: Vec<_> = ProviderKind::ALL
        .into_iter()
        .map(|kind| {
            tokio::spawn(async move {
                let mut out = Vec::new();
                for r in rows(kind) {
                    let (observed, elapsed, err) = run_row(kind, &r).await;
                    if let Some(e) = &err {
                        assert_no_secret("error", &format!("{e} {e:?}"));
                    }
                    assert_eq!(observed, r.expect, "{kind}: {} ({:?})", r.name, err.map(|e| e.to_string()));
                    assert!(elapsed >= r.min_elapsed, "{kind}: {} took {elapsed:?}", r.name);
                    out.push((r.name, kind, describe(observed, elapsed)));
                }
                out
            })
        })
        .collect();
    let mut cells = Vec::new();
    for t in tasks {
        cells.extend(t.await.unwrap());
    }
    // The table: one row per fault class, one column per provider.
    let mut names: Vec<&str> = Vec::new();
    for (n, _, _) in &cells {
        if !names.contains(n) {
            names.push(n);
        }
    }
    let mut table =
        String::from("| fault | anthropic | openai_compatible | google | ollama |\n|---|---|---|---|---|\n");
    for n in names {
        let cell = |k: ProviderKind| {
            cells.iter().find(|(m, p, _)| *m == n && *p == k).map_or("—".to_owned(), |(_, _, d)| d.clone())
        };
        table.push_str(&format!(
            "| {n} | {} | {} | {} | {} |\n",
            cell(ProviderKind::Anthropic),
            cell(ProviderKind::OpenaiCompatible),
            cell(ProviderKind::Google),
            cell(ProviderKind::Ollama)
        ));
    }
    println!("{table}");
    assert_no_secret("logs", &logs.text());
}

/// A port that refuses connections for as long as the socket lives: bound but never listening.
/// A port bound and closed again could be handed to another test's server in the meantime.
fn refusing_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    (socket, port)
}

#[tokio::test]
async fn unreachable_provider_is_retried_then_unavailable() {
    let _logs = capture_logs();
    let (_held, port) = refusing_port();
    for kind in ProviderKind::ALL {
        let client = LlmClient::new(config_for(kind, &format!("http://127.0.0.1:{port}"))).unwrap();
        let e = client.chat(request(vec![Message::user("hi")])).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{kind}: {e}");
        assert_eq!(e.context().attempts, 4);
        assert_no_secret("error", &format!("{e} {e:?}"));
        if kind == ProviderKind::Ollama {
            assert!(e.to_string().contains("ollama serve"), "{e}");
        }
    }
}

#[tokio::test]
async fn not_configured_fails_fast_naming_every_option() {
    // auto, Ollama unreachable, no Anthropic key.
    let (_held, port) = refusing_port();
    let base = format!("http://127.0.0.1:{port}");
    let client = LlmClient::from_env(|k| match k {
        "CKS_OLLAMA_HOST" => Some(base.clone()),
        _ => None,
    })
    .unwrap();
    let e = client.chat(request(vec![Message::user("hi")])).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotConfigured);
    for word in [
        "auto",
        "ollama",
        "anthropic",
        "google",
        "openai_compatible",
        "ANTHROPIC_API_KEY",
        "CKS_OLLAMA_HOST",
        "CKS_GOOGLE_API_KEY",
        "CKS_OPENAI_BASE_URL",
    ] {
        assert!(e.to_string().contains(word), "{word}: {e}");
    }
    let status = client.status().await;
    assert!(!status.configured && status.provider.is_none());
    // A forced provider without its key.
    for kind in [ProviderKind::Anthropic, ProviderKind::Google] {
        let client = LlmClient::from_env(|k| (k == "CKS_LLM_PROVIDER").then(|| kind.as_str().to_owned())).unwrap();
        let e = client.chat(request(vec![Message::user("hi")])).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotConfigured, "{kind}");
    }
    // Telemetry recorded the failures without content.
    let t = client.telemetry();
    assert_eq!(t.totals.errors, 1);
}

/// No configured secret in any error, log line, result, status or telemetry snapshot.
#[tokio::test]
async fn redaction() {
    let logs = capture_logs();
    let all = SECRETS.iter().map(|(_, v)| *v).collect::<Vec<_>>().join(" ");
    for kind in ProviderKind::ALL {
        let server = ProviderServer::start().await;
        server.push_all([
            // The provider echoes the keys in an error body, in text, and in tool arguments.
            status(401, vec![], &format!(r#"{{"error": {{"message": "bad key {all}"}}}}"#)),
            Reply::text(format!("your keys: {all}")),
            Reply::ToolCalls(vec![ToolCall::new("get_weather", json!({"city": all}))]),
            status(500, vec![], &format!("upstream said {all}")),
            status(500, vec![], &format!("upstream said {all}")),
            status(500, vec![], &format!("upstream said {all}")),
            status(500, vec![], &format!("upstream said {all}")),
        ]);
        let client = client(kind, &server);
        let mut seen = Vec::new();
        for stream in [false, false, true, false] {
            match client
                .chat_with(request(vec![Message::user("hi")]), ChatOptions { stream, ..ChatOptions::default() })
                .await
            {
                Ok(r) => seen.push(serde_json::to_string(&r).unwrap()),
                Err(e) => seen.push(format!("{e} | {e:?}")),
            }
        }
        seen.push(serde_json::to_string(&client.status().await).unwrap());
        seen.push(serde_json::to_string(&client.telemetry()).unwrap());
        seen.push(format!("{client:?}"));
        for s in &seen {
            assert_no_secret(&format!("{kind} output"), s);
        }
        assert!(seen.iter().any(|s| s.contains(cks_llm::REDACTED)), "{kind}: the echoes were replaced");
        // The keys did go to the provider, in the right header.
        let sent = &chat_requests(&server)[0];
        match kind {
            ProviderKind::Anthropic => assert_eq!(sent.header("x-api-key"), Some(secret("ANTHROPIC_API_KEY"))),
            ProviderKind::Google => assert_eq!(sent.header("x-goog-api-key"), Some(secret("CKS_GOOGLE_API_KEY"))),
            ProviderKind::OpenaiCompatible => {
                assert_eq!(
                    sent.header("authorization"),
                    Some(format!("Bearer {}", secret("CKS_OPENAI_API_KEY")).as_str())
                )
            }
            ProviderKind::Ollama => assert_eq!(sent.header("authorization"), None),
        }
    }
    let text = logs.text();
    assert!(text.contains("LLM call failed"), "the failures were logged");
    assert_no_secret("logs", &text);
}

#[tokio::test]
async fn hostile_model_names_send_nothing_and_retries_are_counted() {
    for kind in ProviderKind::ALL {
        let server = ProviderServer::start().await;
        server.push(Reply::text("never asked"));
        let client = client(kind, &server);
        let mut hostile = request(vec![Message::user("hi")]);
        hostile.model = Some("../x?y#".into());
        let e = client.chat(hostile).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest, "{kind}: {e}");
        assert!(e.to_string().contains("invalid model name"), "{kind}: {e}");
        assert!(chat_requests(&server).is_empty(), "{kind}: a request was sent");

        // The answer says how many requests it took: the queued text after one server error.
        server.push(Reply::ServerError);
        let answer = client.chat(request(vec![Message::user("hi")])).await.unwrap();
        assert_eq!(answer.text(), "never asked");
        assert_eq!(answer.requests, 1, "{kind}: first reply answered the first request");
        server.push(Reply::text("after a retry"));
        let answer = client.chat(request(vec![Message::user("hi")])).await.unwrap();
        assert_eq!((answer.text().as_str(), answer.requests), ("after a retry", 2), "{kind}");
    }
}
