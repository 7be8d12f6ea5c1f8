//! `cks`: the Canonical Knowledge Structure's command line, over `cks-core` alone.
//!
//! The subcommands, flags, outputs and exit statuses are those of the Python reference's `cks`
//! (from its `cks-core` package): `validate`, `parse`, `inspect`, `evolve`, `convert`, `export`,
//! `schema validate`, `plugin list` and `migrate`. Usage errors exit with status 2, failures with
//! 1 and a one-line message on standard error; `migrate --check` exits with 2 when a file needs
//! migrating. COMPATIBILITY.md lists where this tool deliberately differs.

mod commands;
mod document;
mod input;
mod jsonld;
mod pyjson;
mod rdf;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

use commands::{convert, evolve, migrate, parse, plugin, schema, validate};

#[derive(Debug, Parser)]
#[command(name = "cks", about = "Canonical Knowledge Structure — CLI", infer_long_args = true)]
struct Cli {
    /// Fail on any plugin loading error (no plugins are loaded, so nothing can fail)
    #[arg(long)]
    strict: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a Knowledge Structure
    Validate(validate::Args),
    /// Parse a canonical JSON file
    Parse(parse::ParseArgs),
    /// Inspect a Knowledge Structure
    Inspect(parse::InspectArgs),
    /// Apply structural evolution
    Evolve(evolve::Args),
    /// Convert JSON-LD, Turtle, or RDF/XML to CKS
    Convert(convert::ConvertArgs),
    /// Export CKS to another format
    Export(convert::ExportArgs),
    /// Schema-related utilities
    #[command(subcommand)]
    Schema(schema::Command),
    /// Manage plugins
    #[command(subcommand)]
    Plugin(plugin::Command),
    /// Upgrade a legacy CKS JSON file to the current versioned format
    Migrate(migrate::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let _ = cli.strict;
    let outcome = match cli.command {
        Command::Validate(args) => validate::run(args),
        Command::Parse(args) => parse::parse(args),
        Command::Inspect(args) => parse::inspect(args),
        Command::Evolve(args) => evolve::run(args),
        Command::Convert(args) => convert::convert(args),
        Command::Export(args) => convert::export(args),
        Command::Schema(command) => schema::run(command),
        Command::Plugin(command) => plugin::run(command),
        Command::Migrate(args) => migrate::run(args),
    };
    match outcome {
        Ok(status) => ExitCode::from(status),
        Err(failure) => {
            eprintln!("{}", failure.message);
            ExitCode::from(failure.status)
        }
    }
}
