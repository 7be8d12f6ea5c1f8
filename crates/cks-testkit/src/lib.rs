//! Test support (in progress).
