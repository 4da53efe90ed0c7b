//! The SQLite store: one file, WAL journal, foreign keys, every write in a transaction.
//!
//! Durability: `journal_mode=WAL` with `synchronous=NORMAL`. A write returns after its commit
//! record is in the WAL file (in the OS page cache), so a committed write survives the process
//! being killed at any point (the crash test kills a writer with SIGKILL and checks exactly
//! that); only an operating-system crash or power loss can roll back the last commits, never
//! leaving a half-written entry. [`SqliteStore::set_synchronous_full`] makes every commit
//! `fsync` the WAL as well, for durability against power loss.
//!
//! Schema versions (`PRAGMA user_version`): 1 entries and embeddings; 2 adds the `state` table
//! of named blobs. Opening an older file migrates it in place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::{decayed_importance, now_ms, Audio, Entry, NewEntry, Store, StoreStats, StoredLatents};
use crate::{CacheError, Result};

const SCHEMA_VERSION: i64 = 2;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    prompt TEXT NOT NULL,
    negative_prompt TEXT,
    seconds REAL NOT NULL,
    origin TEXT NOT NULL,
    steps INTEGER NOT NULL,
    seed INTEGER,
    sample_rate INTEGER,
    channels INTEGER,
    audio BLOB,
    latent_generator TEXT,
    latent_shape TEXT,
    latents BLOB,
    quality TEXT NOT NULL,
    importance REAL NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL,
    used_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS embeddings (
    entry_id INTEGER NOT NULL REFERENCES entries(id) ON DELETE CASCADE,
    embedder TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (entry_id, embedder)
);
CREATE INDEX IF NOT EXISTS embeddings_by_embedder ON embeddings(embedder, entry_id);
CREATE TABLE IF NOT EXISTS state (
    key TEXT PRIMARY KEY,
    bytes BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
";

/// Columns of [`Entry`] without the payload.
const META_COLS: &str = "id, prompt, negative_prompt, seconds, origin, steps, seed, quality, \
                         importance, hits, created_ms, used_ms";

fn err(e: rusqlite::Error) -> CacheError {
    CacheError::Store(e.to_string())
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

/// The SQLite implementation of [`Store`].
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
}

impl SqliteStore {
    /// Opens (creating as needed, with its folder) the database at `path`, in WAL mode.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| CacheError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let conn = Connection::open(&path)
            .map_err(|e| CacheError::Store(format!("{}: {e}", path.display())))?;
        // Wait for other connections' locks (several processes and threads open one store at
        // once) from the first statement on: switching to WAL takes an exclusive lock.
        conn.busy_timeout(std::time::Duration::from_millis(5000))
            .map_err(err)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(CacheError::Store(format!(
                "{}: could not switch to WAL mode (journal mode `{mode}`)",
                path.display()
            )));
        }
        conn.execute_batch(
            "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA busy_timeout=5000;",
        )
        .map_err(err)?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(err)?;
        if version > SCHEMA_VERSION {
            return Err(CacheError::Store(format!(
                "{}: schema version {version} is newer than this aria's {SCHEMA_VERSION}",
                path.display()
            )));
        }
        let mut s = SqliteStore { conn, path };
        s.tx(|c| {
            c.execute_batch(SCHEMA)?;
            c.execute_batch(&format!("PRAGMA user_version={SCHEMA_VERSION}"))
        })?;
        Ok(s)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes every commit also `fsync` the WAL (`synchronous=FULL`): durable against power loss,
    /// at the cost of one sync per write.
    pub fn set_synchronous_full(&mut self) -> Result<()> {
        self.conn
            .execute_batch("PRAGMA synchronous=FULL")
            .map_err(err)
    }

    /// The journal mode SQLite reports (`wal`).
    pub fn journal_mode(&self) -> Result<String> {
        self.conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .map_err(err)
    }

    /// Runs `f` in one transaction (committed when it succeeds, rolled back otherwise).
    fn tx<T>(&mut self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        // Every transaction here writes: take the write lock when it begins (waiting for it
        // under the busy timeout) rather than upgrading a read lock later, which SQLite refuses
        // at once with "database is locked" when another writer holds it.
        let t = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        let v = f(&t).map_err(err)?;
        t.commit().map_err(err)?;
        Ok(v)
    }

    fn meta(r: &Row<'_>) -> rusqlite::Result<(Entry, String)> {
        let seed: Option<i64> = r.get(6)?;
        let e = Entry {
            id: r.get::<_, i64>(0)? as u64,
            data: NewEntry {
                prompt: r.get(1)?,
                negative_prompt: r.get(2)?,
                seconds: r.get(3)?,
                origin: r.get(4)?,
                steps: r.get::<_, i64>(5)? as usize,
                seed: seed.map(|s| s as u64),
                importance: r.get(8)?,
                ..Default::default()
            },
            hits: r.get::<_, i64>(9)? as u64,
            created_ms: r.get(10)?,
            used_ms: r.get(11)?,
        };
        Ok((e, r.get(7)?))
    }

    fn embeddings_of(&self, id: u64) -> Result<BTreeMap<String, Vec<f32>>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT embedder, vector FROM embeddings WHERE entry_id = ?1")
            .map_err(err)?;
        let rows = st
            .query_map([id as i64], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(err)?;
        let mut out = BTreeMap::new();
        for row in rows {
            let (name, b) = row.map_err(err)?;
            let v = blob_f32(&format!("embedding `{name}` of entry {id}"), &b)?;
            out.insert(name, v);
        }
        Ok(out)
    }
}

