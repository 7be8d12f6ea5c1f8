//! The safetensors format, read: an 8-byte little-endian header length, a JSON header naming
//! each tensor's type, shape and byte range, then the tensors' bytes. Only what a local model
//! needs: little-endian `F32` tensors, read whole or one row at a time.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::EmbedError;

/// A header larger than this is not a model's (it would be read into memory whole).
const MAX_HEADER: u64 = 64 << 20;

#[derive(Debug, Deserialize)]
struct Entry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [u64; 2],
}

/// One tensor's place in the file.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub shape: Vec<usize>,
    /// Where its bytes start in the file.
    offset: u64,
}

/// An open safetensors file whose header was read and checked against the file's size.
#[derive(Debug)]
pub struct SafeTensors {
    file: File,
    path: PathBuf,
    tensors: HashMap<String, Tensor>,
}

impl SafeTensors {
    /// Opens `path` and reads its header. Every `F32` tensor's bytes must lie inside the file, so
    /// a truncated file fails here, not at its first use.
    pub fn open(path: &Path) -> Result<SafeTensors, EmbedError> {
        let bad =
            |why: String| EmbedError::Model(format!("{} is not a usable safetensors file: {why}", path.display()));
        let file = File::open(path).map_err(|e| EmbedError::Model(format!("cannot read {}: {e}", path.display())))?;
        let size = file.metadata().map_err(|e| bad(e.to_string()))?.len();
        let mut head = [0u8; 8];
        file.read_exact_at(&mut head, 0).map_err(|_| bad("shorter than its header".into()))?;
        let length = u64::from_le_bytes(head);
        if length > MAX_HEADER || 8 + length > size {
            return Err(bad(format!("a header of {length} bytes in a file of {size}")));
        }
        let mut header = vec![0u8; length as usize];
        file.read_exact_at(&mut header, 8).map_err(|e| bad(e.to_string()))?;
        let entries: HashMap<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|e| bad(format!("its header: {e}")))?;
        let data = 8 + length;
        let mut tensors = HashMap::new();
        for (name, value) in entries {
            if name == "__metadata__" {
                continue;
            }
            let entry: Entry = serde_json::from_value(value).map_err(|e| bad(format!("tensor {name}: {e}")))?;
            let [start, end] = entry.data_offsets;
            if entry.dtype != "F32" {
                // Other tensors (BERT's `position_ids`) are not read.
                continue;
            }
            let count: usize = entry.shape.iter().product();
            if end < start || end - start != count as u64 * 4 || data + end > size {
                return Err(bad(format!("tensor {name} lies outside the file or does not fit its shape")));
            }
            tensors.insert(name, Tensor { shape: entry.shape, offset: data + start });
        }
        Ok(SafeTensors { file, path: path.to_owned(), tensors })
    }

    /// The `F32` tensor `name`, which must have `shape`.
    pub fn tensor(&self, name: &str, shape: &[usize]) -> Result<&Tensor, EmbedError> {
        let tensor = self
            .tensors
            .get(name)
            .ok_or_else(|| EmbedError::Model(format!("{} has no F32 tensor {name}", self.path.display())))?;
        if tensor.shape != shape {
            return Err(EmbedError::Model(format!(
                "{}: tensor {name} has shape {:?}, not {shape:?}",
                self.path.display(),
                tensor.shape
            )));
        }
        Ok(tensor)
    }

    /// The `F32` tensor `name`, of `shape`, read whole.
    pub fn read(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, EmbedError> {
        let tensor = self.tensor(name, shape)?;
        let mut values = vec![0f32; shape.iter().product()];
        self.read_at(tensor.offset, &mut values)?;
        Ok(values)
    }

    /// Row `row` of a two-dimensional tensor, into `out` (as long as a row).
    pub fn read_row(&self, tensor: &Tensor, row: usize, out: &mut [f32]) -> Result<(), EmbedError> {
        debug_assert_eq!(tensor.shape.get(1), Some(&out.len()));
        self.read_at(tensor.offset + (row * out.len() * 4) as u64, out)
    }

    fn read_at(&self, offset: u64, out: &mut [f32]) -> Result<(), EmbedError> {
        let mut bytes = vec![0u8; out.len() * 4];
        self.file
            .read_exact_at(&mut bytes, offset)
            .map_err(|e| EmbedError::Model(format!("cannot read {}: {e}", self.path.display())))?;
        let (values, _) = bytes.as_chunks::<4>();
        out.iter_mut().zip(values).for_each(|(o, v)| *o = f32::from_le_bytes(*v));
        Ok(())
    }
}

/// Writes `tensors` (name, shape, values) as a safetensors file: tests make small models with it.
pub fn write(path: &Path, tensors: &[(&str, Vec<usize>, &[f32])]) -> std::io::Result<()> {
    let mut header = serde_json::Map::new();
    let mut at = 0usize;
    for (name, shape, values) in tensors {
        let end = at + values.len() * 4;
        header
            .insert((*name).to_owned(), serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [at, end]}));
        at = end;
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    for (_, _, values) in tensors {
        bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    }
    std::fs::write(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_are_read_whole_or_by_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        write(&path, &[("a", vec![2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), ("b", vec![1], &[7.5])]).unwrap();
        let file = SafeTensors::open(&path).unwrap();
        assert_eq!(file.read("b", &[1]).unwrap(), vec![7.5]);
        let a = file.tensor("a", &[2, 3]).unwrap().clone();
        let mut row = [0f32; 3];
        file.read_row(&a, 1, &mut row).unwrap();
        assert_eq!(row, [4.0, 5.0, 6.0]);
        let error = file.read("a", &[3, 2]).unwrap_err().to_string();
        assert!(error.contains("has shape [2, 3], not [3, 2]"), "{error}");
        assert!(file.read("c", &[1]).unwrap_err().to_string().contains("no F32 tensor c"));
    }

    #[test]
    fn a_truncated_file_fails_as_it_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        write(&path, &[("a", vec![4], &[1.0, 2.0, 3.0, 4.0])]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let error = SafeTensors::open(&path).unwrap_err().to_string();
        assert!(error.contains("tensor a lies outside the file"), "{error}");
        std::fs::write(&path, [1, 2, 3]).unwrap();
        assert!(SafeTensors::open(&path).unwrap_err().to_string().contains("shorter than its header"));
    }
}
