//! Connecting: the URL, TLS, the pool, the start-up errors that say what to fix, and the
//! connection that listens for other replicas' events.
//!
//! TLS is rustls: `sslmode=prefer` (the default) tries TLS and falls back to plain; `require`
//! insists on TLS and, unlike libpq's `require`, always verifies the server's certificate and host
//! name, so `verify-ca` and `verify-full` are accepted as synonyms of it. Trusted roots are the
//! system's, plus the PEM file named by `sslrootcert` in the URL. A password is never printed: the
//! errors name the user, host, port and database only.

use std::sync::Arc;
use std::time::Duration;

use cks_core::error_chain;
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use futures::StreamExt as _;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use tokio::sync::broadcast;
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, Config};
use tokio_postgres_rustls::MakeRustlsConnect;

use cks_runtime::events::Event;
use cks_runtime::store::StoreError;

use crate::{EVENT_CHANNEL, Published};

/// Pool and timeout settings.
#[derive(Clone, Debug)]
pub struct PostgresOptions {
    /// Most connections this process opens (besides the one that listens for events).
    pub pool_size: usize,
    /// How long to wait for a connection: to open one, or for a free one in the pool.
    pub connect_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions { pool_size: 16, connect_timeout: Duration::from_secs(10) }
    }
}

/// Whether `url` names a PostgreSQL database (`postgres://…` or `postgresql://…`).
pub fn is_postgres_url(url: &str) -> bool {
    let lower = url.trim_start().to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// Why the store could not start.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "not a usable PostgreSQL URL: {0}. The accepted form is \
         postgres://USER:PASSWORD@HOST:PORT/DATABASE[?sslmode=disable|prefer|require&sslrootcert=FILE]"
    )]
    InvalidUrl(String),
    #[error("cannot set up TLS for PostgreSQL: {0}")]
    Tls(String),
    #[error(
        "cannot reach PostgreSQL at {at}: {detail}. Check that the server is running and accepts connections \
         there (host, port, listen_addresses, pg_hba.conf)"
    )]
    Unreachable { at: String, detail: String },
    #[error(
        "PostgreSQL at {at} refused user '{user}': {detail}. Check the user name and password in the URL \
         (and the server's pg_hba.conf)"
    )]
    Authentication { at: String, user: String, detail: String },
    #[error(
        "the database '{database}' does not exist at {at}. Create it first (`createdb {database}`, or \
         CREATE DATABASE {database}) or name an existing one in the URL"
    )]
    DatabaseMissing { at: String, database: String },
    #[error("PostgreSQL at {at} refused the connection: {detail}")]
    Refused { at: String, detail: String },
    #[error("cannot prepare the database schema: {0}")]
    Schema(StoreError),
}

/// A parsed URL with its TLS connector.
#[derive(Clone)]
pub(crate) struct Target {
    config: Config,
    tls: MakeRustlsConnect,
}

impl std::fmt::Debug for Target {
    // Never the config itself: it holds the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").field("at", &self.at()).finish_non_exhaustive()
    }
}

impl Target {
    pub(crate) fn parse(url: &str, options: &PostgresOptions) -> Result<Target, ConnectError> {
        let (url, root_cert) = take_root_cert(url.trim());
        let mut config: Config =
            url.parse().map_err(|e: tokio_postgres::Error| ConnectError::InvalidUrl(e.to_string()))?;
        if config.get_dbname().is_none() {
            return Err(ConnectError::InvalidUrl("it names no database (the path after the host)".into()));
        }
        config.connect_timeout(options.connect_timeout);
        config.application_name("cks-mcp");
        let tls = tls(root_cert.as_deref())?;
        Ok(Target { config, tls })
    }

    pub(crate) fn pool(&self, options: &PostgresOptions) -> Result<Pool, ConnectError> {
        let manager = Manager::from_config(
            self.config.clone(),
            self.tls.clone(),
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| ConnectError::InvalidUrl(e.to_string()))
    }

    /// Where, in words: user@host:port/database (no password).
    fn at(&self) -> String {
        let host = match self.config.get_hosts().first() {
            Some(Host::Tcp(name)) => name.clone(),
            Some(Host::Unix(path)) => path.display().to_string(),
            None => "localhost".into(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        format!("{host}:{port}/{}", self.config.get_dbname().unwrap_or_default())
    }

    /// The start-up error for a failed first connection.
    pub(crate) fn explain(&self, error: PoolError) -> ConnectError {
        let at = self.at();
        let e = match error {
            PoolError::Backend(e) => e,
            PoolError::Timeout(_) => {
                return ConnectError::Unreachable { at, detail: "timed out connecting".into() };
            }
            other => return ConnectError::Unreachable { at, detail: other.to_string() },
        };
        let detail = error_chain(&e);
        match e.code() {
            Some(code)
                if *code == SqlState::INVALID_PASSWORD || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
            {
                let user = self.config.get_user().unwrap_or_default().to_owned();
                ConnectError::Authentication { at, user, detail }
            }
            Some(code) if *code == SqlState::INVALID_CATALOG_NAME => {
                ConnectError::DatabaseMissing { at, database: self.config.get_dbname().unwrap_or_default().to_owned() }
            }
            Some(_) => ConnectError::Refused { at, detail },
            None => ConnectError::Unreachable { at, detail },
        }
    }
}

/// Removes `sslrootcert=FILE` (which the driver does not know) from the URL's query, and maps
/// libpq's verifying modes onto `require` (which verifies here).
fn take_root_cert(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else { return (url.to_owned(), None) };
    let mut root_cert = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sslrootcert", file)) => root_cert = Some(file.to_owned()),
            Some(("sslmode", "verify-ca" | "verify-full")) => kept.push("sslmode=require".to_owned()),
            _ => kept.push(pair.to_owned()),
        }
    }
    let url = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    (url, root_cert)
}

