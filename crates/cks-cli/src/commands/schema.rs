//! `cks schema validate`: a JSON document checked against the canonical JSON Schema (CKS-003):
//! an object with a non-empty `objects` array of `{identity: {id, type, name}, structure}`
//! records, strings where the identity needs them, and no other keys.

use serde_json::{Value, json};
use std::path::PathBuf;

use crate::input::{self, Failure};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Validate a JSON document against the canonical schema
    Validate {
        /// Path to JSON file
        input: PathBuf,
    },
}

/// The canonical serialization's schema (JSON Schema 2020-12).
fn canonical_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Canonical Knowledge Structure",
        "type": "object",
        "required": ["objects"],
        "properties": {
            "version": {"type": "string"},
            "objects": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["identity", "structure"],
                    "properties": {
                        "identity": {
                            "type": "object",
                            "required": ["id", "type", "name"],
                            "properties": {
                                "id": {"type": "string"},
                                "type": {"type": "string"},
                                "name": {"type": "string"}
                            },
                            "additionalProperties": false
                        },
                        "structure": {"type": "object"}
                    },
                    "additionalProperties": false
                }
            }
        },
        "additionalProperties": false
    })
}

pub(crate) fn run(command: Command) -> Result<u8, Failure> {
    let Command::Validate { input: path } = command;
    let text = input::read_text(&path).map_err(|e| e.failure(&path))?;
    let document: Value = serde_json::from_str(&text).map_err(|e| Failure::new(format!("Invalid JSON: {e}")))?;
    match jsonschema::validate(&canonical_schema(), &document) {
        Ok(()) => {
            input::print_line("✅ Schema valid")?;
            Ok(0)
        }
        Err(error) => {
            let place = error.instance_path().to_string();
            let at = if place.is_empty() { String::new() } else { format!(" (at {place})") };
            input::print_line(&format!("❌ Schema invalid: {error}{at}"))?;
            Ok(1)
        }
    }
}
