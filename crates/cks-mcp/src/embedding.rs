//! Which embedder search by meaning uses: `CKS_EMBEDDING_PROVIDER` (`local`, `none`, or an LLM
//! provider with an embeddings endpoint: `ollama`, `openai_compatible`, `google`) and
//! `CKS_EMBEDDING_MODEL` (the local model's directory, or the provider's embedding model). Unset,
//! the local model is used when it is installed where `scripts/install-embedding-model` puts it
//! (the transformer, else the static table), and nothing otherwise: search then ranks by words
//! alone.
//!
//! A local model is a directory whose `model.json` says its format: a transformer
//! (`cks-transformer`) or a static table (`cks-static`). Its manifests, and a transformer's
//! weights' header, are read at start-up (so a wrong setting or a damaged model stops the server
//! with a message naming it); its weights or table in the background when a session's vectors
//! first settle (its first change or search), not at start.
//!
//! A provider is reached at the base URL and with the key its chat calls use (`CKS_OLLAMA_HOST`,
//! `CKS_OPENAI_BASE_URL` and `CKS_OPENAI_API_KEY`, `CKS_GOOGLE_BASE_URL` and `CKS_GOOGLE_API_KEY`),
//! whichever provider `CKS_LLM_PROVIDER` picks for chat. Ollama's model defaults to
//! `nomic-embed-text`; the others need one named. A setting that cannot work (a provider without
//! an embeddings endpoint, a missing model or key) stops start-up; a provider failing later only
//! delays the vectors: the runtime embeds in the background and retries.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use anyhow::{Context as _, anyhow, bail};
use cks_embed::{EmbedError, Embedder, StaticModel, Transformer};
use cks_llm::{EmbedderError, ProviderEmbedder, ProviderKind};

/// The default local model's directory name under the cache.
pub const DEFAULT_MODEL: &str = "minilm-l6";

/// The static model's, used when it is the one installed.
pub const STATIC_MODEL: &str = "minilm-l6-static";

/// Where the install script puts models: `${XDG_CACHE_HOME:-$HOME/.cache}/cks-mcp/models`.
pub fn models_dir(env: &HashMap<String, String>) -> PathBuf {
    let cache = match env.get("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env.get("HOME").map_or(".", String::as_str)).join(".cache"),
    };
    cache.join("cks-mcp").join("models")
}

/// The embedder the environment asks for, if any.
pub fn open(env: &HashMap<String, String>) -> anyhow::Result<Option<Arc<dyn Embedder>>> {
    let provider = env.get("CKS_EMBEDDING_PROVIDER").map(|v| v.trim().to_ascii_lowercase());
    let named = env.get("CKS_EMBEDDING_MODEL").map(|v| v.trim()).filter(|v| !v.is_empty());
    let model = named.map(PathBuf::from);
    let models = models_dir(env);
    let installed = [DEFAULT_MODEL, STATIC_MODEL]
        .map(|name| models.join(name))
        .into_iter()
        .find(|dir| dir.join("model.json").exists());
    match provider.as_deref() {
        Some("none") => Ok(None),
        Some("local") => {
            let Some(dir) = model.clone().or(installed) else {
                bail!(
                    "CKS_EMBEDDING_PROVIDER=local: no model at {} (install the default one with \
                     scripts/install-embedding-model, or set CKS_EMBEDDING_MODEL to a model's directory)",
                    models.join(DEFAULT_MODEL).display()
                );
            };
            let local = if model.is_some() { local(&dir).context("CKS_EMBEDDING_MODEL")? } else { local(&dir)? };
            Ok(Some(local))
        }
        None | Some("") => match model {
            Some(dir) => Ok(Some(local(&dir).context("CKS_EMBEDDING_MODEL")?)),
            None => installed.map(|dir| local(&dir)).transpose(),
        },
        Some(name) => match ProviderKind::from_name(name) {
            Some(kind) => Ok(Some(Arc::new(provider_embedder(kind, named, env)?))),
            None => bail!("CKS_EMBEDDING_PROVIDER={name}: expected local, none or one of {}", provider_names()),
        },
    }
}

