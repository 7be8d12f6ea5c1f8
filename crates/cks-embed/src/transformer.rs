//! The local transformer model: a BERT encoder run in process, on the CPU, from weights an install
//! step put in a directory (all-MiniLM-L6-v2 by default). A text's vector is its tokens' last
//! hidden states pooled (their mean, or the first token's), normalised.
//!
//! A model is a directory of the files its publisher ships, plus our manifest:
//!
//! | file | what it holds |
//! |---|---|
//! | `model.json` | `format` (`"cks-transformer"`), `name`, `max_tokens`, `pooling` (`mean` or `cls`) |
//! | `config.json` | the BERT configuration (sizes, layers, heads) |
//! | `vocab.txt` | the WordPiece vocabulary, one token per line |
//! | `model.safetensors` | the weights, `F32`, under the names Hugging Face's `BertModel` uses |
//!
//! [`Transformer::check`] reads the manifests and the weights' header (a wrong or truncated
//! file is found there, at start-up); the weights are read at the first embedding, the word
//! embeddings never whole: each token's row is read from the file as a text needs it.
//!
//! Texts are encoded without padding: each text's tokens are rows of one matrix through the
//! linear layers, and attention runs text by text.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, mpsc};

use serde::Deserialize;

use crate::gemm::{Packed, View, ViewMut, multiply};
use crate::safetensors::{SafeTensors, Tensor};
use crate::wordpiece::WordPiece;
use crate::{EmbedError, Embedder};

/// The `format` a transformer model's `model.json` declares.
pub const FORMAT: &str = "cks-transformer";

/// How a text's token states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The mean of every token's state, `[CLS]` and `[SEP]` included (sentence-transformers').
    Mean,
    /// The first token's (`[CLS]`) state.
    Cls,
}

#[derive(Debug, Deserialize)]
struct Manifest {
    format: String,
    name: String,
    /// Tokens a text is cut to, `[CLS]` and `[SEP]` included.
    max_tokens: usize,
    pooling: Pooling,
}

/// The part of BERT's `config.json` the encoder needs.
#[derive(Debug, Clone, Deserialize)]
struct Config {
    hidden_size: usize,
    num_attention_heads: usize,
    num_hidden_layers: usize,
    intermediate_size: usize,
    layer_norm_eps: f32,
    max_position_embeddings: usize,
    vocab_size: usize,
    type_vocab_size: usize,
    hidden_act: String,
}

/// Texts in one background call are encoded in groups of about this many tokens: large enough
/// for the matrix products to run at speed, small enough to keep the buffers in cache.
const GROUP_TOKENS: usize = 2048;

/// A transformer model whose files were checked; its weights are read when first needed.
#[derive(Debug)]
pub struct Transformer {
    shared: Arc<Shared>,
    /// The background thread's queue, made at the first batch.
    background: OnceLock<mpsc::Sender<Job>>,
}

#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    name: String,
    max_tokens: usize,
    pooling: Pooling,
    config: Config,
    weights: OnceLock<Result<Weights, EmbedError>>,
}

type Job = (Vec<String>, tokio::sync::oneshot::Sender<Result<Vec<Vec<f32>>, EmbedError>>);

