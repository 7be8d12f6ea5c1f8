//! Provider selection and configuration, read from an injected environment.
//!
//! Each provider's variables (key, base URL, model) and defaults are in its adapter's table entry
//! ([`provider_variables`] lists them); the rest:
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `CKS_LLM_PROVIDER` | `auto` or a provider's name | `auto` |
//! | `CKS_LLM_MAX_TOKENS` | default output limit per call | 4096 |
//! | `CKS_LLM_MODELS_TTL_SECONDS` | model-list cache lifetime (0 disables) | 300 |
//! | `CKS_LLM_TIMEOUT_SECONDS` | request timeout per attempt | 120 |
//! | `CKS_LLM_MAX_RETRIES` | retries after the first attempt | 3 |
//!
//! `auto` probes Ollama (`GET /api/tags`, ~1 s timeout), then uses Anthropic if its key is set, and
//! otherwise fails fast with a message naming every option (each adapter says whether and how `auto`
//! may choose it). It never picks `google` or `openai_compatible`: their key, model and base URL
//! cannot be guessed safely. A per-call model
//! overrides the provider's model variable, which overrides the default; it never changes the provider.
//!
//! The environment is passed in (`LlmConfig::from_env(|name| std::env::var(name).ok())`) so that tests
//! never mutate the process environment.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::conversation::ProviderKind;
use crate::error::LlmError;
use crate::providers::{self, Auto, Key};
use crate::redact::{Redactor, Secret};

pub use crate::providers::{Setting, Variable, variables as provider_variables};

/// The text every "no provider" error carries, naming every option and its variables.
pub fn provider_help() -> &'static str {
    static HELP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let auto: Vec<String> = ProviderKind::ALL
            .iter()
            .map(|&kind| providers::adapter(kind))
            .filter_map(|a| match a.auto {
                Auto::WhenReachable => Some(format!(
                    "{} if reachable at {} [{}]",
                    a.title,
                    a.base_url.name,
                    a.base_url.default.unwrap_or_default()
                )),
                Auto::WhenKeyed => Some(format!("{} if {} is set", a.title, a.key_variables.first()?.name)),
                Auto::Never => None,
            })
            .collect();
        let fixed: Vec<&str> = ProviderKind::ALL.iter().map(|&kind| providers::adapter(kind).help).collect();
        format!("Set CKS_LLM_PROVIDER to one of: auto (default: uses {}), {}.", auto.join(", else "), fixed.join(", "))
    });
    &HELP
}

/// What `CKS_LLM_PROVIDER` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderChoice {
    /// Ollama if reachable, else Anthropic if keyed, else not configured.
    Auto,
    /// Always this provider.
    Fixed(ProviderKind),
}

impl FromStr for ProviderChoice {
    type Err = LlmError;

    fn from_str(s: &str) -> Result<Self, LlmError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(ProviderChoice::Auto),
            other => ProviderKind::from_name(other).map(ProviderChoice::Fixed).ok_or_else(|| {
                LlmError::not_configured(None, format!("unknown CKS_LLM_PROVIDER={other:?}. {}", provider_help()))
            }),
        }
    }
}

impl fmt::Display for ProviderChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderChoice::Auto => f.write_str("auto"),
            ProviderChoice::Fixed(k) => write!(f, "{k}"),
        }
    }
}

/// One provider's endpoint, key and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// Which provider.
    pub kind: ProviderKind,
    /// Base URL without a trailing slash (Anthropic: without `/v1`; Gemini and OpenAI: with their version).
    pub base_url: String,
    /// API key, when the provider needs one.
    pub api_key: Option<Secret>,
    /// The model used when a call names none (provider variable, else default).
    pub model: String,
}

impl ProviderConfig {
    /// A configuration with the given base URL and model, no key.
    pub fn new(kind: ProviderKind, base_url: impl Into<String>, model: impl Into<String>) -> Self {
        ProviderConfig { kind, base_url: trim_base(&base_url.into()), api_key: None, model: model.into() }
    }

