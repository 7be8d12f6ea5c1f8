//! `cks evolve`: a batch of evolution operations applied to a file, the result written out.

use std::path::PathBuf;

use crate::input::{self, Failure};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Path to canonical JSON file
    input: PathBuf,
    /// JSON file describing operations
    operations: PathBuf,
    /// Write result to file
    #[arg(long, short)]
    output: Option<PathBuf>,
}

pub(crate) fn run(args: Args) -> Result<u8, Failure> {
    let structure = super::parse::load(&args.input)?;
    let text = input::read_text(&args.operations).map_err(|e| e.failure(&args.operations))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Failure::new(format!("Invalid JSON in operations file: {e}")))?;
    let operations =
        cks_core::ops::parse_operations(&value).map_err(|e| Failure::new(format!("Invalid operations: {e}")))?;
    // The reference stops with a traceback when an operation cannot apply; this says why.
    let evolved =
        cks_core::ops::evolve(&structure, &operations).map_err(|e| Failure::new(format!("Evolution error: {e}")))?;
    input::emit(&crate::document::serialize(&evolved), args.output.as_deref())?;
    Ok(0)
}