/// The quality scores as JSON and the latent shape as text, after checking the latents.
fn encode_meta(e: &NewEntry) -> Result<(String, Option<String>)> {
    let quality = serde_json::to_string(&e.quality)
        .map_err(|x| CacheError::Store(format!("quality scores: {x}")))?;
    if let Some(l) = &e.latents {
        let n: usize = l.shape.iter().product();
        if n != l.data.len() {
            return Err(CacheError::Invalid {
                name: "latents".into(),
                reason: format!("shape {:?} but {} values", l.shape, l.data.len()),
            });
        }
    }
    let shape = e.latents.as_ref().map(|l| {
        l.shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(",")
    });
    Ok((quality, shape))
}

fn insert_embeddings(c: &Connection, id: i64, e: &NewEntry) -> rusqlite::Result<()> {
    let mut st = c.prepare_cached(
        "INSERT INTO embeddings (entry_id, embedder, vector) VALUES (?1, ?2, ?3)",
    )?;
    for (name, v) in &e.embeddings {
        st.execute(params![id, name, f32_blob(v)])?;
    }
    Ok(())
}

fn parse_quality(id: u64, s: &str) -> Result<BTreeMap<String, f32>> {
    serde_json::from_str(s)
        .map_err(|e| CacheError::Store(format!("quality scores of entry {id}: {e}")))
}

impl Store for SqliteStore {
    fn insert(&mut self, e: &NewEntry) -> Result<u64> {
        let (quality, shape) = encode_meta(e)?;
        let now = now_ms();
        self.tx(|c| {
            c.execute(
                "INSERT INTO entries (prompt, negative_prompt, seconds, origin, steps, seed, \
                 sample_rate, channels, audio, latent_generator, latent_shape, latents, quality, \
                 importance, hits, created_ms, used_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, 0, ?15, ?15)",
                params![
                    e.prompt,
                    e.negative_prompt,
                    e.seconds,
                    e.origin,
                    e.steps as i64,
                    e.seed.map(|s| s as i64),
                    e.audio.as_ref().map(|a| i64::from(a.sample_rate)),
                    e.audio.as_ref().map(|a| a.channels as i64),
                    e.audio.as_ref().map(|a| f32_blob(&a.samples)),
                    e.latents.as_ref().map(|l| l.generator.clone()),
                    shape,
                    e.latents.as_ref().map(|l| f32_blob(&l.data)),
                    quality,
                    e.importance,
                    now,
                ],
            )?;
            let id = c.last_insert_rowid();
            insert_embeddings(c, id, e)?;
            Ok(id as u64)
        })
    }

