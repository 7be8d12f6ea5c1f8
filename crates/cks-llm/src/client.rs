//! [`LlmClient`]: the entry point. It picks the provider per the configuration, resolves the model,
//! lets the provider's adapter build the request, sends it through the one HTTP layer and records
//! telemetry. It contains no provider-specific behaviour: that is the adapters' business.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::config::{LlmConfig, ProviderChoice, check_model_name, provider_help};
use crate::conversation::{ChatRequest, ChatResponse, ProviderKind, Usage};
use crate::error::{ErrorContext, LlmError};
use crate::http::{Decoder, Outcome, Payload, Transport};
use crate::providers::{self, Auto, CallSettings, ModelInfo};
use crate::telemetry::{CallInfo, CallOutcome, Operation, Telemetry, TelemetrySnapshot};

/// How to make one chat call.
#[derive(Clone, Copy, Default)]
pub struct ChatOptions<'a> {
    /// Ask the provider to stream and assemble the answer from the stream. The result is the same
    /// [`ChatResponse`]; streaming only changes the wire (and lets long answers start sooner upstream).
    pub stream: bool,
    /// Receives the answer's text as the provider streams it (implies `stream`). The pieces, joined,
    /// are the text of the answer (its text blocks; never reasoning or tool arguments), redacted like
    /// the answer itself.
    ///
    /// Retries: an attempt that fails before any text reached the sink is retried as usual (nothing
    /// was shown). Once text has reached the sink, a failed attempt is not retried — the text shown
    /// cannot be taken back, and a second attempt would repeat or contradict it — and the call fails
    /// with the attempt's error.
    pub deltas: Option<&'a dyn DeltaSink>,
}

impl std::fmt::Debug for ChatOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatOptions").field("stream", &self.stream).field("deltas", &self.deltas.is_some()).finish()
    }
}

impl ChatOptions<'_> {
    /// Whether the answer is streamed.
    pub fn streamed(&self) -> bool {
        self.stream || self.deltas.is_some()
    }
}

/// Receives the text of a streamed answer as it arrives ([`ChatOptions::deltas`]).
pub trait DeltaSink: Send + Sync {
    /// The next piece of the answer's text (never empty).
    fn text(&self, delta: &str);
}

impl<F: Fn(&str) + Send + Sync> DeltaSink for F {
    fn text(&self, delta: &str) {
        self(delta)
    }
}

/// Which provider would answer and whether it can.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LlmStatus {
    /// `CKS_LLM_PROVIDER` as configured (`auto` or a provider name).
    pub selection: String,
    /// The provider that would answer (absent when none is usable).
    pub provider: Option<ProviderKind>,
    /// The model a call without override would use.
    pub model: Option<String>,
    /// The provider's base URL.
    pub base_url: Option<String>,
    /// Whether the provider has what it needs (key set where one is required).
    pub configured: bool,
    /// Whether the provider answered a model-list request with 2xx just now.
    pub reachable: bool,
    /// What is wrong, when something is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug)]
struct CachedModels {
    at: Instant,
    provider: ProviderKind,
    base_url: String,
    models: Vec<ModelInfo>,
}

#[derive(Debug)]
struct Inner {
    config: LlmConfig,
    transport: Transport,
    telemetry: Telemetry,
    models: Mutex<Option<CachedModels>>,
    auto: Mutex<Option<(Instant, ProviderKind)>>,
}

/// The LLM client. Cheap to clone; clones share the HTTP connection pool, caches and telemetry.
#[derive(Debug, Clone)]
pub struct LlmClient {
    inner: Arc<Inner>,
}