    /// With this key.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(Secret::new(key));
        self
    }

    /// The variable(s) that hold this provider's key, for messages.
    pub fn key_variable(&self) -> &'static str {
        providers::adapter(self.kind).credentials
    }

    /// Fails with `NotConfigured` when the provider cannot be called as configured: Anthropic and Gemini need
    /// a key; OpenAI proper needs one too, while local OpenAI-compatible servers usually accept none.
    pub fn check_ready(&self) -> Result<(), LlmError> {
        if self.lacks_key() {
            return Err(LlmError::not_configured(
                Some(self.kind),
                format!("{} is selected but {} is not set. {}", self.kind, self.key_variable(), provider_help()),
            ));
        }
        Ok(())
    }

    /// Whether a call needs a key and none is set.
    pub(crate) fn lacks_key(&self) -> bool {
        let needs_key = match providers::adapter(self.kind).key {
            Key::Required => true,
            Key::AtHost(host) => self.base_url.contains(host),
            Key::None => false,
        };
        needs_key && self.api_key.is_none()
    }
}

fn trim_base(s: &str) -> String {
    s.trim().trim_end_matches('/').to_owned()
}

/// Timeouts and retry bounds of the HTTP layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// Time to establish a connection.
    pub connect_timeout: Duration,
    /// Time for one whole attempt (request and complete answer, streams included).
    pub request_timeout: Duration,
    /// Timeout of the Ollama reachability probe used by `auto` and `status`.
    pub probe_timeout: Duration,
    /// Retry bounds.
    pub retry: RetryPolicy,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(120),
            probe_timeout: Duration::from_secs(1),
            retry: RetryPolicy::default(),
        }
    }
}

/// Which failures are retried, how often and how long we wait. Only 408, 429, 529, other 5xx, connection
/// failures, timeouts and transient errors inside a stream are retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff ceiling; doubles per retry (full jitter: the wait is uniform in `0..=ceiling`).
    pub base_delay: Duration,
    /// Largest backoff ceiling.
    pub max_delay: Duration,
    /// A wait the provider asks for beyond this is not waited out: the error is returned at once with the
    /// wait in [`crate::ErrorContext::retry_after`] (e.g. a daily quota).
    pub max_retry_after: Duration,
    /// No retry starts if it would end after this much time since the first attempt.
    pub max_elapsed: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
            max_elapsed: Duration::from_secs(300),
        }
    }
}

/// Everything the client needs.
#[derive(Debug, Clone)]
pub struct LlmConfig {
    /// `CKS_LLM_PROVIDER`.
    pub provider: ProviderChoice,
    /// Each provider's endpoint, key and model, in [`ProviderKind::ALL`]'s order.
    providers: Vec<ProviderConfig>,
    /// HTTP layer settings.
    pub http: HttpConfig,
    /// Output limit for calls that set none.
    pub default_max_tokens: u32,
    /// `CKS_ARBITER_MODEL`: the model `arbitrate_inference_conflict` asks for when its call names
    /// none (otherwise the provider's configured model).
    pub arbiter_model: Option<String>,
    /// `CKS_ARBITER_MAX_TOKENS`: the arbiter's output limit when its call sets none (its answer
    /// is a small JSON decision).
    pub arbiter_max_tokens: u32,
    /// Model-list cache lifetime (zero disables the cache).
    pub models_ttl: Duration,
    /// How long an `auto` decision is reused before Ollama is probed again (zero: probe every call).
    pub auto_ttl: Duration,
    /// Bounded telemetry size (calls kept).
    pub telemetry_capacity: usize,
    /// Secrets to keep out of errors, logs and results.
    pub redactor: Redactor,
}

