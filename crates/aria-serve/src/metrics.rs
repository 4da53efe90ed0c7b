//! Counters behind `GET /metrics` (Prometheus text format 0.0.4).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::jobs::{JobState, StateCounts};

/// Upper bounds (seconds) of the job latency histogram.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// Counters of this process.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Jobs accepted.
    pub submitted: AtomicU64,
    /// Submits refused with 429.
    pub rejected_full: AtomicU64,
    /// Requests refused with another 4xx.
    pub rejected_invalid: AtomicU64,
    /// Batches run.
    pub batches: AtomicU64,
    /// Jobs run in those batches.
    pub batch_items: AtomicU64,
    /// Sampler steps run (per batch).
    pub steps: AtomicU64,
    /// The warm-start cache of this process's worker.
    pub cache: CacheMetrics,
    hist: Mutex<Hist>,
}

/// Warm-start cache counters (requests with `warm_start`).
#[derive(Debug, Default)]
pub struct CacheMetrics {
    /// Requests served through the cache.
    pub requests: AtomicU64,
    /// Of those, hits (a cached reference was used).
    pub hits: AtomicU64,
    /// Hits that started from the reference's stored latents as they were.
    pub latents_stored: AtomicU64,
    /// Hits that started from its stored latents cropped or tiled (no encode).
    pub latents_fitted: AtomicU64,
    /// Hits whose reference audio was stretched and encoded.
    pub stretched: AtomicU64,
    /// Hits whose reference was a segment of a longer cached clip (the pyramid index).
    pub segment_hits: AtomicU64,
    /// Sampler steps skipped by hits.
    pub skipped_steps: AtomicU64,
    /// Entries evicted to keep the cache within its bounds.
    pub evictions: AtomicU64,
    /// Results admitted to the cache.
    pub admitted: AtomicU64,
    /// The refinement worker's counters, as last read (attempts, generations, replaced
    /// entries, errors).
    refine: Mutex<[u64; 4]>,
    /// How many hits started at each step (the skip gater's choices, or the fixed policy's).
    start_steps: Mutex<std::collections::BTreeMap<usize, u64>>,
}

impl CacheMetrics {
    /// Records one request served through the cache.
    pub fn observe(&self, out: &aria_cache::Outcome) {
        use aria_cache::warm::Alignment;
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.evictions
            .fetch_add(out.evicted.len() as u64, Ordering::Relaxed);
        if out.admitted.is_some() {
            self.admitted.fetch_add(1, Ordering::Relaxed);
        }
        if out.reference.is_none() {
            return;
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.skipped_steps
            .fetch_add(out.start_step as u64, Ordering::Relaxed);
        let c = match out.alignment {
            Some(Alignment::StoredLatents) => &self.latents_stored,
            Some(Alignment::FittedLatents { .. }) => &self.latents_fitted,
            _ => &self.stretched,
        };
        c.fetch_add(1, Ordering::Relaxed);
        if out.segment.is_some() {
            self.segment_hits.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut m) = self.start_steps.lock() {
            *m.entry(out.start_step).or_insert(0) += 1;
        }
    }

    /// Takes the refinement worker's counters.
    pub fn observe_refiner(&self, r: &aria_cache::manager::RefineStats) {
        if let Ok(mut m) = self.refine.lock() {
            *m = [r.attempts, r.generations, r.replaced, r.errors];
        }
    }

    fn render(&self, s: &mut String) {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        if let Ok(r) = self.refine.lock() {
            for (i, (name, help)) in [
                (
                    "aria_cache_refine_attempts_total",
                    "Refinement attempts on weak, reused entries.",
                ),
                (
                    "aria_cache_refine_generations_total",
                    "Generations the refinement worker ran.",
                ),
                (
                    "aria_cache_refine_replaced_total",
                    "Entries whose clip a refinement replaced.",
                ),
                (
                    "aria_cache_refine_errors_total",
                    "Errors the refinement worker met (it keeps going).",
                ),
            ]
            .into_iter()
            .enumerate()
            {
                let _ = writeln!(s, "# HELP {name} {help}");
                let _ = writeln!(s, "# TYPE {name} counter");
                let _ = writeln!(s, "{name} {}", r[i]);
            }
        }
        for (name, help, v) in [
            (
                "aria_cache_requests_total",
                "Requests served through the warm-start cache.",
                load(&self.requests),
            ),
            (
                "aria_cache_hits_total",
                "Of those, requests that started from a cached reference.",
                load(&self.hits),
            ),
            (
                "aria_cache_segment_hits_total",
                "Of the hits, those whose reference was a segment of a longer cached clip.",
                load(&self.segment_hits),
            ),
            (
                "aria_cache_skipped_steps_total",
                "Sampler steps the hits skipped.",
                load(&self.skipped_steps),
            ),
            (
                "aria_cache_evictions_total",
                "Entries evicted to keep the cache within its bounds.",
                load(&self.evictions),
            ),
            (
                "aria_cache_admitted_total",
                "Results added to the cache.",
                load(&self.admitted),
            ),
        ] {
            let _ = writeln!(s, "# HELP {name} {help}");
            let _ = writeln!(s, "# TYPE {name} counter");
            let _ = writeln!(s, "{name} {v}");
        }
        let name = "aria_cache_hit_starts_total";
        let _ = writeln!(
            s,
            "# HELP {name} Hits by how the reference became the start: stored latents, fitted \
             (cropped or tiled) latents, or stretched and encoded audio."
        );
        let _ = writeln!(s, "# TYPE {name} counter");
        for (how, a) in [
            ("stored_latents", &self.latents_stored),
            ("fitted_latents", &self.latents_fitted),
            ("stretched_audio", &self.stretched),
        ] {
            let _ = writeln!(s, "{name}{{start=\"{how}\"}} {}", load(a));
        }
        let name = "aria_cache_start_step_total";
        let _ = writeln!(
            s,
            "# HELP {name} Hits by the sampler step they started at (the skip gater's choices)."
        );
        let _ = writeln!(s, "# TYPE {name} counter");
        if let Ok(m) = self.start_steps.lock() {
            for (step, n) in m.iter() {
                let _ = writeln!(s, "{name}{{step=\"{step}\"}} {n}");
            }
        }
    }
}

#[derive(Debug, Default)]
struct Hist {
    counts: [u64; LATENCY_BUCKETS.len()],
    total: u64,
    sum: f64,
    step_seconds: f64,
    last_steps_per_s: f64,
}

impl Metrics {
    /// Record a job's submit-to-finish latency.
    pub fn observe_latency(&self, secs: f64) {
        if let Ok(mut h) = self.hist.lock() {
            for (i, b) in LATENCY_BUCKETS.iter().enumerate() {
                if secs <= *b {
                    h.counts[i] += 1;
                }
            }
            h.total += 1;
            h.sum += secs;
        }
    }