impl LlmClient {
    /// A client for this configuration.
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        let transport = Transport::new(config.http.clone(), config.redactor.clone());
        let telemetry = Telemetry::new(config.telemetry_capacity);
        Ok(LlmClient {
            inner: Arc::new(Inner { config, transport, telemetry, models: Mutex::new(None), auto: Mutex::new(None) }),
        })
    }

    /// A client configured from an injected environment (see [`LlmConfig::from_env`]).
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        LlmClient::new(LlmConfig::from_env(env)?)
    }

    /// The configuration.
    pub fn config(&self) -> &LlmConfig {
        &self.inner.config
    }

    /// A copy of the telemetry.
    pub fn telemetry(&self) -> TelemetrySnapshot {
        self.inner.telemetry.snapshot()
    }

    /// One chat call, not streamed.
    pub async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        self.chat_with(request, ChatOptions::default()).await
    }

    /// One chat call with options.
    pub async fn chat_with(&self, request: ChatRequest, options: ChatOptions<'_>) -> Result<ChatResponse, LlmError> {
        let stream = options.streamed();
        let started = SystemTime::now();
        let clock = Instant::now();
        let kind = match self.provider().await {
            Ok(k) => k,
            Err(e) => {
                self.record(
                    started,
                    clock,
                    None,
                    request.model.as_deref().unwrap_or(""),
                    Wire::asked(stream),
                    Operation::Chat,
                    Usage::default(),
                    0,
                    &Err::<(), _>(e.clone()),
                );
                return Err(e);
            }
        };
        let config = &self.inner.config;
        let settings = CallSettings {
            model: config.resolve_model(kind, request.model.as_deref()),
            max_tokens: request.max_tokens.unwrap_or(config.default_max_tokens).max(1),
            stream,
        };
        if let Err(why) = check_model_name(&settings.model) {
            // Nothing is sent: the name could aim the request at another path of the provider's host.
            let error = self
                .inner
                .transport
                .redactor()
                .redact_error(LlmError::BadRequest(ErrorContext { provider: Some(kind), ..ErrorContext::msg(why) }));
            let result = Err::<ChatResponse, _>(error);
            self.record(
                started,
                clock,
                Some(kind),
                "",
                Wire::asked(stream),
                Operation::Chat,
                Usage::default(),
                0,
                &result,
            );
            return result;
        }
        let span = self.call_span("chat", kind, &settings.model);
        let result = match providers::encode_chat(kind, &request, config.provider_config(kind), &settings) {
            Ok((call, ctx)) => {
                let Outcome { result, retries, whole_answer } = self
                    .inner
                    .transport
                    .execute(kind, &settings.model, &call, Decoder::Chat { ctx: &ctx, stream, deltas: options.deltas })
                    .instrument(span.clone())
                    .await;
                let result = result.and_then(|p| match p {
                    Payload::Chat(mut r) => {
                        r.requests = retries + 1;
                        Ok(r)
                    }
                    Payload::Models(_) | Payload::Embeddings(_) => Err(internal(kind, &settings.model)),
                });
                (result, retries, whole_answer)
            }
            Err(e) => (Err(self.inner.transport.redactor().redact_error(e)), 0, false),
        };
        let (result, retries, whole_answer) = result;
        let usage = result.as_ref().map(|r| r.usage).unwrap_or_default();
        let wire = Wire { streamed: stream, whole_answer };
        self.record(started, clock, Some(kind), &settings.model, wire, Operation::Chat, usage, retries, &result);
        close_span(&span, usage, retries, &result);
        result
    }

    /// The span of one call to the provider, for traces only (`cks_trace`): the operation, the
    /// provider and the model (redacted as every text that leaves this crate), never a key, a
    /// prompt or an answer. A disabled span (traces off) costs nothing more.
    fn call_span(&self, operation: &'static str, kind: ProviderKind, model: &str) -> tracing::Span {
        let span = tracing::info_span!(
            target: "cks_trace",
            "llm_call",
            otel.name = tracing::field::Empty,
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = operation,
            gen_ai.provider.name = kind.as_str(),
            gen_ai.request.model = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
            "cks.llm.retries" = tracing::field::Empty,
        );
        if !span.is_disabled() {
            let model = self.inner.transport.redactor().redact(model);
            span.record("otel.name", format!("{operation} {model}").as_str());
            span.record("gen_ai.request.model", model.as_str());
        }
        span
    }

    /// The provider that answers calls now: the configured one, or the `auto` choice (Ollama if it answers
    /// `GET /api/tags` within the probe timeout, else Anthropic if `ANTHROPIC_API_KEY` is set).
    pub async fn provider(&self) -> Result<ProviderKind, LlmError> {
        let config = &self.inner.config;
        match config.provider {
            ProviderChoice::Fixed(kind) => {
                config
                    .provider_config(kind)
                    .check_ready()
                    .map_err(|e| self.inner.transport.redactor().redact_error(e))?;
                Ok(kind)
            }
            ProviderChoice::Auto => {
                if let Some((at, kind)) = *self.lock_auto()
                    && at.elapsed() < config.auto_ttl
                {
                    return Ok(kind);
                }
                let kind = self.choose_auto().await?;
                *self.lock_auto() = Some((Instant::now(), kind));
                Ok(kind)
            }
        }
    }

    /// The first provider, in the table's order, that `auto` may choose and that is usable now;
    /// otherwise an error saying what each one lacked.
    async fn choose_auto(&self) -> Result<ProviderKind, LlmError> {
        let config = &self.inner.config;
        let mut lacks = Vec::new();
        for &kind in &ProviderKind::ALL {
            let adapter = providers::adapter(kind);
            let provider = config.provider_config(kind);
            match adapter.auto {
                Auto::WhenReachable => {
                    let probe = providers::encode_list_models(kind, provider);
                    match self.inner.transport.probe(&probe).await {
                        Ok(()) => return Ok(kind),
                        Err(why) => {
                            lacks.push(format!("{} is not reachable at {} ({why})", adapter.title, provider.base_url));
                        }
                    }
                }
                Auto::WhenKeyed if provider.api_key.is_some() => return Ok(kind),
                Auto::WhenKeyed => lacks.push(format!("{} is not set", provider.key_variable())),
                Auto::Never => {}
            }
        }
        Err(LlmError::not_configured(
            None,
            format!("no LLM provider is available: {}. {}", lacks.join(" and "), provider_help()),
        ))
    }

    fn lock_auto(&self) -> std::sync::MutexGuard<'_, Option<(Instant, ProviderKind)>> {
        self.inner.auto.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Which provider would answer, whether it is configured and whether it answers now.
    pub async fn status(&self) -> LlmStatus {
        let config = &self.inner.config;
        let selection = config.provider.to_string();
        let kind = match self.provider().await {
            Ok(k) => k,
            Err(e) => {
                let provider = match config.provider {
                    ProviderChoice::Fixed(k) => Some(k),
                    ProviderChoice::Auto => None,
                };
                return LlmStatus {
                    selection,
                    provider,
                    model: provider.map(|k| config.provider_config(k).model.clone()),
                    base_url: provider.map(|k| config.provider_config(k).base_url.clone()),
                    configured: false,
                    reachable: false,
                    message: Some(e.context().message.clone()),
                };
            }
        };
        let pc = config.provider_config(kind);
        let probe = self.inner.transport.probe(&providers::encode_list_models(kind, pc)).await;
        LlmStatus {
            selection,
            provider: Some(kind),
            model: Some(pc.model.clone()),
            base_url: Some(pc.base_url.clone()),
            configured: true,
            reachable: probe.is_ok(),
            message: probe.err().map(|why| format!("{kind} did not answer at {}: {why}", pc.base_url)),
        }
    }

    /// The models the current provider offers, cached for `models_ttl` per provider and base URL.
    pub async fn list_models(&self) -> Result<Vec<ModelInfo>, LlmError> {
        let started = SystemTime::now();
        let clock = Instant::now();
        let config = &self.inner.config;
        let kind = self.provider().await?;
        let pc = config.provider_config(kind);
        if !config.models_ttl.is_zero()
            && let Some(c) = self.inner.models.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref()
            && c.provider == kind
            && c.base_url == pc.base_url
            && c.at.elapsed() < config.models_ttl
        {
            return Ok(c.models.clone());
        }
        let call = providers::encode_list_models(kind, pc);
        let span = self.call_span("list_models", kind, &pc.model);
        let Outcome { result, retries, .. } =
            self.inner.transport.execute(kind, &pc.model, &call, Decoder::Models).instrument(span.clone()).await;
        let result = result.and_then(|p| match p {
            Payload::Models(m) => Ok(m),
            Payload::Chat(_) | Payload::Embeddings(_) => Err(internal(kind, &pc.model)),
        });
        self.record(
            started,
            clock,
            Some(kind),
            &pc.model,
            Wire::asked(false),
            Operation::ListModels,
            Usage::default(),
            retries,
            &result,
        );
        close_span(&span, Usage::default(), retries, &result);
        let models = result?;
        if !config.models_ttl.is_zero() {
            *self.inner.models.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(CachedModels {
                at: Instant::now(),
                provider: kind,
                base_url: pc.base_url.clone(),
                models: models.clone(),
            });
        }
        Ok(models)
    }

    #[allow(clippy::too_many_arguments)] // a private recording helper; a struct would only rename the list
    fn record<T>(
        &self,
        started: SystemTime,
        clock: Instant,
        provider: Option<ProviderKind>,
        model: &str,
        wire: Wire,
        operation: Operation,
        usage: Usage,
        retries: u32,
        result: &Result<T, LlmError>,
    ) {
        self.inner.telemetry.record(CallInfo {
            started,
            provider,
            model: &self.inner.transport.redactor().redact(model),
            operation,
            streamed: wire.streamed,
            whole_answer: wire.whole_answer,
            latency: clock.elapsed(),
            usage,
            retries,
            outcome: match result {
                Ok(_) => CallOutcome::Ok,
                Err(e) => CallOutcome::Error(e.kind()),
            },
        });
    }
}

/// Records a call's tokens, retries and outcome on its span.
fn close_span<T>(span: &tracing::Span, usage: Usage, retries: u32, result: &Result<T, LlmError>) {
    if span.is_disabled() {
        return;
    }
    span.record("gen_ai.usage.input_tokens", usage.input_tokens);
    span.record("gen_ai.usage.output_tokens", usage.output_tokens);
    span.record("cks.llm.retries", retries);
    if let Err(e) = result {
        span.record("error.type", e.kind().as_str());
        span.record("otel.status_code", "error");
    }
}

/// How a call's answer travelled, for its record.
#[derive(Debug, Clone, Copy)]
struct Wire {
    /// A stream was asked for.
    streamed: bool,
    /// ... and the provider answered with one whole body instead.
    whole_answer: bool,
}

impl Wire {
    /// A call that got no answer, or was not streamed: only what was asked is known.
    fn asked(streamed: bool) -> Self {
        Wire { streamed, whole_answer: false }
    }
}

/// A payload of the wrong kind cannot happen (the decoder decides the payload); report it rather than panic.
fn internal(kind: ProviderKind, model: &str) -> LlmError {
    LlmError::MalformedResponse(ErrorContext::new(kind, model, "internal error: unexpected payload kind"))
}