/// The providers with an embeddings endpoint, for messages.
fn provider_names() -> String {
    cks_llm::embedding_providers().map(ProviderKind::as_str).collect::<Vec<_>>().join(", ")
}

/// Embeddings through `kind`'s endpoint, or a start-up error naming the setting to change.
fn provider_embedder(
    kind: ProviderKind,
    model: Option<&str>,
    env: &HashMap<String, String>,
) -> anyhow::Result<ProviderEmbedder> {
    ProviderEmbedder::from_env(kind, model, |name| env.get(name).cloned()).map_err(|e| match e {
        EmbedderError::NoModel { example, .. } => anyhow!(
            "CKS_EMBEDDING_PROVIDER={kind} needs CKS_EMBEDDING_MODEL, the provider's embedding model (e.g. {example})"
        ),
        EmbedderError::InvalidModel(why) => anyhow!("CKS_EMBEDDING_MODEL: {why}"),
        other => anyhow!("CKS_EMBEDDING_PROVIDER={kind}: {other}"),
    })
}

/// The local model in `dir`, of the format its manifest names, checked.
fn local(dir: &Path) -> anyhow::Result<Arc<dyn Embedder>> {
    let manifest = dir.join("model.json");
    let text = std::fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", manifest.display()))?;
    match value["format"].as_str() {
        Some(cks_embed::transformer::FORMAT) => Ok(Arc::new(Transformer::check(dir)?)),
        Some(cks_embed::static_model::FORMAT) => Ok(Arc::new(LazyModel::new(dir, &value)?)),
        _ => bail!(
            "{} names no model format this server runs (format {}; expected {} or {})",
            manifest.display(),
            value["format"],
            cks_embed::transformer::FORMAT,
            cks_embed::static_model::FORMAT
        ),
    }
}

/// A local static model, opened (its vocabulary read, its table's size checked) when readied or
/// at its first use.
#[derive(Debug)]
struct LazyModel {
    dir: PathBuf,
    name: String,
    model: OnceLock<Result<StaticModel, EmbedError>>,
}

impl LazyModel {
    fn new(dir: &Path, manifest: &serde_json::Value) -> anyhow::Result<LazyModel> {
        let Some(name) = manifest["name"].as_str() else {
            bail!("{} names no model", dir.join("model.json").display())
        };
        Ok(LazyModel { dir: dir.to_owned(), name: name.to_owned(), model: OnceLock::new() })
    }

    fn loaded(&self) -> Result<&StaticModel, EmbedError> {
        self.model.get_or_init(|| StaticModel::load(&self.dir)).as_ref().map_err(Clone::clone)
    }
}

#[async_trait::async_trait]
impl Embedder for LazyModel {
    fn model(&self) -> &str {
        &self.name
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.loaded()?.embed(texts).await
    }

    fn batch_size(&self) -> usize {
        1024
    }

    fn prepare(&self) -> Result<(), EmbedError> {
        self.loaded().map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[tokio::test]
    async fn the_installed_model_is_used_unless_told_otherwise() {
        let cache = tempfile::tempdir().unwrap();
        let home = cache.path().to_str().unwrap();
        assert!(open(&env(&[("XDG_CACHE_HOME", home)])).unwrap().is_none(), "nothing installed");
        let models = models_dir(&env(&[("XDG_CACHE_HOME", home)]));
        cks_embed::static_model::write(&models.join(STATIC_MODEL), "tiny", &["[UNK]", "red"], &[0.0, 0.0, 1.0, 0.5])
            .unwrap();
        let embedder = open(&env(&[("XDG_CACHE_HOME", home)])).unwrap().expect("installed");
        assert_eq!(embedder.model(), "tiny", "the static model, when it is the one installed");
        assert_eq!(embedder.embed(&["red".into()]).await.unwrap(), vec![vec![1.0, 0.5]]);
        assert!(open(&env(&[("XDG_CACHE_HOME", home), ("CKS_EMBEDDING_PROVIDER", "none")])).unwrap().is_none());

        let tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "red"];
        cks_embed::transformer::write_sample(&models.join(DEFAULT_MODEL), "tiny-bert", &tokens, 8, 1).unwrap();
        let embedder = open(&env(&[("XDG_CACHE_HOME", home)])).unwrap().expect("installed");
        assert_eq!(embedder.model(), "tiny-bert", "the transformer, the default, goes first");
        let vectors = embedder.embed(&["red".into(), "red red".into()]).await.unwrap();
        assert_eq!(vectors.iter().map(Vec::len).collect::<Vec<_>>(), [8, 8]);
        assert_eq!(embedder.embed(&["red".into()]).await.unwrap()[0], vectors[0], "a query as a batch's text");
    }

