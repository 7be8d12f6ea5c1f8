//! Encodes texts with a local transformer model and prints how long it took: a quick check
//! of a model directory. `cargo run --release -p cks-embed --example encode -- DIR [TEXT...]`.

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("a model directory");
    let texts: Vec<String> = args.collect();
    let model = cks_embed::Transformer::check(std::path::Path::new(&dir)).expect("a model");
    let started = Instant::now();
    model.load().expect("its weights");
    eprintln!("loaded in {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
    for text in &texts {
        let started = Instant::now();
        let vector = model.encode(&[text]).expect("a vector");
        let first = started.elapsed();
        let started = Instant::now();
        for _ in 0..20 {
            model.encode(&[text]).expect("a vector");
        }
        let each = started.elapsed() / 20;
        println!(
            "{text:?}: {:?}… first {:.2} ms, then {:.2} ms",
            &vector[0][..4],
            first.as_secs_f64() * 1e3,
            each.as_secs_f64() * 1e3
        );
    }
}
