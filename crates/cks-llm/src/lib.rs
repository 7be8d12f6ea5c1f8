//! LLM client (in progress).
