//! The local static model: one vector per vocabulary token (a table distilled from a
//! transformer, each row already weighted by how much its token tells), and a text's vector is
//! the mean of its tokens' rows. Microseconds per text, no network, no model hub.
//!
//! A model is a directory of three files:
//!
//! | file | what it holds |
//! |---|---|
//! | `model.json` | `format` (`"cks-static"`), `name`, `dims`, and where it came from |
//! | `vocab.txt` | the WordPiece vocabulary, one token per line |
//! | `table.f32` | `vocab × dims` little-endian `f32`s, row `i` for token `i` |
//!
//! The table (31 MB for the default model) is read whole only when a batch of texts wants it.
//! Until then a text's rows are read from the file one at a time: a restarted server whose
//! objects are all embedded embeds only queries, a few rows each, and never reads the rest.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Deserialize;

use crate::wordpiece::WordPiece;
use crate::{EmbedError, Embedder};

/// The `format` a static model's `model.json` declares.
pub const FORMAT: &str = "cks-static";

#[derive(Debug, Deserialize)]
struct Manifest {
    format: String,
    name: String,
    dims: usize,
}

/// From this many texts in one call, the table is read whole first.
const WHOLE_TABLE_FROM: usize = 16;

/// A loaded static model.
#[derive(Debug)]
pub struct StaticModel {
    name: String,
    dims: usize,
    vocab: WordPiece,
    /// `table.f32`, open: row `i` is bytes `i * dims * 4..`.
    file: File,
    path: PathBuf,
    /// The whole table as read, once a batch wanted it (decoded as rows are summed, so 31 MB is
    /// read once rather than also written out again as `f32`s).
    table: OnceLock<Vec<u8>>,
}

impl StaticModel {
    /// Loads the model in `dir`; the error names the file that is missing or wrong.
    pub fn load(dir: &Path) -> Result<StaticModel, EmbedError> {
        let read = |name: &str| -> Result<Vec<u8>, EmbedError> {
            let path: PathBuf = dir.join(name);
            std::fs::read(&path).map_err(|e| unreadable(&path, e))
        };
        let manifest: Manifest = serde_json::from_slice(&read("model.json")?)
            .map_err(|e| EmbedError::Model(format!("{}: {e}", dir.join("model.json").display())))?;
        if manifest.format != FORMAT || manifest.dims == 0 {
            return Err(EmbedError::Model(format!(
                "{} is not a static model (format {:?}, {} dimensions)",
                dir.display(),
                manifest.format,
                manifest.dims
            )));
        }
        let vocab_text = String::from_utf8(read("vocab.txt")?)
            .map_err(|_| EmbedError::Model(format!("{} is not UTF-8", dir.join("vocab.txt").display())))?;
        let vocab = WordPiece::from_lines(&vocab_text);
        let path = dir.join("table.f32");
        let file = File::open(&path).map_err(|e| unreadable(&path, e))?;
        let size = file.metadata().map_err(|e| unreadable(&path, e))?.len();
        let expected = vocab.len() * manifest.dims * 4;
        if size != expected as u64 || vocab.is_empty() {
            return Err(EmbedError::Model(format!(
                "{} holds {size} bytes; {} tokens of {} dimensions need {expected}",
                path.display(),
                vocab.len(),
                manifest.dims
            )));
        }
        Ok(StaticModel { name: manifest.name, dims: manifest.dims, vocab, file, path, table: OnceLock::new() })
    }

    /// Reads the whole table, unless it was read already.
    fn read_table(&self) -> Result<(), EmbedError> {
        if self.table.get().is_some() {
            return Ok(());
        }
        let mut table = vec![0u8; self.vocab.len() * self.dims * 4];
        self.file.read_exact_at(&mut table, 0).map_err(|e| unreadable(&self.path, e))?;
        // Two batches may both have read it: either copy is the table.
        let _ = self.table.set(table);
        Ok(())
    }

    pub fn dims(&self) -> usize {
        self.dims
    }

    /// The mean of the rows of `text`'s known tokens; all zeros when it has none. Reads its
    /// rows from the file unless the table was read whole.
    pub fn vector(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let row_bytes = self.dims * 4;
        let mut sum = vec![0f32; self.dims];
        let mut read = Vec::new();
        let ids = self.vocab.encode(text);
        let mut counted = 0usize;
        for id in ids {
            if Some(id) == self.vocab.unknown() {
                continue;
            }
            let at = id as usize * row_bytes;
            let row = match self.table.get() {
                Some(table) => &table[at..][..row_bytes],
                None => {
                    read.resize(row_bytes, 0);
                    self.file.read_exact_at(&mut read, at as u64).map_err(|e| unreadable(&self.path, e))?;
                    &read[..]
                }
            };
            let (values, _) = row.as_chunks::<4>();
            sum.iter_mut().zip(values).for_each(|(s, v)| *s += f32::from_le_bytes(*v));
            counted += 1;
        }
        if counted > 0 {
            sum.iter_mut().for_each(|s| *s /= counted as f32);
        }
        Ok(sum)
    }
}

