//! `cks validate`: the validator's always-on constraints over one or more files, reported as
//! text, JSON, HTML or Markdown; exit status 1 when any structure is invalid.

use cks_core::validate::{Diagnostic, Severity, ValidationOptions};
use std::path::{Path, PathBuf};

use crate::input::{self, Failure};
use crate::pyjson::{self, Json};

/// How the report is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ReportFormat {
    Text,
    Json,
    Html,
    Markdown,
}

/// The severity from which a diagnostic makes a structure invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MinSeverity {
    Error,
    Warning,
    Information,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Path(s) to canonical JSON file(s)
    #[arg(required = true, value_name = "INPUT")]
    inputs: Vec<PathBuf>,
    #[arg(long, short, value_enum, default_value = "text")]
    format: ReportFormat,
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Minimum severity to consider a structure invalid
    #[arg(long, value_enum, default_value = "error")]
    min_severity: MinSeverity,
}

/// One file's outcome, as the reference's `ValidationResult` reports it.
struct Outcome {
    valid: bool,
    diagnostics: Vec<Diagnostic>,
    evaluated: Vec<&'static str>,
}

impl Outcome {
    fn count(&self, severity: Severity) -> usize {
        self.diagnostics.iter().filter(|d| d.severity == severity).count()
    }

    fn status(&self) -> &'static str {
        if self.valid { "✅ Valid" } else { "❌ Invalid" }
    }

    fn counts_line(&self, separator: &str) -> String {
        format!(
            "Errors: {}{separator}Warnings: {}{separator}Info: {}",
            self.count(Severity::Error),
            self.count(Severity::Warning),
            self.count(Severity::Information)
        )
    }

    /// The keys of the JSON report, after any given first.
    fn json_entries(&self, mut entries: Vec<(String, Json)>) -> Json {
        let diagnostics = self
            .diagnostics
            .iter()
            .map(|d| {
                Json::Dict(vec![
                    ("identity".into(), Json::str(&d.code)),
                    ("severity".into(), Json::str(d.severity.as_str())),
                    ("message".into(), Json::str(&d.message)),
                    ("location".into(), d.location.as_ref().map_or(Json::Null, Json::str)),
                ])
            })
            .collect();
        entries.extend([
            ("valid".into(), Json::Bool(self.valid)),
            ("error_count".into(), Json::int(self.count(Severity::Error))),
            ("warning_count".into(), Json::int(self.count(Severity::Warning))),
            ("information_count".into(), Json::int(self.count(Severity::Information))),
            ("constraints_evaluated".into(), Json::List(self.evaluated.iter().map(|c| Json::str(*c)).collect())),
            ("diagnostics".into(), Json::List(diagnostics)),
        ]);
        Json::Dict(entries)
    }
}

pub(crate) fn run(args: Args) -> Result<u8, Failure> {
    let threshold = match args.min_severity {
        MinSeverity::Error => Severity::Error,
        MinSeverity::Warning => Severity::Warning,
        MinSeverity::Information => Severity::Information,
    };
    // Every file is read and parsed before any is validated, as the reference does.
    let mut structures = Vec::with_capacity(args.inputs.len());
    for path in &args.inputs {
        let text = input::read_text(path).map_err(|e| e.failure(path))?;
        let structure = crate::document::parse(&text)
            .map_err(|e| Failure::new(format!("Serialization error in {}: {e}", input::display(path))))?;
        structures.push(structure);
    }
    let outcomes: Vec<Outcome> = structures
        .iter()
        .map(|structure| {
            let report = cks_core::validate(structure, &ValidationOptions::default());
            // Every diagnostic counts against the threshold, information included (the reference's rule).
            let valid = report.diagnostics.iter().all(|d| d.severity < threshold);
            Outcome { valid, diagnostics: report.diagnostics, evaluated: report.evaluated }
        })
        .collect();
    let text = match outcomes.as_slice() {
        [single] => single_report(args.format, single),
        many => multi_report(args.format, &args.inputs, many),
    };
    input::emit(&text, args.output.as_deref())?;
    Ok(if outcomes.iter().all(|o| o.valid) { 0 } else { 1 })
}

