//! What the stored forms of the search indexes share ([`crate::text::TextIndex::from_bytes`],
//! [`crate::vectors::StoredVectors`]): their error, and a reader of little-endian bytes that
//! refuses to read past the end.

use crate::ContentHash;

/// Why stored bytes are not an index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stored index unusable: {0}")]
pub struct StoredIndexError(pub(crate) String);

impl StoredIndexError {
    pub(crate) fn new(what: impl Into<String>) -> Self {
        StoredIndexError(what.into())
    }
}

pub(crate) struct Reader<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    pub(crate) fn take(&mut self, len: usize) -> Result<&'a [u8], StoredIndexError> {
        let end = self
            .at
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| StoredIndexError::new("cut short"))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, StoredIndexError> {
        Ok(u32_at(self.take(4)?, 0))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, StoredIndexError> {
        Ok(u64_at(self.take(8)?, 0))
    }

    /// Reads the head every stored index begins with: its magic (naming `what` it is), the
    /// version of how its text was made (named `made`, refused unless `version`), and the root
    /// hash of the structure it was made from, which it returns.
    pub(crate) fn head(
        &mut self,
        magic: &[u8; 8],
        what: &str,
        made: &str,
        version: u32,
    ) -> Result<ContentHash, StoredIndexError> {
        if self.take(magic.len())? != magic {
            return Err(StoredIndexError::new(format!("not a {what}")));
        }
        let written = self.u32()?;
        if written != version {
            return Err(StoredIndexError::new(format!("{made} {written}, this build makes {version}")));
        }
        Ok(ContentHash(self.take(32)?.try_into().expect("32 bytes")))
    }

    /// Whether every byte was read.
    pub(crate) fn is_done(&self) -> bool {
        self.at == self.bytes.len()
    }
}

/// The u32 at `at` of a section whose length was checked.
pub(crate) fn u32_at(section: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(section[at..at + 4].try_into().expect("four bytes"))
}

pub(crate) fn u64_at(section: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(section[at..at + 8].try_into().expect("eight bytes"))
}
