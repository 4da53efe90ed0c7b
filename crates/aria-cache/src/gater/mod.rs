//! The skip gater of SoundWeaver (§2.2): a contextual bandit that decides, per warm-started
//! request, how many of the sampler steps to skip.
//!
//! # Arms and the schedule
//!
//! Each arm is a skip percentage `p ∈ {0, 5, 10, …, 65} %` ([`SKIP_PERCENTS`]). On a request of
//! `T` steps, arm `p` skips `round(p·T/100)` steps (halves rounded up, [`skip_steps`]) and the
//! generation starts at that step: 0–5 of 8 steps for the distilled models
//! (0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4, 5, 5), 0–33 of 50 for the base models. Of the levels
//! that skip the same number of steps only the lowest is played ([`distinct_level`]: at 8 steps
//! 0, 10, 20, 35, 45 and 60 %), and schedules of up to [`DISTILLED_MAX_STEPS`] steps have arm
//! models of their own ([`schedule_class`]), since an arm skips different fractions of 8 and
//! of 50 steps.
//!
//! # Context
//!
//! `{e_prompt, e_cache, T}` in the paper; here ([`Context`], [`Featurizer`]): the prompt
//! embedding projected onto a few dimensions by a fixed seeded Gaussian matrix, the reference's
//! scores (`s_pos`, which is `e_promptᵀe_cache`, `s_neg` and the selector's `q`), the
//! duration ratio `ρ = d_i/L` and `T`. Similarity and `|ln ρ|` enter through a bilinear grid
//! of hat functions, so a model linear in the features can follow an optimum that depends on
//! both jointly.
//!
//! # Reward
//!
//! ```text
//! r_t = α·ΔE_t + (1 − α)·Q̃_t                                                    (3)
//! Q̃_t = rank(Q_t) / (N_p − 1) ∈ [0, 1]                                         (4)
//! w_p = σ_p² / (σ̄² + ε)                                                         (5)
//! L   = E[w_p·δ_t²] + λ·E[w_p·(û(s_t, a_t) − |δ_t|)²],   δ_t = Q̂(s_t, a_t) − r_t   (6)
//! ```
//!
//! * `ΔE_t` is the fraction of the `T` steps skipped; `α` defaults to the paper's 0.47.
//! * `Q_t` is a [`QualityScore`]: the cosine between the result's audio embedding and the
//!   prompt's where the embedder has an audio side, else [`proxy_quality`]
//!   `Q = 1 − (1 − σ_s)(1 − s_pos)` (documented there).
//! * Eq. 4: offline ([`Gater::train_offline`]) `Q_t` is ranked among the qualities logged for
//!   the same prompt at the other arms (`N_p` of them, as in the paper). Online a request is
//!   seen at one arm only; with [`GaterConfig::rank_window`] `W ≥ 2`, the residual
//!   `Q_t − b̂(x_t)` is ranked among the last `W − 1` residuals (`W` in place of `N_p`), `b̂` an
//!   arm-agnostic ridge regression of `Q` on the context. Ranking the raw `Q_t` would rank
//!   prompts against each other rather than arms (a prompt of low base quality ranks low at
//!   any skip, a ruinous skip costs no more than rank 0): on the simulator that converged to
//!   over-skipping (mean regret ≈ 0.10 after 4 000 requests at W = 64). With the residual it
//!   converges (≈ 0.014), still behind the raw quality (≈ 0.009), so the default is `W = 0`
//!   (`Q̃ = Q` online) and ranks are used where the paper defines them, offline; a noisier,
//!   preference-like `Q` is where the window pays.
//! * Eq. 5: offline, `σ_p²` is the variance of a prompt's logged qualities across arms and
//!   `σ̄²` its mean over the prompts logged at two arms or more; prompts logged once, and every
//!   online update, weigh 1 (their variance across arms is not observed).
//! * Eq. 6: per arm, `Q̂(x) = r₀ + θᵀx` and `û(x) = νᵀx` are weighted ridge regressions on
//!   one design `A = λ_r·I + Σ w·x·xᵀ` ([`GaterConfig::ridge`]): `θ = A⁻¹Σ w·(r − r₀)·x`
//!   minimizes the first term, `ν = A⁻¹Σ w·|δ|·x` the second. `r₀` = [`REWARD_PRIOR`] = 1, the
//!   reward's upper bound: the prior makes arms not yet tried look good (optimism), which a
//!   prior mean of 0 does not (UCB then never leaves the first arm that pays). The two heads
//!   share no parameter, so the paper's `λ` (0.1) scales the loss without moving its minimum
//!   and does not appear. Online, `δ_t` is the error of the prediction made before the update;
//!   offline, of the fitted reward head.
//!
//! # Choice and the conservative fallback
//!
//! For arm `a`, the uncertainty is `u_a(x) = û_a(x) + σ̂·√(xᵀA_a⁻¹x)`: the uncertainty head
//! (how far off the arm's estimates have been in contexts like this) plus the posterior width
//! (how little it has seen of them), `σ̂` the running RMS of `δ`. The arm is
//! `argmax_a Q̂_a + β·σ̂·√(xᵀA_a⁻¹x)` ([`Exploration::Ucb`]: the bonus is the posterior width
//! alone, which shrinks with data; the head does not, and as a bonus it would keep pulling
//! towards noisy arms), or `argmax_a Q̂_a` with a uniform draw at rate ε
//! ([`Exploration::EpsilonGreedy`]), or `argmax_a Q̂_a` alone ([`Exploration::Greedy`]). The
//! gater falls back to [`GaterConfig::conservative_level`] ([`Fallback`]):
//!
//! * `Novel`: when the context's support `1/(xᵀA_pool⁻¹x)` over every context seen (the
//!   effective number of similar contexts) is below [`GaterConfig::min_support`], in every mode;
//! * `Uncertain`: when an exploiting choice (greedy, or ε-greedy's non-random draw) skips more
//!   than the conservative level while its `u_a` exceeds [`GaterConfig::max_uncertainty`]. UCB
//!   seeks uncertainty on purpose and is only held back by the novelty rule.
//!
//! The state ([`Gater::to_bytes`], versioned and checksummed) is saved in the cache's store
//! under [`state_key`] after every update when the cache runs with `SkipPolicy::Gated`.
//!
//! [`sim`] simulates requests with a known optimal skip to measure regret.
//!
//! ```
//! use aria_cache::gater::{Context, Gater, GaterConfig};
//! # fn main() -> aria_cache::Result<()> {
//! let mut g = Gater::new(GaterConfig::default(), 3)?;
//! let ctx = Context { prompt: vec![1.0, 0.0, 0.0], s_pos: 0.8, s_neg: 0.1, q: 1.0,
//!                     duration_ratio: 1.0, steps: 8 };
//! let d = g.decide(&ctx)?;
//! assert!(d.fallback.is_some()); // nothing seen yet: the conservative skip
//! let r = g.update(&d, 0.9)?;    // the result's quality
//! assert!(r.is_finite());
//! let again = Gater::from_bytes(&g.to_bytes())?;
//! assert_eq!(again.updates(), 1);
//! # Ok(()) }
//! ```