impl LlmConfig {
    /// Read the configuration from an injected environment lookup. Empty values count as unset.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        let get = |name: &str| env(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let provider = match get("CKS_LLM_PROVIDER") {
            Some(v) => v.parse()?,
            None => ProviderChoice::Auto,
        };
        let providers = ProviderKind::ALL
            .iter()
            .map(|&kind| {
                let a = providers::adapter(kind);
                let or_default =
                    |v: &Variable| get(v.name).or_else(|| v.default.map(str::to_owned)).unwrap_or_default();
                ProviderConfig {
                    kind,
                    base_url: trim_base(&or_default(&a.base_url)),
                    api_key: a.key_variables.iter().find_map(|v| get(v.name)).map(Secret::new),
                    model: get(a.model.name)
                        .or_else(|| a.model_fallback.and_then(|v| get(v.name)))
                        .unwrap_or_else(|| or_default(&a.model)),
                }
            })
            .collect();
        let mut http = HttpConfig::default();
        if let Some(s) = number(&get, "CKS_LLM_TIMEOUT_SECONDS", "seconds")? {
            http.request_timeout = Duration::from_secs(s.max(1));
        }
        if let Some(n) = number(&get, "CKS_LLM_MAX_RETRIES", "retries")? {
            http.retry.max_retries = u32::try_from(n).unwrap_or(u32::MAX).min(10);
        }
        let default_max_tokens =
            number(&get, "CKS_LLM_MAX_TOKENS", "tokens")?.map_or(4096, |n| u32::try_from(n).unwrap_or(u32::MAX).max(1));
        let models_ttl = Duration::from_secs(number(&get, "CKS_LLM_MODELS_TTL_SECONDS", "seconds")?.unwrap_or(300));
        let arbiter_max_tokens = number(&get, "CKS_ARBITER_MAX_TOKENS", "tokens")?
            .map_or(1024, |n| u32::try_from(n).unwrap_or(u32::MAX).max(1));
        Ok(LlmConfig {
            provider,
            providers,
            http,
            default_max_tokens,
            arbiter_model: get("CKS_ARBITER_MODEL"),
            arbiter_max_tokens,
            models_ttl,
            auto_ttl: Duration::from_secs(30),
            telemetry_capacity: 1000,
            redactor: Redactor::from_env(&env),
        })
    }

    /// The configuration of one provider.
    pub fn provider_config(&self, kind: ProviderKind) -> &ProviderConfig {
        self.providers.iter().find(|p| p.kind == kind).expect("every provider has a configuration")
    }

    /// Mutable access to one provider's configuration.
    pub fn provider_config_mut(&mut self, kind: ProviderKind) -> &mut ProviderConfig {
        self.providers.iter_mut().find(|p| p.kind == kind).expect("every provider has a configuration")
    }

    /// The model a call uses: the per-call model, else the provider's configured model. Check it with
    /// [`check_model_name`] before it goes into a request.
    pub fn resolve_model(&self, kind: ProviderKind, per_call: Option<&str>) -> String {
        per_call
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map_or_else(|| self.provider_config(kind).model.clone(), str::to_owned)
    }

    /// The secrets of this configuration's keys are added to the redactor (for configurations built in code).
    pub fn with_redacted_keys(mut self) -> Self {
        let mut secrets: Vec<String> = ProviderKind::ALL
            .iter()
            .filter_map(|k| self.provider_config(*k).api_key.as_ref().map(|s| s.expose().to_owned()))
            .collect();
        secrets.extend(self.redactor.secrets().iter().cloned());
        self.redactor = Redactor::new(secrets);
        self
    }
}

/// The longest model name accepted.
pub const MAX_MODEL_NAME_LEN: usize = 256;

/// Whether `name` may be used as a model name with any provider: 1 to [`MAX_MODEL_NAME_LEN`] ASCII letters,
/// digits and `-._:/@+`, no empty, `.` or `..` path segment. Model names reach URL paths (Gemini) and
/// bodies; anything that could aim a request elsewhere (`?`, `#`, `%`, `\`, spaces, `..`) is refused.
/// The error says what is wrong and what is accepted.
pub fn check_model_name(name: &str) -> Result<(), String> {
    const ACCEPTED: &str = "a model name is 1 to 256 ASCII letters, digits and '-._:/@+', without empty, '.' or \
                            '..' path segments (e.g. 'gpt-4o', 'llama3.2:latest', 'models/gemini-2.5-flash')";
    if name.is_empty() || name.len() > MAX_MODEL_NAME_LEN {
        return Err(format!("invalid model name of {} bytes: {ACCEPTED}", name.len()));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || "-._:/@+".contains(*c))) {
        return Err(format!("invalid model name {name:?}: the character {bad:?} is not allowed; {ACCEPTED}"));
    }
    if name.split('/').any(|segment| segment.is_empty() || segment == "." || segment == "..") {
        return Err(format!("invalid model name {name:?}: {ACCEPTED}"));
    }
    Ok(())
}