#[async_trait::async_trait]
impl Embedder for StaticModel {
    fn model(&self) -> &str {
        &self.name
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.len() >= WHOLE_TABLE_FROM {
            self.read_table()?;
        }
        texts.iter().map(|t| self.vector(t)).collect()
    }

    fn batch_size(&self) -> usize {
        1024
    }
}

/// A file of the model that could not be read.
fn unreadable(path: &Path, e: std::io::Error) -> EmbedError {
    EmbedError::Model(format!("cannot read {}: {e}", path.display()))
}

/// Writes a static model into `dir` (the distillation writes the same files; tests make small
/// ones with this).
pub fn write(dir: &Path, name: &str, tokens: &[&str], table: &[f32]) -> std::io::Result<()> {
    let dims = table.len() / tokens.len().max(1);
    std::fs::create_dir_all(dir)?;
    let manifest = serde_json::json!({"format": FORMAT, "name": name, "dims": dims});
    std::fs::write(dir.join("model.json"), manifest.to_string())?;
    std::fs::write(dir.join("vocab.txt"), tokens.join("\n"))?;
    let bytes: Vec<u8> = table.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("table.f32"), bytes)
}

/// Writes a three-dimension model for tests in which "car", "automobile" and "vehicle" mean
/// nearly the same, "banana", "fruit" and "yellow" something else, and "thing" neither.
pub fn write_sample(dir: &Path, name: &str) -> std::io::Result<()> {
    let tokens = ["[UNK]", "car", "automobile", "banana", "fruit", "vehicle", "yellow", "thing"];
    #[rustfmt::skip]
    let table = [
        0.0, 0.0, 0.0,
        1.0, 0.1, 0.0,
        0.9, 0.2, 0.0,
        0.0, 0.1, 1.0,
        0.0, 0.2, 0.9,
        0.8, 0.3, 0.0,
        0.1, 0.0, 0.8,
        0.0, 1.0, 0.0,
    ];
    write(dir, name, &tokens, &table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(dir: &Path) -> StaticModel {
        let tokens = ["[UNK]", "red", "apple", "##s", "car"];
        #[rustfmt::skip]
        let table = [
            9.0, 9.0, 9.0,
            1.0, 0.0, 0.0,
            0.0, 1.0, 0.0,
            0.0, 0.0, 1.0,
            0.0, 0.0, 4.0,
        ];
        write(dir, "tiny", &tokens, &table).unwrap();
        StaticModel::load(dir).unwrap()
    }

    #[tokio::test]
    async fn a_text_is_the_mean_of_its_known_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let model = model(dir.path());
        assert_eq!(model.model(), "tiny");
        assert_eq!(model.vector("Red apples").unwrap(), vec![1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0]);
        assert_eq!(model.vector("zebra car").unwrap(), vec![0.0, 0.0, 4.0], "unknown words add nothing");
        assert_eq!(model.vector("???").unwrap(), vec![0.0; 3]);
        let embedded = model.embed(&["car".to_owned(), "red".to_owned()]).await.unwrap();
        assert_eq!(embedded, vec![vec![0.0, 0.0, 4.0], vec![1.0, 0.0, 0.0]]);
    }

    #[tokio::test]
    async fn rows_are_read_one_at_a_time_until_a_batch_reads_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let model = model(dir.path());
        let texts: Vec<String> =
            (0..WHOLE_TABLE_FROM).map(|i| ["red car", "apples", "car"][i % 3].to_owned()).collect();
        let by_rows = model.embed(&texts[..2]).await.unwrap();
        assert!(model.table.get().is_none(), "a few texts read their rows alone");
        let whole = model.embed(&texts).await.unwrap();
        assert_eq!(model.table.get().map(Vec::len), Some(5 * 3 * 4), "a batch reads the table");
        assert_eq!(whole[..2], by_rows[..], "either way a text has one vector");
        assert_eq!(whole[0], vec![0.5, 0.0, 2.0]);
        // Read whole, the file is not needed again.
        std::fs::write(dir.path().join("table.f32"), [0u8; 60]).unwrap();
        assert_eq!(model.vector("red car").unwrap(), vec![0.5, 0.0, 2.0]);
    }

    #[test]
    fn a_broken_model_names_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        model(dir.path());
        std::fs::write(dir.path().join("table.f32"), [0u8; 12]).unwrap();
        let error = StaticModel::load(dir.path()).unwrap_err().to_string();
        assert!(error.contains("table.f32 holds 12 bytes"), "{error}");
        std::fs::remove_file(dir.path().join("vocab.txt")).unwrap();
        let error = StaticModel::load(dir.path()).unwrap_err().to_string();
        assert!(error.contains("cannot read") && error.contains("vocab.txt"), "{error}");
        std::fs::write(dir.path().join("model.json"), r#"{"format": "other", "name": "x", "dims": 3}"#).unwrap();
        let error = StaticModel::load(dir.path()).unwrap_err().to_string();
        assert!(error.contains("is not a static model"), "{error}");
    }
}
