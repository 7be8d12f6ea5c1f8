//! `cks migrate`: a legacy document (no `_cks_format_version`) rewritten in the current
//! versioned format; `--check` only says whether that is needed (exit status 2 when it is).

use cks_core::validate::pyrepr::py_str;
use serde_json::Value;
use std::path::PathBuf;

use crate::input::{self, Failure, ReadError};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Path to the source CKS JSON file
    input: PathBuf,
    /// Destination path (omit when using --in-place)
    output: Option<PathBuf>,
    /// Overwrite the input file in place
    #[arg(long, short)]
    in_place: bool,
    /// Exit 0 if the file is already current, exit 2 if migration is needed, without writing any output
    #[arg(long)]
    check: bool,
}

pub(crate) fn run(args: Args) -> Result<u8, Failure> {
    let path = &args.input;
    let shown = input::display(path);
    let text = match input::read_text(path) {
        Ok(text) => text,
        Err(ReadError::NotFound) => return Err(Failure::new(format!("File not found: {shown}"))),
        Err(other) => return Err(other.failure(path)),
    };
    let document: Value = serde_json::from_str(&text).map_err(|e| Failure::new(format!("Cannot read {shown}: {e}")))?;
    let version = document.get("_cks_format_version");
    let current = || version.map_or_else(|| "?".to_owned(), py_str);
    if args.check {
        return match version {
            None => {
                input::print_line(&format!("NEEDS MIGRATION: {shown} (legacy format, no _cks_format_version)"))?;
                Ok(2)
            }
            Some(_) => {
                input::print_line(&format!("OK: {shown} (format version {})", current()))?;
                Ok(0)
            }
        };
    }
    if version.is_some() {
        input::print_line(&format!("Nothing to do: {shown} is already at format version {}.", current()))?;
        return Ok(0);
    }
    let destination = match (&args.output, args.in_place) {
        (_, true) => path.clone(),
        (Some(output), false) => output.clone(),
        (None, false) => return Err(Failure::new("error: specify an output path or pass --in-place")),
    };
    let structure = crate::document::parse_value(document)
        .map_err(|e| Failure::new(format!("Serialization error in {shown}: {e}")))?;
    std::fs::write(&destination, crate::document::serialize(&structure))
        .map_err(|e| Failure::new(format!("Cannot write {}: {e}", input::display(&destination))))?;
    if args.in_place {
        input::print_line(&format!("✓ Migrated {shown} to format v1.0 (in place)"))?;
    } else {
        input::print_line(&format!("✓ Migrated {shown} → {} (format v1.0)", input::display(&destination)))?;
    }
    Ok(0)
}
