//! The `cks-mcp` command.

fn main() -> anyhow::Result<()> {
    cks_mcp::run()
}