fn single_report(format: ReportFormat, outcome: &Outcome) -> String {
    match format {
        ReportFormat::Json => pyjson::dumps(&outcome.json_entries(Vec::new()), false),
        ReportFormat::Text => {
            let mut lines = vec![outcome.status().to_owned()];
            if !outcome.valid {
                for d in &outcome.diagnostics {
                    let prefix = match d.severity {
                        Severity::Error => "  [ERROR]",
                        Severity::Warning => "  [WARN] ",
                        Severity::Information => "  [INFO] ",
                    };
                    lines.push(format!("{prefix} {}", d.message));
                }
            }
            lines.push(format!("\n{}", outcome.counts_line("  ")));
            lines.join("\n")
        }
        ReportFormat::Html => {
            let rows: String = outcome
                .diagnostics
                .iter()
                .map(|d| {
                    format!(
                        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        escape_html(&d.code),
                        d.severity,
                        escape_html(&d.message),
                        escape_html(d.location.as_deref().unwrap_or(""))
                    )
                })
                .collect();
            format!(
                "<!DOCTYPE html>\n<html>\n<head><meta charset='utf-8'><title>CKS Validation Report</title></head>\n\
                 <body>\n<h1>{}</h1>\n<p>{}</p>\n<table border='1'><tr><th>Identity</th><th>Severity</th>\
                 <th>Message</th><th>Location</th></tr>{rows}</table>\n</body>\n</html>",
                outcome.status(),
                outcome.counts_line(" ")
            )
        }
        ReportFormat::Markdown => {
            let mut lines = vec![
                format!("## {}", outcome.status()),
                String::new(),
                "| Severity | Identity | Message | Location |".to_owned(),
                "|----------|----------|---------|----------|".to_owned(),
            ];
            for d in &outcome.diagnostics {
                lines.push(format!(
                    "| {} | {} | {} | {} |",
                    d.severity,
                    d.code,
                    d.message,
                    d.location.as_deref().unwrap_or("")
                ));
            }
            lines.push(String::new());
            lines.push(outcome.counts_line("  "));
            lines.join("\n")
        }
    }
}

fn multi_report(format: ReportFormat, paths: &[PathBuf], outcomes: &[Outcome]) -> String {
    let total = outcomes.len();
    let valid = outcomes.iter().filter(|o| o.valid).count();
    let invalid = total - valid;
    let shown = |path: &Path| input::display(path);
    match format {
        ReportFormat::Json => {
            let files = paths
                .iter()
                .zip(outcomes)
                .map(|(path, outcome)| outcome.json_entries(vec![("path".into(), Json::str(shown(path)))]))
                .collect();
            let report = Json::Dict(vec![
                ("total".into(), Json::int(total)),
                ("valid".into(), Json::int(valid)),
                ("invalid".into(), Json::int(invalid)),
                ("files".into(), Json::List(files)),
            ]);
            pyjson::dumps(&report, false)
        }
        ReportFormat::Html => {
            let sections: String = paths
                .iter()
                .zip(outcomes)
                .map(|(path, outcome)| {
                    format!("<h2>{}</h2>\n{}", escape_html(&shown(path)), single_report(ReportFormat::Html, outcome))
                })
                .collect();
            format!(
                "<!DOCTYPE html>\n<html>\n<head><meta charset='utf-8'><title>CKS Validation Report</title></head>\n\
                 <body>\n<h1>Files validated: {total} — Valid: {valid} — Invalid: {invalid}</h1>\n{sections}\n</body>\n</html>"
            )
        }
        ReportFormat::Markdown => {
            let sections: Vec<String> = paths
                .iter()
                .zip(outcomes)
                .map(|(path, outcome)| {
                    format!("## {}\n\n{}", shown(path), single_report(ReportFormat::Markdown, outcome))
                })
                .collect();
            format!(
                "# Validation Report\n\nFiles validated: {total}  Valid: {valid}  Invalid: {invalid}\n\n{}",
                sections.join("\n\n")
            )
        }
        ReportFormat::Text => {
            let mut lines = vec![
                format!("Files validated: {total}"),
                format!("Valid: {valid}"),
                format!("Invalid: {invalid}"),
                String::new(),
            ];
            for (path, outcome) in paths.iter().zip(outcomes) {
                lines.push(format!("{}: {}", shown(path), outcome.status()));
            }
            lines.join("\n")
        }
    }
}

/// Python's `html.escape` (quotes included).
fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            c => out.push(c),
        }
    }
    out
}
