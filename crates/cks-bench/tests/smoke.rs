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
