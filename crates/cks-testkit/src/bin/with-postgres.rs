//! `with-postgres COMMAND [ARGS…]`: runs a command beside a throw-away PostgreSQL server whose
//! admin URL is in `CKS_TEST_PG_URL` (tests make their own databases in it), then stops the
//! server and deletes its data, whatever the command's outcome. Exits with the command's status.

use std::process::{Command, ExitCode};

use cks_testkit::postgres::PgServer;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: with-postgres COMMAND [ARGS…]");
        return ExitCode::from(2);
    };
    // Durability is not under test here (the kill and restart tests start servers of their own),
    // and there are many connections: one pool per test store, two or more replicas per test.
    let server = PgServer::start_with(&[("fsync", "off"), ("synchronous_commit", "off"), ("max_connections", "500")]);
    eprintln!("with-postgres: PostgreSQL on 127.0.0.1:{}", server.port());
    let status = Command::new(&program).args(args).env("CKS_TEST_PG_URL", server.admin_url()).status();
    drop(server);
    match status {
        Ok(status) => ExitCode::from(status.code().map_or(1, |c| c.clamp(0, 255) as u8)),
        Err(e) => {
            eprintln!("with-postgres: cannot run {}: {e}", program.to_string_lossy());
            ExitCode::from(127)
        }
    }
}
