//! The reference selector of SoundWeaver (§2.1): among the top-K retrieved cache entries, keep
//! those passing a quality gate and a duration gate, and draw one with probability growing with
//! its similarity to the prompt.
//!
//! For each candidate `i` there are two similarities: `s_pos(i)` between the candidate and the
//! user prompt, and `s_neg(i)` between the candidate and a fixed negative prompt
//! ([`NEGATIVE_PROMPT`], "low quality"). The paper's quality score (eq. 1) is
//!
//! ```text
//! q_i = min[ s_pos(i) / max_j s_pos(j) ,  (1 − s_neg(i)) / max_j (1 − s_neg(j)) ]      (1)
//!            └──────── a_i ────────┘      └──────────── b_i ────────────┘
//! ```
//!
//! with the maxima over the K retrieved candidates, and the duration-aware gate (eq. 2) is
//!
//! ```text
//! q_i = min(a_i, b_i)   if d_i ∈ [0.5·L, 1.5·L]
//!       0               otherwise                                                      (2)
//! ```
//!
//! where `d_i` is the candidate's duration and `L` the requested one. Candidates with
//! `q_i ≥ θ_q` are admitted and one is drawn with `p_i ∝ exp(s_pos(i)/τ)` ("τ controls
//! diversity") from a seeded generator ([`SplitMix64`]), so a run is reproducible.
//!
//! The paper states no values for K, θ_q or τ; [`SelectorConfig::default`] documents the ones
//! used here. Because eq. 1 is relative (the best candidate always has `a_i = 1`), an optional
//! absolute floor on `s_pos` ([`SelectorConfig::min_similarity`]) keeps a far-off nearest
//! neighbour from being reused; set it to `f32::NEG_INFINITY` for the paper's gate alone.
//!
//! Without an audio embedder (real CLAP weights), `s_pos` and `s_neg` compare the prompt and the
//! negative prompt with the embedding of the prompt that made the cached clip.

use crate::{CacheError, Result};

/// The fixed negative prompt of the quality gate.
pub const NEGATIVE_PROMPT: &str = "low quality";

/// One retrieved cache entry, as the selector sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// The entry's id in the store.
    pub id: u64,
    /// Similarity to the prompt, `s_pos(i)`.
    pub s_pos: f32,
    /// Similarity to the negative prompt, `s_neg(i)`.
    pub s_neg: f32,
    /// Duration `d_i` of the reference, in seconds: the cached clip's, or its segment's.
    pub duration: f64,
    /// The reference's segment of the cached clip (pyramid level ≥ 1: `duration` seconds from
    /// this start); `None`: the whole clip.
    pub segment: Option<crate::index::Segment>,
}

/// The selector's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SelectorConfig {
    /// Candidates retrieved from the index, K.
    pub top_k: usize,
    /// Quality threshold θ_q on `q_i`.
    pub theta_q: f32,
    /// Sampling temperature τ (> 0) of `p_i ∝ exp(s_pos(i)/τ)`.
    pub tau: f32,
    /// Lower bound of the duration gate as a fraction of `L` (0.5 in eq. 2).
    pub min_duration_ratio: f64,
    /// Upper bound of the duration gate as a fraction of `L` (1.5 in eq. 2).
    pub max_duration_ratio: f64,
    /// Absolute floor on `s_pos` (not in the paper's gate; `f32::NEG_INFINITY` disables it).
    pub min_similarity: f32,
}

impl Default for SelectorConfig {
    /// K = 8, θ_q = 0.9, τ = 0.05, the duration gate [0.5L, 1.5L] of eq. 2, and a similarity
    /// floor of 0.35 (the threshold of the rule-based skip policy the paper compares with).
    fn default() -> Self {
        SelectorConfig {
            top_k: 8,
            theta_q: 0.9,
            tau: 0.05,
            min_duration_ratio: 0.5,
            max_duration_ratio: 1.5,
            min_similarity: 0.35,
        }
    }
}

impl SelectorConfig {
    /// Checks the ranges: `top_k ≥ 1`, `tau > 0`, `0 < min ≤ max` duration ratios, finite θ_q.
    pub fn validate(&self) -> Result<()> {
        let bad = |name: &str, reason: String| {
            Err(CacheError::Invalid {
                name: name.into(),
                reason,
            })
        };
        if self.top_k == 0 {
            return bad("top_k", "must be at least 1".into());
        }
        if !(self.tau.is_finite() && self.tau > 0.0) {
            return bad(
                "tau",
                format!("must be a positive number, got {}", self.tau),
            );
        }
        if !self.theta_q.is_finite() {
            return bad("theta_q", format!("must be finite, got {}", self.theta_q));
        }
        if !(self.min_duration_ratio > 0.0 && self.min_duration_ratio <= self.max_duration_ratio) {
            return bad(
                "duration ratios",
                format!(
                    "need 0 < min <= max, got [{}, {}]",
                    self.min_duration_ratio, self.max_duration_ratio
                ),
            );
        }
        Ok(())
    }
}

