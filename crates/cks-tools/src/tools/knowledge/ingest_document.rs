//! `ingest_document`: a web page, fetched through the guarded fetcher (`cks_web::fetch`) and read
//! (`cks_web::html`), as a knowledge structure — a Document with its Topics (keywords), its
//! Metadata (JSON-LD, OpenGraph, Twitter card, microdata, other meta tags) and its Sections,
//! Tables and Lists — or, with `use_llm`, the structure a model builds from what was read. The
//! structure is returned, not stored; the Enrichment process commits it where a search found it.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

use cks_core::object::{Identity, KnowledgeObject};
use cks_core::ops::Operation;
use cks_core::{KnowledgeStructure, json::parse_value};
use cks_llm::ChatRequest;

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};
use crate::tools::llm::construct_knowledge::SYSTEM_PROMPT;
use crate::tools::llm::json_answer::ask_json;
use cks_web::fetch::FetchError;
use cks_web::html::{self, Page};

/// The largest page read.
const MAX_PAGE_BYTES: usize = 5 * 1024 * 1024;
/// Characters of the page's text kept on the Document.
const PREVIEW_CHARS: usize = 500;
const MAX_KEYWORDS: usize = 20;
const STOP_WORDS: [&str; 44] = [
    "the", "is", "at", "which", "on", "and", "a", "an", "in", "to", "of", "for", "with", "by", "from", "as", "or",
    "it", "its", "be", "was", "are", "been", "this", "that", "not", "but", "they", "we", "you", "he", "she", "has",
    "have", "had", "will", "would", "can", "could", "should", "may", "do", "does", "did",
];

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The page to read.
    pub(crate) url: String,
    /// Let the configured LLM build the structure from the page (default false).
    #[serde(default)]
    pub(crate) use_llm: bool,
    /// Model for use_llm (default: the configured one).
    pub(crate) model: Option<String>,
    /// Answer token limit for use_llm (default: CKS_LLM_MAX_TOKENS, else 4096).
    #[schemars(range(min = 1))]
    pub(crate) max_tokens: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// The URL asked for.
    url: String,
    /// The page's title.
    title: Option<String>,
    /// Its 20 most frequent words of three letters or more, stop words left out.
    keywords: Vec<String>,
    /// The structure as canonical JSON text (not stored).
    knowledge_structure: String,
    /// Entries of the structure, relations included.
    object_count: usize,
    relation_count: usize,
    /// With use_llm: the model that answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    model_used: Option<String>,
}

/// A page read into objects.
#[derive(Debug)]
pub struct Ingested {
    pub title: Option<String>,
    pub keywords: Vec<String>,
    pub page: Page,
    /// The Document's id, made from the URL (so the same page is the same Document).
    pub document_id: String,
    /// The Document first, then its parts and their relations.
    pub objects: Vec<KnowledgeObject>,
}

/// The operation adding `object` (a relation as a relation).
pub fn addition(object: KnowledgeObject) -> Operation {
    let KnowledgeObject { identity, mut structure } = object;
    let relation = match (structure.remove("participants"), structure.remove("relation_type")) {
        (Some(Value::Array(participants)), Some(Value::String(relation_type))) => {
            Some((participants.into_iter().filter_map(|p| p.as_str().map(str::to_owned)).collect(), relation_type))
        }
        (participants, relation_type) => {
            // Not a relation after all: put back what was taken.
            participants.map(|p| structure.insert("participants", p));
            relation_type.map(|r| structure.insert("relation_type", r));
            None
        }
    };
    match relation {
        Some((participants, relation_type)) => {
            Operation::AddRelation { identity, participants, relation_type, structure }
        }
        None => Operation::AddObject { identity, structure },
    }
}

/// Fetches `url` and reads it into objects.
pub async fn ingest(ctx: &ToolContext, url: &str) -> Result<Ingested, ToolError> {
    let fetched = ctx.fetcher.get(url, MAX_PAGE_BYTES).await.map_err(|e| fetch_error(url, e))?;
    if fetched.status >= 400 {
        return Err(ToolError::internal(format!("Failed to fetch URL: the server answered HTTP {}", fetched.status)));
    }
    let page = html::read(&String::from_utf8_lossy(&fetched.body));
    let keywords = keywords(&page.text);
    let document_id = document_id(url);
    let objects = objects(url, &document_id, &page, &keywords);
    Ok(Ingested { title: page.title.clone(), keywords, page, document_id, objects })
}