    fn get(&self, id: u64) -> Result<Option<Entry>> {
        let sql = format!(
            "SELECT {META_COLS}, sample_rate, channels, audio, latent_generator, latent_shape, \
             latents FROM entries WHERE id = ?1"
        );
        type Payload = (
            Option<i64>,
            Option<i64>,
            Option<Vec<u8>>,
            Option<String>,
            Option<String>,
            Option<Vec<u8>>,
        );
        let row = self
            .conn
            .query_row(&sql, [id as i64], |r| {
                let payload: Payload = (
                    r.get(12)?,
                    r.get(13)?,
                    r.get(14)?,
                    r.get(15)?,
                    r.get(16)?,
                    r.get(17)?,
                );
                Ok((Self::meta(r)?, payload))
            })
            .optional()
            .map_err(err)?;
        let Some(((mut e, q), (sr, ch, audio, gen, shape, lat))) = row else {
            return Ok(None);
        };
        e.data.quality = parse_quality(id, &q)?;
        if let (Some(sr), Some(ch), Some(b)) = (sr, ch, audio) {
            let samples = blob_f32(&format!("audio of entry {id}"), &b)?;
            e.data.audio = Some(Audio::new(samples, ch as usize, sr as u32)?);
        }
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
        e.data.embeddings = self.embeddings_of(id)?;
        Ok(Some(e))
    }

    fn list(&self) -> Result<Vec<Entry>> {
        let mut st = self
            .conn
            .prepare(&format!("SELECT {META_COLS} FROM entries ORDER BY id"))
            .map_err(err)?;
        let rows = st.query_map([], Self::meta).map_err(err)?;
        let mut out = Vec::new();
        for r in rows {
            let (mut e, q) = r.map_err(err)?;
            e.data.quality = parse_quality(e.id, &q)?;
            out.push(e);
        }
        Ok(out)
    }