impl Transformer {
    /// Checks the model in `dir` (its manifests, and that its weights file holds every tensor
    /// the configuration needs, in its shape) without reading the weights. The error names the
    /// file that is missing or wrong.
    pub fn check(dir: &Path) -> Result<Transformer, EmbedError> {
        let manifest: Manifest = read_json(&dir.join("model.json"))?;
        if manifest.format != FORMAT {
            return Err(EmbedError::Model(format!(
                "{} is not a transformer model (format {:?})",
                dir.display(),
                manifest.format
            )));
        }
        let config: Config = read_json(&dir.join("config.json"))?;
        let heads_fit = config.num_attention_heads > 0 && config.hidden_size.is_multiple_of(config.num_attention_heads);
        if config.hidden_act != "gelu" || !heads_fit || config.hidden_size == 0 || config.type_vocab_size == 0 {
            return Err(EmbedError::Model(format!(
                "{}: a BERT with GELU whose heads divide its hidden size is needed",
                dir.join("config.json").display()
            )));
        }
        if manifest.max_tokens < 2 || manifest.max_tokens > config.max_position_embeddings {
            return Err(EmbedError::Model(format!(
                "{}: max_tokens {} is not within 2..={}",
                dir.join("model.json").display(),
                manifest.max_tokens,
                config.max_position_embeddings
            )));
        }
        let file = SafeTensors::open(&dir.join("model.safetensors"))?;
        for (name, shape) in tensor_shapes(&config) {
            file.tensor(&name, &shape)?;
        }
        let shared = Shared {
            dir: dir.to_owned(),
            name: manifest.name,
            max_tokens: manifest.max_tokens,
            pooling: manifest.pooling,
            config,
            weights: OnceLock::new(),
        };
        Ok(Transformer { shared: Arc::new(shared), background: OnceLock::new() })
    }

    /// Reads the vocabulary and the weights, unless they were read already.
    pub fn load(&self) -> Result<(), EmbedError> {
        self.shared.weights().map(|_| ())
    }

    /// The vectors of `texts`, encoded on this thread.
    pub fn encode(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.shared.encode(texts)
    }

    /// The queue of the thread that encodes batches, started at the first. It runs at a lower
    /// priority than the server's other threads, so commits and searches go first.
    fn background(&self) -> mpsc::Sender<Job> {
        let queue = self.background.get_or_init(|| {
            let (sender, receiver) = mpsc::channel::<Job>();
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new().name("cks-embed".into()).spawn(move || {
                // Nice 10: about a tenth of a core's share against a busy thread at the default.
                if let Err(e) = rustix::process::setpriority_process(None, 10) {
                    tracing::debug!(error = %e, "the embedding thread's priority was not lowered");
                }
                while let Ok((texts, reply)) = receiver.recv() {
                    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
                    let _ = reply.send(shared.encode(&texts));
                }
            });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "no embedding thread");
            }
            sender
        });
        queue.clone()
    }
}

#[async_trait::async_trait]
impl Embedder for Transformer {
    fn model(&self) -> &str {
        &self.shared.name
    }

    /// One text (a query) is encoded at once on a blocking thread; more go to the background
    /// thread, behind any batch already there.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let stopped = || EmbedError::Model("the embedding thread stopped".into());
        let texts = texts.to_vec();
        if texts.len() <= 1 {
            let shared = self.shared.clone();
            return tokio::task::spawn_blocking(move || {
                let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
                shared.encode(&texts)
            })
            .await
            .map_err(|_| stopped())?;
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.background().send((texts, reply)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    fn batch_size(&self) -> usize {
        32
    }

    fn prepare(&self) -> Result<(), EmbedError> {
        self.load()
    }
}

/// Every tensor the encoder reads, with its shape.
fn tensor_shapes(config: &Config) -> Vec<(String, Vec<usize>)> {
    let (h, i) = (config.hidden_size, config.intermediate_size);
    let mut shapes = vec![
        ("embeddings.word_embeddings.weight".to_owned(), vec![config.vocab_size, h]),
        ("embeddings.position_embeddings.weight".to_owned(), vec![config.max_position_embeddings, h]),
        ("embeddings.token_type_embeddings.weight".to_owned(), vec![config.type_vocab_size, h]),
        ("embeddings.LayerNorm.weight".to_owned(), vec![h]),
        ("embeddings.LayerNorm.bias".to_owned(), vec![h]),
    ];
    for layer in 0..config.num_hidden_layers {
        let p = format!("encoder.layer.{layer}.");
        for (name, outputs, inputs) in [
            ("attention.self.query", h, h),
            ("attention.self.key", h, h),
            ("attention.self.value", h, h),
            ("attention.output.dense", h, h),
            ("intermediate.dense", i, h),
            ("output.dense", h, i),
        ] {
            shapes.push((format!("{p}{name}.weight"), vec![outputs, inputs]));
            shapes.push((format!("{p}{name}.bias"), vec![outputs]));
        }
        for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
            shapes.push((format!("{p}{norm}.weight"), vec![h]));
            shapes.push((format!("{p}{norm}.bias"), vec![h]));
        }
    }
    shapes
}

/// The vocabulary and the weights, as read.
#[derive(Debug)]
struct Weights {
    vocab: WordPiece,
    cls: u32,
    sep: u32,
    file: SafeTensors,
    words: Tensor,
    /// Each position's embedding plus the (only) token type's.
    positions: Vec<f32>,
    norm: Norm,
    layers: Vec<Layer>,
}

#[derive(Debug)]
struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: Norm,
    up: Linear,
    down: Linear,
    norm: Norm,
}

