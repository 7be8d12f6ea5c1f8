//! What a web page says, read in one pass over its tokens: the title, the description, the plain
//! text, the machine-readable metadata (JSON-LD, OpenGraph, Twitter cards, other `<meta>` tags,
//! schema.org microdata), and the content's shape (heading-delimited sections, tables, lists).
//! `ingest_document` builds a knowledge structure from it.
//!
//! Pages are tag soup: an end tag closes the innermost open element of its name and everything
//! opened inside it, a stray end tag is ignored, and nothing here fails — a page that cannot be
//! read yields whatever was read before. Every collection is capped, so a hostile page costs at
//! most its size.

use html5gum::{DefaultEmitter, Token, Tokenizer};
use serde_json::{Map, Value, json};

const MAX_JSON_LD: usize = 20;
const MAX_MICRODATA: usize = 30;
const MAX_TABLES: usize = 20;
const MAX_TABLE_ROWS: usize = 200;
const MAX_LISTS: usize = 30;
const MAX_LIST_ITEMS: usize = 100;
const MAX_SECTIONS: usize = 50;
const MAX_SECTION_CHARS: usize = 3000;

/// Elements whose text is not page content (the title is kept apart).
const NOT_CONTENT: [&str; 5] = ["script", "style", "noscript", "template", "title"];
/// Elements whose start and end separate the text around them (others run into their neighbours:
/// `Ca<b>t</b>` reads "Cat").
const BLOCK: [&str; 30] = [
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "dd",
    "div",
    "dl",
    "dt",
    "figcaption",
    "figure",
    "footer",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "td",
    "th",
    "tr",
];
/// Elements that never have an end tag.
const VOID: [&str; 14] =
    ["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"];

/// What a page says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Page {
    /// The `<title>`, whitespace collapsed.
    pub title: Option<String>,
    /// `<meta name="description">`.
    pub description: Option<String>,
    /// All readable text (the title's included), whitespace collapsed.
    pub text: String,
    /// JSON-LD items, `@graph`s and arrays flattened.
    pub json_ld: Vec<Value>,
    /// Top-level microdata items: `{"type", "properties"}`, nested items inside their property.
    pub microdata: Vec<Value>,
    /// `og:*` properties, without the prefix.
    pub open_graph: Map<String, Value>,
    /// `twitter:*` names, without the prefix.
    pub twitter: Map<String, Value>,
    /// Every other named `<meta>`.
    pub meta: Map<String, Value>,
    pub sections: Vec<Section>,
    pub tables: Vec<Table>,
    pub lists: Vec<List>,
}

/// The text under one heading (the first section holds what comes before any heading: no heading,
/// no level).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Section {
    pub heading: Option<String>,
    pub level: Option<u8>,
    /// At most 3,000 characters.
    pub content: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub caption: Option<String>,
    /// The first row made of header cells.
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct List {
    pub ordered: bool,
    /// The non-empty items (a nested list's text belongs to its item).
    pub items: Vec<String>,
}

impl Page {
    /// The metadata as one object: `{json_ld, microdata, open_graph, twitter, meta}`.
    pub fn metadata(&self) -> Value {
        json!({
            "json_ld": self.json_ld,
            "microdata": self.microdata,
            "open_graph": self.open_graph,
            "twitter": self.twitter,
            "meta": self.meta,
        })
    }
}

/// Reads `html`.
pub fn read(html: &str) -> Page {
    let mut emitter = DefaultEmitter::default();
    // Script, style and title content is raw text, not markup: switch states on those tags as a
    // tree builder would.
    emitter.naively_switch_states(true);
    let mut reader = Reader::default();
    for Ok(token) in Tokenizer::new_with_emitter(html, emitter) {
        match token {
            Token::StartTag(tag) => {
                let name = String::from_utf8_lossy(&tag.name).to_ascii_lowercase();
                reader.separated |= BLOCK.contains(&name.as_str());
                let attribute = |key: &str| {
                    tag.attributes.get(key.as_bytes()).map(|value| String::from_utf8_lossy(&value.value).into_owned())
                };
                reader.open(&name, &attribute);
                if tag.self_closing || VOID.contains(&name.as_str()) {
                    reader.close(&name);
                }
            }
            Token::EndTag(tag) => {
                let name = String::from_utf8_lossy(&tag.name).to_ascii_lowercase();
                reader.separated |= BLOCK.contains(&name.as_str());
                reader.close(&name);
            }
            Token::String(text) => {
                let text = String::from_utf8_lossy(&text.value);
                if std::mem::take(&mut reader.separated) {
                    reader.text(&format!(" {text}"));
                } else {
                    reader.text(&text);
                }
            }
            _ => {}
        }
    }
    reader.finish()
}

