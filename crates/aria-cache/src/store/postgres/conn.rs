//! Connecting to PostgreSQL: what every aria store kept there shares (this crate's
//! [`PostgresStore`](super::PostgresStore), and the job queue of `aria serve`).
//!
//! A [`PgTarget`] is a parsed connection URL with a 10 s connect timeout and an application
//! name where the URL sets none, optionally confined to a schema of its own (through the
//! connection's `search_path`), and a description for messages that never repeats the
//! password. Connections are plain TCP or a Unix socket without TLS: put the database on
//! loopback or a private network.

use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Config, NoTls, Transaction};

use crate::{CacheError, Result};

/// Where a store's tables live: a connection configuration, its description and the schema.
#[derive(Clone)]
pub struct PgTarget {
    config: Config,
    location: String,
    schema: Option<String>,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTarget")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

/// Whether `schema` is a plain lowercase identifier (a-z, 0-9, `_`, not starting with a digit,
/// at most 63 characters), safe to splice into `CREATE SCHEMA` and `search_path`.
pub fn is_plain_schema(schema: &str) -> bool {
    !schema.is_empty()
        && schema.len() <= 63
        && !schema.starts_with(|c: char| c.is_ascii_digit())
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// `postgres://user@host:port/db` of a configuration, without its password.
pub fn describe(cfg: &Config) -> String {
    let user = cfg.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    let host = match cfg.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = cfg
        .get_ports()
        .first()
        .map(|p| format!(":{p}"))
        .unwrap_or_default();
    let db = cfg.get_dbname().unwrap_or_default();
    format!("postgres://{user}{host}{port}/{db}")
}

impl PgTarget {
    /// Parses `url` (`postgres://user:password@host:port/db`, `postgresql://…`, or a key=value
    /// connection string; `host` may be a Unix socket directory). `application` is the
    /// application name the server shows where the URL names none. With `schema` (checked by
    /// [`is_plain_schema`]) every connection's `search_path` is that schema.
    ///
    /// Errors: [`CacheError::Store`] for a malformed URL (the message never repeats the URL,
    /// which may hold a password), [`CacheError::Invalid`] named `schema` for a schema that is
    /// not a plain identifier.
    pub fn parse(url: &str, application: &str, schema: Option<&str>) -> Result<PgTarget> {
        let mut config: Config = url
            .parse()
            .map_err(|e| CacheError::Store(format!("postgres: invalid connection URL: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if config.get_application_name().is_none() {
            config.application_name(application);
        }
        let mut location = describe(&config);
        if let Some(schema) = schema {
            if !is_plain_schema(schema) {
                return Err(CacheError::Invalid {
                    name: "schema".into(),
                    reason: format!(
                        "`{schema}` is not a plain lowercase identifier (a-z, 0-9, _; at most 63)"
                    ),
                });
            }
            let opts = config.get_options().unwrap_or_default();
            let opts = format!("{opts} -c search_path={schema}");
            config.options(opts.trim_start());
            location = format!("{location} (schema {schema})");
        }
        Ok(PgTarget {
            config,
            location,
            schema: schema.map(str::to_string),
        })
    }

    /// The connection configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// `postgres://user@host:port/db`, with ` (schema s)` when confined to one: for messages.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The schema of its own, if any.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// A new connection; [`CacheError::Store`] saying where when it fails.
    pub fn connect(&self) -> Result<Client> {
        self.config
            .connect(NoTls)
            .map_err(|e| CacheError::Store(format!("{}: cannot connect: {e}", self.location)))
    }

    /// A new connection that `LISTEN`s on `channel` (a plain identifier); read it with
    /// [`wait_notifications`].
    pub fn listen(&self, channel: &str) -> Result<Client> {
        let mut client = self.connect()?;
        client
            .batch_execute(&format!("LISTEN {channel}"))
            .map_err(|e| CacheError::Store(format!("{}: LISTEN {channel}: {e}", self.location)))?;
        Ok(client)
    }

    /// In transaction `t`: takes the transaction-scoped advisory lock `lock` (so that processes
    /// starting together do not race), creates the schema when the target has one, then runs
    /// `ddl` (`CREATE … IF NOT EXISTS` statements).
    pub fn create_tables(
        &self,
        t: &mut Transaction<'_>,
        lock: i64,
        ddl: &str,
    ) -> std::result::Result<(), postgres::Error> {
        t.execute("SELECT pg_advisory_xact_lock($1)", &[&lock])?;
        if let Some(schema) = &self.schema {
            t.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))?;
        }
        t.batch_execute(ddl)
    }

    /// `DROP SCHEMA … CASCADE` of the target's schema (everything in it goes), or `None` when
    /// the target has no schema of its own (nothing a store may drop).
    pub fn drop_schema_sql(&self) -> Option<String> {
        self.schema
            .as_ref()
            .map(|s| format!("DROP SCHEMA IF EXISTS {s} CASCADE"))
    }
}

/// Waits up to `timeout` for a notification on `client` (a [`PgTarget::listen`] connection)
/// and drains every pending one: their payloads, empty on timeout.
pub fn wait_notifications(
    client: &mut Client,
    timeout: Duration,
) -> std::result::Result<Vec<String>, postgres::Error> {
    let mut n = client.notifications();
    let Some(first) = n.timeout_iter(timeout).next()? else {
        return Ok(Vec::new());
    };
    let mut payloads = vec![first.payload().to_string()];
    let mut more = n.iter();
    while let Some(x) = more.next()? {
        payloads.push(x.payload().to_string());
    }
    Ok(payloads)
}
