//! Crash safety of the SQLite store under the cache manager's writes.
//!
//! A child process (this test binary again, re-run on the test alone in the child role) admits
//! entries, refines them (`replace`), records reuses, evicts through the [`Manager`] and rewrites a
//! state blob (as the skip gater does), printing `BEGIN …` before and `ACK …` after each committed
//! write. The parent kills it with SIGKILL at seeded random points, 60 times, reopens the store
//! after each kill and checks that:
//!
//! - `PRAGMA integrity_check` is `ok`;
//! - every acknowledged write is there: acknowledged entries are present with their last
//!   acknowledged clip and reuse count, removed ones are gone, the state blob is the last
//!   acknowledged version — the one write in flight at the kill may or may not have landed,
//!   and nothing else differs;
//! - no entry is corrupt: each clip (audio, latents, embeddings of the right dimensions,
//!   quality) is exactly the one its tag describes, and the state blob's checksum holds.
//!
//! The store runs as [`SqliteStore::open`] sets it up: WAL journal, `synchronous=NORMAL`,
//! under which a commit is durable against the process dying (not against power loss).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use aria_cache::manager::{Admission, Capacity, Manager, ManagerConfig};
use aria_cache::select::SplitMix64;
use aria_cache::store::{now_ms, Audio, NewEntry, SqliteStore, Store, StoredLatents};
use aria_testing::TempDir;

const CHILD_DB: &str = "ARIA_CRASH_CHILD_DB";
const CHILD_SEED: &str = "ARIA_CRASH_CHILD_SEED";
const STATE_KEY: &str = "gater";
const KILLS: usize = 60;
const CHILD_MAX_OPS: usize = 3000;

/// The clip a tag stands for (everything but the importance, which reuses change).
fn content(tag: u64) -> NewEntry {
    let mut r = SplitMix64::new(tag);
    let mut f = || r.next_f64() as f32 * 2.0 - 1.0;
    let channels = 1 + (tag % 2) as usize;
    let frames = 64 * (1 + (tag % 4) as usize);
    let samples: Vec<f32> = (0..channels * frames).map(|_| f()).collect();
    let t = 1 + (tag % 5) as usize;
    let latents: Vec<f32> = (0..2 * t).map(|_| f()).collect();
    let mut e: Vec<f32> = (0..16).map(|_| f()).collect();
    aria_cache::embed::normalize(&mut e);
    let mut embeddings = BTreeMap::from([("e".to_string(), e)]);
    if tag.is_multiple_of(3) {
        embeddings.insert("f".into(), (0..4).map(|_| f()).collect());
    }
    NewEntry {
        prompt: format!("clip {tag}"),
        negative_prompt: tag.is_multiple_of(2).then(|| "hiss".to_string()),
        seconds: 0.5 + (tag % 7) as f64 * 0.25,
        audio: Some(Audio::new(samples, channels, 8000).unwrap()),
        latents: Some(StoredLatents {
            generator: "crash".into(),
            shape: vec![1, 2, t],
            data: latents,
        }),
        embeddings,
        quality: BTreeMap::from([("q".to_string(), (tag % 1000) as f32 / 1000.0)]),
        importance: 0.0,
        steps: 8,
        seed: Some(tag),
        origin: "crash".into(),
    }
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ u64::from(*x)).wrapping_mul(0x100_0000_01b3)
    })
}

/// State blob version `n`: `n`, a payload, and a checksum of both.
fn state(n: u64) -> Vec<u8> {
    let mut r = SplitMix64::new(n ^ 0x5747);
    let mut b = n.to_le_bytes().to_vec();
    b.extend((0..10 + n % 50).map(|_| r.next_u64() as u8));
    let c = fnv(&b);
    b.extend(c.to_le_bytes());
    b
}

/// The version of a state blob, checking its checksum.
fn state_version(b: &[u8]) -> u64 {
    assert!(b.len() >= 16, "state blob of {} bytes", b.len());
    let (body, sum) = b.split_at(b.len() - 8);
    assert_eq!(fnv(body).to_le_bytes(), sum, "state blob checksum");
    let n = u64::from_le_bytes(body[..8].try_into().unwrap());
    assert_eq!(b, state(n).as_slice(), "state blob {n}");
    n
}

fn manager_config() -> ManagerConfig {
    ManagerConfig {
        capacity: Capacity::entries(24),
        admission: Admission::Always,
        new_entry_importance: 1.0,
    }
}