fn tls(root_cert: Option<&str>) -> Result<MakeRustlsConnect, ConnectError> {
    let mut roots = rustls::RootCertStore::empty();
    // The system's roots; unreadable ones are skipped (the rest still verify).
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(file) = root_cert {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
            .and_then(|certs| certs.collect())
            .map_err(|e| ConnectError::Tls(format!("cannot read sslrootcert {file}: {e}")))?;
        if certs.is_empty() {
            return Err(ConnectError::Tls(format!("sslrootcert {file} holds no PEM certificate")));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| ConnectError::Tls(format!("sslrootcert {file}: {e}")))?;
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ConnectError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// How long the listener waits before it tries again after losing its connection.
const RELISTEN_DELAY: Duration = Duration::from_millis(500);

/// Listens for the events other processes publish and hands them to `remote`'s subscribers,
/// reconnecting after any failure, until every store handle is gone.
pub(crate) async fn listen(target: Target, origin: String, remote: broadcast::Sender<Event>) {
    let remote = remote.downgrade();
    let mut failures = 0u32;
    loop {
        if remote.upgrade().is_none() {
            return;
        }
        match target.config.connect(target.tls.clone()).await {
            Ok((client, mut connection)) => {
                let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                let listen = format!("LISTEN {EVENT_CHANNEL}");
                let listening = client.batch_execute(&listen);
                // The connection must be polled for the LISTEN to complete.
                let started = tokio::select! {
                    result = listening => result.map_err(|e| e.to_string()),
                    ended = messages.next() => Err(format!("the connection ended: {ended:?}")),
                };
                match started {
                    Ok(()) => {
                        if failures > 0 {
                            tracing::info!("listening for other replicas' events again");
                        }
                        failures = 0;
                    }
                    Err(e) => tracing::warn!("cannot listen for other replicas' events: {e}"),
                }
                while let Some(message) = messages.next().await {
                    let Ok(AsyncMessage::Notification(notification)) = message else {
                        if let Err(e) = message {
                            tracing::warn!("the connection listening for other replicas' events failed: {e}");
                            break;
                        }
                        continue;
                    };
                    let Some(remote) = remote.upgrade() else { return };
                    match serde_json::from_str::<Published>(notification.payload()) {
                        Ok(published) if published.origin != origin => {
                            for event in published.events {
                                let _ = remote.send(event);
                            }
                        }
                        Ok(_) => {}
                        Err(e) => tracing::debug!("ignoring an event notification that does not parse: {e}"),
                    }
                }
                drop(client);
            }
            Err(e) => {
                if failures == 0 {
                    tracing::warn!("cannot connect to listen for other replicas' events: {}", error_chain(&e));
                }
            }
        }
        failures = failures.saturating_add(1);
        tokio::time::sleep(RELISTEN_DELAY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_recognised_by_scheme() {
        assert!(is_postgres_url("postgres://u@h/db"));
        assert!(is_postgres_url("PostgreSQL://u@h/db"));
        assert!(!is_postgres_url("/var/lib/cks.db"));
        assert!(!is_postgres_url(":memory:"));
    }

    #[test]
    fn the_root_certificate_leaves_the_url_and_verifying_modes_become_require() {
        let (url, cert) = take_root_cert("postgres://u@h/db?sslmode=verify-full&sslrootcert=/ca.pem&connect_timeout=3");
        assert_eq!(url, "postgres://u@h/db?sslmode=require&connect_timeout=3");
        assert_eq!(cert.as_deref(), Some("/ca.pem"));
        assert_eq!(take_root_cert("postgres://u@h/db"), ("postgres://u@h/db".to_owned(), None));
    }

    #[test]
    fn bad_urls_say_what_is_accepted_and_never_echo_the_password() {
        let options = PostgresOptions::default();
        let err = Target::parse("postgres://u:s3cret@h:notaport/db", &options).unwrap_err().to_string();
        assert!(err.contains("postgres://USER:PASSWORD@HOST:PORT/DATABASE"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
        let err = Target::parse("postgres://u:s3cret@h:5432", &options).unwrap_err().to_string();
        assert!(err.contains("names no database"), "{err}");
        let debug = format!("{:?}", Target::parse("postgres://u:s3cret@h:5432/db", &options).unwrap());
        assert!(!debug.contains("s3cret") && debug.contains("h:5432/db"), "{debug}");
    }

    #[test]
    fn an_unreadable_root_certificate_is_a_tls_error() {
        let err = Target::parse("postgres://u@h/db?sslrootcert=/no/such/ca.pem", &PostgresOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot read sslrootcert /no/such/ca.pem"), "{err}");
    }
}
