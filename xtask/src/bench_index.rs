//! `cargo xtask bench index`: the aria-cache vector indexes on MiniLM embeddings of AudioCaps
//! captions.
//!
//! The set: the AudioCaps captions of `tokenizer/gemma-audiocaps.jsonl` (≈3 000) are too few, so
//! 10 000 entries are built as the unique captions plus *recombined* captions (the first half of
//! the words of one caption and the second half of another, pairs drawn with a fixed seed,
//! duplicates dropped), every one embedded by the Rust all-MiniLM-L6-v2. The queries are further
//! recombinations that are not in the set. The 100 000-entry set adds 90 000 synthetic vectors:
//! `normalize(α·a + (1−α)·b + σ·n)` of two random real embeddings (α ∈ [0.3, 0.7], σ = 0.02 per
//! coordinate, n normal), so it keeps the geometry of the real set without embedding 100 000
//! texts.
//!
//! Reported per size: IVF build time, recall@10 against the exact index at several `nprobe`, and
//! the per-query latency (median and 99th percentile, one query at a time) of exact search and of
//! IVF at `nprobe` 8, under a 2-thread pool.
//!
//! Options: `--texts FILE` (default `fixtures/tokenizer/gemma-audiocaps.jsonl`, or
//! under `ARIA_FIXTURES`), `--sizes A,B` (default 10000,100000), `--queries Q` (default 500),
//! `--threads T` (default 2), `--seed S` (default 1), `--nlist A,B` (IVF cells; default 0 =
//! round(√n / 2)), `--emb-cache FILE` (keep the embeddings there and reuse them while the texts are
//! the same; default `target/bench-index-embeddings.f32`).

use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::time::Instant;

use aria_cache::embed::{normalize, MiniLm};
use aria_cache::index::{recall_at_k, ExactIndex, Hit, IvfIndex, IvfParams, VectorIndex};
use aria_cache::Embedder;
use aria_core::threads;

struct Opts {
    texts: PathBuf,
    sizes: Vec<usize>,
    queries: usize,
    threads: usize,
    seed: u64,
    nlist: Vec<usize>,
    emb_cache: PathBuf,
}