mod features;
mod linear;
mod persist;
mod reward;
mod rng;
mod serve;
pub mod sim;

use std::collections::BTreeMap;

pub use features::{Context, Featurizer, FIXED_FEATURES, RATIO_KNOTS, SIMILARITY_KNOTS};
pub use reward::{
    efficiency, proxy_quality, rank_normalize, reward, variance, variance_weights, DefaultQuality,
    QualityInput, QualityScore, RankWindow,
};
pub use rng::Rng;
pub use serve::Serving;

use crate::{CacheError, Result};
use linear::Ridge;

/// The arms: skip percentages of the total steps.
pub const SKIP_PERCENTS: [u32; 14] = [0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65];

/// Largest embedding dimension the gater accepts.
pub const MAX_EMBED_DIM: usize = 1 << 16;
/// Largest projection of the prompt embedding.
pub const MAX_PROMPT_DIMS: usize = 64;

/// Steps skipped by `percent` % of `steps`: `round(percent·steps/100)`, halves up, at most
/// `steps`.
pub fn skip_steps(percent: u32, steps: usize) -> usize {
    ((percent as usize * steps + 50) / 100).min(steps)
}

/// Schedules of at most this many steps (the distilled models) have arm models of their own;
/// longer ones (the base models) share the other set.
pub const DISTILLED_MAX_STEPS: usize = 16;

