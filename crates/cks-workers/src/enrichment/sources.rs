//! The external sources the Enrichment process searches: each takes a query and answers candidate
//! pages (a URL and a title), unfetched. Every request goes through the guarded fetcher; a source
//! that fails is reported apart, so the others still contribute.

use quick_xml::Reader;
use quick_xml::events::Event;
use reqwest::Url;
use serde_json::Value;

use cks_web::fetch::Fetcher;

/// The largest search answer read.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// A page a source proposed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Candidate {
    pub(crate) url: String,
    pub(crate) title: String,
    /// The source that proposed it: wikipedia or arxiv.
    pub(crate) source: &'static str,
}

/// A search API and where it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// MediaWiki's `opensearch` action (`CKS_ENRICHMENT_WIKIPEDIA_URL`).
    Wikipedia { endpoint: String },
    /// arXiv's Atom query API (`CKS_ENRICHMENT_ARXIV_URL`).
    Arxiv { endpoint: String },
}

impl Source {
    /// The sources by name, as `CKS_ENRICHMENT_ADAPTERS` lists them.
    pub const NAMES: [&'static str; 2] = ["wikipedia", "arxiv"];
    pub const WIKIPEDIA: &'static str = "https://en.wikipedia.org/w/api.php";
    pub const ARXIV: &'static str = "https://export.arxiv.org/api/query";

    pub fn name(&self) -> &'static str {
        match self {
            Source::Wikipedia { .. } => "wikipedia",
            Source::Arxiv { .. } => "arxiv",
        }
    }

    /// Up to `limit` candidates for `query`.
    pub(crate) async fn search(&self, fetcher: &Fetcher, query: &str, limit: usize) -> Result<Vec<Candidate>, String> {
        let (endpoint, pairs) = match self {
            Source::Wikipedia { endpoint } => (
                endpoint,
                vec![
                    ("action", "opensearch".to_owned()),
                    ("format", "json".to_owned()),
                    ("namespace", "0".to_owned()),
                    ("limit", limit.to_string()),
                    ("search", query.to_owned()),
                ],
            ),
            Source::Arxiv { endpoint } => (
                endpoint,
                vec![
                    ("search_query", format!("all:{query}")),
                    ("start", "0".to_owned()),
                    ("max_results", limit.to_string()),
                ],
            ),
        };
        let mut url = Url::parse(endpoint).map_err(|e| format!("'{endpoint}' is not a URL: {e}"))?;
        url.query_pairs_mut().extend_pairs(pairs);
        let fetched = fetcher.get(url.as_str(), MAX_ANSWER_BYTES).await.map_err(|e| e.to_string())?;
        if fetched.status >= 400 {
            return Err(format!("{} answered HTTP {}", self.name(), fetched.status));
        }
        let body = String::from_utf8_lossy(&fetched.body);
        let mut found = match self {
            Source::Wikipedia { .. } => opensearch(&body)?,
            Source::Arxiv { .. } => atom(&body)?,
        };
        found.truncate(limit);
        Ok(found)
    }
}

/// `[query, [titles], [descriptions], [urls]]`.
fn opensearch(body: &str) -> Result<Vec<Candidate>, String> {
    let answer: Value = serde_json::from_str(body).map_err(|e| format!("wikipedia answered no JSON: {e}"))?;
    let (Some(titles), Some(urls)) = (answer.get(1).and_then(Value::as_array), answer.get(3).and_then(Value::as_array))
    else {
        return Err("wikipedia's answer is not an opensearch result".into());
    };
    Ok(titles
        .iter()
        .zip(urls)
        .filter_map(|(title, url)| {
            let url = url.as_str().filter(|u| !u.is_empty())?;
            Some(Candidate { url: url.to_owned(), title: title.as_str().unwrap_or("").to_owned(), source: "wikipedia" })
        })
        .collect())
}

/// An Atom feed's entries: each entry's `<id>` is its abstract page and its `<title>`.
fn atom(body: &str) -> Result<Vec<Candidate>, String> {
    let mut reader = Reader::from_str(body);
    let mut found = Vec::new();
    let mut entry: Option<(String, String)> = None;
    let mut field: Option<&'static str> = None;
    loop {
        match reader.read_event().map_err(|e| format!("arxiv answered no Atom feed: {e}"))? {
            Event::Start(tag) => match tag.local_name().as_ref() {
                "entry" => entry = Some((String::new(), String::new())),
                "id" if entry.is_some() => field = Some("id"),
                "title" if entry.is_some() => field = Some("title"),
                _ => {}
            },
            Event::Text(text) => {
                if let (Some(field), Some((id, title))) = (field, &mut entry) {
                    let text = text.xml10_content();
                    if field == "id" { id } else { title }.push_str(&text);
                }
            }
            Event::GeneralRef(reference) => {
                if let (Some("title"), Some((_, title))) = (field, &mut entry) {
                    if let Ok(Some(c)) = reference.resolve_char_ref() {
                        title.push(c);
                    } else if let Some(text) = quick_xml::escape::resolve_xml_entity(&reference.xml10_content()) {
                        title.push_str(text);
                    }
                }
            }
            Event::End(tag) => match tag.local_name().as_ref() {
                "entry" => {
                    if let Some((id, title)) = entry.take() {
                        let id = id.trim();
                        if !id.is_empty() {
                            // arXiv names its abstract pages with http:// addresses it serves over https.
                            let url = match id.strip_prefix("http://arxiv.org/") {
                                Some(rest) => format!("https://arxiv.org/{rest}"),
                                None => id.to_owned(),
                            };
                            found.push(Candidate { url, title: cks_web::html::collapse(&title), source: "arxiv" });
                        }
                    }
                }
                "id" | "title" => field = None,
                _ => {}
            },
            Event::Eof => return Ok(found),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_answers_are_read() {
        let wiki = r#"["photo", ["Photosynthesis", "Photon", "Empty"], ["", "", ""],
            ["https://en.wikipedia.org/wiki/Photosynthesis", "https://en.wikipedia.org/wiki/Photon", ""]]"#;
        let found = opensearch(wiki).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].title.as_str(), found[0].source), ("Photosynthesis", "wikipedia"));
        assert!(opensearch("{\"error\": 1}").is_err());
        let feed = r#"<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>query</title>
            <id>http://arxiv.org/api/x</id>
            <entry><id>http://arxiv.org/abs/2101.00001v1</id><title>Light &amp; leaves:
              a study</title></entry>
            <entry><title>no id</title></entry></feed>"#;
        let found = atom(feed).unwrap();
        assert_eq!(
            found,
            vec![Candidate {
                url: "https://arxiv.org/abs/2101.00001v1".into(),
                title: "Light & leaves: a study".into(),
                source: "arxiv"
            }]
        );
        assert!(atom("<feed><entry>").is_ok_and(|f| f.is_empty()), "a cut feed yields what it holds");
    }
}