    fn embeddings(&self, name: &str) -> Result<Vec<(u64, Vec<f32>)>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT entry_id, vector FROM embeddings WHERE embedder = ?1 ORDER BY entry_id",
            )
            .map_err(err)?;
        let rows = st
            .query_map([name], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(err)?;
        let mut out = Vec::new();
        for r in rows {
            let (id, b) = r.map_err(err)?;
            out.push((
                id,
                blob_f32(&format!("embedding `{name}` of entry {id}"), &b)?,
            ));
        }
        Ok(out)
    }

    fn record_hit(&mut self, id: u64, importance: f64, now_ms: i64) -> Result<()> {
        let n = self.tx(|c| {
            let old: Option<(f64, i64)> = c
                .query_row(
                    "SELECT importance, used_ms FROM entries WHERE id = ?1",
                    [id as i64],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let Some((old, since)) = old else {
                return Ok(0);
            };
            let new = decayed_importance(old, since, now_ms) + importance;
            c.execute(
                "UPDATE entries SET hits = hits + 1, importance = ?2, used_ms = ?3 WHERE id = ?1",
                params![id as i64, new, now_ms],
            )
        })?;
        if n == 0 {
            return Err(CacheError::Store(format!(
                "no entry {id} to record a hit on"
            )));
        }
        Ok(())
    }

    fn put_embedding(&mut self, id: u64, name: &str, v: &[f32]) -> Result<()> {
        self.tx(|c| {
            c.execute(
                "INSERT OR REPLACE INTO embeddings (entry_id, embedder, vector) \
                 VALUES (?1, ?2, ?3)",
                params![id as i64, name, f32_blob(v)],
            )
        })
        .map(|_| ())
    }

    fn remove(&mut self, id: u64) -> Result<bool> {
        let n = self.tx(|c| c.execute("DELETE FROM entries WHERE id = ?1", [id as i64]))?;
        Ok(n > 0)
    }

    fn clear(&mut self) -> Result<u64> {
        let n = self.tx(|c| {
            c.execute("DELETE FROM embeddings", [])?;
            c.execute("DELETE FROM entries", [])
        })?;
        Ok(n as u64)
    }

    fn stats(&self) -> Result<StoreStats> {
        let mut s = self
            .conn
            .query_row(
                "SELECT COUNT(*), COUNT(audio), COUNT(latents), COALESCE(SUM(hits), 0), \
                 COALESCE(SUM(COALESCE(LENGTH(audio), 0) + COALESCE(LENGTH(latents), 0)), 0), \
                 COALESCE(SUM(seconds), 0.0) FROM entries",
                [],
                |r| {
                    Ok(StoreStats {
                        entries: r.get::<_, i64>(0)? as u64,
                        with_audio: r.get::<_, i64>(1)? as u64,
                        with_latents: r.get::<_, i64>(2)? as u64,
                        hits: r.get::<_, i64>(3)? as u64,
                        payload_bytes: r.get::<_, i64>(4)? as u64,
                        seconds: r.get(5)?,
                        embedders: Vec::new(),
                    })
                },
            )
            .map_err(err)?;
        let mut st = self
            .conn
            .prepare("SELECT embedder, COUNT(*) FROM embeddings GROUP BY embedder ORDER BY 1")
            .map_err(err)?;
        let rows = st
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
            })
            .map_err(err)?;
        for r in rows {
            s.embedders.push(r.map_err(err)?);
        }
        Ok(s)
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn payload_sizes(&self) -> Result<Vec<(u64, u64)>> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, COALESCE(LENGTH(audio), 0) + COALESCE(LENGTH(latents), 0) \
                 FROM entries ORDER BY id",
            )
            .map_err(err)?;
        let rows = st
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
            })
            .map_err(err)?;
        rows.map(|r| r.map_err(err)).collect()
    }

    fn put_state(&mut self, key: &str, bytes: &[u8]) -> Result<()> {
        self.tx(|c| {
            c.execute(
                "INSERT INTO state (key, bytes) VALUES (?1, ?2) \
                 ON CONFLICT(key) DO UPDATE SET bytes = excluded.bytes",
                params![key, bytes],
            )
        })
        .map(|_| ())
    }

    fn add_counters(&mut self, deltas: &[(&str, u64)]) -> Result<()> {
        let deltas = super::counter_deltas(deltas);
        if deltas.is_empty() {
            return Ok(());
        }
        self.tx(|c| {
            for (k, d) in &deltas {
                c.execute(
                    "INSERT INTO counters (key, value) VALUES (?1, ?2) \
                     ON CONFLICT(key) DO UPDATE SET value = value + excluded.value",
                    params![k, d],
                )?;
            }
            Ok(())
        })
    }

    fn counters(&self) -> Result<std::collections::BTreeMap<String, u64>> {
        let mut st = self
            .conn
            .prepare("SELECT key, value FROM counters ORDER BY key")
            .map_err(err)?;
        let rows = st
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(err)?;
        let mut out = std::collections::BTreeMap::new();
        for r in rows {
            let (k, v) = r.map_err(err)?;
            out.insert(k, v.max(0) as u64);
        }
        Ok(out)
    }

    fn get_state(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.conn
            .query_row("SELECT bytes FROM state WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .optional()
            .map_err(err)
    }

    fn replace(&mut self, id: u64, e: &NewEntry) -> Result<bool> {
        let (quality, shape) = encode_meta(e)?;
        self.tx(|c| {
            let n = c.execute(
                "UPDATE entries SET prompt = ?2, negative_prompt = ?3, seconds = ?4, origin = ?5, \
                 steps = ?6, seed = ?7, sample_rate = ?8, channels = ?9, audio = ?10, \
                 latent_generator = ?11, latent_shape = ?12, latents = ?13, quality = ?14 \
                 WHERE id = ?1",
                params![
                    id as i64,
                    e.prompt,
                    e.negative_prompt,
                    e.seconds,
                    e.origin,
                    e.steps as i64,
                    e.seed.map(|s| s as i64),
                    e.audio.as_ref().map(|a| i64::from(a.sample_rate)),
                    e.audio.as_ref().map(|a| a.channels as i64),
                    e.audio.as_ref().map(|a| f32_blob(&a.samples)),
                    e.latents.as_ref().map(|l| l.generator.clone()),
                    shape,
                    e.latents.as_ref().map(|l| f32_blob(&l.data)),
                    quality,
                ],
            )?;
            if n == 0 {
                return Ok(false);
            }
            c.execute("DELETE FROM embeddings WHERE entry_id = ?1", [id as i64])?;
            insert_embeddings(c, id as i64, e)?;
            Ok(true)
        })
    }
}