/// Schedule classes: each has its own model per arm.
pub const SCHEDULE_CLASSES: usize = 2;

/// The schedule class of `steps` (0: distilled, 1: base).
pub fn schedule_class(steps: usize) -> usize {
    usize::from(steps > DISTILLED_MAX_STEPS)
}

/// Whether `level` is the lowest of the levels that skip the same number of steps of `steps`
/// (only those are chosen: at 8 steps the levels 0, 10, 20, 35, 45 and 60 %).
pub fn distinct_level(level: usize, steps: usize) -> bool {
    level == 0
        || skip_steps(SKIP_PERCENTS[level], steps) != skip_steps(SKIP_PERCENTS[level - 1], steps)
}

/// The store key of the gater state for embedder `name`.
pub fn state_key(embedder: &str) -> String {
    format!("skip-gater/{embedder}")
}

/// How the gater explores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Exploration {
    /// Upper confidence bound: `argmax Q̂_a + β·σ̂·√(xᵀA_a⁻¹x)`.
    Ucb {
        /// β ≥ 0.
        beta: f64,
    },
    /// A uniform arm at rate ε, else the greedy one.
    EpsilonGreedy {
        /// ε in [0, 1].
        epsilon: f64,
    },
    /// The greedy arm only (serving after offline training).
    Greedy,
}

/// The gater's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaterConfig {
    /// α of eq. 3, in (0, 1).
    pub alpha: f64,
    /// Exploration rule.
    pub exploration: Exploration,
    /// Ridge prior λ_r > 0 of every arm's design.
    pub ridge: f64,
    /// Online rank window `W` of eq. 4 (0: no rank normalization, `Q̃ = Q`).
    pub rank_window: usize,
    /// Dimensions `P` of the projected prompt embedding.
    pub prompt_dims: usize,
    /// Seed of the projection and of the ε-greedy draws.
    pub seed: u64,
    /// Index into [`SKIP_PERCENTS`] of the conservative fallback.
    pub conservative_level: usize,
    /// Support below which a context counts as novel.
    pub min_support: f64,
    /// Uncertainty above which an exploiting choice falls back.
    pub max_uncertainty: f64,
    /// ε of eq. 5.
    pub variance_eps: f64,
    /// Whether offline training weighs prompts by eq. 5 (else every log weighs 1).
    pub prompt_weighting: bool,
}

impl Default for GaterConfig {
    /// α = 0.47 (the paper's), UCB with β = 1, λ_r = 1, no online rank window (W = 0; see the
    /// module docs), P = 4, the conservative
    /// level 20 % (2 of 8 steps), support ≥ 3, uncertainty ≤ 0.15, ε = 1e-6.
    fn default() -> Self {
        GaterConfig {
            alpha: 0.47,
            exploration: Exploration::Ucb { beta: 1.0 },
            ridge: 1.0,
            rank_window: 0,
            prompt_dims: 4,
            seed: 0,
            conservative_level: 4,
            min_support: 3.0,
            max_uncertainty: 0.15,
            variance_eps: 1e-6,
            prompt_weighting: true,
        }
    }
}

