//! The web as the server reads it: every URL a tool or a worker fetches goes through the guarded
//! [`fetch::Fetcher`]; [`html::read`] turns a page into its text, metadata and shape; and
//! [`robots::RobotsCache`] asks a site's robots.txt before a page nobody named is fetched.
//!
//! Invariant: nothing else in the workspace opens an HTTP client for a URL it was given; the LLM
//! client (`cks-llm`) talks only to the configured provider.

pub mod fetch;
pub mod html;
pub mod robots;

pub use fetch::{AddressRange, FetchError, FetchPolicy, Fetched, Fetcher};