/// The child: random writes until killed (or `CHILD_MAX_OPS`). It is the test binary re-run
/// on `acknowledged_writes_survive_sigkill` alone with [`CHILD_DB`] and [`CHILD_SEED`] set,
/// which then plays this role instead of the test's.
fn crash_child(db: &str) {
    let seed = std::env::var(CHILD_SEED).expect("the child's seed");
    let mut rng = SplitMix64::new(seed.parse().unwrap());
    let mut s = SqliteStore::open(db).unwrap();
    let mut m = Manager::open(manager_config(), &s).unwrap();
    let mut version = s
        .get_state(STATE_KEY)
        .unwrap()
        .map_or(0, |b| state_version(&b));
    let out = std::io::stdout();
    let mut o = out.lock();
    let mut say = |line: String| {
        writeln!(o, "{line}").unwrap();
        o.flush().unwrap();
    };
    say("READY".into());
    for _ in 0..CHILD_MAX_OPS {
        let live: Vec<u64> = m.eviction_order().collect();
        let pick = |r: &mut SplitMix64| live[(r.next_u64() % live.len() as u64) as usize];
        let op = rng.next_u64() % 20;
        match op {
            _ if op < 7 || live.is_empty() => {
                let tag = rng.next_u64() >> 1;
                let mut e = content(tag);
                let now = now_ms();
                assert!(m.should_admit(&mut e, now, false));
                say(format!("BEGIN insert {tag}"));
                let id = s.insert(&e).unwrap();
                say(format!("ACK insert {id} {tag}"));
                m.on_insert(id, &e, now);
                for gone in m.plan_evictions(Some(id)) {
                    say(format!("BEGIN remove {gone}"));
                    assert!(s.remove(gone).unwrap());
                    say(format!("ACK remove {gone}"));
                    m.forget(gone);
                }
            }
            _ if op < 11 => {
                let id = pick(&mut rng);
                let tag = rng.next_u64() >> 1;
                let e = content(tag);
                say(format!("BEGIN replace {id} {tag}"));
                assert!(s.replace(id, &e).unwrap());
                say(format!("ACK replace {id} {tag}"));
                m.on_replace(id, &e);
            }
            _ if op < 16 => {
                let id = pick(&mut rng);
                let now = now_ms();
                say(format!("BEGIN hit {id}"));
                s.record_hit(id, 2.0, now).unwrap();
                say(format!("ACK hit {id}"));
                m.on_hit(id, 2.0, now);
            }
            _ => {
                let n = version + 1;
                say(format!("BEGIN state {n}"));
                s.put_state(STATE_KEY, &state(n)).unwrap();
                say(format!("ACK state {n}"));
                version = n;
            }
        }
    }
    say("DONE".into());
}

/// What the acknowledged writes say the store holds.
#[derive(Debug, Default, Clone, PartialEq)]
struct Model {
    /// id → (tag, hits)
    entries: BTreeMap<u64, (u64, u64)>,
    state: u64,
}

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Insert(u64),
    Replace(u64, u64),
    Hit(u64),
    Remove(u64),
    State(u64),
}

fn nums(w: &[&str]) -> Vec<u64> {
    w.iter().map(|x| x.parse().unwrap()).collect()
}

/// Applies the child's lines to `m`; returns the write in flight (BEGIN without ACK), the
/// number of ACKs and whether it finished.
fn apply(m: &mut Model, lines: &[String]) -> (Option<Op>, usize, bool) {
    let (mut pending, mut acks, mut done) = (None, 0, false);
    for l in lines {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["BEGIN", "insert", rest @ ..] => pending = Some(Op::Insert(nums(rest)[0])),
            ["BEGIN", "replace", rest @ ..] => {
                let n = nums(rest);
                pending = Some(Op::Replace(n[0], n[1]));
            }
            ["BEGIN", "hit", rest @ ..] => pending = Some(Op::Hit(nums(rest)[0])),
            ["BEGIN", "remove", rest @ ..] => pending = Some(Op::Remove(nums(rest)[0])),
            ["BEGIN", "state", rest @ ..] => pending = Some(Op::State(nums(rest)[0])),
            ["ACK", kind, rest @ ..] => {
                let n = nums(rest);
                match *kind {
                    "insert" => {
                        assert_eq!(pending, Some(Op::Insert(n[1])));
                        assert!(m.entries.insert(n[0], (n[1], 0)).is_none(), "id reused");
                    }
                    "replace" => m.entries.get_mut(&n[0]).unwrap().0 = n[1],
                    "hit" => m.entries.get_mut(&n[0]).unwrap().1 += 1,
                    "remove" => assert!(m.entries.remove(&n[0]).is_some()),
                    "state" => m.state = n[0],
                    other => panic!("unknown ACK {other}"),
                }
                pending = None;
                acks += 1;
            }
            ["DONE"] => done = true,
            _ => {}
        }
    }
    (pending, acks, done)
}