fn fetch_error(url: &str, error: FetchError) -> ToolError {
    match error {
        FetchError::UnsafeUrl { .. } => {
            ToolError::new(ErrorCode::UnsafeUrl, format!("Refusing to fetch '{url}': {error}"))
        }
        other => ToolError::internal(format!("Failed to fetch URL: {other}")),
    }
}

/// `doc-` + the URL's first 30 characters (each not a letter, digit, `_` or `-` made `_`) + the
/// first 12 hex digits of its SHA-256: the reference's Document id.
pub fn document_id(url: &str) -> String {
    let prefix: String =
        url.chars().take(30).map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    let digest = Sha256::digest(url.as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("doc-{prefix}-{hex}")
}

/// The most frequent words (runs of three or more ASCII letters standing alone), lower-cased and
/// without stop words; ties in order of first appearance.
pub(crate) fn keywords(text: &str) -> Vec<String> {
    let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        if word.len() < 3 || !word.bytes().all(|b| b.is_ascii_alphabetic()) {
            continue;
        }
        let word = word.to_ascii_lowercase();
        if STOP_WORDS.contains(&word.as_str()) {
            continue;
        }
        let first = counts.len();
        counts.entry(word).or_insert((0, first)).0 += 1;
    }
    let mut ranked: Vec<(String, (usize, usize))> = counts.into_iter().collect();
    ranked.sort_by(|(_, (a, first_a)), (_, (b, first_b))| b.cmp(a).then(first_a.cmp(first_b)));
    ranked.into_iter().take(MAX_KEYWORDS).map(|(word, _)| word).collect()
}

fn objects(url: &str, doc: &str, page: &Page, keywords: &[String]) -> Vec<KnowledgeObject> {
    let object = |id: String, ty: &str, name: String, structure: Value| {
        KnowledgeObject::new(Identity::new(id, ty, name), structure.as_object().cloned().unwrap_or_default())
    };
    let relation = |id: String, name: &str, part: &str| {
        object(id, "Relation", name.to_owned(), json!({"participants": [doc, part], "relation_type": name}))
    };
    let label = page.title.clone().unwrap_or_else(|| url.to_owned());
    let mut document = Map::new();
    document.insert("url".into(), json!(url));
    document.insert("content_preview".into(), json!(page.text.chars().take(PREVIEW_CHARS).collect::<String>()));
    if let Some(title) = &page.title {
        document.insert("title".into(), json!(title));
    }
    if let Some(description) = &page.description {
        document.insert("description".into(), json!(description));
    }
    let mut objects = vec![object(doc.to_owned(), "Document", label.clone(), Value::Object(document))];
    let mut relations = Vec::new();
    for (i, keyword) in keywords.iter().enumerate() {
        objects.push(object(format!("{doc}-kw-{i}"), "Topic", keyword.clone(), json!({})));
        relations.push(relation(format!("rel-{doc}-kw-{i}"), "mentions", &format!("{doc}-kw-{i}")));
    }
    let metadata = format!("{doc}-metadata");
    objects.push(object(metadata.clone(), "Metadata", format!("Metadata for {label}"), page.metadata()));
    relations.push(relation(format!("rel-{metadata}"), "has_metadata", &metadata));
    for (i, section) in page.sections.iter().enumerate() {
        let id = format!("{doc}-section-{i}");
        let name = section.heading.clone().unwrap_or_else(|| format!("Section {}", i + 1));
        let structure = json!({"heading": section.heading, "level": section.level, "content": section.content});
        objects.push(object(id.clone(), "Section", name, structure));
        relations.push(relation(format!("rel-{id}"), "has_section", &id));
    }
    for (i, table) in page.tables.iter().enumerate() {
        let id = format!("{doc}-table-{i}");
        let name = table.caption.clone().unwrap_or_else(|| format!("Table {}", i + 1));
        let structure = json!({"caption": table.caption, "headers": table.headers, "rows": table.rows});
        objects.push(object(id.clone(), "Table", name, structure));
        relations.push(relation(format!("rel-{id}"), "has_table", &id));
    }
    for (i, list) in page.lists.iter().enumerate() {
        let id = format!("{doc}-list-{i}");
        let structure = json!({"ordered": list.ordered, "items": list.items});
        objects.push(object(id.clone(), "List", format!("List {}", i + 1), structure));
        relations.push(relation(format!("rel-{id}"), "has_list", &id));
    }
    objects.extend(relations);
    objects
}

