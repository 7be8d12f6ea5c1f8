#!/usr/bin/env python3
"""Extract standalone JSON Schemas for the four chat request bodies and the three embeddings request
bodies from the provider specs.

Run from the workspace root:  python3 crates/cks-llm/tests/data/extract_schemas.py /path/to/provider-specs
The tests only read the generated files in `schemas/`; this script documents how they were made.

For each root schema, every `#/components/schemas/X` reachable from it is copied into `$defs` and the
references are rewritten to `#/$defs/X`. Deliberate changes (all listed in the README beside this file):
- Gemini: every object schema that lists `properties` and no `additionalProperties` gets
  `additionalProperties: false`, because the real API is protobuf-backed and rejects unknown fields
  ("Cannot find field"), which the converted OpenAPI document does not express.
- OpenAI: the message, tool-call and tool-definition schemas (`ChatCompletionRequest*Message*`,
  `ChatCompletionMessageToolCall`, `ChatCompletionTool`, `FunctionObject`) get the same treatment, because the
  API rejects unknown message fields and we want a leaked bookkeeping key to fail validation.
- Ollama: `ChatMessage` gains `tool_name`, `tool_call_id` and `thinking`, and `ToolCall.function` gains
  `index` (all in ollama/ollama api/types.go but missing from docs/openapi.yaml); `ChatMessage`, `ToolCall` and
  `ToolCall.function` become strict so that a leaked bookkeeping key fails validation.
- Embeddings: Gemini's `BatchEmbedContentsRequest` gets the same treatment as its chat request (protobuf);
  Ollama's `EmbedRequest` becomes strict (a misspelt field would be ignored silently by the server);
  OpenAI's `CreateEmbeddingRequest` is already strict.
"""
import json
import re
import sys
from pathlib import Path

import yaml

REF = re.compile(r"^#/components/schemas/(.+)$")


def closure(schemas, root):
    seen, todo = {}, [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        node = schemas[name]
        seen[name] = node

        def walk(v):
            if isinstance(v, dict):
                for k, x in v.items():
                    if k == "$ref" and isinstance(x, str):
                        m = REF.match(x)
                        if m:
                            todo.append(m.group(1))
                    else:
                        walk(x)
            elif isinstance(v, list):
                for x in v:
                    walk(x)

        walk(node)
    return seen


def rewrite(v):
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k == "$ref" and isinstance(x, str) and REF.match(x):
                out[k] = "#/$defs/" + REF.match(x).group(1)
            elif k in ("example", "examples", "x-enum-descriptions", "discriminator"):
                continue  # documentation only; `discriminator` is OpenAPI, not JSON Schema
            else:
                out[k] = rewrite(x)
        return out
    if isinstance(v, list):
        return [rewrite(x) for x in v]
    return v


def strict_objects(v):
    if isinstance(v, dict):
        for x in v.values():
            strict_objects(x)
        if "properties" in v and "additionalProperties" not in v and not any(
            k in v for k in ("allOf", "anyOf", "oneOf")
        ):
            v["additionalProperties"] = False
    elif isinstance(v, list):
        for x in v:
            strict_objects(x)


def build(schemas, root, source, title):
    defs = {k: rewrite(v) for k, v in closure(schemas, root).items()}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        "description": f"Extracted from {source}, schema {root} (see tests/data/README.md)",
        "$ref": f"#/$defs/{root}",
        "$defs": dict(sorted(defs.items())),
    }


def main():
    specs = Path(sys.argv[1])
    out = Path(__file__).parent / "schemas"
    out.mkdir(exist_ok=True)

    anthropic = json.loads((specs / "anthropic-openapi.json").read_text())["components"]["schemas"]
    doc = build(anthropic, "CreateMessageParams", "anthropic-openapi.json", "Anthropic messages request")
    (out / "anthropic_create_message.json").write_text(json.dumps(doc, indent=1) + "\n")

    openai = yaml.safe_load((specs / "openai-openapi.yaml").read_text())["components"]["schemas"]
    doc = build(openai, "CreateChatCompletionRequest", "openai-openapi.yaml", "OpenAI chat completions request")
    for name, node in doc["$defs"].items():
        if name.startswith("ChatCompletionRequest") or name in (
            "ChatCompletionMessageToolCall",
            "ChatCompletionTool",
            "FunctionObject",
        ):
            strict_objects(node)
    (out / "openai_create_chat_completion.json").write_text(json.dumps(doc, indent=1) + "\n")

    gemini = json.loads((specs / "gemini-v1beta-openapi.json").read_text())["components"]["schemas"]
    doc = build(gemini, "GenerateContentRequest", "gemini-v1beta-openapi.json", "Gemini generateContent request")
    strict_objects(doc["$defs"])
    (out / "gemini_generate_content.json").write_text(json.dumps(doc, indent=1) + "\n")

    ollama = yaml.safe_load((specs / "ollama-openapi.yaml").read_text())["components"]["schemas"]
    msg = ollama["ChatMessage"]
    msg["properties"]["tool_name"] = {"type": "string", "description": "added from api/types.go"}
    msg["properties"]["tool_call_id"] = {"type": "string", "description": "added from api/types.go"}
    msg["properties"]["thinking"] = {"type": "string", "description": "added from api/types.go"}
    msg["additionalProperties"] = False
    call = ollama["ToolCall"]
    call["properties"]["id"] = {"type": "string", "description": "added from api/types.go"}
    call["additionalProperties"] = False
    call["properties"]["function"]["properties"]["index"] = {"type": "integer", "description": "added from api/types.go"}
    call["properties"]["function"]["additionalProperties"] = False
    doc = build(ollama, "ChatRequest", "ollama-openapi.yaml", "Ollama chat request")
    doc["$defs"]["ChatRequest"]["additionalProperties"] = False
    (out / "ollama_chat_request.json").write_text(json.dumps(doc, indent=1) + "\n")

    doc = build(openai, "CreateEmbeddingRequest", "openai-openapi.yaml", "OpenAI embeddings request")
    (out / "openai_create_embedding.json").write_text(json.dumps(doc, indent=1) + "\n")

    doc = build(gemini, "BatchEmbedContentsRequest", "gemini-v1beta-openapi.json", "Gemini batchEmbedContents request")
    strict_objects(doc["$defs"])
    (out / "gemini_batch_embed_contents.json").write_text(json.dumps(doc, indent=1) + "\n")

    doc = build(ollama, "EmbedRequest", "ollama-openapi.yaml", "Ollama embed request")
    doc["$defs"]["EmbedRequest"]["additionalProperties"] = False
    (out / "ollama_embed_request.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
