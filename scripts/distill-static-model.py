#!/usr/bin/env python3
"""Distils a static embedding model (the server's `cks-static` format) from a BERT-family
sentence encoder given as `model.safetensors` + `vocab.txt` (all-MiniLM-L6-v2 by default).

Every vocabulary token except [PAD] and [unused*] is run through the encoder alone, as
`[CLS] token [SEP]`, and the three output positions are averaged: that is the token's row.
The rows are projected on their top `--dims` singular vectors (uncentred: subtracting the mean
lost recall), then each is weighted by a / (a + p), p the token's Zipf probability from its
vocabulary rank (BERT's vocabulary is ordered roughly by frequency), so common words weigh
little. A text's vector is then the mean of its tokens' rows.

Usage: distill-static-model.py SOURCE_DIR OUT_DIR [--dims 256] [--sif 1e-4] [--name NAME]
Needs numpy and safetensors. Writes model.json, vocab.txt and table.f32 into OUT_DIR.
"""

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np
from safetensors.numpy import load_file

HEADS = 12
BATCH = 2048


def erf(x):
    """Abramowitz and Stegun 7.1.26 (absolute error under 1.5e-7): numpy has no erf."""
    sign = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-x * x))


def layer_norm(x, gain, bias, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gain + bias


class Encoder:
    """BERT's forward pass over equal-length sequences without padding."""

    def __init__(self, weights):
        w = {k[5:] if k.startswith("bert.") else k: v.astype(np.float32) for k, v in weights.items()}
        self.w = w
        self.layers = []
        count = 1 + max(int(k.split(".")[2]) for k in w if k.startswith("encoder.layer."))
        for i in range(count):
            g = lambda name: w[f"encoder.layer.{i}.{name}"]
            self.layers.append(
                dict(
                    qkv_w=np.concatenate(
                        [g("attention.self.query.weight"), g("attention.self.key.weight"), g("attention.self.value.weight")]
                    ).T.copy(),
                    qkv_b=np.concatenate(
                        [g("attention.self.query.bias"), g("attention.self.key.bias"), g("attention.self.value.bias")]
                    ),
                    out_w=g("attention.output.dense.weight").T.copy(),
                    out_b=g("attention.output.dense.bias"),
                    ln1=(g("attention.output.LayerNorm.weight"), g("attention.output.LayerNorm.bias")),
                    up_w=g("intermediate.dense.weight").T.copy(),
                    up_b=g("intermediate.dense.bias"),
                    down_w=g("output.dense.weight").T.copy(),
                    down_b=g("output.dense.bias"),
                    ln2=(g("output.LayerNorm.weight"), g("output.LayerNorm.bias")),
                )
            )

    def forward(self, ids):
        w = self.w
        batch, length = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None]
            + w["embeddings.token_type_embeddings.weight"][0][None, None]
        )
        hidden = x.shape[-1]
        # Every position as one row: each dense layer is then one large matrix product (numpy
        # would otherwise loop over the batch's small ones).
        x = layer_norm(x.reshape(batch * length, hidden), w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        per_head = hidden // HEADS
        for layer in self.layers:
            qkv = (x @ layer["qkv_w"] + layer["qkv_b"]).reshape(batch, length, 3, HEADS, per_head)
            q, k, v = qkv.transpose(2, 0, 3, 1, 4)
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(per_head)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            attended = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
            x = layer_norm(attended @ layer["out_w"] + layer["out_b"] + x, *layer["ln1"])
            up = x @ layer["up_w"] + layer["up_b"]
            up = 0.5 * up * (1.0 + erf(up / np.sqrt(2.0)))
            x = layer_norm(up @ layer["down_w"] + layer["down_b"] + x, *layer["ln2"])
        return x.reshape(batch, length, hidden)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("out")
    parser.add_argument("--dims", type=int, default=256)
    parser.add_argument("--sif", type=float, default=1e-4)
    parser.add_argument("--name", default="minilm-l6-static-256")
    parser.add_argument("--origin", default="sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0)")
    args = parser.parse_args()

    started = time.time()
    vocab = open(os.path.join(args.source, "vocab.txt"), encoding="utf-8").read().splitlines()
    encoder = Encoder(load_file(os.path.join(args.source, "model.safetensors")))
    cls_id, sep_id = vocab.index("[CLS]"), vocab.index("[SEP]")
    kept = np.array([not (t.startswith("[unused") or t == "[PAD]") for t in vocab])
    ids = np.nonzero(kept)[0]
    hidden = encoder.w["embeddings.word_embeddings.weight"].shape[1]
    rows = np.zeros((len(vocab), hidden), np.float32)
    for start in range(0, len(ids), BATCH):
        chunk = ids[start : start + BATCH]
        sequences = np.stack([np.full(len(chunk), cls_id), chunk, np.full(len(chunk), sep_id)], 1)
        rows[chunk] = encoder.forward(sequences).mean(1)
        print(f"distill: {min(start + BATCH, len(ids))}/{len(ids)} tokens", file=sys.stderr, flush=True)

    # Uncentred PCA: the top right singular vectors of the kept rows.
    kept_rows = rows[kept].astype(np.float64)
    _, _, components = np.linalg.svd(kept_rows, full_matrices=False)
    projected = kept_rows @ components[: args.dims].T
    rank = np.arange(len(vocab))
    zipf = 1.0 / (rank + 2)
    zipf /= zipf.sum()
    weights = args.sif / (args.sif + zipf)
    table = np.zeros((len(vocab), args.dims), np.float32)
    table[kept] = projected * weights[kept][:, None]

    os.makedirs(args.out, exist_ok=True)
    table.astype("<f4").tofile(os.path.join(args.out, "table.f32"))
    shutil.copyfile(os.path.join(args.source, "vocab.txt"), os.path.join(args.out, "vocab.txt"))
    manifest = {
        "format": "cks-static",
        "name": args.name,
        "dims": args.dims,
        "distilled_from": args.origin,
        "distillation": {"pooling": "mean of [CLS] token [SEP]", "pca": "uncentred", "sif": args.sif},
    }
    with open(os.path.join(args.out, "model.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    print(f"distill: {args.out} written in {time.time() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