/// What an open element collects.
#[derive(Default)]
struct Frame {
    tag: String,
    /// Its text, when the element's text is a value of its own (a heading, a cell, an item, an
    /// item property).
    text: Option<String>,
    /// A microdata item it opened.
    item: Option<Map<String, Value>>,
    /// The property its value (text, attribute or item) is assigned to in the enclosing item.
    property: Option<String>,
    /// The property's value taken from an attribute.
    property_value: Option<String>,
    /// What it owns: the top-level table, a cell, a list, an item, a heading, the title.
    owns: Option<Owned>,
    /// The table or list nesting it counts in.
    nests: Option<Owned>,
}

#[derive(Clone, Copy, PartialEq)]
enum Owned {
    Table,
    Cell,
    List,
    Item,
    Heading,
    Title,
}

#[derive(Default)]
struct Reader {
    page: Page,
    stack: Vec<Frame>,
    /// Open elements whose text is not content (script, style…).
    hidden: usize,
    /// Inside `<script type="application/ld+json">`: its text.
    json_ld: Option<String>,
    /// The first `<title>`'s text.
    title: Option<String>,
    tables: usize,
    lists: usize,
    table: Option<Table>,
    caption: Option<String>,
    row: Option<(Vec<String>, bool)>,
    list: Option<List>,
    /// The current section's text, and whether it is in `page.sections` (past the cap it is not).
    section: (String, bool),
    text: String,
    /// A block element started or ended since the last text.
    separated: bool,
}

