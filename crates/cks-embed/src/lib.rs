//! Text embeddings for search by meaning: the [`Embedder`] interface the runtime embeds through,
//! and the two local models: the [`Transformer`] (a BERT encoder run in process, the default)
//! and the [`StaticModel`] (a token table, microseconds a text). Providers' embedding endpoints
//! implement the same interface in the model client.
//!
//! Invariant: nothing here reaches the network or a model hub; a model is read from a directory
//! an install step filled.

mod gemm;
pub mod safetensors;
pub mod static_model;
pub mod transformer;
pub mod wordpiece;

pub use static_model::StaticModel;
pub use transformer::Transformer;

/// Why texts could not be embedded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbedError {
    /// The model cannot be loaded or used.
    #[error("embedding model: {0}")]
    Model(String),
    /// The provider did not answer as it should (it may do better later).
    #[error("embedding provider: {0}")]
    Provider(String),
}

/// Something that turns texts into vectors.
#[async_trait::async_trait]
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// The model's name; vectors are kept under it, so a different model never mixes in.
    fn model(&self) -> &str;

    /// One vector per text, in order. A query and a stored text embed the same way.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// How many texts one call should carry at most.
    fn batch_size(&self) -> usize {
        64
    }

    /// Readies what the first embedding needs (a local model's vocabulary), so the first query does
    /// not wait for it. Called once, off the async workers, when a session first settles; a
    /// failure here is reported again by [`Embedder::embed`].
    fn prepare(&self) -> Result<(), EmbedError> {
        Ok(())
    }
}
