//! The PostgreSQL store: one database shared by several processes (the `postgres` feature).
//!
//! The database is the durable truth; each process keeps its vector index in memory (there is
//! no vector extension to rely on) and follows the others' writes through a change log:
//!
//! - every write is one transaction, which also advances a counter (`cache_meta.version`) and,
//!   for inserts, replacements, embedding updates, removals and clears, appends a row to
//!   `cache_changes` at that version; hits advance the counter only;
//! - the counter row is locked by each write until it commits, so versions are handed out in
//!   commit order: a follower that has read every change up to version `v` never meets a later
//!   commit with a version at or below `v` (a plain sequence would allow exactly that);
//! - each write notifies the channel [`CHANNEL`] with its version on commit, so followers
//!   ([`Listener`]) wake up instead of polling; [`Store::changes_since`] then says what to
//!   reload;
//! - a clear drops the change log and leaves a single `Clear` row, so the log grows with the
//!   entries written, not with the requests served.
//!
//! Writers that update existing rows take the counter first, so two transactions never wait on
//! each other in opposite orders. Connections are plain TCP or a Unix socket, without TLS: put
//! the database on loopback or a private network.
//!
//! Tables (created when absent, under an advisory lock so that workers starting together do not
//! race): `cache_meta`, `cache_entries`, `cache_embeddings`, `cache_state`, `cache_changes`.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use postgres::{Client, Row, Transaction};

use super::{
    decayed_importance, now_ms, Audio, Change, Entry, NewEntry, Store, StoreStats, StoredLatents,
};
use crate::{CacheError, Result};

pub mod conn;

pub use conn::PgTarget;

/// The schema version this code writes.
const SCHEMA_VERSION: i32 = 1;

/// The `LISTEN`/`NOTIFY` channel every write notifies (its payload: the new version).
pub const CHANNEL: &str = "aria_cache";

/// Key of the advisory lock held while the schema is created.
const SCHEMA_LOCK: i64 = 0x6172_6961_6361_6368;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS cache_meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    schema_version INTEGER NOT NULL,
    version BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS cache_entries (
    id BIGSERIAL PRIMARY KEY,
    prompt TEXT NOT NULL,
    negative_prompt TEXT,
    seconds DOUBLE PRECISION NOT NULL,
    origin TEXT NOT NULL,
    steps BIGINT NOT NULL,
    seed BIGINT,
    sample_rate BIGINT,
    channels BIGINT,
    audio BYTEA,
    latent_generator TEXT,
    latent_shape TEXT,
    latents BYTEA,
    quality TEXT NOT NULL,
    importance DOUBLE PRECISION NOT NULL,
    hits BIGINT NOT NULL DEFAULT 0,
    created_ms BIGINT NOT NULL,
    used_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS cache_embeddings (
    entry_id BIGINT NOT NULL REFERENCES cache_entries(id) ON DELETE CASCADE,
    embedder TEXT NOT NULL,
    vector BYTEA NOT NULL,
    PRIMARY KEY (entry_id, embedder)
);
CREATE INDEX IF NOT EXISTS cache_embeddings_by_embedder ON cache_embeddings(embedder, entry_id);
CREATE TABLE IF NOT EXISTS cache_state (
    key TEXT PRIMARY KEY,
    value BYTEA NOT NULL,
    updated_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS cache_counters (
    key TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS cache_changes (
    version BIGINT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('upsert', 'remove', 'clear')),
    entry_id BIGINT
);
";

/// Columns of [`Entry`] without the payload.
const META_COLS: &str = "id, prompt, negative_prompt, seconds, origin, steps, seed, quality, \
                         importance, hits, created_ms, used_ms";

fn err(e: postgres::Error) -> CacheError {
    CacheError::Store(format!("postgres: {e}"))
}

fn f32_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn blob_f32(what: &str, b: &[u8]) -> Result<Vec<f32>> {
    if !b.len().is_multiple_of(4) {
        return Err(CacheError::Store(format!(
            "{what}: blob of {} bytes is not whole f32 values",
            b.len()
        )));
    }
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn parse_quality(id: u64, s: &str) -> Result<BTreeMap<String, f32>> {
    serde_json::from_str(s)
        .map_err(|e| CacheError::Store(format!("quality scores of entry {id}: {e}")))
}

fn quality_text(e: &NewEntry) -> Result<String> {
    serde_json::to_string(&e.quality).map_err(|x| CacheError::Store(format!("quality scores: {x}")))
}

fn check_latents(e: &NewEntry) -> Result<Option<String>> {
    let Some(l) = &e.latents else {
        return Ok(None);
    };
    let n: usize = l.shape.iter().product();
    if n != l.data.len() {
        return Err(CacheError::Invalid {
            name: "latents".into(),
            reason: format!("shape {:?} but {} values", l.shape, l.data.len()),
        });
    }
    Ok(Some(
        l.shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(","),
    ))
}

fn to_i64(name: &str, v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| CacheError::Invalid {
        name: name.into(),
        reason: format!("{v} does not fit a signed 64-bit column"),
    })
}

/// Advances the counter (locking its row until commit) and returns the new version.
fn bump(t: &mut Transaction<'_>) -> std::result::Result<i64, postgres::Error> {
    let v: i64 = t
        .query_one(
            "UPDATE cache_meta SET version = version + 1 WHERE id = 1 RETURNING version",
            &[],
        )?
        .get(0);
    t.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &v.to_string()])?;
    Ok(v)
}

