//! [`ProviderEmbedder`]: search by meaning through a provider's embeddings endpoint, as a
//! [`cks_embed::Embedder`]. The provider's adapter builds each request and reads each answer; the one
//! HTTP layer sends it (timeouts, retries of what is transient, redaction), as for chat calls.
//!
//! What this adds: texts split into the provider's batches, blank texts never sent (some providers
//! refuse an empty input; a blank text has nothing to compare by and gets a zero vector), and the
//! answers checked (one vector per text, all of one length) before the runtime keeps them. The name
//! vectors are kept under is `provider:model`, so vectors of two providers never mix.
//!
//! Errors: what may clear by itself (rate limits, overload, 5xx, timeouts, unreachable, answers of the
//! wrong shape) is [`EmbedError::Provider`]; a rejected key, model or request is [`EmbedError::Model`].
//! The runtime retries both in the background; the messages are redacted like every other.

use std::fmt;

use cks_embed::{EmbedError, Embedder};

use crate::config::{LlmConfig, ProviderConfig, check_model_name};
use crate::conversation::ProviderKind;
use crate::error::{ErrorKind, LlmError};
use crate::http::{Decoder, Outcome, Payload, Transport};
use crate::providers::{self, EmbeddingEndpoint};

/// Why a provider's embeddings cannot be used as configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbedderError {
    /// The provider has no embeddings endpoint.
    #[error("{provider} has no embeddings endpoint (providers with one: {})", names(embedding_providers()))]
    NoEndpoint {
        /// The provider asked for.
        provider: ProviderKind,
    },
    /// The provider has no default embedding model, and none was named.
    #[error("{provider} has no default embedding model: name one (e.g. {example})")]
    NoModel {
        /// The provider asked for.
        provider: ProviderKind,
        /// A model to suggest.
        example: &'static str,
    },
    /// The model name cannot be used.
    #[error("{0}")]
    InvalidModel(String),
    /// The provider needs a key and none is set.
    #[error("{provider} needs a key: set {variable}")]
    MissingKey {
        /// The provider asked for.
        provider: ProviderKind,
        /// The variable(s) that hold its key.
        variable: &'static str,
    },
    /// The client's other settings are wrong (a number that is not one).
    #[error(transparent)]
    Config(LlmError),
}

/// The providers that have an embeddings endpoint, in the table's order.
pub fn embedding_providers() -> impl Iterator<Item = ProviderKind> {
    ProviderKind::ALL.into_iter().filter(|&kind| providers::adapter(kind).embeddings.is_some())
}

/// The embedding model a provider uses when none is named, if it has one.
pub fn default_embedding_model(kind: ProviderKind) -> Option<&'static str> {
    providers::adapter(kind).embeddings.as_ref().and_then(|e| e.default_model)
}

fn names(kinds: impl Iterator<Item = ProviderKind>) -> String {
    kinds.map(ProviderKind::as_str).collect::<Vec<_>>().join(", ")
}

/// Texts to vectors through a provider's embeddings endpoint.
pub struct ProviderEmbedder {
    kind: ProviderKind,
    provider: ProviderConfig,
    endpoint: &'static EmbeddingEndpoint,
    /// The model as the provider is told it.
    wire_model: String,
    /// `provider:model`, the name vectors are kept under.
    name: String,
    transport: Transport,
}

impl fmt::Debug for ProviderEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The provider's configuration holds its key: show only what identifies the embedder.
        f.debug_struct("ProviderEmbedder")
            .field("name", &self.name)
            .field("base_url", &self.provider.base_url)
            .finish_non_exhaustive()
    }
}