/// `y = x · W + b`; `W` is stored `outputs × inputs`, and held packed.
#[derive(Debug)]
struct Linear {
    weight: Packed,
    bias: Vec<f32>,
}

#[derive(Debug)]
struct Norm {
    gain: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl Shared {
    fn weights(&self) -> Result<&Weights, EmbedError> {
        self.weights.get_or_init(|| self.read_weights()).as_ref().map_err(Clone::clone)
    }

    fn read_weights(&self) -> Result<Weights, EmbedError> {
        let config = &self.config;
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let vocab_path = self.dir.join("vocab.txt");
        let text = std::fs::read(&vocab_path)
            .map_err(|e| EmbedError::Model(format!("cannot read {}: {e}", vocab_path.display())))
            .and_then(|b| {
                String::from_utf8(b).map_err(|_| EmbedError::Model(format!("{} is not UTF-8", vocab_path.display())))
            })?;
        let vocab = WordPiece::from_lines(&text);
        let special = |token: &str| {
            vocab.id(token).filter(|id| (*id as usize) < config.vocab_size).ok_or_else(|| {
                EmbedError::Model(format!("{} has no {token} within the model's vocabulary", vocab_path.display()))
            })
        };
        let (cls, sep) = (special("[CLS]")?, special("[SEP]")?);
        if vocab.len() > config.vocab_size {
            return Err(EmbedError::Model(format!(
                "{} has {} tokens; the model knows {}",
                vocab_path.display(),
                vocab.len(),
                config.vocab_size
            )));
        }
        let file = SafeTensors::open(&self.dir.join("model.safetensors"))?;
        let words = file.tensor("embeddings.word_embeddings.weight", &[config.vocab_size, h])?.clone();
        let mut positions = file.read("embeddings.position_embeddings.weight", &[config.max_position_embeddings, h])?;
        // Every text is BERT's sentence A: the first token type.
        let token_type = file.read("embeddings.token_type_embeddings.weight", &[config.type_vocab_size, h])?;
        for row in positions.chunks_exact_mut(h) {
            row.iter_mut().zip(&token_type).for_each(|(p, t)| *p += t);
        }
        let norm = |name: &str| -> Result<Norm, EmbedError> {
            Ok(Norm {
                gain: file.read(&format!("{name}.weight"), &[h])?,
                bias: file.read(&format!("{name}.bias"), &[h])?,
                eps: config.layer_norm_eps,
            })
        };
        let linear = |name: &str, outputs: usize, inputs: usize| -> Result<Linear, EmbedError> {
            let stored = file.read(&format!("{name}.weight"), &[outputs, inputs])?;
            let weight = Packed::from_transposed(&stored, outputs, inputs);
            Ok(Linear { weight, bias: file.read(&format!("{name}.bias"), &[outputs])? })
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for layer in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{layer}.");
            layers.push(Layer {
                query: linear(&format!("{p}attention.self.query"), h, h)?,
                key: linear(&format!("{p}attention.self.key"), h, h)?,
                value: linear(&format!("{p}attention.self.value"), h, h)?,
                attention_out: linear(&format!("{p}attention.output.dense"), h, h)?,
                attention_norm: norm(&format!("{p}attention.output.LayerNorm"))?,
                up: linear(&format!("{p}intermediate.dense"), i, h)?,
                down: linear(&format!("{p}output.dense"), h, i)?,
                norm: norm(&format!("{p}output.LayerNorm"))?,
            });
        }
        let norm = norm("embeddings.LayerNorm")?;
        Ok(Weights { vocab, cls, sep, file, words, positions, norm, layers })
    }

    /// `texts` in groups of about [`GROUP_TOKENS`] tokens.
    fn encode(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let weights = self.weights()?;
        let mut vectors = Vec::with_capacity(texts.len());
        let mut group: Vec<Vec<u32>> = Vec::new();
        let mut tokens = 0;
        for text in texts {
            let ids = self.token_ids(weights, text);
            tokens += ids.len();
            group.push(ids);
            if tokens >= GROUP_TOKENS {
                vectors.extend(self.encode_group(weights, &group)?);
                group.clear();
                tokens = 0;
            }
        }
        if !group.is_empty() {
            vectors.extend(self.encode_group(weights, &group)?);
        }
        Ok(vectors)
    }

    /// `[CLS]`, the text's pieces cut to fit, `[SEP]`.
    fn token_ids(&self, weights: &Weights, text: &str) -> Vec<u32> {
        let mut ids = vec![weights.cls];
        let mut pieces = weights.vocab.tokens(text);
        pieces.truncate(self.max_tokens - 2);
        ids.extend(pieces);
        ids.push(weights.sep);
        ids
    }

    fn encode_group(&self, weights: &Weights, texts: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let config = &self.config;
        let (h, inner) = (config.hidden_size, config.intermediate_size);
        let rows: usize = texts.iter().map(Vec::len).sum();
        let mut x = vec![0f32; rows * h];
        let mut row = 0;
        for ids in texts {
            for (position, id) in ids.iter().enumerate() {
                let out = &mut x[row * h..][..h];
                weights.file.read_row(&weights.words, *id as usize, out)?;
                out.iter_mut().zip(&weights.positions[position * h..][..h]).for_each(|(v, p)| *v += p);
                row += 1;
            }
        }
        weights.norm.apply(&mut x, h);
        let (mut q, mut k, mut v, mut context, mut sum) = (
            vec![0f32; rows * h],
            vec![0f32; rows * h],
            vec![0f32; rows * h],
            vec![0f32; rows * h],
            vec![0f32; rows * h],
        );
        let mut up = vec![0f32; rows * inner];
        let longest = texts.iter().map(Vec::len).max().unwrap_or(0);
        let mut scores = vec![0f32; longest * longest];
        let heads = config.num_attention_heads;
        let head = h / heads;
        let scale = 1.0 / (head as f32).sqrt();
        for layer in &weights.layers {
            layer.query.apply(&x, rows, &mut q);
            layer.key.apply(&x, rows, &mut k);
            layer.value.apply(&x, rows, &mut v);
            let mut start = 0;
            for ids in texts {
                let n = ids.len();
                for at in (0..heads).map(|i| start * h + i * head) {
                    let s = ViewMut::rows(&mut scores[..n * n], n, n);
                    let keys = View::strided(&k[at..], n, head, h, 1);
                    multiply(View::strided(&q[at..], n, head, h, 1), keys.t(), 0.0, s);
                    for line in scores[..n * n].chunks_exact_mut(n) {
                        softmax(line, scale);
                    }
                    let out = ViewMut::strided(&mut context[at..], n, head, h);
                    multiply(View::rows(&scores[..n * n], n, n), View::strided(&v[at..], n, head, h, 1), 0.0, out);
                }
                start += n;
            }
            layer.attention_out.apply(&context, rows, &mut sum);
            sum.iter_mut().zip(&x).for_each(|(s, x)| *s += x);
            layer.attention_norm.apply(&mut sum, h);
            std::mem::swap(&mut x, &mut sum);
            layer.up.apply(&x, rows, &mut up);
            up.iter_mut().for_each(|u| *u = gelu(*u));
            layer.down.apply(&up, rows, &mut sum);
            sum.iter_mut().zip(&x).for_each(|(s, x)| *s += x);
            layer.norm.apply(&mut sum, h);
            std::mem::swap(&mut x, &mut sum);
        }
        let mut vectors = Vec::with_capacity(texts.len());
        let mut start = 0;
        for ids in texts {
            let states = &x[start * h..][..ids.len() * h];
            let mut vector = match self.pooling {
                Pooling::Cls => states[..h].to_vec(),
                Pooling::Mean => {
                    let mut mean = vec![0f32; h];
                    for state in states.chunks_exact(h) {
                        mean.iter_mut().zip(state).for_each(|(m, s)| *m += s);
                    }
                    mean.iter_mut().for_each(|m| *m /= ids.len() as f32);
                    mean
                }
            };
            let length = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
            if length > 0.0 {
                vector.iter_mut().for_each(|v| *v /= length);
            }
            vectors.push(vector);
            start += ids.len();
        }
        Ok(vectors)
    }
}

impl Linear {
    /// `out = input · W + b` for `rows` rows.
    fn apply(&self, input: &[f32], rows: usize, out: &mut [f32]) {
        for row in out.chunks_exact_mut(self.bias.len()) {
            row.copy_from_slice(&self.bias);
        }
        self.weight.multiply(input, rows, out);
    }
}

impl Norm {
    /// Each row of `x` (rows of `width`) to mean 0 and variance 1, then scaled and shifted.
    fn apply(&self, x: &mut [f32], width: usize) {
        for row in x.chunks_exact_mut(width) {
            let mean = row.iter().sum::<f32>() / width as f32;
            let variance = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / width as f32;
            let inverse = 1.0 / (variance + self.eps).sqrt();
            for ((v, g), b) in row.iter_mut().zip(&self.gain).zip(&self.bias) {
                *v = (*v - mean) * inverse * g + b;
            }
        }
    }
}

/// `line · scale`, turned into probabilities.
fn softmax(line: &mut [f32], scale: f32) {
    let max = line.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v)) * scale;
    let mut total = 0.0;
    for v in line.iter_mut() {
        *v = (*v * scale - max).exp();
        total += *v;
    }
    line.iter_mut().for_each(|v| *v /= total);
}