fn default_texts() -> PathBuf {
    let rel = "tokenizer/gemma-audiocaps.jsonl";
    match std::env::var_os("ARIA_FIXTURES") {
        Some(p) => PathBuf::from(p).join(rel),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures")
            .join(rel),
    }
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        texts: default_texts(),
        sizes: vec![10_000, 100_000],
        queries: 500,
        threads: 2,
        seed: 1,
        nlist: vec![0],
        emb_cache: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../target/bench-index-embeddings.f32"),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--texts" => o.texts = PathBuf::from(val()?),
            "--sizes" => {
                o.sizes = val()?
                    .split(',')
                    .map(|s| s.trim().parse().map_err(|e| format!("--sizes: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--queries" => o.queries = val()?.parse().map_err(|e| format!("--queries: {e}"))?,
            "--threads" => o.threads = val()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--seed" => o.seed = val()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--nlist" => {
                o.nlist = val()?
                    .split(',')
                    .map(|s| s.trim().parse().map_err(|e| format!("--nlist: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--emb-cache" => o.emb_cache = PathBuf::from(val()?),
            other => {
                return Err(format!(
                    "unknown option `{other}` (--texts FILE, --sizes A,B, --queries Q, --threads T, --seed S, --nlist A,B, --emb-cache FILE)"
                ))
            }
        }
    }
    Ok(o)
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn unif(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    fn normal(&mut self) -> f32 {
        (0..12).map(|_| self.unif()).sum::<f32>() - 6.0
    }
}

fn captions(path: &PathBuf) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e} (set --texts or ARIA_FIXTURES)", path.display()))?;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(t) = v["text"].as_str() {
            let t = t.trim().to_string();
            if t.split_whitespace().count() >= 2 && seen.insert(t.clone()) {
                out.push(t);
            }
        }
    }
    Ok(out)
}

/// Unique recombinations: first half of the words of one caption, second half of another.
fn recombine(base: &[String], n: usize, taken: &mut HashSet<String>, rng: &mut Rng) -> Vec<String> {
    let words: Vec<Vec<&str>> = base
        .iter()
        .map(|c| c.split_whitespace().collect())
        .collect();
    let mut out = Vec::with_capacity(n);
    let mut tries = 0usize;
    while out.len() < n && tries < 100 * n {
        tries += 1;
        let (a, b) = (
            &words[rng.below(words.len())],
            &words[rng.below(words.len())],
        );
        let t = [&a[..a.len() / 2], &b[b.len() / 2..]].concat().join(" ");
        if taken.insert(t.clone()) {
            out.push(t);
        }
    }
    out
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

/// Median and p99 per-query latency in ms, and the results.
fn time_queries(
    queries: &[Vec<f32>],
    f: impl Fn(&[f32]) -> Result<Vec<Hit>, String>,
) -> Result<(f64, f64, Vec<Vec<Hit>>), String> {
    for q in queries.iter().take(20) {
        f(q)?; // warm-up
    }
    let mut ms = Vec::with_capacity(queries.len());
    let mut res = Vec::with_capacity(queries.len());
    for q in queries {
        let t = Instant::now();
        let h = f(q)?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        res.push(h);
    }
    ms.sort_by(f64::total_cmp);
    Ok((percentile(&ms, 0.5), percentile(&ms, 0.99), res))
}

fn join(v: impl Iterator<Item = f64>) -> String {
    v.map(|r| format!("{r:.3}")).collect::<Vec<_>>().join(" / ")
}

fn mean_recall(got: &[Vec<Hit>], want: &[Vec<Hit>]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| recall_at_k(g, w))
        .sum::<f64>()
        / want.len().max(1) as f64
}

pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let model = MiniLm::load_default().map_err(|e| e.to_string())?;
    let mut base = captions(&o.texts)?;
    let mut rng = Rng(o.seed);
    // Held-out real captions (a seeded choice) are the first query set.
    for i in (1..base.len()).rev() {
        base.swap(i, rng.below(i + 1));
    }
    let held: Vec<String> = base.split_off(base.len().saturating_sub(o.queries));
    let n_real = o.sizes.iter().copied().min().unwrap_or(0).max(base.len());
    let mut taken: HashSet<String> = base.iter().chain(&held).cloned().collect();
    let extra = recombine(
        &base,
        n_real.saturating_sub(base.len()),
        &mut taken,
        &mut rng,
    );
    let mut qtexts = held.clone();
    qtexts.extend(recombine(&base, o.queries, &mut taken, &mut rng));
    let mut texts: Vec<&str> = base.iter().map(String::as_str).collect();
    texts.extend(extra.iter().map(String::as_str));
    texts.truncate(n_real);
    println!(
        "set: {} captions + {} recombinations = {} texts; queries: {} held-out captions, {} held-out recombinations",
        base.len(),
        texts.len() - base.len(),
        texts.len(),
        held.len(),
        qtexts.len() - held.len()
    );
    let mut all: Vec<&str> = texts.clone();
    all.extend(qtexts.iter().map(String::as_str));
    let key = {
        let mut h = DefaultHasher::new();
        all.hash(&mut h);
        h.finish()
    };
    if let Some(v) = load_cache(&o.emb_cache, key, all.len(), model.dim()) {
        println!(
            "MiniLM: {} embeddings reused from {}",
            v.len(),
            o.emb_cache.display()
        );
        let queries = v[texts.len()..].to_vec();
        let real = v[..texts.len()].to_vec();
        return measure(&o, model.dim(), &real, &queries);
    }
    let (real, queries) = threads::with_threads(o.threads, || -> Result<_, String> {
        let t = Instant::now();
        let real = model.embed_texts(&texts).map_err(|e| e.to_string())?;
        let q: Vec<&str> = qtexts.iter().map(String::as_str).collect();
        let queries = model.embed_texts(&q).map_err(|e| e.to_string())?;
        let s = t.elapsed().as_secs_f64();
        let n = real.len() + queries.len();
        println!(
            "MiniLM: embedded {n} texts in {s:.1} s ({:.0} texts/s)",
            n as f64 / s
        );
        Ok((real, queries))
    })
    .map_err(|e| e.to_string())??;
    save_cache(&o.emb_cache, key, real.iter().chain(&queries));
    measure(&o, model.dim(), &real, &queries)
}

fn load_cache(path: &PathBuf, key: u64, n: usize, dim: usize) -> Option<Vec<Vec<f32>>> {
    let b = std::fs::read(path).ok()?;
    let head = |i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            b.get(i * 8..i * 8 + 8)?.try_into().ok()?,
        ))
    };
    if head(0)? != key
        || head(1)? != n as u64
        || head(2)? != dim as u64
        || b.len() != 24 + n * dim * 4
    {
        return None;
    }
    let f: Vec<f32> = b[24..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Some(f.chunks_exact(dim).map(<[f32]>::to_vec).collect())
}