/// A candidate with its scores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    /// The candidate.
    pub candidate: Candidate,
    /// Normalized positive similarity `a_i`.
    pub a: f32,
    /// Normalized negative dissimilarity `b_i`.
    pub b: f32,
    /// Whether `d_i ∈ [0.5L, 1.5L]`.
    pub duration_ok: bool,
    /// The gated quality `q_i` of eq. 2.
    pub q: f32,
    /// Whether the candidate is admitted (`q_i ≥ θ_q` and `s_pos ≥ min_similarity`).
    pub admitted: bool,
    /// Its sampling probability (0 when not admitted; the admitted ones sum to 1).
    pub p: f64,
}

/// The selector's choice.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// Index into the scored candidates of the chosen one.
    pub index: usize,
    /// Every candidate with its scores, in the order given.
    pub scored: Vec<Scored>,
}

impl Selection {
    /// The chosen candidate.
    pub fn chosen(&self) -> &Scored {
        &self.scored[self.index]
    }
}

/// `x / max` with a non-positive maximum giving 0 (nothing is "best" then).
fn ratio(x: f32, max: f32) -> f32 {
    if max > 0.0 {
        x / max
    } else {
        0.0
    }
}

/// Scores candidates for a request of `target_seconds` (eq. 1 and 2, the gate, and the
/// sampling probabilities). Errors on a bad configuration or a non-positive duration.
pub fn score(
    candidates: &[Candidate],
    target_seconds: f64,
    cfg: &SelectorConfig,
) -> Result<Vec<Scored>> {
    cfg.validate()?;
    if !(target_seconds.is_finite() && target_seconds > 0.0) {
        return Err(CacheError::Invalid {
            name: "requested duration".into(),
            reason: format!("must be a positive number of seconds, got {target_seconds}"),
        });
    }
    let max_pos = candidates
        .iter()
        .map(|c| c.s_pos)
        .fold(f32::NEG_INFINITY, f32::max);
    let max_neg = candidates
        .iter()
        .map(|c| 1.0 - c.s_neg)
        .fold(f32::NEG_INFINITY, f32::max);
    let (lo, hi) = (
        cfg.min_duration_ratio * target_seconds,
        cfg.max_duration_ratio * target_seconds,
    );
    let mut out: Vec<Scored> = candidates
        .iter()
        .map(|&c| {
            let a = ratio(c.s_pos, max_pos);
            let b = ratio(1.0 - c.s_neg, max_neg);
            let duration_ok = c.duration >= lo && c.duration <= hi;
            let q = if duration_ok { a.min(b) } else { 0.0 };
            let admitted = q >= cfg.theta_q
                && c.s_pos >= cfg.min_similarity
                && c.s_pos.is_finite()
                && c.s_neg.is_finite();
            Scored {
                candidate: c,
                a,
                b,
                duration_ok,
                q,
                admitted,
                p: 0.0,
            }
        })
        .collect();
    // p_i ∝ exp(s_pos/τ) over the admitted ones, shifted by the maximum for range.
    let top = out
        .iter()
        .filter(|s| s.admitted)
        .map(|s| f64::from(s.candidate.s_pos))
        .fold(f64::NEG_INFINITY, f64::max);
    let tau = f64::from(cfg.tau);
    let mut z = 0.0;
    for s in out.iter_mut().filter(|s| s.admitted) {
        s.p = ((f64::from(s.candidate.s_pos) - top) / tau).exp();
        z += s.p;
    }
    if z > 0.0 {
        out.iter_mut().for_each(|s| s.p /= z);
    }
    Ok(out)
}

/// Scores the candidates and draws one of the admitted ones with `rng`; `None` when none is
/// admitted (a cold generation then).
pub fn select(
    candidates: &[Candidate],
    target_seconds: f64,
    cfg: &SelectorConfig,
    rng: &mut SplitMix64,
) -> Result<Option<Selection>> {
    let scored = score(candidates, target_seconds, cfg)?;
    let admitted: Vec<usize> = (0..scored.len()).filter(|&i| scored[i].admitted).collect();
    let Some(&last) = admitted.last() else {
        return Ok(None);
    };
    let u = rng.next_f64();
    let mut acc = 0.0;
    let mut index = last;
    for &i in &admitted {
        acc += scored[i].p;
        if u < acc {
            index = i;
            break;
        }
    }
    Ok(Some(Selection { index, scored }))
}

/// A small seeded generator (SplitMix64): the same draws on every platform.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw in `[0, 1)` (53 random bits).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}
