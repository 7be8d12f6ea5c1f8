//! `cks parse` and `cks inspect`: a file's objects and relations, counted or listed.

use cks_core::KnowledgeStructure;
use std::path::{Path, PathBuf};

use crate::input::{self, Failure};
use crate::pyjson::{self, Json};

/// Reads and parses a canonical document, failing as the reference's `parse`, `inspect`,
/// `evolve` and `export` do.
pub(crate) fn load(path: &Path) -> Result<KnowledgeStructure, Failure> {
    let text = input::read_text(path).map_err(|e| e.failure(path))?;
    crate::document::parse(&text).map_err(|e| Failure::new(format!("Serialization error: {e}")))
}

#[derive(Debug, clap::Args)]
pub(crate) struct ParseArgs {
    /// Path to canonical JSON file
    input: PathBuf,
}

pub(crate) fn parse(args: ParseArgs) -> Result<u8, Failure> {
    let structure = load(&args.input)?;
    input::print_line(&format!("Objects: {}\nRelations: {}", structure.len(), structure.relations().count()))?;
    Ok(0)
}

/// How `inspect` writes its listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum InspectFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub(crate) struct InspectArgs {
    /// Path to canonical JSON file
    input: PathBuf,
    #[arg(long, short, value_enum, default_value = "text")]
    format: InspectFormat,
    #[arg(long, short)]
    output: Option<PathBuf>,
}

pub(crate) fn inspect(args: InspectArgs) -> Result<u8, Failure> {
    let structure = load(&args.input)?;
    let text = match args.format {
        InspectFormat::Text => {
            let mut lines = vec![
                format!("Objects: {}", structure.len()),
                format!("Relations: {}", structure.relations().count()),
                String::new(),
            ];
            for object in structure.objects() {
                let identity = &object.identity;
                lines.push(format!("  {}: {} ({})", identity.r#type, identity.id, identity.name));
            }
            lines.join("\n")
        }
        InspectFormat::Json => {
            let objects = structure
                .objects()
                .map(|o| {
                    Json::Dict(vec![
                        ("id".into(), Json::str(o.identity.id.as_str())),
                        ("type".into(), Json::str(o.identity.r#type.as_str())),
                        ("name".into(), Json::str(o.identity.name.as_str())),
                    ])
                })
                .collect();
            let relations = structure
                .relations()
                .filter_map(|o| {
                    let relation = o.relation()?;
                    Some(Json::Dict(vec![
                        ("id".into(), Json::str(o.id())),
                        ("type".into(), Json::str(relation.relation_type)),
                        (
                            "participants".into(),
                            Json::List(relation.participants.iter().map(|p| Json::str(*p)).collect()),
                        ),
                    ]))
                })
                .collect();
            let listing =
                Json::Dict(vec![("objects".into(), Json::List(objects)), ("relations".into(), Json::List(relations))]);
            pyjson::dumps(&listing, true)
        }
    };
    input::emit(&text, args.output.as_deref())?;
    Ok(0)
}