impl Reader {
    fn open(&mut self, tag: &str, attribute: &dyn Fn(&str) -> Option<String>) {
        let mut frame = Frame { tag: tag.to_owned(), ..Frame::default() };
        if NOT_CONTENT.contains(&tag) {
            self.hidden += 1;
            if tag == "script"
                && attribute("type").is_some_and(|t| t.trim().eq_ignore_ascii_case("application/ld+json"))
            {
                self.json_ld = Some(String::new());
            }
            if tag == "title" && self.title.is_none() {
                self.title = Some(String::new());
                frame.owns = Some(Owned::Title);
            }
            self.stack.push(frame);
            return;
        }
        if self.hidden > 0 {
            self.stack.push(frame);
            return;
        }
        if tag == "meta" {
            self.meta(attribute);
            self.stack.push(frame);
            return;
        }
        // An item, a row or a cell ends where the next one starts.
        match tag {
            "li" => self.close_sibling("li", &["ul", "ol"]),
            "tr" => self.close_sibling("tr", &["table"]),
            "td" | "th" => {
                self.close_sibling("td", &["tr", "table"]);
                self.close_sibling("th", &["tr", "table"]);
            }
            _ => {}
        }
        if let Some(property) = attribute("itemprop").filter(|_| self.stack.iter().any(|f| f.item.is_some())) {
            frame.property_value = attribute("content")
                .or_else(|| matches!(tag, "a" | "link").then(|| attribute("href")).flatten())
                .or_else(|| (tag == "img").then(|| attribute("src")).flatten())
                .or_else(|| (tag == "time").then(|| attribute("datetime")).flatten());
            if frame.property_value.is_none() {
                frame.text = Some(String::new());
            }
            frame.property = Some(property);
        }
        if attribute("itemscope").is_some() {
            let kind = attribute("itemtype").map(|t| {
                let t = t.trim_end_matches('/');
                t.rsplit('/').next().unwrap_or(t).to_owned()
            });
            let mut item = Map::new();
            item.insert("type".into(), kind.map_or(Value::Null, Value::String));
            item.insert("properties".into(), Value::Object(Map::new()));
            frame.item = Some(item);
            // An item is its property's value, not its text.
            frame.text = None;
            frame.property_value = None;
        }
        match tag {
            "table" => {
                self.tables += 1;
                frame.nests = Some(Owned::Table);
                if self.tables == 1 && self.page.tables.len() < MAX_TABLES {
                    self.table = Some(Table::default());
                    frame.owns = Some(Owned::Table);
                }
            }
            _ if self.tables == 1 => match tag {
                "caption" => self.caption = Some(String::new()),
                "tr" => self.row = Some((Vec::new(), false)),
                "td" | "th" => {
                    frame.owns = Some(Owned::Cell);
                    frame.text = Some(String::new());
                    if let (Some(row), "th") = (&mut self.row, tag) {
                        row.1 = true;
                    }
                }
                _ => {}
            },
            // Inside a nested table: no lists or sections.
            _ if self.tables > 1 => {}
            "ul" | "ol" if self.tables == 0 => {
                self.lists += 1;
                frame.nests = Some(Owned::List);
                if self.lists == 1 && self.page.lists.len() < MAX_LISTS {
                    self.list = Some(List { ordered: tag == "ol", items: Vec::new() });
                    frame.owns = Some(Owned::List);
                }
            }
            "li" if self.lists == 1 => {
                frame.owns = Some(Owned::Item);
                frame.text = Some(String::new());
            }
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" if self.lists == 0 => {
                self.end_section();
                let level = tag.as_bytes()[1] - b'0';
                let kept = self.page.sections.len() < MAX_SECTIONS;
                if kept {
                    self.page.sections.push(Section { heading: None, level: Some(level), content: String::new() });
                }
                self.section = (String::new(), kept);
                frame.owns = Some(Owned::Heading);
                frame.text = Some(String::new());
            }
            _ => {}
        }
        self.stack.push(frame);
    }

    /// Closes an open `tag` unless one of `bounds` was opened after it.
    fn close_sibling(&mut self, tag: &str, bounds: &[&str]) {
        let innermost = self.stack.iter().rev().find(|f| f.tag == tag || bounds.contains(&f.tag.as_str()));
        if innermost.is_some_and(|f| f.tag == tag) {
            self.close(tag);
        }
    }

    fn close(&mut self, tag: &str) {
        let Some(at) = self.stack.iter().rposition(|f| f.tag == tag) else { return };
        // Elements left open inside it close with it, innermost first.
        while self.stack.len() > at {
            let frame = self.stack.pop().expect("the stack holds the element being closed");
            self.closed(frame);
        }
    }

    fn closed(&mut self, frame: Frame) {
        if NOT_CONTENT.contains(&frame.tag.as_str()) {
            self.hidden -= 1;
            if let (Some(raw), "script") = (&self.json_ld, frame.tag.as_str()) {
                let raw = raw.clone();
                self.json_ld = None;
                self.add_json_ld(&raw);
            }
            return;
        }
        if self.hidden > 0 {
            return;
        }
        match frame.nests {
            Some(Owned::Table) => self.tables -= 1,
            Some(Owned::List) => self.lists -= 1,
            _ => {}
        }
        if let Some(item) = &frame.item {
            let item = Value::Object(item.clone());
            match &frame.property {
                Some(property) => self.assign(property, item),
                None if self.page.microdata.len() < MAX_MICRODATA => self.page.microdata.push(item),
                None => {}
            }
        } else if let Some(property) = &frame.property {
            let value = frame.property_value.clone().unwrap_or_else(|| collapse(frame.text.as_deref().unwrap_or("")));
            self.assign(property, Value::String(value));
        }
        match (frame.tag.as_str(), frame.owns) {
            (_, Some(Owned::Table)) => {
                if let Some(table) = self.table.take() {
                    self.page.tables.push(table);
                }
            }
            ("caption", _) if self.caption.is_some() => {
                let caption = collapse(&self.caption.take().unwrap_or_default());
                if let Some(table) = &mut self.table {
                    table.caption = (!caption.is_empty()).then_some(caption);
                }
            }
            (_, Some(Owned::Cell)) => {
                if let Some((cells, _)) = &mut self.row {
                    cells.push(collapse(frame.text.as_deref().unwrap_or("")));
                }
            }
            ("tr", _) => {
                if let (Some((cells, header)), Some(table)) = (self.row.take(), &mut self.table) {
                    if header && table.headers.is_empty() {
                        table.headers = cells;
                    } else if table.rows.len() < MAX_TABLE_ROWS {
                        table.rows.push(cells);
                    }
                }
            }
            (_, Some(Owned::List)) => {
                if let Some(list) = self.list.take() {
                    self.page.lists.push(list);
                }
            }
            (_, Some(Owned::Item)) => {
                let item = collapse(frame.text.as_deref().unwrap_or(""));
                if let Some(list) = self.list.as_mut().filter(|l| !item.is_empty() && l.items.len() < MAX_LIST_ITEMS) {
                    list.items.push(item);
                }
            }
            (_, Some(Owned::Heading)) => {
                let heading = collapse(frame.text.as_deref().unwrap_or(""));
                if let (true, Some(section)) = (self.section.1, self.page.sections.last_mut()) {
                    section.heading = (!heading.is_empty()).then_some(heading);
                }
            }
            _ => {}
        }
    }

    fn text(&mut self, text: &str) {
        if self.hidden > 0 {
            if let Some(raw) = &mut self.json_ld {
                raw.push_str(text);
            } else if let (Some(title), Some(Owned::Title)) = (&mut self.title, self.stack.last().and_then(|f| f.owns))
            {
                title.push_str(text);
                self.text.push_str(text);
            }
            return;
        }
        self.text.push_str(text);
        if let Some(caption) = &mut self.caption {
            caption.push_str(text);
            return;
        }
        // Every open item property takes it, up to the innermost heading, cell or list item, which
        // takes it instead of the section.
        let mut collected = false;
        for frame in self.stack.iter_mut().rev() {
            if let Some(own) = &mut frame.text {
                own.push_str(text);
            }
            if frame.owns.is_some() {
                collected = true;
                break;
            }
        }
        if !collected && self.tables == 0 && self.lists == 0 {
            self.section.0.push_str(text);
        }
    }

    fn meta(&mut self, attribute: &dyn Fn(&str) -> Option<String>) {
        let Some(content) = attribute("content") else { return };
        let property = attribute("property").unwrap_or_default();
        let name = attribute("name").unwrap_or_default();
        if let Some(key) = property.strip_prefix("og:") {
            self.page.open_graph.insert(key.to_owned(), Value::String(content));
        } else if let Some(key) = name.strip_prefix("twitter:") {
            self.page.twitter.insert(key.to_owned(), Value::String(content));
        } else if !name.is_empty() {
            if name.eq_ignore_ascii_case("description") && self.page.description.is_none() {
                self.page.description = Some(content.trim().to_owned());
            }
            self.page.meta.insert(name, Value::String(content));
        }
    }

    fn add_json_ld(&mut self, raw: &str) {
        fn flatten(value: Value, into: &mut Vec<Value>) {
            match value {
                Value::Array(items) => items.into_iter().for_each(|item| flatten(item, into)),
                Value::Object(mut object) => match object.remove("@graph") {
                    Some(Value::Array(graph)) => graph.into_iter().for_each(|item| flatten(item, into)),
                    Some(other) => {
                        object.insert("@graph".into(), other);
                        into.push(Value::Object(object));
                    }
                    None => into.push(Value::Object(object)),
                },
                _ => {}
            }
        }
        let Ok(value) = serde_json::from_str::<Value>(raw.trim()) else { return };
        let mut items = Vec::new();
        flatten(value, &mut items);
        let room = MAX_JSON_LD.saturating_sub(self.page.json_ld.len());
        self.page.json_ld.extend(items.into_iter().take(room));
    }

    fn enclosing_item(&mut self) -> Option<&mut Map<String, Value>> {
        self.stack.iter_mut().rev().find_map(|f| f.item.as_mut())
    }

    /// Adds `value` to the enclosing item's `property` (a second value makes a list).
    fn assign(&mut self, property: &str, value: Value) {
        let Some(Value::Object(properties)) = self.enclosing_item().and_then(|item| item.get_mut("properties")) else {
            return;
        };
        match properties.get_mut(property) {
            Some(Value::Array(values)) => values.push(value),
            Some(first) => *first = Value::Array(vec![first.take(), value]),
            None => {
                properties.insert(property.to_owned(), value);
            }
        }
    }

    /// Ends the current section: its text becomes its content (the first section is created here
    /// when text came before any heading).
    fn end_section(&mut self) {
        let (text, kept) = std::mem::take(&mut self.section);
        let content: String = collapse(&text).chars().take(MAX_SECTION_CHARS).collect();
        if kept {
            if let Some(section) = self.page.sections.last_mut() {
                section.content = content;
            }
        } else if self.page.sections.is_empty() && !content.is_empty() {
            self.page.sections.push(Section { heading: None, level: None, content });
        }
    }

    fn finish(mut self) -> Page {
        while let Some(frame) = self.stack.pop() {
            self.closed(frame);
        }
        self.end_section();
        self.page.sections.retain(|s| s.heading.is_some() || !s.content.is_empty());
        self.page.title = self.title.map(|t| collapse(&t)).filter(|t| !t.is_empty());
        self.page.text = collapse(&self.text);
        self.page
    }
}

