//! Links the `cks-mcp` command with packed relative relocations where the platform has them
//! (glibc 2.36 and GNU ld 2.38, or lld): a position-independent binary's tens of thousands of
//! relocations are then a few kilobytes the loader reads at start-up instead of most of a megabyte.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