/// What was read, as the model is shown it.
fn prompt(url: &str, page: &Page) -> String {
    let mut lines = vec![format!("Build a knowledge structure from this web page ({url}).")];
    if let Some(title) = &page.title {
        lines.push(format!("Title: {title}"));
    }
    if let Some(description) = &page.description {
        lines.push(format!("Description: {description}"));
    }
    for section in &page.sections {
        let heading = section.heading.as_deref().unwrap_or("(no heading)");
        lines.push(format!("Section \"{heading}\": {}", section.content));
    }
    for (i, table) in page.tables.iter().enumerate() {
        lines.push(format!(
            "Table {} ({}): headers {:?}, rows {:?}",
            i + 1,
            table.caption.as_deref().unwrap_or("-"),
            table.headers,
            table.rows
        ));
    }
    for (i, list) in page.lists.iter().enumerate() {
        lines.push(format!("List {}: {:?}", i + 1, list.items));
    }
    lines.push(format!("Metadata: {}", page.metadata()));
    lines.join("\n")
}

pub(crate) struct IngestDocument;

#[async_trait::async_trait]
impl Tool for IngestDocument {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Read a web page";
    const META: ToolMeta = ToolMeta {
        name: "ingest_document",
        description: "Fetch a web page (http or https on a public address, else unsafe_url; at most 5 MiB) \
            and read it into a knowledge structure, returned, not stored: a Document, a Topic per keyword, its \
            Metadata, Sections, Tables and Lists; the same page gives the same ids. With 'use_llm' the configured \
            LLM builds the structure instead. Returns {url, title, keywords, knowledge_structure (CKS JSON text), \
            object_count}; store it with evolve_knowledge or validate_knowledge.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: true,
        session_fields: &[],
        session_checks: &[],
        // The model would choose the URL, as with verify_source: a page's address can carry a
        // graph's content to any public server.
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        if input.url.is_empty() {
            return Err(ToolError::missing_parameter("url"));
        }
        let ingested = ingest(ctx, &input.url).await?;
        let (structure, model_used) = if input.use_llm {
            let request = ChatRequest {
                model: input.model.filter(|m| !m.trim().is_empty()),
                system: Some(SYSTEM_PROMPT.to_owned()),
                max_tokens: input.max_tokens,
                ..ChatRequest::from_prompt(prompt(&input.url, &ingested.page))
            };
            let answer = ask_json(ctx, request, false, Self::META.name, "LLM call").await?;
            let structure =
                parse_value(answer.value).map_err(|e| ToolError::new(ErrorCode::CksParseError, e.to_string()))?;
            (structure, Some(answer.model))
        } else {
            let structure = KnowledgeStructure::from_objects(ingested.objects)
                .map_err(|e| ToolError::internal(format!("Failed to build Knowledge Structure: {e}")))?;
            (structure, None)
        };
        Ok(Output {
            url: input.url,
            title: ingested.title,
            keywords: ingested.keywords,
            knowledge_structure: crate::convert::client_document(&structure),
            object_count: structure.len(),
            relation_count: structure.relations().count(),
            model_used,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{document_id, keywords};
    use crate::testing::{HttpServer, Reply, call, llm_context, llm_env};
    use crate::tools::knowledge::verify_source::tests::local_context;

    const PAGE: &str = r#"<html><head><title>Photosynthesis</title><meta name="description" content="Plants and light">
        <meta property="og:type" content="article"><script type="application/ld+json">{"@type": "Article"}</script></head>
        <body><h1>Light</h1><p>Chlorophyll absorbs light; light drives chlorophyll.</p>
        <ul><li>one</li></ul><table><tr><th>a</th></tr><tr><td>1</td></tr></table></body></html>"#;

    async fn site() -> (HttpServer, String) {
        let server = HttpServer::start(|_, path| match path {
            "/page" => Reply::status(200).header("content-type", "text/html").body(PAGE),
            "/elsewhere" => Reply::redirect(302, "http://10.1.2.3/internal"),
            _ => Reply::status(404),
        })
        .await;
        let base = format!("http://127.0.0.1:{}", server.addr.port());
        (server, base)
    }

    fn entries(result: &Value) -> Vec<Value> {
        let text = result["knowledge_structure"].as_str().expect("canonical text");
        serde_json::from_str::<Value>(text).unwrap()["objects"].as_array().unwrap().clone()
    }

    #[tokio::test]
    async fn a_page_becomes_a_document_with_its_parts() {
        let (_server, base) = site().await;
        let ctx = local_context();
        let url = format!("{base}/page");
        let result = call(&ctx, "ingest_document", json!({"url": url})).await;
        assert_eq!(result["title"], "Photosynthesis", "{result}");
        assert_eq!(
            result["keywords"].as_array().unwrap()[0..3],
            [json!("light"), json!("chlorophyll"), json!("photosynthesis")]
        );
        let entries = entries(&result);
        assert_eq!(result["object_count"], entries.len());
        let doc = document_id(&url);
        let find =
            |id: &str| entries.iter().find(|o| o["identity"]["id"] == id).cloned().unwrap_or_else(|| panic!("{id}"));
        let document = find(&doc);
        assert_eq!(document["identity"]["type"], "Document");
        assert_eq!(document["structure"]["description"], "Plants and light");
        assert_eq!(document["structure"]["url"], url);
        assert_eq!(find(&format!("{doc}-metadata"))["structure"]["json_ld"], json!([{"@type": "Article"}]));
        assert_eq!(find(&format!("{doc}-metadata"))["structure"]["open_graph"], json!({"type": "article"}));
        let section = find(&format!("{doc}-section-0"));
        assert_eq!(
            section["structure"],
            json!({"heading": "Light", "level": 1, "content": "Chlorophyll absorbs light; light drives chlorophyll."})
        );
        assert_eq!(find(&format!("{doc}-table-0"))["structure"]["rows"], json!([["1"]]));
        assert_eq!(find(&format!("{doc}-list-0"))["structure"]["items"], json!(["one"]));
        let has_list = find(&format!("rel-{doc}-list-0"));
        assert_eq!(
            has_list["structure"],
            json!({"participants": [doc, format!("{doc}-list-0")], "relation_type": "has_list"})
        );
        let relations = entries.iter().filter(|o| o["structure"].get("relation_type").is_some()).count();
        assert_eq!(result["relation_count"], relations);
        assert_eq!(relations, result["keywords"].as_array().unwrap().len() + 4);
    }

    #[tokio::test]
    async fn refused_missing_and_failing_pages() {
        let (_server, base) = site().await;
        let ctx = local_context();
        let refused = call(&ctx, "ingest_document", json!({"url": "http://192.168.1.1/x"})).await;
        assert_eq!(refused["error"], "unsafe_url", "{refused}");
        assert!(refused["message"].as_str().unwrap().starts_with("Refusing to fetch 'http://192.168.1.1/x': "));
        let redirected = call(&ctx, "ingest_document", json!({"url": format!("{base}/elsewhere")})).await;
        assert_eq!(redirected["error"], "unsafe_url", "a redirect to a private address: {redirected}");
        let missing = call(&ctx, "ingest_document", json!({"url": format!("{base}/nothing")})).await;
        assert_eq!(missing["error"], "internal_error");
        assert!(missing["message"].as_str().unwrap().contains("HTTP 404"), "{missing}");
        assert_eq!(call(&ctx, "ingest_document", json!({"url": ""})).await["error"], "missing_parameter");
        assert_eq!(call(&ctx, "ingest_document", json!({})).await["error"], "missing_parameter");
    }

    #[tokio::test]
    async fn with_use_llm_the_model_builds_the_structure() {
        let (_server, base) = site().await;
        let provider = cks_testkit::ProviderServer::start().await;
        let answer = json!({"objects": [
            {"identity": {"id": "plant", "type": "Organism", "name": "Plant"}, "structure": {}},
            {"identity": {"id": "light", "type": "Energy", "name": "Light"}, "structure": {}},
            {"identity": {"id": "r", "type": "Relation", "name": "uses"}, "structure": {"participants": ["plant", "light"], "relation_type": "uses"}}
        ]});
        provider.set_default(Some(cks_testkit::Reply::Text(answer.to_string())));
        let mut ctx = llm_context(&llm_env("anthropic", &provider.base_url()));
        ctx.fetcher = local_context().fetcher;
        let result = call(&ctx, "ingest_document", json!({"url": format!("{base}/page"), "use_llm": true})).await;
        assert_eq!(
            (result["object_count"].as_u64(), result["relation_count"].as_u64()),
            (Some(3), Some(1)),
            "{result}"
        );
        assert!(result["model_used"].is_string());
        let sent = provider.requests()[0].body.to_string();
        assert!(
            sent.contains("Chlorophyll absorbs light") && sent.contains("Photosynthesis"),
            "the page reaches the model"
        );
    }

    #[test]
    fn ids_and_keywords_follow_the_reference() {
        // The reference's id for this URL.
        assert_eq!(
            document_id("https://example.org/wiki/Photosynthesis"),
            "doc-https___example_org_wiki_Photo-7bb6239c48ed"
        );
        assert_eq!(
            keywords("The cat's cat, CAT and dog: a café cafe x1y abc1 dog"),
            vec!["cat".to_owned(), "dog".to_owned(), "cafe".to_owned()]
        );
    }
}