impl GaterConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<()> {
        let bad = |name: &str, reason: String| {
            Err(CacheError::Invalid {
                name: format!("gater {name}"),
                reason,
            })
        };
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return bad("alpha", format!("must be in (0, 1), got {}", self.alpha));
        }
        match self.exploration {
            Exploration::Ucb { beta } if !(beta >= 0.0 && beta.is_finite()) => {
                return bad("UCB beta", format!("must be finite and >= 0, got {beta}"));
            }
            Exploration::EpsilonGreedy { epsilon } if !(0.0..=1.0).contains(&epsilon) => {
                return bad("epsilon", format!("must be in [0, 1], got {epsilon}"));
            }
            _ => {}
        }
        if !(self.ridge > 0.0 && self.ridge.is_finite()) {
            return bad("ridge", format!("must be positive, got {}", self.ridge));
        }
        if self.rank_window == 1 || self.rank_window > persist::MAX_WINDOW {
            return bad(
                "rank_window",
                format!(
                    "must be 0 (off) or in 2..={}, got {}",
                    persist::MAX_WINDOW,
                    self.rank_window
                ),
            );
        }
        if self.prompt_dims > MAX_PROMPT_DIMS {
            return bad(
                "prompt_dims",
                format!(
                    "must be at most {MAX_PROMPT_DIMS}, got {}",
                    self.prompt_dims
                ),
            );
        }
        if self.conservative_level >= SKIP_PERCENTS.len() {
            return bad(
                "conservative_level",
                format!(
                    "must index the {} skip levels, got {}",
                    SKIP_PERCENTS.len(),
                    self.conservative_level
                ),
            );
        }
        for (name, v) in [
            ("min_support", self.min_support),
            ("max_uncertainty", self.max_uncertainty),
            ("variance_eps", self.variance_eps),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return bad(name, format!("must be finite and >= 0, got {v}"));
            }
        }
        Ok(())
    }

    /// Steps the conservative level skips of `steps`.
    pub fn conservative_steps(&self, steps: usize) -> usize {
        let p = SKIP_PERCENTS
            .get(self.conservative_level)
            .copied()
            .unwrap_or(0);
        skip_steps(p, steps)
    }
}

/// Why the gater fell back to the conservative level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// Too few similar contexts seen (support below `min_support`).
    Novel,
    /// The exploiting arm's uncertainty is above `max_uncertainty`.
    Uncertain,
}

/// One decision of the gater, to be passed back to [`Gater::update`] with the result.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Index of the arm into [`SKIP_PERCENTS`].
    pub level: usize,
    /// Its percentage.
    pub percent: u32,
    /// Steps to skip (the start step).
    pub skip_steps: usize,
    /// Total steps `T` of the request.
    pub steps: usize,
    /// Whether an ε-greedy draw picked it at random.
    pub explored: bool,
    /// Set when the conservative level replaced the bandit's choice.
    pub fallback: Option<Fallback>,
    /// `Q̂` of the arm taken.
    pub mean: f64,
    /// `u` of the arm taken.
    pub uncertainty: f64,
    /// The context's support.
    pub support: f64,
    /// The context's features.
    pub features: Vec<f64>,
}

/// One logged request for offline training.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedRequest {
    /// The prompt (logs of one prompt at several arms are ranked together, eq. 4–5).
    pub prompt: String,
    /// Its context.
    pub context: Context,
    /// The skip percentage it ran with (one of [`SKIP_PERCENTS`]).
    pub skip_percent: u32,
    /// The observed quality `Q`.
    pub quality: f64,
}

/// What [`Gater::train_offline`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OfflineReport {
    /// Requests trained on.
    pub requests: usize,
    /// Prompts logged at two arms or more (ranked and weighted within their group).
    pub ranked_prompts: usize,
    /// Requests of prompts logged once (ranked in the window, weight 1).
    pub single: usize,
    /// Smallest and largest weight `w_p` given.
    pub weight_range: (f64, f64),
}

