//! The `cks` binary run as a user runs it: each command's output and exit status, and hostile
//! inputs (huge, deeply nested, not UTF-8, entity bombs, malformed RDF) refused with a message.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A scratch directory for one test's files.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new() -> Scratch {
        Scratch(tempfile::tempdir().unwrap())
    }

    fn file(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    fn dir(&self) -> &Path {
        self.0.path()
    }
}

/// What one run printed and how it ended.
struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

fn cks(dir: &Path, args: &[&str]) -> Run {
    let Output { status, stdout, stderr } =
        Command::new(env!("CARGO_BIN_EXE_cks")).args(args).current_dir(dir).output().unwrap();
    // A signal (a crash) has no code: it must never happen, whatever the input.
    let status = status.code().expect("cks ended by a signal");
    Run { status, stdout: String::from_utf8(stdout).unwrap(), stderr: String::from_utf8(stderr).unwrap() }
}

/// Runs `cks` and checks its exit status.
fn check(dir: &Path, args: &[&str], status: i32) -> Run {
    let run = cks(dir, args);
    assert_eq!(run.status, status, "cks {args:?}\nstdout: {}\nstderr: {}", run.stdout, run.stderr);
    run
}

const GRAPH: &str = r#"{"version": "1.0", "objects": [
  {"identity": {"id": "a", "type": "Concept", "name": "Alpha"}, "structure": {"x": 1, "note": "é"}},
  {"identity": {"id": "b", "type": "Concept", "name": "Beta"}, "structure": {}},
  {"identity": {"id": "r", "type": "Relation", "name": "r"},
   "structure": {"participants": ["a", "b"], "relation_type": "derives"}}
]}"#;

const DANGLING: &str = r#"{"objects": [
  {"identity": {"id": "a", "type": "Concept", "name": "Alpha"}, "structure": {}},
  {"identity": {"id": "r", "type": "Relation", "name": "r"},
   "structure": {"participants": ["a", "zz"], "relation_type": "uses"}}
]}"#;

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn validate_reports_and_sets_the_exit_status() {
    let s = Scratch::new();
    s.file("good.json", GRAPH);
    s.file("bad.json", DANGLING);
    let run = check(s.dir(), &["validate", "good.json"], 0);
    assert_eq!(run.stdout, "✅ Valid\n\nErrors: 0  Warnings: 0  Info: 0\n");
    let run = check(s.dir(), &["validate", "bad.json"], 1);
    assert_eq!(
        run.stdout,
        "❌ Invalid\n  [ERROR] Relation 'r' references unknown object 'zz'.\n\nErrors: 1  Warnings: 0  Info: 0\n"
    );
    let report = json(&check(s.dir(), &["validate", "--format", "json", "bad.json"], 1).stdout);
    assert_eq!(report["diagnostics"][0]["identity"], "CKS-STRUCT-DANGLING-REF");
    assert_eq!(report["diagnostics"][0]["location"], "r");
    assert_eq!(report["constraints_evaluated"].as_array().unwrap().len(), 4);
    let run = check(s.dir(), &["validate", "./good.json", "bad.json"], 1);
    assert_eq!(run.stdout, "Files validated: 2\nValid: 1\nInvalid: 1\n\ngood.json: ✅ Valid\nbad.json: ❌ Invalid\n");
    let run = check(s.dir(), &["validate", "-f", "markdown", "-o", "report.md", "good.json"], 0);
    assert_eq!(run.stdout, "");
    let report = std::fs::read_to_string(s.path("report.md")).unwrap();
    assert!(report.starts_with("## ✅ Valid\n") && report.ends_with("Info: 0"), "{report}");
    assert!(
        check(s.dir(), &["validate", "-f", "html", "bad.json"], 1).stdout.contains("<td>CKS-STRUCT-DANGLING-REF</td>")
    );
}

