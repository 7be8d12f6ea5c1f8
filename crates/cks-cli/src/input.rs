//! Reading the files a command names, bounded, and writing what it produces.
//!
//! A file is read whole, as the reference reads it (`Path.read_text`, universal newlines), but
//! never more than [`MAX_INPUT_BYTES`]: a larger file, a device that never ends or text that is
//! not UTF-8 is an error naming the file, not a crash or a hang.

use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Component, Path};

/// The largest file a command reads (512 MiB): parsing takes several times a file's size in
/// memory, and no knowledge structure this tool is meant for comes near it.
pub(crate) const MAX_INPUT_BYTES: u64 = 512 << 20;

/// A command's failure: the line it writes to standard error, and its exit status.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) status: u8,
}

impl Failure {
    /// A failure with exit status 1, as every error of the reference's commands has.
    pub(crate) fn new(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), status: 1 }
    }
}

/// Why a file could not be read as text.
#[derive(Debug)]
pub(crate) enum ReadError {
    NotFound,
    TooLarge,
    NotUtf8 { offset: usize },
    Io(io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::NotFound => f.write_str("no such file"),
            ReadError::TooLarge => write!(f, "the file is larger than {} MiB", MAX_INPUT_BYTES >> 20),
            ReadError::NotUtf8 { offset } => write!(f, "the file is not UTF-8 text (invalid byte at offset {offset})"),
            ReadError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl ReadError {
    /// The reference's "File not found: PATH" for a missing file, else "Cannot read PATH: why".
    pub(crate) fn failure(&self, path: &Path) -> Failure {
        match self {
            ReadError::NotFound => Failure::new(format!("File not found: {}", display(path))),
            other => Failure::new(format!("Cannot read {}: {other}", display(path))),
        }
    }
}

/// Reads a UTF-8 text file of at most [`MAX_INPUT_BYTES`], with `\r\n` and `\r` read as `\n`.
pub(crate) fn read_text(path: &Path) -> Result<String, ReadError> {
    read_text_limited(path, MAX_INPUT_BYTES)
}

fn read_text_limited(path: &Path, limit: u64) -> Result<String, ReadError> {
    let file = std::fs::File::open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => ReadError::NotFound,
        _ => ReadError::Io(e),
    })?;
    let metadata = file.metadata().map_err(ReadError::Io)?;
    if metadata.is_dir() {
        return Err(ReadError::Io(io::Error::new(io::ErrorKind::IsADirectory, "is a directory")));
    }
    if metadata.len() > limit {
        return Err(ReadError::TooLarge);
    }
    // The size is checked again while reading: a pipe or a device reports none.
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge);
    }
    let text = String::from_utf8(bytes).map_err(|e| ReadError::NotUtf8 { offset: e.utf8_error().valid_up_to() })?;
    Ok(if text.contains('\r') { text.replace("\r\n", "\n").replace('\r', "\n") } else { text })
}

/// A path as Python's `str(Path(...))` shows it: `.` segments, repeated and trailing slashes
/// dropped.
pub(crate) fn display(path: &Path) -> String {
    let text = path.to_string_lossy();
    let absolute = text.starts_with('/');
    let parts: Vec<String> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
            Component::ParentDir => Some("..".to_owned()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect();
    match (absolute, parts.is_empty()) {
        (true, _) => format!("/{}", parts.join("/")),
        (false, true) => ".".to_owned(),
        (false, false) => parts.join("/"),
    }
}

/// Where a command's result goes: printed with a final newline (Python's `print`), or written to
/// the file as it is.
pub(crate) fn emit(text: &str, output: Option<&Path>) -> Result<(), Failure> {
    match output {
        None => print_line(text),
        Some(path) => {
            std::fs::write(path, text).map_err(|e| Failure::new(format!("Cannot write {}: {e}", display(path))))
        }
    }
}

/// Prints `text` and a newline on standard output. A closed pipe (`cks ... | head`) ends the
/// output quietly.
pub(crate) fn print_line(text: &str) -> Result<(), Failure> {
    let mut stdout = io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.write_all(b"\n")).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::new(format!("Cannot write the output: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_display_as_python_shows_them() {
        for (path, shown) in
            [("./a.json", "a.json"), ("a//b/", "a/b"), ("/x/./y", "/x/y"), ("../a", "../a"), (".", ".")]
        {
            assert_eq!(display(Path::new(path)), shown);
        }
    }

    #[test]
    fn reading_is_bounded_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"a\r\nb\rc").unwrap();
        assert_eq!(read_text(&path).unwrap(), "a\nb\nc");
        assert!(matches!(read_text_limited(&path, 3), Err(ReadError::TooLarge)));
        std::fs::write(&path, b"ok\xff").unwrap();
        assert!(matches!(read_text(&path), Err(ReadError::NotUtf8 { offset: 2 })));
        assert!(matches!(read_text(&dir.path().join("none")), Err(ReadError::NotFound)));
        assert!(matches!(read_text(dir.path()), Err(ReadError::Io(_))));
    }
}