impl ProviderEmbedder {
    /// Embeddings through `kind` with `model` (or the provider's default embedding model), at the base
    /// URL and with the key of `config`, and its HTTP settings and redaction.
    pub fn new(config: &LlmConfig, kind: ProviderKind, model: Option<&str>) -> Result<Self, EmbedderError> {
        let endpoint =
            providers::adapter(kind).embeddings.as_ref().ok_or(EmbedderError::NoEndpoint { provider: kind })?;
        let model = match model.map(str::trim).filter(|m| !m.is_empty()) {
            Some(model) => model,
            None => endpoint
                .default_model
                .ok_or(EmbedderError::NoModel { provider: kind, example: endpoint.example_model })?,
        };
        check_model_name(model).map_err(EmbedderError::InvalidModel)?;
        let provider = config.provider_config(kind).clone();
        if provider.lacks_key() {
            return Err(EmbedderError::MissingKey { provider: kind, variable: provider.key_variable() });
        }
        Ok(ProviderEmbedder {
            kind,
            provider,
            endpoint,
            wire_model: model.to_owned(),
            name: format!("{kind}:{model}"),
            transport: Transport::new(config.http.clone(), config.redactor.clone()),
        })
    }

    /// [`ProviderEmbedder::new`] with the configuration read from an injected environment: the same
    /// variables (base URL, key, timeouts, retries) the provider's chat calls read.
    pub fn from_env(
        kind: ProviderKind,
        model: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, EmbedderError> {
        // Which provider answers chat calls is no concern of embeddings: a wrong choice there must not
        // stop them.
        let config = LlmConfig::from_env(|name| if name == "CKS_LLM_PROVIDER" { None } else { env(name) })
            .map_err(EmbedderError::Config)?;
        ProviderEmbedder::new(&config, kind, model)
    }

    /// The provider.
    pub fn provider(&self) -> ProviderKind {
        self.kind
    }

    /// One request: the vectors of `texts` (none blank), as many as there are texts.
    async fn request(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let call = (self.endpoint.encode)(texts, &self.provider, &self.wire_model);
        let Outcome { result, .. } =
            self.transport.execute(self.kind, &self.wire_model, &call, Decoder::Embeddings).await;
        let vectors = match result {
            Ok(Payload::Embeddings(vectors)) => vectors,
            Ok(_) => return Err(self.fault("the answer was not embeddings (internal error)")),
            Err(e) => return Err(embed_error(&e)),
        };
        if vectors.len() != texts.len() {
            return Err(self.fault(&format!("{} vectors came back for {} texts", vectors.len(), texts.len())));
        }
        Ok(vectors)
    }

    /// A provider fault found here, named like the HTTP layer's errors.
    fn fault(&self, what: &str) -> EmbedError {
        let message = format!("{} (model {}): {what}", self.kind, self.wire_model);
        EmbedError::Provider(self.transport.redactor().redact(&message))
    }
}

/// A client error as the embedder interface classes it.
fn embed_error(e: &LlmError) -> EmbedError {
    match e.kind() {
        // The key, the model or the request was refused: trying again as is will not help.
        ErrorKind::Auth | ErrorKind::BadRequest | ErrorKind::NotConfigured => EmbedError::Model(e.to_string()),
        _ => EmbedError::Provider(e.to_string()),
    }
}

#[async_trait::async_trait]
impl Embedder for ProviderEmbedder {
    fn model(&self) -> &str {
        &self.name
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let sent: Vec<usize> = (0..texts.len()).filter(|&i| !texts[i].trim().is_empty()).collect();
        let mut vectors = Vec::with_capacity(sent.len());
        for batch in sent.chunks(self.endpoint.batch_size.max(1)) {
            let batch: Vec<String> = batch.iter().map(|&i| texts[i].clone()).collect();
            vectors.extend(self.request(&batch).await?);
        }
        let dims = vectors.first().map_or(0, Vec::len);
        if vectors.first().is_some_and(Vec::is_empty) {
            return Err(self.fault("the answer's vectors are empty"));
        }
        if let Some(other) = vectors.iter().find(|v| v.len() != dims) {
            return Err(self.fault(&format!("vectors of {dims} and of {} dimensions came back together", other.len())));
        }
        let mut out = vec![vec![0.0; dims]; texts.len()];
        for (i, vector) in sent.into_iter().zip(vectors) {
            out[i] = vector;
        }
        Ok(out)
    }