fn save_cache<'a>(path: &PathBuf, key: u64, vs: impl Iterator<Item = &'a Vec<f32>>) {
    let vs: Vec<&Vec<f32>> = vs.collect();
    let dim = vs.first().map_or(0, |v| v.len());
    let mut b = Vec::with_capacity(24 + vs.len() * dim * 4);
    for h in [key, vs.len() as u64, dim as u64] {
        b.extend_from_slice(&h.to_le_bytes());
    }
    for v in vs {
        for x in v {
            b.extend_from_slice(&x.to_le_bytes());
        }
    }
    if let Err(e) = std::fs::write(path, b) {
        eprintln!(
            "warning: could not keep the embeddings in {}: {e}",
            path.display()
        );
    }
}

fn measure(o: &Opts, dim: usize, real: &[Vec<f32>], queries: &[Vec<f32>]) -> Result<(), String> {
    println!();
    println!("recall@10 against exact at nprobe 1/4/8/16 (caption and recombined queries);");
    println!("latency per query over all queries, one at a time");
    println!("| entries | nlist | largest cell | build s | recall, captions | recall, recombined | exact ms p50/p99 | IVF nprobe 8 ms p50/p99 |");
    println!("|---:|---:|---:|---:|---|---|---|---|");
    for &n in &o.sizes {
        let mut data: Vec<f32> = Vec::with_capacity(n * dim);
        for v in real.iter().take(n) {
            data.extend_from_slice(v);
        }
        let mut syn = Rng(o.seed ^ 0xABCD);
        for _ in real.len().min(n)..n {
            let (a, b) = (&real[syn.below(real.len())], &real[syn.below(real.len())]);
            let al = 0.3 + 0.4 * syn.unif();
            let mut v: Vec<f32> = a
                .iter()
                .zip(b)
                .map(|(x, y)| al * x + (1.0 - al) * y + 0.02 * syn.normal())
                .collect();
            normalize(&mut v);
            data.extend_from_slice(&v);
        }
        let ids: Vec<u64> = (0..n as u64).collect();
        let row = |i: usize| &data[i * dim..(i + 1) * dim];
        threads::with_threads(o.threads, || -> Result<(), String> {
            let mut exact = ExactIndex::new(dim);
            for i in 0..n {
                exact.add(i as u64, row(i)).map_err(|e| e.to_string())?;
            }
            let (ex50, ex99, want) =
                time_queries(queries, |q| exact.search(q, 10).map_err(|e| e.to_string()))?;
            let half = o.queries.min(queries.len());
            for &nlist in &o.nlist {
                let t = Instant::now();
                let params = IvfParams {
                    nlist,
                    ..IvfParams::default()
                };
                let mut ivf =
                    IvfIndex::build(dim, &ids, &data, params).map_err(|e| e.to_string())?;
                let build = t.elapsed().as_secs_f64();
                let mut recalls = Vec::new();
                let mut lat = (0.0, 0.0);
                for np in [1, 4, 8, 16] {
                    ivf.set_nprobe(np);
                    let (p50, p99, got) =
                        time_queries(queries, |q| ivf.search(q, 10).map_err(|e| e.to_string()))?;
                    recalls.push((mean_recall(&got[..half], &want[..half]), mean_recall(&got[half..], &want[half..])));
                    if np == 8 {
                        lat = (p50, p99);
                    }
                }
                println!(
                    "| {n} | {} | {} | {build:.2} | {} | {} | {ex50:.3} / {ex99:.3} | {:.3} / {:.3} |",
                    ivf.nlist(),
                    ivf.cell_sizes().iter().max().unwrap_or(&0),
                    join(recalls.iter().map(|r| r.0)),
                    join(recalls.iter().map(|r| r.1)),
                    lat.0,
                    lat.1
                );
            }
            Ok(())
        })
        .map_err(|e| e.to_string())??;
    }
    println!(
        "\n(threads: {}; queries: {}; k = 10)",
        o.threads,
        queries.len()
    );
    Ok(())
}