    /// Record a batch of `items` that ran `steps` sampler steps in `secs`.
    pub fn observe_batch(&self, items: usize, steps: usize, secs: f64) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batch_items.fetch_add(items as u64, Ordering::Relaxed);
        self.steps.fetch_add(steps as u64, Ordering::Relaxed);
        if let Ok(mut h) = self.hist.lock() {
            h.step_seconds += secs;
            if secs > 0.0 {
                h.last_steps_per_s = steps as f64 / secs;
            }
        }
    }

    /// The text of `GET /metrics`.
    pub fn render(&self, counts: &StateCounts) -> String {
        let mut s = String::new();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(s, "# HELP aria_queue_depth Jobs waiting in the queue.");
        let _ = writeln!(s, "# TYPE aria_queue_depth gauge");
        let _ = writeln!(s, "aria_queue_depth {}", counts.queued);
        let _ = writeln!(s, "# HELP aria_jobs Jobs in the store by state.");
        let _ = writeln!(s, "# TYPE aria_jobs gauge");
        for st in JobState::ALL {
            let _ = writeln!(s, "aria_jobs{{state=\"{}\"}} {}", st.name(), counts.get(st));
        }
        for (name, help, v) in [
            (
                "aria_jobs_submitted_total",
                "Jobs accepted here.",
                load(&self.submitted),
            ),
            (
                "aria_requests_rejected_queue_full_total",
                "Submits refused with 429 (queue full).",
                load(&self.rejected_full),
            ),
            (
                "aria_requests_rejected_invalid_total",
                "Requests refused as invalid or over a limit.",
                load(&self.rejected_invalid),
            ),
            (
                "aria_batches_total",
                "Batches run here.",
                load(&self.batches),
            ),
            (
                "aria_batch_items_total",
                "Jobs run in those batches.",
                load(&self.batch_items),
            ),
            (
                "aria_steps_total",
                "Sampler steps run (per batch).",
                load(&self.steps),
            ),
        ] {
            let _ = writeln!(s, "# HELP {name} {help}");
            let _ = writeln!(s, "# TYPE {name} counter");
            let _ = writeln!(s, "{name} {v}");
        }
        if let Ok(h) = self.hist.lock() {
            let _ = writeln!(s, "# HELP aria_step_seconds_total Time spent in batches.");
            let _ = writeln!(s, "# TYPE aria_step_seconds_total counter");
            let _ = writeln!(s, "aria_step_seconds_total {}", h.step_seconds);
            let _ = writeln!(
                s,
                "# HELP aria_steps_per_second Steps per second of the last batch."
            );
            let _ = writeln!(s, "# TYPE aria_steps_per_second gauge");
            let _ = writeln!(s, "aria_steps_per_second {}", h.last_steps_per_s);
            let name = "aria_job_latency_seconds";
            let _ = writeln!(s, "# HELP {name} Submit-to-finish time of finished jobs.");
            let _ = writeln!(s, "# TYPE {name} histogram");
            for (b, c) in LATENCY_BUCKETS.iter().zip(h.counts) {
                let _ = writeln!(s, "{name}_bucket{{le=\"{b}\"}} {c}");
            }
            let _ = writeln!(s, "{name}_bucket{{le=\"+Inf\"}} {}", h.total);
            let _ = writeln!(s, "{name}_sum {}", h.sum);
            let _ = writeln!(s, "{name}_count {}", h.total);
        }
        self.cache.render(&mut s);
        s
    }
}