/// The contextual bandit over [`SKIP_PERCENTS`].
#[derive(Debug, Clone, PartialEq)]
pub struct Gater {
    pub(crate) cfg: GaterConfig,
    pub(crate) feat: Featurizer,
    pub(crate) arms: Vec<Ridge>,
    pub(crate) pool: Ridge,
    pub(crate) window: RankWindow,
    /// The arm-agnostic quality baseline `b̂(x)` the online window ranks residuals of.
    pub(crate) baseline: Ridge,
    pub(crate) rng: Rng,
    /// `Σ w·δ²` and `Σ w`, for σ̂.
    pub(crate) sq_delta: f64,
    pub(crate) sq_weight: f64,
    pub(crate) updates: u64,
}

/// The prior mean of every arm's reward, `r₀` in `Q̂_a(x) = r₀ + θ_aᵀx`: the upper bound of
/// eq. 3 (`ΔE ≤ 1`, `Q̃ ≤ 1`), so that the ridge prior makes unseen arms look good (optimism) —
/// and uncertain, which keeps greedy serving from them.
pub const REWARD_PRIOR: f64 = 1.0;

/// Prior of σ̂ (as if `SIGMA_PRIOR_WEIGHT` updates had an error of `SIGMA_PRIOR`).
const SIGMA_PRIOR: f64 = 0.1;
const SIGMA_PRIOR_WEIGHT: f64 = 10.0;