/// Records change `kind` of `entry` at version `v`.
fn log(
    t: &mut Transaction<'_>,
    v: i64,
    kind: &str,
    entry: Option<i64>,
) -> std::result::Result<(), postgres::Error> {
    t.execute(
        "INSERT INTO cache_changes (version, kind, entry_id) VALUES ($1, $2, $3)",
        &[&v, &kind, &entry],
    )?;
    Ok(())
}

/// The PostgreSQL implementation of [`Store`], shared by every process that opens the same
/// database.
pub struct PostgresStore {
    client: Mutex<Client>,
    target: PgTarget,
    location: String,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user:password@host:port/db`, `postgresql://…`, or a
    /// key=value connection string; `host` may be a Unix socket directory) and creates the
    /// tables when absent, where the connection's `search_path` puts them (`public` by
    /// default).
    pub fn open(url: &str) -> Result<PostgresStore> {
        Self::open_with(url, None)
    }

    /// [`PostgresStore::open`] with the tables in schema `schema` (created when absent), so
    /// that several caches share one database. `schema` is a plain identifier (ASCII letters,
    /// digits, `_`; not starting with a digit).
    pub fn open_in_schema(url: &str, schema: &str) -> Result<PostgresStore> {
        Self::open_with(url, Some(schema))
    }

    fn open_with(url: &str, schema: Option<&str>) -> Result<PostgresStore> {
        let target = PgTarget::parse(url, "aria-cache", schema)?;
        let location = target.location().to_string();
        let mut client = target.connect()?;
        let ctx = |e: postgres::Error| CacheError::Store(format!("{location}: schema: {e}"));
        let mut t = client.transaction().map_err(ctx)?;
        target
            .create_tables(&mut t, SCHEMA_LOCK, SCHEMA)
            .map_err(ctx)?;
        t.execute(
            "INSERT INTO cache_meta (id, schema_version, version) VALUES (1, $1, 0) \
             ON CONFLICT (id) DO NOTHING",
            &[&SCHEMA_VERSION],
        )
        .map_err(ctx)?;
        let found: i32 = t
            .query_one("SELECT schema_version FROM cache_meta WHERE id = 1", &[])
            .map_err(ctx)?
            .get(0);
        if found > SCHEMA_VERSION {
            return Err(CacheError::Store(format!(
                "{location}: schema version {found} is newer than this aria's {SCHEMA_VERSION}"
            )));
        }
        t.commit().map_err(ctx)?;
        Ok(PostgresStore {
            client: Mutex::new(client),
            target,
            location,
        })
    }

    /// Drops the schema this store was opened in ([`PostgresStore::open_in_schema`]) with
    /// every table in it, entries and state included. Refused for a store opened without one.
    pub fn drop_schema(self) -> Result<()> {
        let Some(sql) = self.target.drop_schema_sql() else {
            return Err(CacheError::Store(format!(
                "{}: opened without a schema of its own; nothing to drop",
                self.location
            )));
        };
        self.conn()?.batch_execute(&sql).map_err(err)
    }

