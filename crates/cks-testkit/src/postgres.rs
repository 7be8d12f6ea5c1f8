//! A throw-away PostgreSQL server for tests: `initdb` into a temporary directory, `pg_ctl start` on
//! a free loopback port (and a unix socket in the same directory), stopped and deleted on drop.
//!
//! The server binaries are found on `PATH`, else in the newest `/usr/lib/postgresql/*/bin` (where
//! Debian's `postgresql` package puts them). PostgreSQL refuses to run as root, so when the tests
//! run as root the server runs as the `postgres` user that package creates.
//!
//! `scripts/test` starts one server for the whole run and names it in `CKS_TEST_PG_URL` (an admin
//! URL); [`TestDatabase::create`] then makes a fresh database in it for each test instead of
//! starting a server per test. Tests that stop or restart the server start their own
//! ([`PgServer::start`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};

/// The superuser every test server is made with, and its password (host connections need it;
/// the unix socket trusts).
pub const PG_USER: &str = "cks";
pub const PG_PASSWORD: &str = "cks-test-password";

/// One running test server.
#[derive(Debug)]
pub struct PgServer {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    run_as_postgres: bool,
    running: bool,
}

impl PgServer {
    /// Starts a fresh server. Panics with what to install when PostgreSQL is missing.
    pub fn start() -> PgServer {
        Self::start_with(&[])
    }

    /// Starts a fresh server with extra `postgresql.conf` settings (`("fsync", "off")`…).
    pub fn start_with(settings: &[(&str, &str)]) -> PgServer {
        let bin = server_bin_dir().unwrap_or_else(|| {
            panic!(
                "PostgreSQL's server programs (initdb, pg_ctl) are not installed: install Debian's `postgresql` \
                 package (scripts/test does), or put its bin directory on PATH"
            )
        });
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "cks-pg-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        let run_as_postgres = running_as_root();
        let mut server = PgServer { dir, bin, port: free_port(), run_as_postgres, running: false };
        if run_as_postgres {
            server.give_to_postgres();
        }
        std::fs::write(server.dir.join("pwfile"), PG_PASSWORD).expect("write the password file");
        server.give_to_postgres_if_needed(&server.dir.join("pwfile"));
        let data = server.data_dir();
        server.pg(
            "initdb",
            &[
                "-D",
                path_str(&data),
                "-U",
                PG_USER,
                "--pwfile",
                path_str(&server.dir.join("pwfile")),
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        );
        let mut conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\nmax_connections = 200\n",
            server.port,
            server.dir.display()
        );
        for (key, value) in settings {
            conf.push_str(&format!("{key} = '{value}'\n"));
        }
        let conf_path = data.join("postgresql.auto.conf");
        std::fs::write(&conf_path, conf).expect("write postgresql.auto.conf");
        server.give_to_postgres_if_needed(&conf_path);
        server.start_again();
        server
    }

    /// The admin URL (the superuser, over TCP, on the `postgres` database).
    pub fn admin_url(&self) -> String {
        self.url("postgres")
    }

    /// The URL of database `name` on this server.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{}/{name}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server (fast shutdown: open connections are closed, committed data is kept).
    pub fn stop(&mut self) {
        if self.running {
            self.pg("pg_ctl", &["-D", path_str(&self.data_dir()), "-m", "fast", "-w", "stop"]);
            self.running = false;
        }
    }

    /// Starts the stopped server again on the same port, with the same data.
    pub fn start_again(&mut self) {
        let log = self.dir.join("server.log");
        self.pg("pg_ctl", &["-D", path_str(&self.data_dir()), "-l", path_str(&log), "-w", "-t", "60", "start"]);
        self.running = true;
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Runs one of the server's programs (as `postgres` when we are root); panics with its output
    /// when it fails.
    fn pg(&self, program: &str, args: &[&str]) -> Output {
        let exe = self.bin.join(program);
        let mut command = if self.run_as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        // initdb and pg_ctl resolve relative paths against the working directory, which
        // `postgres` may not be allowed to enter.
        command.args(args).current_dir(&self.dir);
        let output = command.output().unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
        if !output.status.success() {
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            panic!(
                "{program} {args:?} failed: {}\n{}\n{}\nserver log:\n{log}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        output
    }

    fn give_to_postgres(&self) {
        self.give_to_postgres_if_needed(&self.dir);
    }

    fn give_to_postgres_if_needed(&self, path: &Path) {
        if !self.run_as_postgres {
            return;
        }
        let (uid, gid) = postgres_ids().expect("Debian's postgresql package creates the `postgres` user");
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown to postgres");
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if self.running {
            let data = self.data_dir();
            // The data is deleted next: nothing to flush.
            let args = ["-D", path_str(&data), "-m", "immediate", "-w", "stop"];
            let exe = self.bin.join("pg_ctl");
            let _ = if self.run_as_postgres {
                Command::new("runuser").args(["-u", "postgres", "--"]).arg(&exe).args(args).output()
            } else {
                Command::new(&exe).args(args).output()
            };
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh database for one test: in the server named by `CKS_TEST_PG_URL` when it is set, else in
/// a server of its own. Dropped with the test (the database, or the whole server).
#[derive(Debug)]
pub struct TestDatabase {
    url: String,
    admin_url: String,
    name: String,
    _own_server: Option<PgServer>,
}

impl TestDatabase {
    pub fn create() -> TestDatabase {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("cks_test_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let (admin_url, own) = match std::env::var("CKS_TEST_PG_URL") {
            Ok(url) if !url.is_empty() => (url, None),
            _ => {
                let server = PgServer::start_with(&[("fsync", "off")]);
                (server.admin_url(), Some(server))
            }
        };
        psql(&admin_url, &format!("CREATE DATABASE {name}"));
        let url = replace_database(&admin_url, &name);
        TestDatabase { url, admin_url, name, _own_server: own }
    }

    /// The URL of this test's database.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if self._own_server.is_none() {
            psql(&self.admin_url, &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

/// Runs one SQL command with `psql` (the client every PostgreSQL installation has).
pub fn psql(url: &str, sql: &str) -> String {
    let output = Command::new(psql_program())
        .args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql])
        .output()
        .unwrap_or_else(|e| panic!("cannot run psql: {e}"));
    assert!(output.status.success(), "psql {sql:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn psql_program() -> PathBuf {
    server_bin_dir().map(|b| b.join("psql")).filter(|p| p.exists()).unwrap_or_else(|| PathBuf::from("psql"))
}

/// `url` with its database (the path) replaced by `name`.
pub fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let base = match base[after_scheme..].find('/') {
        Some(slash) => &base[..after_scheme + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

/// The directory holding initdb and pg_ctl.
pub fn server_bin_dir() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
                // Debian links initdb into /usr/local/bin on some images; follow it to the
                // directory that has the server too.
                let real = std::fs::canonicalize(dir.join("initdb")).ok()?;
                return real.parent().map(Path::to_path_buf);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("initdb").is_file())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

fn postgres_ids() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let line = passwd.lines().find(|l| l.starts_with("postgres:"))?;
    let mut fields = line.split(':').skip(2);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_names_replace_the_path_only() {
        assert_eq!(replace_database("postgres://u:p@h:5/postgres", "x"), "postgres://u:p@h:5/x");
        assert_eq!(replace_database("postgres://u:p@h:5", "x"), "postgres://u:p@h:5/x");
        assert_eq!(replace_database("postgres://h/db?sslmode=disable", "x"), "postgres://h/x?sslmode=disable");
    }
}