/// BERT's GELU, `x · Φ(x)`, with `erf` to within 3e-7 (Abramowitz and Stegun 7.1.28: no
/// exponential, so it vectorises).
fn gelu(x: f32) -> f32 {
    let z = (x * std::f32::consts::FRAC_1_SQRT_2).abs();
    let p = 1.0
        + z * (0.070_523_08
            + z * (0.042_282_01
                + z * (0.009_270_527 + z * (0.000_152_014_3 + z * (0.000_276_567_2 + z * 0.000_043_063_8)))));
    let p2 = p * p;
    let p4 = p2 * p2;
    let p8 = p4 * p4;
    let erf = 1.0 - 1.0 / (p8 * p8);
    0.5 * x * (1.0 + erf.copysign(x))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, EmbedError> {
    let bytes = std::fs::read(path).map_err(|e| EmbedError::Model(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_slice(&bytes).map_err(|e| EmbedError::Model(format!("{}: {e}", path.display())))
}

/// Writes a small BERT with seeded weights into `dir` (the encoder's tests use it; an installed
/// model has the same files): `hidden` wide, two heads, `layers` layers, the given vocabulary.
pub fn write_sample(dir: &Path, name: &str, tokens: &[&str], hidden: usize, layers: usize) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let manifest = serde_json::json!({"format": FORMAT, "name": name, "max_tokens": 16, "pooling": "mean"});
    std::fs::write(dir.join("model.json"), manifest.to_string())?;
    let config = Config {
        hidden_size: hidden,
        num_attention_heads: 2,
        num_hidden_layers: layers,
        intermediate_size: hidden * 4,
        layer_norm_eps: 1e-12,
        max_position_embeddings: 16,
        vocab_size: tokens.len(),
        type_vocab_size: 2,
        hidden_act: "gelu".into(),
    };
    std::fs::write(dir.join("config.json"), config.to_json().to_string())?;
    std::fs::write(dir.join("vocab.txt"), tokens.join("\n"))?;
    // A fixed sequence in -0.5..0.5 (a 64-bit linear congruential generator): the same model on
    // every run, with no randomness crate.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut values = |count: usize| -> Vec<f32> {
        (0..count)
            .map(|_| {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    };
    let shapes = tensor_shapes(&config);
    let data: Vec<Vec<f32>> = shapes.iter().map(|(_, shape)| values(shape.iter().product())).collect();
    let tensors: Vec<(&str, Vec<usize>, &[f32])> =
        shapes.iter().zip(&data).map(|((name, shape), values)| (name.as_str(), shape.clone(), &values[..])).collect();
    crate::safetensors::write(&dir.join("model.safetensors"), &tensors)
}

impl Config {
    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "num_hidden_layers": self.num_hidden_layers,
            "intermediate_size": self.intermediate_size,
            "layer_norm_eps": self.layer_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "vocab_size": self.vocab_size,
            "type_vocab_size": self.type_vocab_size,
            "hidden_act": self.hidden_act,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKENS: [&str; 10] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "red", "apple", "##s", "car", "fast", "."];

    fn sample(dir: &Path) -> Transformer {
        write_sample(dir, "tiny-bert", &TOKENS, 8, 2).unwrap();
        Transformer::check(dir).unwrap()
    }

    #[test]
    fn a_batch_encodes_each_text_as_it_would_alone() {
        let dir = tempfile::tempdir().unwrap();
        let model = sample(dir.path());
        let texts = ["red apples", "a fast car.", "", "red red red red red red red red red red red red red red red"];
        let together = model.encode(&texts).unwrap();
        for (text, vector) in texts.iter().zip(&together) {
            let alone = model.encode(&[text]).unwrap().remove(0);
            assert_eq!(vector.len(), 8);
            let length: f32 = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
            assert!((length - 1.0).abs() < 1e-5, "{text:?} is normalised: {length}");
            assert!(vector.iter().zip(&alone).all(|(a, b)| (a - b).abs() < 1e-5), "{text:?}: {vector:?} / {alone:?}");
        }
        assert_ne!(together[0], together[1], "different texts, different vectors");
        // Cut at max_tokens: only the first fourteen pieces count.
        let long = model.encode(&["red ".repeat(30).as_str()]).unwrap();
        assert_eq!(long, model.encode(&["red ".repeat(14).as_str()]).unwrap());
    }

    #[test]
    fn a_damaged_model_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        sample(dir.path());
        let weights = dir.path().join("model.safetensors");
        let bytes = std::fs::read(&weights).unwrap();
        std::fs::write(&weights, &bytes[..bytes.len() - 4]).unwrap();
        let error = Transformer::check(dir.path()).unwrap_err().to_string();
        assert!(error.contains("model.safetensors") && error.contains("lies outside the file"), "{error}");
        std::fs::remove_file(dir.path().join("config.json")).unwrap();
        let error = Transformer::check(dir.path()).unwrap_err().to_string();
        assert!(error.contains("cannot read") && error.contains("config.json"), "{error}");
        std::fs::write(dir.path().join("model.json"), r#"{"format": "cks-static", "name": "x", "dims": 3}"#).unwrap();
        let error = Transformer::check(dir.path()).unwrap_err().to_string();
        assert!(error.contains("model.json"), "{error}");
    }

    #[test]
    fn missing_weights_of_a_layer_are_named() {
        let dir = tempfile::tempdir().unwrap();
        sample(dir.path());
        let mut config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("config.json")).unwrap()).unwrap();
        config["num_hidden_layers"] = 3.into();
        std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
        let error = Transformer::check(dir.path()).unwrap_err().to_string();
        assert!(error.contains("no F32 tensor encoder.layer.2."), "{error}");
    }

    #[test]
    fn gelu_follows_the_normal_distribution() {
        // x · Φ(x), with Φ from Python's math.erf.
        for (x, expected) in
            [(0.0, 0.0), (1.0, 0.841_344_7), (-1.0, -0.158_655_3), (2.5, 2.484_475_8), (-3.0, -0.004_049_7)]
        {
            assert!((gelu(x) - expected).abs() < 1e-6, "gelu({x}) = {}", gelu(x));
        }
    }
}