    /// The connection, reconnecting when the previous one was closed (a server restart).
    fn conn(&self) -> Result<MutexGuard<'_, Client>> {
        let mut c = self.client.lock().map_err(|_| {
            CacheError::Store(format!("{}: connection lock poisoned", self.location))
        })?;
        if c.is_closed() {
            *c = self.target.connect()?;
        }
        Ok(c)
    }

    /// Runs `f` in one transaction (committed when it returns `Ok(Some(_))`, rolled back when
    /// it returns `Ok(None)` — nothing to change — or an error).
    fn tx<T>(
        &self,
        f: impl FnOnce(&mut Transaction<'_>) -> std::result::Result<Option<T>, postgres::Error>,
    ) -> Result<Option<T>> {
        let mut c = self.conn()?;
        let mut t = c.transaction().map_err(err)?;
        match f(&mut t).map_err(err)? {
            Some(v) => {
                t.commit().map_err(err)?;
                Ok(Some(v))
            }
            None => {
                t.rollback().map_err(err)?;
                Ok(None)
            }
        }
    }

    fn meta(r: &Row) -> Result<Entry> {
        let id = r.get::<_, i64>(0) as u64;
        let seed: Option<i64> = r.get(6);
        let quality: String = r.get(7);
        Ok(Entry {
            id,
            data: NewEntry {
                prompt: r.get(1),
                negative_prompt: r.get(2),
                seconds: r.get(3),
                origin: r.get(4),
                steps: r.get::<_, i64>(5) as usize,
                seed: seed.map(|s| s as u64),
                importance: r.get(8),
                quality: parse_quality(id, &quality)?,
                ..Default::default()
            },
            hits: r.get::<_, i64>(9) as u64,
            created_ms: r.get(10),
            used_ms: r.get(11),
        })
    }

    /// The vector of embedder `name` for entry `id` with the entry's duration; `None` when the
    /// entry or that embedding is absent. What a follower reloads for an upsert.
    pub fn embedding(&self, id: u64, name: &str) -> Result<Option<(f64, Vec<f32>)>> {
        let row = self
            .conn()?
            .query_opt(
                "SELECT e.seconds, m.vector FROM cache_entries e JOIN cache_embeddings m \
                 ON m.entry_id = e.id WHERE e.id = $1 AND m.embedder = $2",
                &[&to_i64("entry id", id)?, &name],
            )
            .map_err(err)?;
        row.map(|r| {
            let b: Vec<u8> = r.get(1);
            Ok((
                r.get(0),
                blob_f32(&format!("embedding `{name}` of entry {id}"), &b)?,
            ))
        })
        .transpose()
    }

    /// A [`Listener`] on this store's database.
    pub fn listener(&self) -> Result<Listener> {
        Listener::on(&self.target)
    }
}

fn insert_entry(
    t: &mut Transaction<'_>,
    e: &NewEntry,
    shape: &Option<String>,
    quality: &str,
    now: i64,
) -> std::result::Result<i64, postgres::Error> {
    let audio = e.audio.as_ref();
    let lat = e.latents.as_ref();
    let id: i64 = t
        .query_one(
            "INSERT INTO cache_entries (prompt, negative_prompt, seconds, origin, steps, seed, \
             sample_rate, channels, audio, latent_generator, latent_shape, latents, quality, \
             importance, hits, created_ms, used_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 0, $15, $15) \
             RETURNING id",
            &[
                &e.prompt,
                &e.negative_prompt,
                &e.seconds,
                &e.origin,
                &(e.steps as i64),
                &e.seed.map(|s| s as i64),
                &audio.map(|a| i64::from(a.sample_rate)),
                &audio.map(|a| a.channels as i64),
                &audio.map(|a| f32_blob(&a.samples)),
                &lat.map(|l| l.generator.clone()),
                shape,
                &lat.map(|l| f32_blob(&l.data)),
                &quality,
                &e.importance,
                &now,
            ],
        )?
        .get(0);
    put_embeddings(t, id, e)?;
    Ok(id)
}

fn put_embeddings(
    t: &mut Transaction<'_>,
    id: i64,
    e: &NewEntry,
) -> std::result::Result<(), postgres::Error> {
    let st =
        t.prepare("INSERT INTO cache_embeddings (entry_id, embedder, vector) VALUES ($1, $2, $3)")?;
    for (name, v) in &e.embeddings {
        t.execute(&st, &[&id, name, &f32_blob(v)])?;
    }
    Ok(())
}

impl Store for PostgresStore {
    fn insert(&mut self, e: &NewEntry) -> Result<u64> {
        let quality = quality_text(e)?;
        let shape = check_latents(e)?;
        let now = now_ms();
        // The new rows are invisible to others until commit: the counter is taken last, so
        // the payload upload does not hold it.
        let id = self.tx(|t| {
            let id = insert_entry(t, e, &shape, &quality, now)?;
            let v = bump(t)?;
            log(t, v, "upsert", Some(id))?;
            Ok(Some(id))
        })?;
        id.map(|id| id as u64)
            .ok_or_else(|| CacheError::Store(format!("{}: insert returned no id", self.location)))
    }

