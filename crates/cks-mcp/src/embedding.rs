//! Which embedder search by meaning uses: `CKS_EMBEDDING_PROVIDER` (`local`, or `none`) and
//! `CKS_EMBEDDING_MODEL` (the local model's directory). Unset, the local model is used when it
//! is installed where `scripts/install-embedding-model` puts it, and nothing otherwise: search
//! then ranks by words alone.
//!
//! The local model's manifest is read at start-up (so a wrong setting stops the server with a
//! message saying what is wrong); its table only at the first embedding, so a server that never
//! searches never pays for it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use anyhow::{Context as _, bail};
use cks_embed::{EmbedError, Embedder, StaticModel};

/// The default local model's directory name under the cache.
pub const DEFAULT_MODEL: &str = "minilm-l6-static";

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
    let provider = env.get("CKS_EMBEDDING_PROVIDER").map(|v| v.to_ascii_lowercase());
    let model = env.get("CKS_EMBEDDING_MODEL").filter(|v| !v.is_empty()).map(PathBuf::from);
    let installed = models_dir(env).join(DEFAULT_MODEL);
    match provider.as_deref() {
        Some("none") => Ok(None),
        Some("local") => {
            let dir = model.unwrap_or(installed);
            if !dir.join("model.json").exists() {
                bail!(
                    "CKS_EMBEDDING_PROVIDER=local: no model at {} (install the default one with \
                     scripts/install-embedding-model, or set CKS_EMBEDDING_MODEL to a model's directory)",
                    dir.display()
                );
            }
            Ok(Some(Arc::new(LazyModel::new(&dir).context("CKS_EMBEDDING_MODEL")?)))
        }
        None | Some("") => match model {
            Some(dir) => Ok(Some(Arc::new(LazyModel::new(&dir).context("CKS_EMBEDDING_MODEL")?))),
            None if installed.join("model.json").exists() => Ok(Some(Arc::new(LazyModel::new(&installed)?))),
            None => Ok(None),
        },
        Some(other) => bail!("CKS_EMBEDDING_PROVIDER={other}: expected local or none"),
    }
}

/// A local static model whose table is read at its first use.
#[derive(Debug)]
struct LazyModel {
    dir: PathBuf,
    name: String,
    model: OnceLock<Result<StaticModel, EmbedError>>,
}

impl LazyModel {
    fn new(dir: &Path) -> anyhow::Result<LazyModel> {
        let manifest = dir.join("model.json");
        let text = std::fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{} is not JSON", manifest.display()))?;
        if value["format"] != cks_embed::static_model::FORMAT {
            bail!("{} is not a static model's manifest (format {})", manifest.display(), value["format"]);
        }
        let Some(name) = value["name"].as_str() else { bail!("{} names no model", manifest.display()) };
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
        let dir = models_dir(&env(&[("XDG_CACHE_HOME", home)])).join(DEFAULT_MODEL);
        cks_embed::static_model::write(&dir, "tiny", &["[UNK]", "red"], &[0.0, 0.0, 1.0, 0.5]).unwrap();
        let embedder = open(&env(&[("XDG_CACHE_HOME", home)])).unwrap().expect("installed");
        assert_eq!(embedder.model(), "tiny");
        assert_eq!(embedder.embed(&["red".into()]).await.unwrap(), vec![vec![1.0, 0.5]]);
        assert!(open(&env(&[("XDG_CACHE_HOME", home), ("CKS_EMBEDDING_PROVIDER", "none")])).unwrap().is_none());
    }

    #[test]
    fn a_wrong_setting_says_what_is_wrong() {
        let cache = tempfile::tempdir().unwrap();
        let home = cache.path().to_str().unwrap();
        let error = open(&env(&[("XDG_CACHE_HOME", home), ("CKS_EMBEDDING_PROVIDER", "local")])).unwrap_err();
        assert!(format!("{error:#}").contains("install-embedding-model"), "{error:#}");
        let error = open(&env(&[("CKS_EMBEDDING_PROVIDER", "magic")])).unwrap_err();
        assert!(format!("{error:#}").contains("expected local or none"), "{error:#}");
        let error = open(&env(&[("CKS_EMBEDDING_MODEL", home)])).unwrap_err();
        assert!(format!("{error:#}").contains("model.json"), "{error:#}");
    }
}