    fn batch_size(&self) -> usize {
        self.endpoint.batch_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> LlmConfig {
        let map: std::collections::HashMap<String, String> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        LlmConfig::from_env(|k| map.get(k).cloned()).unwrap()
    }

    #[test]
    fn the_name_holds_provider_and_model() {
        let e = ProviderEmbedder::new(&config(&[]), ProviderKind::Ollama, None).unwrap();
        assert_eq!(e.model(), "ollama:nomic-embed-text");
        assert_eq!(e.batch_size(), 64);
        let c = config(&[("CKS_GOOGLE_API_KEY", "AIza-unit-test-key")]);
        let e = ProviderEmbedder::new(&c, ProviderKind::Google, Some("gemini-embedding-001")).unwrap();
        assert_eq!((e.model(), e.batch_size()), ("google:gemini-embedding-001", 100));
        assert!(!format!("{e:?}").contains("AIza-unit-test-key"), "{e:?}");
        let e = ProviderEmbedder::new(
            &config(&[("CKS_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")]),
            ProviderKind::OpenaiCompatible,
            Some("m"),
        )
        .unwrap();
        assert_eq!(e.model(), "openai_compatible:m", "a local server needs no key");
    }

    #[test]
    fn what_cannot_work_is_refused_with_the_reason() {
        let none = config(&[]);
        let e = ProviderEmbedder::new(&none, ProviderKind::Anthropic, Some("m")).unwrap_err();
        assert_eq!(e, EmbedderError::NoEndpoint { provider: ProviderKind::Anthropic });
        assert_eq!(
            e.to_string(),
            "anthropic has no embeddings endpoint (providers with one: ollama, google, openai_compatible)"
        );
        let e = ProviderEmbedder::new(&none, ProviderKind::Google, None).unwrap_err();
        assert_eq!(e.to_string(), "google has no default embedding model: name one (e.g. gemini-embedding-001)");
        let e = ProviderEmbedder::new(&none, ProviderKind::Google, Some("gemini-embedding-001")).unwrap_err();
        assert_eq!(e.to_string(), "google needs a key: set CKS_GOOGLE_API_KEY (or GOOGLE_API_KEY)");
        let e =
            ProviderEmbedder::new(&none, ProviderKind::OpenaiCompatible, Some("text-embedding-3-small")).unwrap_err();
        assert!(matches!(e, EmbedderError::MissingKey { .. }), "the real OpenAI API needs a key: {e}");
        let e = ProviderEmbedder::new(&none, ProviderKind::Ollama, Some("../x?y")).unwrap_err();
        assert!(matches!(e, EmbedderError::InvalidModel(_)), "{e}");
    }

    #[test]
    fn a_wrong_chat_provider_does_not_stop_embeddings() {
        let env = |name: &str| (name == "CKS_LLM_PROVIDER").then(|| "nonsense".to_owned());
        assert!(ProviderEmbedder::from_env(ProviderKind::Ollama, None, env).is_ok());
        let env = |name: &str| (name == "CKS_LLM_TIMEOUT_SECONDS").then(|| "soon".to_owned());
        assert!(matches!(ProviderEmbedder::from_env(ProviderKind::Ollama, None, env), Err(EmbedderError::Config(_))));
    }

    #[test]
    fn errors_are_classed_by_what_may_clear() {
        use crate::error::ErrorContext;
        let ctx = || ErrorContext::msg("x");
        assert!(matches!(embed_error(&LlmError::Overloaded(ctx())), EmbedError::Provider(_)));
        assert!(matches!(embed_error(&LlmError::RateLimited(ctx())), EmbedError::Provider(_)));
        assert!(matches!(embed_error(&LlmError::Unavailable(ctx())), EmbedError::Provider(_)));
        assert!(matches!(embed_error(&LlmError::MalformedResponse(ctx())), EmbedError::Provider(_)));
        assert!(matches!(embed_error(&LlmError::Auth(ctx())), EmbedError::Model(_)));
        assert!(matches!(embed_error(&LlmError::BadRequest(ctx())), EmbedError::Model(_)));
    }
}
