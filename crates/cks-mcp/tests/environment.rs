//! The environment variables: `--help` lists every variable the sources read (found by scanning
//! the workspace's sources for variable names), every row of the table is still read, and a bad
//! value stops the real binary before it serves anything.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cks_mcp::config::variables;

const PREFIXES: &[&str] = &["CKS_", "ANTHROPIC_", "GOOGLE_", "OPENAI_", "OLLAMA_", "OTEL_"];

fn workspace_crates() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// String literals that are exactly a variable name: `"CKS_SOMETHING"`.
fn variable_literals(text: &str) -> impl Iterator<Item = &str> {
    text.split('"').skip(1).step_by(2).filter(|s| {
        PREFIXES.iter().any(|p| s.starts_with(p))
            && s.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    })
}

/// Every variable named in the workspace's sources, outside the table itself and the test
/// support crate (whose variables only tests read).
fn variables_in_sources() -> BTreeSet<String> {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(workspace_crates()).unwrap() {
        let krate = krate.unwrap().path();
        if krate.ends_with("cks-testkit") {
            continue;
        }
        let src = krate.join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    let table = Path::new("config").join("variables.rs");
    files
        .iter()
        .filter(|f| !f.ends_with(&table))
        .flat_map(|f| variable_literals(&std::fs::read_to_string(f).unwrap()).map(str::to_owned).collect::<Vec<_>>())
        .collect()
}

#[test]
fn help_lists_every_variable_the_sources_read() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_cks-mcp")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    let listed: BTreeSet<&str> = help.lines().filter_map(|l| l.split_whitespace().next()).collect();
    let read = variables_in_sources();
    assert!(read.contains("CKS_LLM_TIMEOUT_SECONDS") && read.contains("CKS_MCP_DB_PATH"), "the scan finds nothing");
    let missing: Vec<&String> = read.iter().filter(|v| !listed.contains(v.as_str())).collect();
    assert!(missing.is_empty(), "read but not in --help (add them to config/variables.rs): {missing:?}");
    let stale: Vec<&str> = variables::all().map(|v| v.name).filter(|name| !read.contains(*name)).collect();
    assert!(stale.is_empty(), "in the table but read nowhere: {stale:?}");
}

#[test]
fn a_bad_value_stops_the_binary_with_a_message_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_cks-mcp"))
        .env("CKS_MCP_DATA_DIR", dir.path())
        .env("CKS_MCP_DB_PATH", ":memory:")
        .env("CKS_LLM_MAX_RETRIES", "lots")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("CKS_LLM_MAX_RETRIES='lots'"), "{stderr}");
    assert!(stderr.contains("0 to 10"), "{stderr}");
}

#[test]
fn variables_set_but_not_read_are_named_in_one_warning() {
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_cks-mcp"))
        .env("CKS_MCP_DATA_DIR", dir.path())
        .env("CKS_MCP_DB_PATH", ":memory:")
        .env("CKS_GOSSIP_PORT", "9000")
        .env("CKS_EMBEDDING_DIMENSION", "384")
        .env("CKS_MCP_HTPP_PORT", "8765")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("not read")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    for name in ["CKS_GOSSIP_PORT", "CKS_EMBEDDING_DIMENSION", "CKS_MCP_HTPP_PORT (unknown)", "CKS_MCP_DB_PATH)"] {
        assert!(warnings[0].contains(name), "{name}: {stderr}");
    }
}
