fn main() {
    let n: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let text = cks_core::json::to_canonical_string(&cks_core::sample::random_graph(n / 2, n - n / 2, 42));
    let request = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "validate_knowledge", "arguments": {"json_data": text}}});
    println!("{request}");
}