    fn get(&self, id: u64) -> Result<Option<Entry>> {
        let sql = format!(
            "SELECT {META_COLS}, sample_rate, channels, audio, latent_generator, latent_shape, \
             latents FROM cache_entries WHERE id = $1"
        );
        let key = to_i64("entry id", id)?;
        let mut c = self.conn()?;
        // One snapshot for the entry and its embeddings.
        let mut t = c
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(err)?;
        let Some(r) = t.query_opt(&sql, &[&key]).map_err(err)? else {
            return Ok(None);
        };
        let mut e = Self::meta(&r)?;
        let (sr, ch, audio): (Option<i64>, Option<i64>, Option<Vec<u8>>) =
            (r.get(12), r.get(13), r.get(14));
        if let (Some(sr), Some(ch), Some(b)) = (sr, ch, audio) {
            let samples = blob_f32(&format!("audio of entry {id}"), &b)?;
            let sr = u32::try_from(sr)
                .map_err(|_| CacheError::Store(format!("audio of entry {id}: sample rate {sr}")))?;
            e.data.audio = Some(Audio::new(samples, ch as usize, sr)?);
        }
        let (gen, shape, lat): (Option<String>, Option<String>, Option<Vec<u8>>) =
            (r.get(15), r.get(16), r.get(17));
        if let (Some(generator), Some(shape), Some(b)) = (gen, shape, lat) {
            let shape = shape
                .split(',')
                .map(|d| d.parse::<usize>())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|x| CacheError::Store(format!("latent shape of entry {id}: {x}")))?;
            let data = blob_f32(&format!("latents of entry {id}"), &b)?;
            e.data.latents = Some(StoredLatents {
                generator,
                shape,
                data,
            });
        }
        for r in t
            .query(
                "SELECT embedder, vector FROM cache_embeddings WHERE entry_id = $1",
                &[&key],
            )
            .map_err(err)?
        {
            let name: String = r.get(0);
            let b: Vec<u8> = r.get(1);
            let v = blob_f32(&format!("embedding `{name}` of entry {id}"), &b)?;
            e.data.embeddings.insert(name, v);
        }
        t.commit().map_err(err)?;
        Ok(Some(e))
    }

    fn list(&self) -> Result<Vec<Entry>> {
        let rows = self
            .conn()?
            .query(
                &format!("SELECT {META_COLS} FROM cache_entries ORDER BY id"),
                &[],
            )
            .map_err(err)?;
        rows.iter().map(Self::meta).collect()
    }

    fn embeddings(&self, name: &str) -> Result<Vec<(u64, Vec<f32>)>> {
        let rows = self
            .conn()?
            .query(
                "SELECT entry_id, vector FROM cache_embeddings WHERE embedder = $1 \
                 ORDER BY entry_id",
                &[&name],
            )
            .map_err(err)?;
        rows.iter()
            .map(|r| {
                let id = r.get::<_, i64>(0) as u64;
                let b: Vec<u8> = r.get(1);
                Ok((
                    id,
                    blob_f32(&format!("embedding `{name}` of entry {id}"), &b)?,
                ))
            })
            .collect()
    }

    fn record_hit(&mut self, id: u64, importance: f64, now_ms: i64) -> Result<()> {
        let key = to_i64("entry id", id)?;
        let done = self.tx(|t| {
            bump(t)?;
            let Some(old) = t.query_opt(
                "SELECT importance, used_ms FROM cache_entries WHERE id = $1 FOR UPDATE",
                &[&key],
            )?
            else {
                return Ok(None);
            };
            // Decayed here, with the same function as every store, rather than in SQL.
            let decayed = decayed_importance(old.get(0), old.get(1), now_ms);
            t.execute(
                "UPDATE cache_entries SET hits = hits + 1, importance = $2, used_ms = $3 \
                 WHERE id = $1",
                &[&key, &(decayed + importance), &now_ms],
            )?;
            Ok(Some(()))
        })?;
        done.ok_or_else(|| CacheError::Store(format!("no entry {id} to record a hit on")))
    }

    fn put_embedding(&mut self, id: u64, name: &str, v: &[f32]) -> Result<()> {
        let key = to_i64("entry id", id)?;
        let done = self.tx(|t| {
            let version = bump(t)?;
            let present = t
                .query_opt("SELECT 1 FROM cache_entries WHERE id = $1", &[&key])?
                .is_some();
            if !present {
                return Ok(None);
            }
            t.execute(
                "INSERT INTO cache_embeddings (entry_id, embedder, vector) VALUES ($1, $2, $3) \
                 ON CONFLICT (entry_id, embedder) DO UPDATE SET vector = EXCLUDED.vector",
                &[&key, &name, &f32_blob(v)],
            )?;
            log(t, version, "upsert", Some(key))?;
            Ok(Some(()))
        })?;
        done.ok_or_else(|| {
            CacheError::Store(format!("no entry {id} to store embedding `{name}` for"))
        })
    }

    fn remove(&mut self, id: u64) -> Result<bool> {
        let key = to_i64("entry id", id)?;
        let done = self.tx(|t| {
            let v = bump(t)?;
            let n = t.execute("DELETE FROM cache_entries WHERE id = $1", &[&key])?;
            if n == 0 {
                return Ok(None);
            }
            log(t, v, "remove", Some(key))?;
            Ok(Some(()))
        })?;
        Ok(done.is_some())
    }

    fn clear(&mut self) -> Result<u64> {
        let n = self.tx(|t| {
            let v = bump(t)?;
            t.execute("DELETE FROM cache_embeddings", &[])?;
            let n = t.execute("DELETE FROM cache_entries", &[])?;
            // Everything before the clear is superseded by it.
            t.execute("DELETE FROM cache_changes", &[])?;
            log(t, v, "clear", None)?;
            Ok(Some(n))
        })?;
        Ok(n.unwrap_or(0))
    }

    fn stats(&self) -> Result<StoreStats> {
        let mut c = self.conn()?;
        let r = c
            .query_one(
                "SELECT COUNT(*), COUNT(audio), COUNT(latents), COALESCE(SUM(hits), 0)::BIGINT, \
                 COALESCE(SUM(COALESCE(octet_length(audio), 0) \
                 + COALESCE(octet_length(latents), 0)), 0)::BIGINT, \
                 COALESCE(SUM(seconds), 0.0)::DOUBLE PRECISION FROM cache_entries",
                &[],
            )
            .map_err(err)?;
        let mut s = StoreStats {
            entries: r.get::<_, i64>(0) as u64,
            with_audio: r.get::<_, i64>(1) as u64,
            with_latents: r.get::<_, i64>(2) as u64,
            hits: r.get::<_, i64>(3) as u64,
            payload_bytes: r.get::<_, i64>(4) as u64,
            seconds: r.get(5),
            embedders: Vec::new(),
        };
        for r in c
            .query(
                "SELECT embedder, COUNT(*) FROM cache_embeddings GROUP BY embedder ORDER BY 1",
                &[],
            )
            .map_err(err)?
        {
            s.embedders.push((r.get(0), r.get::<_, i64>(1) as u64));
        }
        Ok(s)
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn put_state(&mut self, key: &str, bytes: &[u8]) -> Result<()> {
        let now = now_ms();
        self.tx(|t| {
            t.execute(
                "INSERT INTO cache_state (key, value, updated_ms) VALUES ($1, $2, $3) \
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, \
                 updated_ms = EXCLUDED.updated_ms",
                &[&key, &bytes, &now],
            )?;
            Ok(Some(()))
        })?;
        Ok(())
    }

    fn add_counters(&mut self, deltas: &[(&str, u64)]) -> Result<()> {
        let deltas = super::counter_deltas(deltas);
        if deltas.is_empty() {
            return Ok(());
        }
        self.tx(|t| {
            for (k, d) in &deltas {
                t.execute(
                    "INSERT INTO cache_counters (key, value) VALUES ($1, $2) \
                     ON CONFLICT (key) DO UPDATE SET value = cache_counters.value + EXCLUDED.value",
                    &[k, d],
                )?;
            }
            Ok(Some(()))
        })?;
        Ok(())
    }

    fn counters(&self) -> Result<std::collections::BTreeMap<String, u64>> {
        let rows = self
            .conn()?
            .query("SELECT key, value FROM cache_counters ORDER BY key", &[])
            .map_err(err)?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1).max(0) as u64))
            .collect())
    }

    fn get_state(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let row = self
            .conn()?
            .query_opt("SELECT value FROM cache_state WHERE key = $1", &[&key])
            .map_err(err)?;
        Ok(row.map(|r| r.get(0)))
    }

    fn replace(&mut self, id: u64, e: &NewEntry) -> Result<bool> {
        let key = to_i64("entry id", id)?;
        let quality = quality_text(e)?;
        let shape = check_latents(e)?;
        let audio = e.audio.as_ref();
        let lat = e.latents.as_ref();
        let done = self.tx(|t| {
            let v = bump(t)?;
            let n = t.execute(
                "UPDATE cache_entries SET prompt = $2, negative_prompt = $3, seconds = $4, \
                 origin = $5, steps = $6, seed = $7, sample_rate = $8, channels = $9, \
                 audio = $10, latent_generator = $11, latent_shape = $12, latents = $13, \
                 quality = $14 WHERE id = $1",
                &[
                    &key,
                    &e.prompt,
                    &e.negative_prompt,
                    &e.seconds,
                    &e.origin,
                    &(e.steps as i64),
                    &e.seed.map(|s| s as i64),
                    &audio.map(|a| i64::from(a.sample_rate)),
                    &audio.map(|a| a.channels as i64),
                    &audio.map(|a| f32_blob(&a.samples)),
                    &lat.map(|l| l.generator.clone()),
                    &shape,
                    &lat.map(|l| f32_blob(&l.data)),
                    &quality,
                ],
            )?;
            if n == 0 {
                return Ok(None);
            }
            t.execute("DELETE FROM cache_embeddings WHERE entry_id = $1", &[&key])?;
            put_embeddings(t, key, e)?;
            log(t, v, "upsert", Some(key))?;
            Ok(Some(()))
        })?;
        Ok(done.is_some())
    }

    fn version(&self) -> Result<u64> {
        let v: i64 = self
            .conn()?
            .query_one("SELECT version FROM cache_meta WHERE id = 1", &[])
            .map_err(err)?
            .get(0);
        Ok(v as u64)
    }

    fn changes_since(&self, since: u64) -> Result<(u64, Vec<Change>)> {
        let mut c = self.conn()?;
        // Versions are handed out in commit order, so every change up to `v` is visible once
        // `v` is.
        let v: i64 = c
            .query_one("SELECT version FROM cache_meta WHERE id = 1", &[])
            .map_err(err)?
            .get(0);
        let v = v as u64;
        if since > v {
            // A follower of another database (or of one that was recreated): start over.
            let ids = c
                .query("SELECT id FROM cache_entries ORDER BY id", &[])
                .map_err(err)?;
            let mut out = vec![Change::Clear];
            out.extend(
                ids.iter()
                    .map(|r| Change::Upsert(r.get::<_, i64>(0) as u64)),
            );
            return Ok((v, out));
        }
        let rows = c
            .query(
                "SELECT version, kind, entry_id FROM cache_changes \
                 WHERE version > $1 AND version <= $2 ORDER BY version",
                &[&(since as i64), &(v as i64)],
            )
            .map_err(err)?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let kind: &str = r.get(1);
            let id: Option<i64> = r.get(2);
            let change = match (kind, id) {
                ("upsert", Some(id)) => Change::Upsert(id as u64),
                ("remove", Some(id)) => Change::Remove(id as u64),
                ("clear", _) => Change::Clear,
                _ => {
                    let version: i64 = r.get(0);
                    return Err(CacheError::Store(format!(
                        "{}: change {version} is malformed (`{kind}` of {id:?})",
                        self.location
                    )));
                }
            };
            out.push(change);
        }
        Ok((v, out))
    }
}

/// A connection that `LISTEN`s on [`CHANNEL`]: [`Listener::wait`] returns when another
/// process (or this one) has committed a change.
pub struct Listener {
    client: Client,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").finish_non_exhaustive()
    }
}

impl Listener {
    /// Connects to `url` and listens.
    pub fn connect(url: &str) -> Result<Listener> {
        Self::on(&PgTarget::parse(url, "aria-cache", None)?)
    }

    fn on(target: &PgTarget) -> Result<Listener> {
        Ok(Listener {
            client: target.listen(CHANNEL)?,
        })
    }

    /// Waits up to `timeout` for a notification; returns the highest version announced
    /// (draining every pending one), or `None` on timeout.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<u64>> {
        let payloads = conn::wait_notifications(&mut self.client, timeout).map_err(err)?;
        Ok(payloads.iter().map(|p| p.parse::<u64>().unwrap_or(0)).max())
    }
}
