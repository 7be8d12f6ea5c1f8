//! The PostgreSQL the benchmarks run on: a server given by its admin URL, or a throw-away one
//! started here (Debian's `postgresql`, durable settings: every commit reaches the disk) and
//! removed at the end. Each measurement gets a database of its own, as it gets a data directory.

use cks_testkit::postgres::{PgServer, psql, replace_database};

/// Where fresh databases are created.
pub(crate) struct Postgres {
    admin_url: String,
    _own_server: Option<PgServer>,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The admin URL holds a password.
        f.debug_struct("Postgres").field("own_server", &self._own_server.is_some()).finish_non_exhaustive()
    }
}

impl Postgres {
    /// `admin_url` names a server to use (its user may create databases); without one, a
    /// throw-away server is started.
    pub(crate) fn new(admin_url: Option<&str>) -> Postgres {
        match admin_url {
            Some(url) => Postgres { admin_url: url.to_owned(), _own_server: None },
            None => {
                eprintln!("cks-bench: starting a throw-away PostgreSQL");
                let server = PgServer::start();
                Postgres { admin_url: server.admin_url(), _own_server: Some(server) }
            }
        }
    }

    /// The URL of a new, empty database named after `label` (replaced when it exists).
    pub(crate) fn fresh_database(&self, label: &str) -> String {
        let name: String = format!("cks_bench_{label}")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
            .collect();
        psql(&self.admin_url, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        psql(&self.admin_url, &format!("CREATE DATABASE {name}"));
        replace_database(&self.admin_url, &name)
    }

    /// The bytes the database at `url` takes on disk (0 when it cannot be read).
    pub(crate) fn database_size(&self, url: &str) -> u64 {
        psql(url, "SELECT pg_database_size(current_database())").parse().unwrap_or(0)
    }
}