fn number(get: &impl Fn(&str) -> Option<String>, name: &str, unit: &str) -> Result<Option<u64>, LlmError> {
    match get(name) {
        None => Ok(None),
        Some(v) => v.parse::<u64>().map(Some).map_err(|_| {
            LlmError::not_configured(None, format!("{name}={v:?} is not accepted: expected a whole number of {unit}"))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults() {
        let c = LlmConfig::from_env(env(&[])).unwrap();
        assert_eq!(c.provider, ProviderChoice::Auto);
        assert_eq!(c.provider_config(ProviderKind::Ollama).base_url, "http://localhost:11434");
        assert_eq!(c.provider_config(ProviderKind::Ollama).model, "llama3.2");
        assert_eq!(c.provider_config(ProviderKind::Anthropic).model, "claude-sonnet-4-5");
        assert_eq!(c.provider_config(ProviderKind::Google).model, "gemini-2.5-flash");
        assert_eq!(
            c.provider_config(ProviderKind::Google).base_url,
            "https://generativelanguage.googleapis.com/v1beta"
        );
        assert_eq!(c.provider_config(ProviderKind::OpenaiCompatible).model, "gpt-4o");
        assert_eq!(c.provider_config(ProviderKind::OpenaiCompatible).base_url, "https://api.openai.com/v1");
        assert_eq!(c.http.request_timeout, Duration::from_secs(120));
        assert_eq!(c.default_max_tokens, 4096);
        assert_eq!((c.arbiter_model.as_deref(), c.arbiter_max_tokens), (None, 1024));
        assert_eq!(c.models_ttl, Duration::from_secs(300));
        assert!(c.provider_config(ProviderKind::Anthropic).check_ready().is_err());
        assert!(c.provider_config(ProviderKind::Ollama).check_ready().is_ok());
    }

    #[test]
    fn variables_and_precedence() {
        let c = LlmConfig::from_env(env(&[
            ("CKS_LLM_PROVIDER", " Google "),
            ("GOOGLE_API_KEY", "g-fallback"),
            ("CKS_GOOGLE_MODEL", "gemini-x"),
            ("CKS_GOOGLE_BASE_URL", "http://127.0.0.1:9/v1beta/"),
            ("ANTHROPIC_BASE_URL", "http://proxy/"),
            ("CKS_OPENAI_API_KEY", ""),
        ]))
        .unwrap();
        assert_eq!(c.provider, ProviderChoice::Fixed(ProviderKind::Google));
        assert_eq!(c.provider_config(ProviderKind::Google).api_key.as_ref().map(Secret::expose), Some("g-fallback"));
        assert_eq!(c.provider_config(ProviderKind::Google).base_url, "http://127.0.0.1:9/v1beta");
        assert_eq!(c.provider_config(ProviderKind::Anthropic).base_url, "http://proxy");
        assert!(c.provider_config(ProviderKind::OpenaiCompatible).api_key.is_none());
        assert_eq!(c.resolve_model(ProviderKind::Google, None), "gemini-x");
        assert_eq!(c.resolve_model(ProviderKind::Google, Some("per-call")), "per-call");
        assert_eq!(c.resolve_model(ProviderKind::Google, Some(" ")), "gemini-x");
        assert!(c.redactor.leaks("g-fallback"));
        let c = LlmConfig::from_env(env(&[("CKS_GOOGLE_API_KEY", "primary"), ("GOOGLE_API_KEY", "fallback")])).unwrap();
        assert_eq!(c.provider_config(ProviderKind::Google).api_key.as_ref().map(Secret::expose), Some("primary"));
    }

    #[test]
    fn cks_llm_model_names_the_anthropic_model_as_in_the_reference() {
        let model = |pairs: &[(&str, &str)], kind| LlmConfig::from_env(env(pairs)).unwrap().resolve_model(kind, None);
        assert_eq!(model(&[("CKS_LLM_MODEL", "claude-x")], ProviderKind::Anthropic), "claude-x");
        let both = [("CKS_LLM_MODEL", "claude-x"), ("CKS_ANTHROPIC_MODEL", "claude-y")];
        assert_eq!(model(&both, ProviderKind::Anthropic), "claude-y", "the provider's own variable wins");
        assert_eq!(model(&[("CKS_LLM_MODEL", "claude-x")], ProviderKind::Ollama), "llama3.2", "Anthropic's only");
        assert_eq!(model(&[("CKS_LLM_MODEL", " ")], ProviderKind::Anthropic), "claude-sonnet-4-5");
        assert!(provider_variables().any(|(setting, v)| setting == Setting::Model && v.name == "CKS_LLM_MODEL"));
    }

    #[test]
    fn model_names_that_could_leave_the_path_are_refused() {
        for good in ["gpt-4o", "llama3.2:latest", "models/gemini-2.5-flash", "meta-llama/Llama-3-8b", "@cf/x", "a+b"] {
            assert_eq!(check_model_name(good), Ok(()), "{good}");
        }
        for bad in ["", "../x?y#", "x?key=1", "x#frag", "a b", "a%2fb", "a\\b", "/abs", "a//b", "a/../b", "..", "é"] {
            let message = check_model_name(bad).unwrap_err();
            assert!(message.contains("invalid model name") && message.contains("ASCII letters"), "{bad}: {message}");
        }
        assert!(check_model_name(&"m".repeat(MAX_MODEL_NAME_LEN + 1)).is_err());
    }

    #[test]
    fn the_help_names_each_provider_and_what_auto_tries() {
        assert_eq!(
            provider_help(),
            "Set CKS_LLM_PROVIDER to one of: auto (default: uses Ollama if reachable at CKS_OLLAMA_HOST \
             [http://localhost:11434], else Anthropic if ANTHROPIC_API_KEY is set), ollama (CKS_OLLAMA_HOST, \
             CKS_OLLAMA_MODEL), anthropic (ANTHROPIC_API_KEY, CKS_ANTHROPIC_MODEL or CKS_LLM_MODEL, \
             ANTHROPIC_BASE_URL), google (CKS_GOOGLE_API_KEY or GOOGLE_API_KEY, CKS_GOOGLE_MODEL, \
             CKS_GOOGLE_BASE_URL), openai_compatible (CKS_OPENAI_API_KEY, CKS_OPENAI_BASE_URL, CKS_OPENAI_MODEL)."
        );
        for (_, variable) in provider_variables() {
            assert!(provider_help().contains(variable.name), "{}", variable.name);
        }
    }

    #[test]
    fn unknown_provider_names_every_option() {
        let e = LlmConfig::from_env(env(&[("CKS_LLM_PROVIDER", "gpt")])).unwrap_err();
        let msg = e.to_string();
        for word in
            ["auto", "ollama", "anthropic", "google", "openai_compatible", "ANTHROPIC_API_KEY", "CKS_OLLAMA_HOST"]
        {
            assert!(msg.contains(word), "{msg}");
        }
        assert!(LlmConfig::from_env(env(&[("CKS_LLM_MAX_TOKENS", "many")])).is_err());
    }

    #[test]
    fn a_bad_number_names_the_variable_and_the_accepted_form() {
        let e = LlmConfig::from_env(env(&[("CKS_LLM_TIMEOUT_SECONDS", "2m")])).unwrap_err().to_string();
        assert!(e.contains("CKS_LLM_TIMEOUT_SECONDS") && e.contains("\"2m\""), "{e}");
        assert!(e.contains("whole number of seconds"), "{e}");
    }
}