    #[test]
    fn a_damaged_transformer_stops_start_up_naming_its_file() {
        let cache = tempfile::tempdir().unwrap();
        let home = cache.path().to_str().unwrap();
        let dir = models_dir(&env(&[("XDG_CACHE_HOME", home)])).join(DEFAULT_MODEL);
        cks_embed::transformer::write_sample(&dir, "tiny-bert", &["[UNK]", "[CLS]", "[SEP]"], 8, 1).unwrap();
        let weights = dir.join("model.safetensors");
        let bytes = std::fs::read(&weights).unwrap();
        std::fs::write(&weights, &bytes[..100]).unwrap();
        let error = format!("{:#}", open(&env(&[("XDG_CACHE_HOME", home)])).unwrap_err());
        assert!(error.contains(&weights.display().to_string()), "{error}");
        std::fs::write(dir.join("model.json"), r#"{"format": "onnx", "name": "x"}"#).unwrap();
        let error = format!("{:#}", open(&env(&[("XDG_CACHE_HOME", home)])).unwrap_err());
        assert!(error.contains("names no model format this server runs"), "{error}");
    }

    #[tokio::test]
    async fn the_model_is_read_when_readied_not_at_the_first_text() {
        let cache = tempfile::tempdir().unwrap();
        let home = cache.path().to_str().unwrap();
        let dir = models_dir(&env(&[("XDG_CACHE_HOME", home)])).join(STATIC_MODEL);
        cks_embed::static_model::write(&dir, "tiny", &["[UNK]", "red"], &[0.0, 0.0, 1.0, 0.5]).unwrap();
        let embedder = open(&env(&[("XDG_CACHE_HOME", home)])).unwrap().expect("installed");
        embedder.prepare().unwrap();
        // Opened already: the open table is read, whatever becomes of its name.
        std::fs::remove_file(dir.join("table.f32")).unwrap();
        assert_eq!(embedder.embed(&["red".into()]).await.unwrap(), vec![vec![1.0, 0.5]]);

        std::fs::write(dir.join("table.f32"), [0u8; 3]).unwrap();
        let broken = open(&env(&[("XDG_CACHE_HOME", home)])).unwrap().expect("a manifest");
        let error = broken.prepare().unwrap_err();
        assert!(error.to_string().contains("table.f32"), "{error}");
        assert_eq!(broken.embed(&["red".into()]).await.unwrap_err(), error, "the first text is told the same");
    }

    #[test]
    fn a_wrong_setting_says_what_is_wrong() {
        let cache = tempfile::tempdir().unwrap();
        let home = cache.path().to_str().unwrap();
        let error = open(&env(&[("XDG_CACHE_HOME", home), ("CKS_EMBEDDING_PROVIDER", "local")])).unwrap_err();
        assert!(format!("{error:#}").contains("install-embedding-model"), "{error:#}");
        let error = open(&env(&[("CKS_EMBEDDING_PROVIDER", "magic")])).unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            "CKS_EMBEDDING_PROVIDER=magic: expected local, none or one of ollama, google, openai_compatible"
        );
        let error = open(&env(&[("CKS_EMBEDDING_MODEL", home)])).unwrap_err();
        assert!(format!("{error:#}").contains("model.json"), "{error:#}");
    }