/// `text` with runs of whitespace made one space, trimmed.
pub fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_page_is_read_into_metadata_text_and_shape() {
        let page = read(
            r#"<!doctype html><html><head><title>Photosynthesis &amp; light</title>
            <meta name="description" content="How plants eat light">
            <meta property="og:title" content="Photosynthesis"><meta name="twitter:card" content="summary">
            <meta name="author" content="Ada"/>
            <script type="application/ld+json">{"@graph": [{"@type": "Article"}, {"@type": "Person"}]}</script>
            <script>var x = "<h1>not a heading</h1>";</script><style>p { color: red }</style></head>
            <body><p>Before any heading.</p>
            <h1>Light <em>reactions</em></h1><p>Chlorophyll absorbs light.</p>
            <ul><li>One <b>two</b></li><li></li><li>Three<ul><li>nested</li></ul></li></ul>
            <table><caption>Pigments</caption><tr><th>Name</th><th>Colour</th></tr><tr><td>a</td><td><i>green</i></td></tr></table>
            <h2>Dark</h2><div itemscope itemtype="https://schema.org/Person/"><span itemprop="name">Ada</span>
            <a itemprop="url" href="https://ada.example/">home</a>
            <div itemprop="address" itemscope itemtype="https://schema.org/PostalAddress"><span itemprop="city">X</span></div></div>
            <ol><li>first</li></ol></body></html>"#,
        );
        assert_eq!(page.title.as_deref(), Some("Photosynthesis & light"));
        assert_eq!(page.description.as_deref(), Some("How plants eat light"));
        assert_eq!(page.open_graph, json!({"title": "Photosynthesis"}).as_object().unwrap().clone());
        assert_eq!(page.twitter["card"], "summary");
        assert_eq!(page.meta["author"], "Ada");
        assert_eq!(page.json_ld, vec![json!({"@type": "Article"}), json!({"@type": "Person"})]);
        assert_eq!(
            page.microdata,
            vec![json!({"type": "Person", "properties": {
                "name": "Ada", "url": "https://ada.example/",
                "address": {"type": "PostalAddress", "properties": {"city": "X"}}}})]
        );
        let sections: Vec<_> =
            page.sections.iter().map(|s| (s.heading.as_deref(), s.level, s.content.as_str())).collect();
        assert_eq!(
            sections,
            vec![
                (None, None, "Before any heading."),
                (Some("Light reactions"), Some(1), "Chlorophyll absorbs light."),
                (Some("Dark"), Some(2), "Ada home X"),
            ]
        );
        assert_eq!(
            page.lists,
            vec![
                List { ordered: false, items: vec!["One two".into(), "Three nested".into()] },
                List { ordered: true, items: vec!["first".into()] },
            ]
        );
        assert_eq!(
            page.tables,
            vec![Table {
                caption: Some("Pigments".into()),
                headers: vec!["Name".into(), "Colour".into()],
                rows: vec![vec!["a".into(), "green".into()]]
            }]
        );
        assert!(page.text.starts_with("Photosynthesis & light Before any heading. Light reactions"), "{}", page.text);
        assert!(!page.text.contains("color") && !page.text.contains("not a heading"), "{}", page.text);
    }

    #[test]
    fn tag_soup_and_broken_json_ld_read_as_far_as_they_go() {
        let page = read(
            "<h2>Open <b>heading</h2><p>text</div></span><ul><li>a<li>b</ul>\
             <script type='application/ld+json'>{broken</script><table><tr><td>cell",
        );
        assert_eq!(page.sections[0].heading.as_deref(), Some("Open heading"));
        assert_eq!(page.sections[0].content, "text");
        assert_eq!(page.lists[0].items, vec!["a".to_owned(), "b".to_owned()], "an item ends where the next starts");
        assert!(page.json_ld.is_empty());
        assert_eq!(page.tables.len(), 1, "an unclosed table ends with the page");
        assert_eq!(page.tables[0].rows, vec![vec!["cell".to_owned()]]);
    }

    #[test]
    fn collections_are_capped() {
        let html: String = (0..80).map(|i| format!("<h3>h{i}</h3><p>t</p><ul><li>i</li></ul>")).collect();
        let page = read(&html);
        assert_eq!((page.sections.len(), page.lists.len()), (MAX_SECTIONS, MAX_LISTS));
        let long = format!("<h1>x</h1><p>{}</p>", "word ".repeat(2000));
        assert_eq!(read(&long).sections[0].content.chars().count(), MAX_SECTION_CHARS);
    }
}
