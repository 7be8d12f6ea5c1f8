//! Enrichment end to end: the real binary over stdio on SQLite, `request_enrichment` queueing a
//! search about an object and the Enrichment process answering it from a local web server standing
//! in for Wikipedia — the page it found committed with its parts, a signed verification record and
//! an `enriched_by` link; the page robots.txt disallows and the one on a private address never
//! fetched.

use serde_json::{Value, json};
use std::time::Duration;

use cks_testkit::web::{HttpServer, Reply};

mod support;
use support::stdio::Mcp;

const PAGE: &str = r#"<!doctype html><html><head><title>Photosynthesis</title>
    <meta name="description" content="How plants turn light into sugar">
    <meta property="og:type" content="article">
    <script type="application/ld+json">{"@context": "https://schema.org", "@type": "Article", "headline": "Photosynthesis"}</script>
    </head><body><h1>Photosynthesis</h1><p>Chlorophyll absorbs light.</p>
    <h2>Stages</h2><ol><li>Light reactions</li><li>Calvin cycle</li></ol></body></html>"#;

/// Wikipedia's search and pages, and a robots.txt that keeps crawlers out of /private/.
async fn site() -> HttpServer {
    HttpServer::start(|_, path| {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        match path {
            "/robots.txt" => Reply::status(200).body("User-agent: *\nDisallow: /private/\n"),
            "/w/api.php" if query.contains("action=opensearch") => Reply::status(200).body(
                json!([
                    "Photosynthesis",
                    ["Photosynthesis", "Photosynthesis (members only)", "Photosynthesis (intranet)"],
                    ["", "", ""],
                    [
                        "http://127.0.0.1:{port}/wiki/Photosynthesis",
                        "http://127.0.0.1:{port}/private/Photosynthesis",
                        "http://10.20.30.40/wiki/Photosynthesis"
                    ]
                ])
                .to_string(),
            ),
            "/wiki/Photosynthesis" | "/private/Photosynthesis" => {
                Reply::status(200).header("content-type", "text/html; charset=utf-8").body(PAGE)
            }
            _ => Reply::status(404),
        }
    })
    .await
}

async fn wait(mcp: &mut Mcp, what: &str, mut done: impl AsyncFnMut(&mut Mcp) -> bool) {
    for _ in 0..300 {
        if done(mcp).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn a_requested_enrichment_commits_the_found_page_linked_and_verified_and_refuses_the_rest() {
    let site = site().await;
    let base = format!("http://127.0.0.1:{}", site.addr.port());
    let dir = tempfile::tempdir().unwrap();
    let env = vec![
        ("CKS_SWEEPERS", "off".to_owned()),
        ("CKS_EMBED_ENRICHMENT_AGENT", "true".into()),
        ("CKS_ENRICHMENT_POLL_INTERVAL", "1".into()),
        ("CKS_ENRICHMENT_LIVENESS_INTERVAL", "1".into()),
        ("CKS_ENRICHMENT_ADAPTERS", "wikipedia".into()),
        ("CKS_ENRICHMENT_WIKIPEDIA_URL", format!("{base}/w/api.php")),
        ("CKS_ENRICHMENT_MAX_INGESTS", "5".into()),
        // The local web server; 10.0.0.0/8 stays refused.
        ("CKS_FETCH_ALLOWED_NETWORKS", "127.0.0.1/32".into()),
    ];
    let mut mcp = Mcp::start(dir.path(), &env).await;
    let graph = json!({"objects": [
        {"identity": {"id": "photosynthesis", "type": "Process", "name": "Photosynthesis"}, "structure": {}},
    ]});
    let created = mcp.call("validate_knowledge", json!({"json_data": graph.to_string()})).await;
    let session = created["session_id"].as_str().unwrap().to_owned();

    let asked = mcp.call("request_enrichment", json!({"session_id": session, "object_id": "photosynthesis"})).await;
    assert_eq!((asked["enqueued"].as_bool(), asked["supported"].as_bool()), (Some(true), Some(true)), "{asked}");
    wait(&mut mcp, "Enrichment to settle the request", async |mcp| {
        mcp.call("process_status", json!({"process_kind": "enrichment"})).await["tasks_done"] == 1
    })
    .await;

    let url = format!("{base}/wiki/Photosynthesis");
    let document = mcp.call("ingest_document", json!({"url": url})).await;
    let text = mcp.call("serialize_knowledge", json!({"session_id": session})).await;
    let stored: Value = serde_json::from_str(text["serialized"].as_str().expect("signed records serialize")).unwrap();
    let objects = stored["objects"].as_array().unwrap();
    let of_type = |ty: &str| objects.iter().filter(|o| o["identity"]["type"] == ty).cloned().collect::<Vec<_>>();
    let [page] = of_type("Document").try_into().expect("one page committed");
    let page_id = page["identity"]["id"].as_str().unwrap();
    let listed: Value = serde_json::from_str(document["knowledge_structure"].as_str().unwrap()).unwrap();
    assert_eq!(listed["objects"][0]["identity"]["id"], page_id, "ingest_document reads it the same way");
    assert_eq!(page["structure"]["url"], url);
    assert_eq!(page["structure"]["description"], "How plants turn light into sugar");
    let [metadata] = of_type("Metadata").try_into().unwrap();
    assert_eq!(metadata["structure"]["json_ld"][0]["@type"], "Article");
    assert_eq!(metadata["structure"]["open_graph"]["type"], "article");
    assert_eq!(of_type("Section").len(), 2);
    assert_eq!(of_type("List")[0]["structure"]["items"], json!(["Light reactions", "Calvin cycle"]));
    let relation =
        |kind: &str| objects.iter().filter(|o| o["structure"]["relation_type"] == kind).cloned().collect::<Vec<_>>();
    let [link] = relation("enriched_by").try_into().expect("one enriched_by link");
    assert_eq!(link["structure"]["participants"], json!(["photosynthesis", page_id]));
    assert_eq!(link["structure"]["source_adapter"], "wikipedia");
    let [record] = of_type("VerificationRecord").try_into().unwrap();
    assert_eq!(record["structure"]["http_status"], 200);
    let [verified_by] = relation("verified_by").try_into().unwrap();
    assert_eq!(verified_by["structure"]["participants"], json!([page_id, record["identity"]["id"]]));

    let history = mcp.call("list_versions", json!({"session_id": session})).await;
    let commits: Vec<&Value> =
        history["versions"].as_array().unwrap().iter().filter(|v| v["metadata"]["process"] == "enrichment").collect();
    assert_eq!(commits.len(), 1, "{history}");
    assert_eq!(commits[0]["metadata"]["tool"], "enrichment");
    assert_eq!(commits[0]["metadata"]["task_id"], asked["task_id"]);
    assert_eq!(commits[0]["metadata"]["source_url"], url);

    let paths: Vec<String> = site.requests().into_iter().map(|r| r.path).collect();
    assert!(paths.contains(&"/robots.txt".to_owned()), "{paths:?}");
    assert!(!paths.iter().any(|p| p.starts_with("/private/")), "robots.txt disallowed it: {paths:?}");
    let listed = mcp.call("list_processes", json!({})).await;
    let process = &listed["processes"].as_array().unwrap().iter().find(|p| p["process_kind"] == "enrichment").unwrap();
    assert_eq!((process["status"].as_str(), process["tasks_failed"].as_u64()), (Some("alive"), Some(0)));

    let unknown = mcp.call("request_enrichment", json!({"session_id": session, "object_id": "nothing"})).await;
    assert_eq!(unknown["error"], "object_not_found");
}