#[test]
fn missing_and_malformed_files_fail_with_one_line() {
    let s = Scratch::new();
    let run = check(s.dir(), &["validate", "none.json"], 1);
    assert_eq!(run.stderr, "File not found: none.json\n");
    s.file("no-objects.json", "{}");
    let run = check(s.dir(), &["validate", "no-objects.json"], 1);
    assert_eq!(run.stderr, "Serialization error in no-objects.json: Missing top-level 'objects' array.\n");
    s.file("no-identity.json", r#"{"objects": [{"structure": {}}]}"#);
    let run = check(s.dir(), &["parse", "no-identity.json"], 1);
    assert_eq!(run.stderr, "Serialization error: Missing object identity.\n");
    let run = check(s.dir(), &["inspect", "."], 1);
    assert!(run.stderr.starts_with("Cannot read .: "), "{}", run.stderr);
}

#[test]
fn usage_errors_exit_with_two() {
    let s = Scratch::new();
    check(s.dir(), &[], 2);
    check(s.dir(), &["validate"], 2);
    check(s.dir(), &["export", "--format", "n3", "x.json"], 2);
    check(s.dir(), &["--version"], 2);
    assert!(check(s.dir(), &["--help"], 0).stdout.contains("validate"));
}

#[test]
fn parse_and_inspect_list_objects_and_relations() {
    let s = Scratch::new();
    s.file("g.json", GRAPH);
    assert_eq!(check(s.dir(), &["parse", "g.json"], 0).stdout, "Objects: 3\nRelations: 1\n");
    let run = check(s.dir(), &["inspect", "g.json"], 0);
    assert_eq!(
        run.stdout,
        "Objects: 3\nRelations: 1\n\n  Concept: a (Alpha)\n  Concept: b (Beta)\n  Relation: r (r)\n"
    );
    let listing = json(&check(s.dir(), &["inspect", "-f", "json", "g.json"], 0).stdout);
    assert_eq!(listing["relations"][0]["participants"], serde_json::json!(["a", "b"]));
    assert_eq!(listing["objects"].as_array().unwrap().len(), 3);
}

#[test]
fn evolve_applies_operations_or_says_why_not() {
    let s = Scratch::new();
    s.file("g.json", GRAPH);
    s.file(
        "ops.json",
        r#"[{"type": "add_object", "identity": {"id": "c", "type": "Concept", "name": "Gamma"}},
            {"type": "update_object", "object_id": "a", "structure_patch": {"x": 2}}]"#,
    );
    let evolved = json(&check(s.dir(), &["evolve", "g.json", "ops.json"], 0).stdout);
    assert_eq!(evolved["objects"].as_array().unwrap().len(), 4);
    assert_eq!(evolved["objects"][0]["structure"]["x"], 2);
    assert_eq!(evolved["_cks_format_version"], "1.0");
    s.file("unknown.json", r#"[{"type": "explode"}]"#);
    let run = check(s.dir(), &["evolve", "g.json", "unknown.json"], 1);
    assert!(run.stderr.starts_with("Invalid operations: Operation #0: "), "{}", run.stderr);
    s.file("not-json.json", "[");
    let run = check(s.dir(), &["evolve", "g.json", "not-json.json"], 1);
    assert!(run.stderr.starts_with("Invalid JSON in operations file: "), "{}", run.stderr);
    s.file("twice.json", r#"[{"type": "add_object", "identity": {"id": "a", "type": "T", "name": "n"}}]"#);
    let run = check(s.dir(), &["evolve", "g.json", "twice.json"], 1);
    assert!(run.stderr.starts_with("Evolution error: Operation #0: "), "{}", run.stderr);
}

#[test]
fn convert_reads_json_ld_turtle_and_rdf_xml() {
    let s = Scratch::new();
    s.file("g.jsonld", r#"{"@graph": [{"@id": "a", "@type": "Person", "name": "Ann", "knows": {"@id": "b"}}]}"#);
    let converted = json(&check(s.dir(), &["convert", "g.jsonld"], 0).stdout);
    let ids: Vec<&str> =
        converted["objects"].as_array().unwrap().iter().map(|o| o["identity"]["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["a", "a-knows-b"]);
    s.file(
        "g.ttl",
        "@prefix ex: <http://example.org/> .\n@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .\n\
         ex:a a <http://example.org/v#Person> ; rdfs:label \"Ann\" ; ex:knows ex:b , [ ex:p ex:c ] .\n",
    );
    let converted = json(&check(s.dir(), &["convert", "--format", "turtle", "g.ttl"], 0).stdout);
    let objects = converted["objects"].as_array().unwrap();
    assert_eq!(
        objects[0]["identity"],
        serde_json::json!({"id": "http://example.org/a", "name": "Ann", "type": "Person"})
    );
    assert!(
        objects
            .iter()
            .any(|o| o["identity"]["id"] == "http://example.org/a-http://example.org/knows-http://example.org/b")
    );
    assert!(objects.iter().any(|o| o["identity"]["id"] == "_:b0-http://example.org/p-http://example.org/c"));
    s.file(
        "g.rdf",
        r#"<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://example.org/">
  <rdf:Description rdf:about="http://example.org/a"><ex:knows rdf:resource="http://example.org/b"/></rdf:Description>
</rdf:RDF>"#,
    );
    check(s.dir(), &["convert", "-f", "rdf-xml", "g.rdf", "-o", "out.json"], 0);
    let converted = json(&std::fs::read_to_string(s.path("out.json")).unwrap());
    assert_eq!(converted["objects"].as_array().unwrap().len(), 3);
    check(s.dir(), &["validate", "out.json"], 0);
}

#[test]
fn export_writes_json_ld_turtle_and_rdf_xml() {
    let s = Scratch::new();
    s.file("g.json", GRAPH);
    let run = check(s.dir(), &["export", "g.json"], 0);
    assert!(run.stdout.contains("\"note\": \"\\u00e9\""), "{}", run.stdout);
    let document = json(&run.stdout);
    assert_eq!(document["@graph"][0]["derives"], serde_json::json!([{"@id": "b"}]));
    let turtle = check(s.dir(), &["export", "-f", "turtle", "g.json"], 0).stdout;
    assert!(turtle.contains("rdfs:label \"Alpha\""), "{turtle}");
    check(s.dir(), &["export", "-f", "rdf-xml", "g.json", "-o", "g.rdf"], 0);
    // The same structure gives the same text (blank nodes are numbered, not random).
    let xml = check(s.dir(), &["export", "-f", "rdf-xml", "g.json"], 0).stdout;
    assert_eq!(xml, format!("{}\n", std::fs::read_to_string(s.path("g.rdf")).unwrap()));
    assert!(xml.contains("rdf:nodeID=\"b0\""), "{xml}");
    // What is exported reads back.
    let back = json(&check(s.dir(), &["convert", "-f", "rdf-xml", "g.rdf"], 0).stdout);
    assert!(back["objects"].as_array().unwrap().iter().any(|o| o["identity"]["name"] == "Alpha"));
    s.file("g.ttl", &turtle);
    check(s.dir(), &["convert", "-f", "turtle", "g.ttl"], 0);
}

#[test]
fn migrate_upgrades_legacy_files() {
    let s = Scratch::new();
    s.file("legacy.json", GRAPH);
    let run = check(s.dir(), &["migrate", "--check", "legacy.json"], 2);
    assert_eq!(run.stdout, "NEEDS MIGRATION: legacy.json (legacy format, no _cks_format_version)\n");
    let run = check(s.dir(), &["migrate", "legacy.json"], 1);
    assert_eq!(run.stderr, "error: specify an output path or pass --in-place\n");
    let run = check(s.dir(), &["migrate", "legacy.json", "new.json"], 0);
    assert_eq!(run.stdout, "✓ Migrated legacy.json → new.json (format v1.0)\n");
    assert_eq!(check(s.dir(), &["migrate", "--check", "new.json"], 0).stdout, "OK: new.json (format version 1.0)\n");
    let run = check(s.dir(), &["migrate", "new.json", "other.json"], 0);
    assert_eq!(run.stdout, "Nothing to do: new.json is already at format version 1.0.\n");
    check(s.dir(), &["migrate", "--in-place", "legacy.json"], 0);
    check(s.dir(), &["migrate", "--check", "legacy.json"], 0);
}

#[test]
fn schema_and_plugins() {
    let s = Scratch::new();
    s.file("g.json", GRAPH);
    assert_eq!(check(s.dir(), &["schema", "validate", "g.json"], 0).stdout, "✅ Schema valid\n");
    s.file("empty.json", r#"{"objects": []}"#);
    assert!(check(s.dir(), &["schema", "validate", "empty.json"], 1).stdout.starts_with("❌ Schema invalid: "));
    let run = check(s.dir(), &["--strict", "plugin", "list"], 0);
    assert_eq!(run.stdout.lines().count(), 4);
    assert!(run.stdout.starts_with("  CKS-STRUCT-UNIQUE-IDENTITY — Canonical identities shall be unique.\n"));
}

#[test]
fn an_entity_bomb_is_refused_before_parsing() {
    let s = Scratch::new();
    let mut bomb = String::from("<?xml version=\"1.0\"?>\n<!doctype lol [\n <!ENTITY lol \"lol\">\n");
    for level in 1..=12 {
        let previous = if level == 1 { "lol".to_owned() } else { format!("lol{}", level - 1) };
        bomb.push_str(&format!(" <!ENTITY lol{level} \"{}\">\n", format!("&{previous};").repeat(10)));
    }
    bomb.push_str("]>\n<rdf:RDF xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\" xmlns:ex=\"http://e/\">\n");
    bomb.push_str("<rdf:Description rdf:about=\"http://e/a\"><ex:p>&lol12;</ex:p></rdf:Description></rdf:RDF>\n");
    s.file("bomb.rdf", bomb);
    let run = check(s.dir(), &["convert", "-f", "rdf-xml", "bomb.rdf"], 1);
    assert!(
        run.stderr.starts_with("Conversion error: Refusing to parse RDF/XML input containing a DOCTYPE"),
        "{}",
        run.stderr
    );
}

#[test]
fn malformed_rdf_is_a_conversion_error() {
    let s = Scratch::new();
    s.file("bad.ttl", "@prefix ex: <http://example.org/> .\nex:a ex:b \"unterminated .\n");
    let run = check(s.dir(), &["convert", "-f", "turtle", "bad.ttl"], 1);
    assert!(run.stderr.starts_with("Conversion error: Failed to parse RDF input as 'turtle': "), "{}", run.stderr);
    s.file("bad.rdf", "<rdf:RDF xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\"><unclosed>");
    let run = check(s.dir(), &["convert", "-f", "rdf-xml", "bad.rdf"], 1);
    assert!(run.stderr.starts_with("Conversion error: Failed to parse RDF input as 'xml': "), "{}", run.stderr);
    s.file("list.jsonld", "[1, 2]");
    assert!(check(s.dir(), &["convert", "list.jsonld"], 1).stderr.starts_with("Conversion error: "));
    s.file("broken.jsonld", "{");
    assert!(check(s.dir(), &["convert", "broken.jsonld"], 1).stderr.starts_with("Invalid JSON in broken.jsonld: "));
}

#[test]
fn deep_nesting_is_refused_without_a_crash() {
    let s = Scratch::new();
    let depth = 100_000;
    let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    s.file("g.json", GRAPH);
    s.file("deep.json", format!(r#"{{"objects": {nested}}}"#));
    s.file("deep-ops.json", &nested);
    s.file("deep.jsonld", format!(r#"{{"@id": "a", "p": {nested}}}"#));
    check(s.dir(), &["validate", "deep.json"], 1);
    check(s.dir(), &["schema", "validate", "deep.json"], 1);
    check(s.dir(), &["migrate", "deep.json", "out.json"], 1);
    check(s.dir(), &["evolve", "g.json", "deep-ops.json"], 1);
    check(s.dir(), &["convert", "deep.jsonld"], 1);
    // Deeply nested RDF is data, not recursion: it converts.
    let blank = format!(
        "<http://e/a> <http://e/p> {}<http://e/b>{} .\n",
        "[ <http://e/p> ".repeat(10_000),
        " ]".repeat(10_000)
    );
    s.file("deep.ttl", blank);
    check(s.dir(), &["convert", "-f", "turtle", "deep.ttl", "-o", "deep-ttl.json"], 0);
    let mut xml =
        String::from("<rdf:RDF xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\" xmlns:e=\"http://e/\">");
    xml.push_str(&"<rdf:Description><e:p>".repeat(5_000));
    xml.push_str(&"</e:p></rdf:Description>".repeat(5_000));
    xml.push_str("</rdf:RDF>");
    s.file("deep.rdf", xml);
    let run = cks(s.dir(), &["convert", "-f", "rdf-xml", "deep.rdf", "-o", "deep-rdf.json"]);
    assert!(run.status == 0 || run.stderr.starts_with("Conversion error: "), "{}", run.stderr);
}

#[test]
fn text_that_is_not_utf8_is_refused() {
    let s = Scratch::new();
    s.file("latin1.json", b"{\"objects\": [], \"x\": \"caf\xe9\"}");
    let run = check(s.dir(), &["validate", "latin1.json"], 1);
    assert_eq!(run.stderr, "Cannot read latin1.json: the file is not UTF-8 text (invalid byte at offset 25)\n");
    s.file("latin1.ttl", b"<http://e/a> <http://e/p> \"caf\xe9\" .");
    check(s.dir(), &["convert", "-f", "turtle", "latin1.ttl"], 1);
}

#[test]
fn a_huge_file_is_refused_before_it_is_read() {
    let s = Scratch::new();
    // A sparse file: its size is 600 MiB, its disk use nothing.
    let file = std::fs::File::create(s.path("huge.json")).unwrap();
    file.set_len(600 << 20).unwrap();
    for args in [
        &["validate", "huge.json"][..],
        &["convert", "-f", "turtle", "huge.json"],
        &["migrate", "--check", "huge.json"],
    ] {
        let run = check(s.dir(), args, 1);
        assert_eq!(run.stderr, "Cannot read huge.json: the file is larger than 512 MiB\n", "{args:?}");
    }
}

#[test]
fn relative_iris_resolve_in_turtle_and_stay_relative_in_rdf_xml() {
    let s = Scratch::new();
    s.file("g.ttl", "<local> <http://e/p> <other> .");
    let converted = json(&check(s.dir(), &["convert", "-f", "turtle", "g.ttl"], 0).stdout);
    let id = converted["objects"][0]["identity"]["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("file:///") && id.ends_with("/local"), "{id}");
    s.file(
        "g.rdf",
        r#"<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:e="http://e/">
  <rdf:Description rdf:about="local"><e:p rdf:resource="other"/></rdf:Description></rdf:RDF>"#,
    );
    let converted = json(&check(s.dir(), &["convert", "-f", "rdf-xml", "g.rdf"], 0).stdout);
    let ids: Vec<&str> =
        converted["objects"].as_array().unwrap().iter().map(|o| o["identity"]["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["local", "other", "local-http://e/p-other"]);
}
