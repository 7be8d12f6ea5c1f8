//! The smoke mode of `cks-bench` against the `cks-mcp` binary, so the tooling cannot rot.
//!
//! Cargo builds the binaries of the package under test only (`CARGO_BIN_EXE_cks-bench`), never
//! those of other packages, so `cks-mcp` is looked up beside `cks-bench` in the same target
//! directory. `cargo test --workspace` (what `./scripts/test` and `.ci/run` run) builds it there,
//! because the cks-mcp package has integration tests. Run alone (`cargo test -p cks-bench`), the
//! test skips with a message unless `cargo build -p cks-mcp` was run first; with
//! `CKS_BENCH_REQUIRE_SERVER=1` (set by `./scripts/test`) a missing binary fails the test instead.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn smoke_mode_measures_cks_mcp() {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_cks-bench"));
    let server = bench.with_file_name(format!("cks-mcp{}", std::env::consts::EXE_SUFFIX));
    if !server.exists() {
        let message = format!(
            "{} is absent: run `cargo build -p cks-mcp` (or the whole workspace's tests) first",
            server.display()
        );
        assert!(std::env::var_os("CKS_BENCH_REQUIRE_SERVER").is_none(), "{message}");
        eprintln!("SKIPPED smoke_mode_measures_cks_mcp: {message}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("smoke.jsonl");
    let markdown = dir.path().join("smoke.md");
    let status = Command::new(&bench)
        .arg("--smoke")
        .arg("--server")
        .arg(&server)
        .arg("--name")
        .arg("ours")
        .arg("--out")
        .arg(&out)
        .arg("--markdown")
        .arg(&markdown)
        .status()
        .unwrap();
    assert!(status.success());

    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let find = |m: &str| lines.iter().find(|r| r["measurement"] == m).unwrap_or_else(|| panic!("no {m} in {lines:?}"));
    for m in [
        "cold_start_p50",
        "query_small_p50",
        "query_small_p99",
        "query_small_throughput",
        "create_validate",
        "evolve_one_p50",
        "evolve_one_p95",
        "query_depth2_p50",
        "serialize",
        "list_versions",
        "compare_versions",
        "disk_size",
        "restart_first_query",
    ] {
        let r = find(m);
        assert!(r["value"].as_f64().is_some_and(|v| v > 0.0), "{m}: {r}");
        assert_eq!(r["server"], "ours");
    }
    if cfg!(target_os = "linux") {
        assert!(find("peak_rss")["value"].as_f64().is_some_and(|v| v > 0.0));
    }
    // ai_chat is measured, or recorded as not available when the server has no such tool.
    let chat = find("ai_chat_turn_p50");
    assert!(chat["value"].as_f64().is_some() || chat["status"] == "not available", "{chat}");
    // Without the provider's own time a turn takes less, and still some time.
    if let Some(turn) = chat["value"].as_f64() {
        let server = find("ai_chat_turn_server_p50")["value"].as_f64().unwrap();
        assert!(server > 0.0 && server < turn, "server part {server} ms of a {turn} ms turn");
    }
    // 5 commits after the creating version; sampled as often as the depth-2 queries (5 in smoke mode).
    assert_eq!(find("list_versions")["note"], "6 versions listed; median of 5");
    // The reload group: one record per stored-session count (1 and 5 in smoke mode).
    let reloads: Vec<_> = lines.iter().filter(|r| r["measurement"] == "reload_first_query").collect();
    assert_eq!(reloads.iter().map(|r| r["size"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 5]);
    assert!(reloads.iter().all(|r| r["value"].as_f64().is_some_and(|v| v > 0.0)), "{reloads:?}");
    let table = std::fs::read_to_string(&markdown).unwrap();
    assert!(table.starts_with("| measurement | size | value | note |"), "{table}");
}

/// The retrieval groups, both in one run, on hand-made inputs in a temporary directory: a LoCoMo
/// file of one conversation and a BEIR directory whose queries are documents too (the query's own
/// document dropped before scoring). Embeddings off, so hybrid ranks by BM25 and vector is not
/// available.
#[test]
fn locomo_and_beir_run_together() {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_cks-bench"));
    let server = bench.with_file_name(format!("cks-mcp{}", std::env::consts::EXE_SUFFIX));
    if !server.exists() {
        let message = format!("{} is absent: run `cargo build -p cks-mcp` first", server.display());
        assert!(std::env::var_os("CKS_BENCH_REQUIRE_SERVER").is_none(), "{message}");
        eprintln!("SKIPPED locomo_and_beir_run_together: {message}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let locomo = dir.path().join("locomo.json");
    let conversation = serde_json::json!([{
        "sample_id": "tiny",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bo",
            "session_1_date_time": "9:00 am on 1 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a grey cat called Pebble."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "I am training for the city marathon."},
            ],
        },
        "qa": [{"question": "What is the name of Ann's cat?", "answer": "Pebble", "evidence": ["D1:1"], "category": 4}],
    }]);
    std::fs::write(&locomo, conversation.to_string()).unwrap();
    let beir = dir.path().join("tiny-beir");
    std::fs::create_dir_all(&beir).unwrap();
    let documents = [
        ("debate-pro01a", "", "Zoos protect endangered animals from extinction."),
        ("debate-pro01b", "animals", "Zoos keep animals in cages; protection belongs in the wild."),
        ("debate-pro02a", "", "Homework teaches pupils discipline."),
        ("debate-pro02b", "education", "Homework takes time that pupils need for play and rest."),
    ];
    let corpus: String = documents
        .iter()
        .map(|(id, title, text)| {
            format!("{}\n", serde_json::json!({"_id": id, "title": title, "text": text, "metadata": {}}))
        })
        .collect();
    std::fs::write(beir.join("corpus.jsonl"), corpus).unwrap();
    let queries = [("debate-pro01a", documents[0].2), ("debate-pro02a", documents[2].2)];
    let queries: String =
        queries.iter().map(|(id, text)| format!("{}\n", serde_json::json!({"_id": id, "text": text}))).collect();
    std::fs::write(beir.join("queries.jsonl"), queries).unwrap();
    std::fs::write(
        beir.join("qrels_test.tsv"),
        "query-id\tcorpus-id\tscore\r\ndebate-pro01a\tdebate-pro01b\t1\r\ndebate-pro02a\tdebate-pro02b\t1\r\n",
    )
    .unwrap();
    let out = dir.path().join("retrieval.jsonl");
    let output = Command::new(&bench)
        .arg("--server")
        .arg(&server)
        .arg("--locomo")
        .arg(&locomo)
        .arg("--beir")
        .arg(&beir)
        .args(["--modes", "lexical,hybrid,vector", "--out"])
        .arg(&out)
        .env("CKS_EMBEDDING_PROVIDER", "none")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let find = |m: &str| lines.iter().find(|r| r["measurement"] == m).unwrap_or_else(|| panic!("no {m} in {lines:?}"));
    assert_eq!(find("locomo_lexical_all")["value"], 1.0);
    // Each query's counter-argument is found once the query's own document is dropped; with two
    // documents left per topic it is first (nDCG 1) or second.
    let lexical = find("beir_tiny_beir_lexical");
    assert!(lexical["value"].as_f64().is_some_and(|v| v > 0.6), "{lexical}");
    assert!(lexical["note"].as_str().unwrap().contains("queries 2, recall@10 1.0000, hit@10 1.0000"), "{lexical}");
    assert!(find("beir_tiny_beir_hybrid")["note"].as_str().unwrap().contains("ranking bm25"));
    assert_eq!(find("beir_tiny_beir_vector")["status"], "not available: the server has no embeddings");
    // Both tables, LoCoMo's first.
    let locomo_at = stdout.find("| mode | category | questions |").expect(&stdout);
    let beir_at = stdout.find("| mode | queries | nDCG@10 |").expect(&stdout);
    assert!(locomo_at < beir_at, "{stdout}");
    assert!(stdout.contains("BEIR retrieval, tiny-beir: 4 documents, 2 of 2 judged queries"), "{stdout}");
}
