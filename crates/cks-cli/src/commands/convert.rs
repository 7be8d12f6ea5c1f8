//! `cks convert` (JSON-LD, Turtle or RDF/XML to CKS) and `cks export` (CKS to JSON-LD, Turtle or
//! RDF/XML).

use std::path::PathBuf;

use crate::input::{self, Failure};
use crate::rdf::Syntax;
use crate::{jsonld, pyjson, rdf};

/// What `convert` reads and `export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LinkedFormat {
    #[value(name = "json-ld")]
    JsonLd,
    #[value(name = "rdf-xml")]
    RdfXml,
    Turtle,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ConvertArgs {
    /// Path to input file
    input: PathBuf,
    /// Write CKS JSON to file
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Input format (default: json-ld)
    #[arg(long, short, value_enum, default_value = "json-ld")]
    format: LinkedFormat,
}

pub(crate) fn convert(args: ConvertArgs) -> Result<u8, Failure> {
    let text = input::read_text(&args.input).map_err(|e| e.failure(&args.input))?;
    let converted = match args.format {
        LinkedFormat::JsonLd => {
            let document = pyjson::loads(&text)
                .map_err(|e| Failure::new(format!("Invalid JSON in {}: {e}", input::display(&args.input))))?;
            jsonld::to_structure(&document)
        }
        LinkedFormat::Turtle => rdf::to_structure(&text, Syntax::Turtle, &base_iri()),
        LinkedFormat::RdfXml => rdf::to_structure(&text, Syntax::RdfXml, &base_iri()),
    };
    let structure = converted.map_err(|e| Failure::new(format!("Conversion error: {e}")))?;
    input::emit(&crate::document::serialize(&structure), args.output.as_deref())?;
    Ok(0)
}

/// Relative IRIs resolve against the working directory, as the reference's parser resolves them.
fn base_iri() -> String {
    let directory = std::env::current_dir().map(|d| d.to_string_lossy().into_owned()).unwrap_or_default();
    let mut base = String::from("file://");
    for c in directory.trim_end_matches('/').chars() {
        match c {
            ' ' => base.push_str("%20"),
            c => base.push(c),
        }
    }
    base.push('/');
    base
}

#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    /// Path to CKS JSON file
    input: PathBuf,
    /// Output format (default: json-ld)
    #[arg(long, short, value_enum, default_value = "json-ld")]
    format: LinkedFormat,
    /// Write output to file instead of stdout
    #[arg(long, short)]
    output: Option<PathBuf>,
}

pub(crate) fn export(args: ExportArgs) -> Result<u8, Failure> {
    let structure = super::parse::load(&args.input)?;
    let text = match args.format {
        LinkedFormat::JsonLd => jsonld::from_structure(&structure).map(|document| pyjson::dumps(&document, true)),
        LinkedFormat::Turtle => Ok(cks_core::linked_data::turtle(&structure)),
        LinkedFormat::RdfXml => rdf::to_rdf_xml(&structure),
    }
    .map_err(|e| Failure::new(format!("Export error: {e}")))?;
    input::emit(&text, args.output.as_deref())?;
    Ok(0)
}