impl Gater {
    /// A gater with no experience, for prompt embeddings of `embed_dim`.
    pub fn new(cfg: GaterConfig, embed_dim: usize) -> Result<Gater> {
        cfg.validate()?;
        let feat = Featurizer::new(embed_dim, cfg.prompt_dims, cfg.seed)?;
        let d = feat.len();
        Ok(Gater {
            arms: (0..SCHEDULE_CLASSES * SKIP_PERCENTS.len())
                .map(|_| Ridge::new(d, cfg.ridge))
                .collect(),
            pool: Ridge::new(d, cfg.ridge),
            window: RankWindow::new(cfg.rank_window),
            baseline: Ridge::new(d, cfg.ridge),
            rng: Rng::new(cfg.seed),
            sq_delta: 0.0,
            sq_weight: 0.0,
            updates: 0,
            feat,
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &GaterConfig {
        &self.cfg
    }

    /// The featurizer.
    pub fn featurizer(&self) -> &Featurizer {
        &self.feat
    }

    /// Updates applied (online and offline).
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// Whether a saved gater can serve under `cfg` for embeddings of `embed_dim`: the
    /// projection (`prompt_dims`, `seed`), the dimension and the ridge prior must match.
    pub fn compatible(&self, cfg: &GaterConfig, embed_dim: usize) -> bool {
        self.cfg.prompt_dims == cfg.prompt_dims
            && self.cfg.seed == cfg.seed
            && self.cfg.ridge == cfg.ridge
            && self.feat.embed_dim() == embed_dim
    }

    /// Takes the run-time parameters of `cfg` (α, exploration, window, fallback thresholds),
    /// keeping what was learned; errors when `cfg` is invalid or not [`Self::compatible`].
    pub fn reconfigure(&mut self, cfg: GaterConfig) -> Result<()> {
        cfg.validate()?;
        if !self.compatible(&cfg, self.feat.embed_dim()) {
            return Err(CacheError::Invalid {
                name: "gater configuration".into(),
                reason: format!(
                    "the saved gater has prompt_dims {}, seed {}, ridge {}; asked for {}, {}, {}",
                    self.cfg.prompt_dims,
                    self.cfg.seed,
                    self.cfg.ridge,
                    cfg.prompt_dims,
                    cfg.seed,
                    cfg.ridge
                ),
            });
        }
        self.window.set_capacity(cfg.rank_window);
        self.cfg = cfg;
        Ok(())
    }

    /// Online eq. 4: the residual `Q − b̂(x)` ranked in the window (then `b̂` learns `Q`); `Q`
    /// itself when the window is off.
    fn online_rank(&mut self, x: &[f64], quality: f64) -> f64 {
        if self.cfg.rank_window == 0 {
            return quality;
        }
        let q = self.window.normalize(quality - self.baseline.mean(x));
        self.baseline.update(x, quality, 0.0, 1.0);
        q
    }

    /// σ̂: the RMS of the reward errors, with a weak prior.
    pub fn sigma(&self) -> f64 {
        ((self.sq_delta + SIGMA_PRIOR_WEIGHT * SIGMA_PRIOR * SIGMA_PRIOR)
            / (self.sq_weight + SIGMA_PRIOR_WEIGHT))
            .sqrt()
    }

    /// The model of `level` for `steps`.
    fn arm(&self, level: usize, steps: usize) -> usize {
        schedule_class(steps) * SKIP_PERCENTS.len() + level
    }

    /// `(Q̂_a, u_a, σ̂·width_a)` of every level for `x` at `steps` (levels that repeat a lower
    /// one's step count get −∞ means).
    fn estimates(&self, x: &[f64], steps: usize) -> Vec<(f64, f64, f64)> {
        let s = self.sigma();
        let c = schedule_class(steps) * SKIP_PERCENTS.len();
        self.arms[c..c + SKIP_PERCENTS.len()]
            .iter()
            .enumerate()
            .map(|(l, a)| {
                if !distinct_level(l, steps) {
                    return (f64::NEG_INFINITY, f64::INFINITY, 0.0);
                }
                let w = s * a.width(x);
                (REWARD_PRIOR + a.mean(x), a.head(x) + w, w)
            })
            .collect()
    }

    /// The arm for `ctx` (see the module docs for the rule and the fallback).
    pub fn decide(&mut self, ctx: &Context) -> Result<Decision> {
        let x = self.feat.features(ctx)?;
        let w = self.pool.width(&x);
        let support = if w > 0.0 {
            1.0 / (w * w)
        } else {
            f64::INFINITY
        };
        let est = self.estimates(&x, ctx.steps);
        let mut cons = self.cfg.conservative_level;
        while !distinct_level(cons, ctx.steps) {
            cons -= 1;
        }
        let argmax = |f: &dyn Fn(&(f64, f64, f64)) -> f64| {
            let mut best = 0;
            for i in 1..est.len() {
                if f(&est[i]) > f(&est[best]) {
                    best = i;
                }
            }
            best
        };
        let (mut level, mut explored, mut fallback) = (cons, false, None);
        if support < self.cfg.min_support {
            fallback = Some(Fallback::Novel);
        } else {
            let exploit = match self.cfg.exploration {
                Exploration::Ucb { beta } => {
                    level = argmax(&|e| e.0 + beta * e.2);
                    false
                }
                Exploration::EpsilonGreedy { epsilon } => {
                    if self.rng.uniform() < epsilon {
                        level = self.rng.below(est.len());
                        while !distinct_level(level, ctx.steps) {
                            level -= 1;
                        }
                        explored = true;
                        false
                    } else {
                        level = argmax(&|e| e.0);
                        true
                    }
                }
                Exploration::Greedy => {
                    level = argmax(&|e| e.0);
                    true
                }
            };
            if exploit
                && est[level].1 > self.cfg.max_uncertainty
                && skip_steps(SKIP_PERCENTS[level], ctx.steps)
                    > skip_steps(SKIP_PERCENTS[cons], ctx.steps)
            {
                level = cons;
                fallback = Some(Fallback::Uncertain);
            }
        }
        let percent = SKIP_PERCENTS[level];
        Ok(Decision {
            level,
            percent,
            skip_steps: skip_steps(percent, ctx.steps),
            steps: ctx.steps,
            explored,
            fallback,
            mean: est[level].0,
            uncertainty: est[level].1,
            support,
            features: x,
        })
    }

    /// The greedy arm's level for `ctx`, ignoring exploration and fallback (for evaluation).
    pub fn greedy_level(&self, ctx: &Context) -> Result<usize> {
        let x = self.feat.features(ctx)?;
        let est = self.estimates(&x, ctx.steps);
        let mut best = 0;
        for i in 1..est.len() {
            if est[i].0 > est[best].0 {
                best = i;
            }
        }
        Ok(best)
    }

    /// Learns from the result of `d` with quality `Q` (eq. 3–4, 6); returns the reward.
    pub fn update(&mut self, d: &Decision, quality: f64) -> Result<f64> {
        if d.features.len() != self.feat.len() || d.level >= SKIP_PERCENTS.len() || d.steps == 0 {
            return Err(CacheError::Invalid {
                name: "gater decision".into(),
                reason: format!(
                    "{} features at level {} of {} steps; this gater has {} features and {} \
                     levels",
                    d.features.len(),
                    d.level,
                    d.steps,
                    self.feat.len(),
                    SKIP_PERCENTS.len()
                ),
            });
        }
        check_quality(quality)?;
        let q = self.online_rank(&d.features, quality);
        let r = reward(self.cfg.alpha, efficiency(d.skip_steps, d.steps), q);
        let a = self.arm(d.level, d.steps);
        let arm = &mut self.arms[a];
        let delta = REWARD_PRIOR + arm.mean(&d.features) - r;
        arm.update(&d.features, r - REWARD_PRIOR, delta.abs(), 1.0);
        self.pool.update(&d.features, 0.0, 0.0, 1.0);
        self.sq_delta += delta * delta;
        self.sq_weight += 1.0;
        self.updates += 1;
        Ok(r)
    }

    /// Learns from logged requests (eq. 3–6; see the module docs for the ranking and the
    /// weights). Validates every log first: nothing is learned from a batch with a bad one.
    pub fn train_offline(&mut self, logs: &[LoggedRequest]) -> Result<OfflineReport> {
        let mut xs = Vec::with_capacity(logs.len());
        let mut levels = Vec::with_capacity(logs.len());
        for (i, l) in logs.iter().enumerate() {
            let Some(level) = SKIP_PERCENTS.iter().position(|&p| p == l.skip_percent) else {
                return Err(CacheError::Invalid {
                    name: format!("logged request {i}"),
                    reason: format!("skip {} % is not one of the levels", l.skip_percent),
                });
            };
            check_quality(l.quality).map_err(|e| CacheError::Invalid {
                name: format!("logged request {i}"),
                reason: e.to_string(),
            })?;
            xs.push(self.feat.features(&l.context)?);
            levels.push(self.arm(level, l.context.steps));
        }
        let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, l) in logs.iter().enumerate() {
            groups.entry(l.prompt.as_str()).or_default().push(i);
        }
        let mut q_tilde = vec![0.0; logs.len()];
        let mut weight = vec![1.0; logs.len()];
        let multi: Vec<&Vec<usize>> = groups.values().filter(|g| g.len() >= 2).collect();
        let vars: Vec<f64> = multi
            .iter()
            .map(|g| variance(&g.iter().map(|&i| logs[i].quality).collect::<Vec<_>>()))
            .collect();
        let all_flat = !self.cfg.prompt_weighting || vars.iter().all(|&v| v == 0.0);
        let ws = variance_weights(&vars, self.cfg.variance_eps);
        for (gi, g) in multi.iter().enumerate() {
            for &i in g.iter() {
                let others = g.iter().filter(|&&j| j != i).map(|&j| logs[j].quality);
                q_tilde[i] = rank_normalize(logs[i].quality, others);
                weight[i] = if all_flat { 1.0 } else { ws[gi] };
            }
        }
        let mut single = 0;
        for (i, l) in logs.iter().enumerate() {
            if groups[l.prompt.as_str()].len() < 2 {
                q_tilde[i] = self.online_rank(&xs[i], l.quality);
                single += 1;
            } else {
                self.baseline.update(&xs[i], l.quality, 0.0, 1.0);
            }
        }
        let steps_of = |i: usize| logs[i].context.steps;
        let rewards: Vec<f64> = (0..logs.len())
            .map(|i| {
                let s = skip_steps(logs[i].skip_percent, steps_of(i));
                reward(self.cfg.alpha, efficiency(s, steps_of(i)), q_tilde[i])
            })
            .collect();
        // Pass 1: the reward heads (first term of eq. 6) and the pooled design.
        for i in 0..logs.len() {
            self.arms[levels[i]].update(&xs[i], rewards[i] - REWARD_PRIOR, 0.0, weight[i]);
            self.pool.update(&xs[i], 0.0, 0.0, 1.0);
        }
        // Pass 2: the uncertainty heads on the fitted errors (second term).
        for i in 0..logs.len() {
            let arm = &mut self.arms[levels[i]];
            let delta = REWARD_PRIOR + arm.mean(&xs[i]) - rewards[i];
            arm.update_head(&xs[i], delta.abs(), weight[i]);
            self.sq_delta += weight[i] * delta * delta;
            self.sq_weight += weight[i];
        }
        self.updates += logs.len() as u64;
        let lo = weight.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = weight.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Ok(OfflineReport {
            requests: logs.len(),
            ranked_prompts: multi.len(),
            single,
            weight_range: if logs.is_empty() {
                (1.0, 1.0)
            } else {
                (lo, hi)
            },
        })
    }

    /// The versioned, checksummed state (see [`Self::from_bytes`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        persist::encode(self)
    }

    /// Restores a state written by [`Self::to_bytes`]; errors (never panics) on bytes that are
    /// truncated, corrupt, of another version or out of range.
    pub fn from_bytes(bytes: &[u8]) -> Result<Gater> {
        persist::decode(bytes)
    }

    /// Loads the gater for `embedder` from `store` (fresh when none is saved or the saved one is
    /// not [`Self::compatible`] with `cfg`, e.g. after a change of embedder); errors on a
    /// corrupt saved state or a store failure.
    pub fn load(
        store: &dyn crate::Store,
        embedder: &str,
        embed_dim: usize,
        cfg: GaterConfig,
    ) -> Result<Gater> {
        match store.get_state(&state_key(embedder))? {
            Some(b) => {
                let mut g = Gater::from_bytes(&b)?;
                if g.compatible(&cfg, embed_dim) {
                    g.reconfigure(cfg)?;
                    Ok(g)
                } else {
                    Gater::new(cfg, embed_dim)
                }
            }
            None => Gater::new(cfg, embed_dim),
        }
    }

    /// Saves the state in `store` under [`state_key`]`(embedder)`.
    pub fn save(&self, store: &mut dyn crate::Store, embedder: &str) -> Result<()> {
        store.put_state(&state_key(embedder), &self.to_bytes())
    }
}

fn check_quality(q: f64) -> Result<()> {
    if q.is_finite() {
        Ok(())
    } else {
        Err(CacheError::Invalid {
            name: "quality".into(),
            reason: format!("must be finite, got {q}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_map_onto_the_schedule() {
        let eight: Vec<usize> = SKIP_PERCENTS.iter().map(|&p| skip_steps(p, 8)).collect();
        assert_eq!(eight, vec![0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4, 5, 5]);
        let fifty: Vec<usize> = SKIP_PERCENTS.iter().map(|&p| skip_steps(p, 50)).collect();
        assert_eq!(fifty[1], 3); // 2.5 rounds up
        assert_eq!(fifty[13], 33);
        assert_eq!(fifty[10], 25);
        assert_eq!(skip_steps(65, 100), 65);
        assert_eq!(skip_steps(65, 0), 0);
        assert_eq!(GaterConfig::default().conservative_steps(8), 2);
    }

    #[test]
    fn bad_configs_are_refused() {
        for c in [
            GaterConfig {
                alpha: 1.0,
                ..Default::default()
            },
            GaterConfig {
                rank_window: 1,
                ..Default::default()
            },
            GaterConfig {
                conservative_level: 14,
                ..Default::default()
            },
            GaterConfig {
                exploration: Exploration::EpsilonGreedy { epsilon: 2.0 },
                ..Default::default()
            },
            GaterConfig {
                min_support: f64::NAN,
                ..Default::default()
            },
        ] {
            assert!(Gater::new(c, 4).is_err(), "{c:?}");
        }
    }
}
