//! `cks plugin list`: the constraints the validator runs. No plugins are loaded: the list is the
//! validator's always-on constraints.

use crate::input::{self, Failure};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// List loaded constraints
    List,
}

/// Each always-on constraint's description, as the reference words it.
const DESCRIPTIONS: [(&str, &str); 4] = [
    (cks_core::validate::UNIQUE_IDENTITY, "Canonical identities shall be unique."),
    (cks_core::validate::DANGLING_REF, "Relation participants shall exist."),
    (cks_core::validate::DERIVATION_ARITY, "Derivation relations shall contain exactly two participants."),
    (cks_core::validate::CYCLE, "Derivation cycles are prohibited."),
];

pub(crate) fn run(command: Command) -> Result<u8, Failure> {
    let Command::List = command;
    let lines: Vec<String> = cks_core::validate::ALWAYS_ON
        .iter()
        .map(|code| {
            let description = DESCRIPTIONS.iter().find(|(c, _)| c == code).map_or("(no description)", |(_, d)| d);
            format!("  {code} — {description}")
        })
        .collect();
    input::print_line(&lines.join("\n"))?;
    Ok(0)
}