    #[test]
    fn a_provider_is_reached_with_its_chat_settings_under_its_own_name() {
        let embedder = open(&env(&[("CKS_EMBEDDING_PROVIDER", "ollama")])).unwrap().expect("an embedder");
        assert_eq!(embedder.model(), "ollama:nomic-embed-text", "Ollama's default embedding model");
        assert_eq!(embedder.batch_size(), 64);
        let embedder = open(&env(&[
            ("CKS_EMBEDDING_PROVIDER", " Google "),
            ("CKS_EMBEDDING_MODEL", "gemini-embedding-001"),
            ("GOOGLE_API_KEY", "AIza-start-up-test"),
            // The chat provider's choice does not matter to embeddings.
            ("CKS_LLM_PROVIDER", "anthropic"),
        ]))
        .unwrap()
        .expect("an embedder");
        assert_eq!((embedder.model(), embedder.batch_size()), ("google:gemini-embedding-001", 100));
        assert!(!format!("{embedder:?}").contains("AIza-start-up-test"));
        let embedder = open(&env(&[
            ("CKS_EMBEDDING_PROVIDER", "openai_compatible"),
            ("CKS_OPENAI_BASE_URL", "http://127.0.0.1:1/v1"),
            ("CKS_EMBEDDING_MODEL", "bge-m3"),
        ]))
        .unwrap()
        .expect("an embedder");
        assert_eq!(embedder.model(), "openai_compatible:bge-m3", "a local server needs no key");
    }

    #[test]
    fn a_provider_that_cannot_work_stops_start_up_saying_why() {
        let message = |pairs: &[(&str, &str)]| format!("{:#}", open(&env(pairs)).unwrap_err());
        assert_eq!(
            message(&[("CKS_EMBEDDING_PROVIDER", "anthropic"), ("ANTHROPIC_API_KEY", "sk-ant-start-up-test")]),
            "CKS_EMBEDDING_PROVIDER=anthropic: anthropic has no embeddings endpoint (providers with one: ollama, \
             google, openai_compatible)"
        );
        assert_eq!(
            message(&[("CKS_EMBEDDING_PROVIDER", "google"), ("GOOGLE_API_KEY", "AIza-start-up-test")]),
            "CKS_EMBEDDING_PROVIDER=google needs CKS_EMBEDDING_MODEL, the provider's embedding model (e.g. \
             gemini-embedding-001)"
        );
        assert_eq!(
            message(&[("CKS_EMBEDDING_PROVIDER", "openai_compatible")]),
            "CKS_EMBEDDING_PROVIDER=openai_compatible needs CKS_EMBEDDING_MODEL, the provider's embedding model \
             (e.g. text-embedding-3-small)"
        );
        assert_eq!(
            message(&[("CKS_EMBEDDING_PROVIDER", "google"), ("CKS_EMBEDDING_MODEL", "gemini-embedding-001")]),
            "CKS_EMBEDDING_PROVIDER=google: google needs a key: set CKS_GOOGLE_API_KEY (or GOOGLE_API_KEY)"
        );
        assert_eq!(
            message(&[
                ("CKS_EMBEDDING_PROVIDER", "openai_compatible"),
                ("CKS_EMBEDDING_MODEL", "text-embedding-3-small")
            ]),
            "CKS_EMBEDDING_PROVIDER=openai_compatible: openai_compatible needs a key: set CKS_OPENAI_API_KEY",
            "the real OpenAI API, the default base URL, needs a key"
        );
        let bad_model = message(&[("CKS_EMBEDDING_PROVIDER", "ollama"), ("CKS_EMBEDDING_MODEL", "../x?y")]);
        assert!(bad_model.starts_with("CKS_EMBEDDING_MODEL: invalid model name"), "{bad_model}");
        let bad_number = message(&[("CKS_EMBEDDING_PROVIDER", "ollama"), ("CKS_LLM_MAX_RETRIES", "some")]);
        assert!(bad_number.contains("CKS_LLM_MAX_RETRIES"), "{bad_number}");
    }
}