/// Checks the reopened store against the model (the in-flight write may have landed or not)
/// and returns what it holds.
fn check(db: &std::path::Path, m: &Model, pending: &Option<Op>) -> Model {
    let c = rusqlite::Connection::open(db).unwrap();
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    drop(c);
    let s = SqliteStore::open(db).unwrap();
    let mut got = Model {
        state: s
            .get_state(STATE_KEY)
            .unwrap()
            .map_or(0, |b| state_version(&b)),
        ..Default::default()
    };
    for e in s.list().unwrap() {
        let full = s.get(e.id).unwrap().unwrap();
        let tag: u64 = full
            .data
            .prompt
            .strip_prefix("clip ")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("entry {}: prompt `{}`", e.id, full.data.prompt));
        let mut want = content(tag);
        want.importance = full.data.importance;
        assert_eq!(full.data, want, "entry {} is not clip {tag}", e.id);
        assert!(full.data.importance.is_finite() && full.data.importance > 0.99);
        got.entries.insert(e.id, (tag, full.hits));
    }
    // Exactly the acknowledged state, or it with the write in flight applied.
    let mut landed = m.clone();
    match *pending {
        Some(Op::Insert(tag)) => {
            let extra: Vec<u64> = got
                .entries
                .keys()
                .filter(|id| !m.entries.contains_key(id))
                .copied()
                .collect();
            if let [id] = extra.as_slice() {
                landed.entries.insert(*id, (tag, 0));
            }
        }
        Some(Op::Replace(id, tag)) => landed.entries.get_mut(&id).unwrap().0 = tag,
        Some(Op::Hit(id)) => landed.entries.get_mut(&id).unwrap().1 += 1,
        Some(Op::Remove(id)) => {
            landed.entries.remove(&id);
        }
        Some(Op::State(n)) => landed.state = n,
        None => {}
    }
    assert!(
        got == *m || got == landed,
        "after the kill (in flight: {pending:?})\nstore: {got:?}\nacknowledged: {m:?}"
    );
    got
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    if let Ok(db) = std::env::var(CHILD_DB) {
        return crash_child(&db);
    }
    // Declared first: it outlives every child process of the test.
    let dir = TempDir::new("crash");
    let db = dir.join("cache.sqlite");
    let exe = std::env::current_exe().unwrap();
    let seed: u64 = std::env::var("ARIA_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x00C0_FFEE);
    let mut rng = SplitMix64::new(seed);
    let mut model = Model::default();
    let t0 = Instant::now();
    let (mut acks, mut in_flight, mut mid_stream, mut before_ready) = (0, 0, 0, 0);
    for run in 0..=KILLS {
        let last = run == KILLS;
        let mut child = Command::new(&exe)
            .args([
                "acknowledged_writes_survive_sigkill",
                "--exact",
                "--nocapture",
            ])
            .args(["--test-threads", "1"])
            .env(CHILD_DB, &db)
            .env(
                CHILD_SEED,
                (seed ^ ((run as u64 + 1) * 0x9E37_79B9)).to_string(),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                // libtest prints `test acknowledged_writes_survive_sigkill ... ` on the same line.
                if l.ends_with("READY") {
                    let _ = tx.send(());
                }
                lines.push(l);
            }
            lines
        });
        if last {
            // The last run finishes on its own: a clean exit loses nothing either.
            assert!(child.wait().unwrap().success());
        } else {
            if rng.next_u64().is_multiple_of(8) {
                // Now and then while it starts (opening, recovering the WAL).
                std::thread::sleep(Duration::from_micros(rng.next_u64() % 8_000));
            } else {
                if rx.recv_timeout(Duration::from_secs(20)).is_err() {
                    let st = child.wait().unwrap();
                    let lines = reader.join().unwrap();
                    panic!("run {run}: the child exited ({st}) before it was ready: {lines:?}");
                }
                std::thread::sleep(Duration::from_micros(rng.next_u64() % 25_000));
            }
            // SIGKILL on Unix.
            child.kill().unwrap();
            child.wait().unwrap();
        }
        let lines = reader.join().unwrap();
        let (pending, n, done) = apply(&mut model, &lines);
        assert_eq!(
            done, last,
            "run {run}: the child finished before it was killed"
        );
        if !lines.iter().any(|l| l.ends_with("READY")) {
            before_ready += 1;
        }
        mid_stream += usize::from(n > 0 && !last);
        in_flight += usize::from(pending.is_some());
        acks += n;
        model = check(&db, &model, &pending);
    }
    eprintln!(
        "{KILLS} kills in {:.1} s: {acks} acknowledged writes, {mid_stream} kills after some, \
         {in_flight} with a write in flight, {before_ready} before the child was ready; \
         {} entries, state version {} at the end",
        t0.elapsed().as_secs_f64(),
        model.entries.len(),
        model.state
    );
    assert!(
        mid_stream >= KILLS / 2,
        "{mid_stream} kills landed after a write"
    );
    assert!(
        in_flight >= 5,
        "only {in_flight} kills landed during a write"
    );
    assert!(model.state > 0 && !model.entries.is_empty());
}
