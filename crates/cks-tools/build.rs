//! Embeds the committed tool schemas (`schemas/tools.json`, which the tests hold equal to every
//! standard tool's derived schemas) as one minified JSON text per schema. The registry parses a
//! tool's schemas the first time they are asked for, instead of deriving every tool's schemas at
//! start-up: deriving ran most of the code a server touches before its first answer.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

fn main() {
    println!("cargo::rerun-if-changed=schemas/tools.json");
    let text = std::fs::read_to_string("schemas/tools.json").expect("reading schemas/tools.json");
    let tools: Vec<Value> = serde_json::from_str(&text).expect("schemas/tools.json is a JSON array");
    let minified = |schema: &Value| serde_json::to_string(schema).expect("a JSON value serializes");
    let mut out = String::from("static PUBLISHED: &[Published] = &[\n");
    for tool in &tools {
        let name = tool["name"].as_str().expect("every entry of schemas/tools.json has a name");
        let input = minified(&tool["inputSchema"]);
        let output = match &tool["outputSchema"] {
            Value::Null => "None".to_owned(),
            schema => format!("Some({:?})", minified(schema)),
        };
        writeln!(out, "    Published {{ name: {name:?}, input: {input:?}, output: {output} }},").expect("writing");
    }
    out.push_str("];\n");
    let dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(Path::new(&dir).join("published.rs"), out).expect("writing published.rs");
}
