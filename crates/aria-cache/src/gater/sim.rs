//! A simulator of warm-started requests with a known optimal skip, to measure the gater's
//! regret (real quality is not measurable with random weights).
//!
//! A request draws a prompt from a fixed pool of random unit embeddings, a similarity
//! `s ~ U(0.35, 1)`, a duration ratio `ρ = exp(U(ln 0.5, ln 1.5))` (the duration gate's range),
//! `s_neg ~ U(0, 0.3)`, `q ~ U(0.9, 1)` and `T` ∈ {8, 50} (8 at the rate [`SimConfig::distilled_share`]).
//! The quality of a result that skipped the fraction `f` of its steps is
//!
//! ```text
//! Q(f) = b_p − k_p·max(0, f − f*(s, ρ)) + N(0, noise²)
//! f*(s, ρ) = clamp(1.2·(s − 0.4) − 0.6·|ln ρ|, 0, 0.65)
//! b_p = 0.75 + 0.1·tanh(3·e_pᵀu₁),   k_p = 2 + tanh(3·e_pᵀu₂)
//! ```
//!
//! with `u₁`, `u₂` fixed random directions: quality holds until the skip passes the optimum
//! `f*` (closer references and smaller stretches tolerate more), then falls at a prompt-dependent
//! rate `k_p ∈ (1, 3)`; so prompts differ in base quality and in their variance across arms.
//! The oracle arm maximizes the expected reward of eq. 3 on the raw quality,
//! `α·f + (1 − α)·E[Q(f)]` (since `k_p > α/(1 − α)`, that is the arm at or just past `f*`),
//! and the regret of an arm is the gap to it.

use super::{skip_steps, Context, Decision, Gater, LoggedRequest, Rng, SKIP_PERCENTS};
use crate::Result;

/// The simulator's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimConfig {
    /// Dimension of the prompt embeddings.
    pub embed_dim: usize,
    /// Distinct prompts in the pool.
    pub prompts: usize,
    /// Standard deviation of the quality noise.
    pub noise: f64,
    /// Share of 8-step (distilled) requests; the rest have 50 steps.
    pub distilled_share: f64,
    /// α of the reward the oracle maximizes.
    pub alpha: f64,
    /// Seed of every draw.
    pub seed: u64,
}

impl Default for SimConfig {
    /// 16-dimensional embeddings, 64 prompts, noise 0.02, all 8-step (distilled), α = 0.47,
    /// seed 7.
    fn default() -> Self {
        SimConfig {
            embed_dim: 16,
            prompts: 64,
            noise: 0.02,
            distilled_share: 1.0,
            alpha: 0.47,
            seed: 7,
        }
    }
}

/// One simulated request.
#[derive(Debug, Clone, PartialEq)]
pub struct SimRequest {
    /// Index of its prompt in the pool.
    pub prompt: usize,
    /// What the gater sees.
    pub context: Context,
    /// The optimum skip fraction `f*`.
    pub optimum: f64,
    /// The prompt's base quality `b_p`.
    pub base: f64,
    /// The prompt's quality slope `k_p` past the optimum.
    pub slope: f64,
}

/// The simulator (see the module docs).
#[derive(Debug, Clone)]
pub struct Simulator {
    cfg: SimConfig,
    rng: Rng,
    pool: Vec<Vec<f32>>,
    u1: Vec<f32>,
    u2: Vec<f32>,
}

fn unit(rng: &mut Rng, d: usize) -> Vec<f32> {
    let v: Vec<f64> = (0..d).map(|_| rng.normal()).collect();
    let n = v.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
    v.iter().map(|x| (x / n) as f32).collect()
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

/// `f*(s, ρ)` of the module docs.
pub fn optimum(s_pos: f64, duration_ratio: f64) -> f64 {
    (1.2 * (s_pos - 0.4) - 0.6 * duration_ratio.ln().abs()).clamp(0.0, 0.65)
}

impl Simulator {
    /// A simulator with its prompt pool drawn from `cfg.seed`.
    pub fn new(cfg: SimConfig) -> Simulator {
        let mut rng = Rng::new(cfg.seed);
        let d = cfg.embed_dim.max(1);
        let u1 = unit(&mut rng, d);
        let u2 = unit(&mut rng, d);
        let pool = (0..cfg.prompts.max(1)).map(|_| unit(&mut rng, d)).collect();
        Simulator {
            cfg,
            rng,
            pool,
            u1,
            u2,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// A request of prompt `prompt` (modulo the pool) with the given similarity, ratio and
    /// steps.
    pub fn request_with(
        &mut self,
        prompt: usize,
        s_pos: f64,
        duration_ratio: f64,
        steps: usize,
    ) -> SimRequest {
        let prompt = prompt % self.pool.len();
        let e = self.pool[prompt].clone();
        let base = 0.75 + 0.1 * (3.0 * dot(&e, &self.u1)).tanh();
        let slope = 2.0 + (3.0 * dot(&e, &self.u2)).tanh();
        let context = Context {
            prompt: e,
            s_pos: s_pos as f32,
            s_neg: self.rng.range(0.0, 0.3) as f32,
            q: self.rng.range(0.9, 1.0) as f32,
            duration_ratio,
            steps,
        };
        SimRequest {
            prompt,
            context,
            optimum: optimum(s_pos, duration_ratio),
            base,
            slope,
        }
    }

    /// The next request of the stream.
    pub fn next_request(&mut self) -> SimRequest {
        let p = self.rng.below(self.pool.len());
        let s = self.rng.range(0.35, 1.0);
        let ratio = self.rng.range(0.5f64.ln(), 1.5f64.ln()).exp();
        let steps = if self.rng.uniform() < self.cfg.distilled_share {
            8
        } else {
            50
        };
        self.request_with(p, s, ratio, steps)
    }

    /// `E[Q]` of `req` run at arm `level`.
    pub fn expected_quality(&self, req: &SimRequest, level: usize) -> f64 {
        let t = req.context.steps.max(1);
        let f = skip_steps(SKIP_PERCENTS[level.min(13)], t) as f64 / t as f64;
        req.base - req.slope * (f - req.optimum).max(0.0)
    }

    /// A noisy quality of `req` run at arm `level`.
    pub fn quality(&mut self, req: &SimRequest, level: usize) -> f64 {
        self.expected_quality(req, level) + self.cfg.noise * self.rng.normal()
    }

    /// The expected raw reward `α·f + (1 − α)·E[Q]` of arm `level`.
    pub fn expected_reward(&self, req: &SimRequest, level: usize) -> f64 {
        let t = req.context.steps.max(1);
        let f = skip_steps(SKIP_PERCENTS[level.min(13)], t) as f64 / t as f64;
        self.cfg.alpha * f + (1.0 - self.cfg.alpha) * self.expected_quality(req, level)
    }

    /// The oracle's arm (the lowest of equally good ones).
    pub fn oracle(&self, req: &SimRequest) -> usize {
        let mut best = 0;
        for l in 1..SKIP_PERCENTS.len() {
            if self.expected_reward(req, l) > self.expected_reward(req, best) + 1e-12 {
                best = l;
            }
        }
        best
    }

    /// The regret of arm `level` against the oracle.
    pub fn regret(&self, req: &SimRequest, level: usize) -> f64 {
        self.expected_reward(req, self.oracle(req)) - self.expected_reward(req, level)
    }

    /// Logs of `prompts` requests from the stream, each run at every arm (the offline sweep of
    /// the paper's training).
    pub fn sweep(&mut self, prompts: usize) -> Vec<LoggedRequest> {
        let mut out = Vec::with_capacity(prompts * SKIP_PERCENTS.len());
        for i in 0..prompts {
            let req = self.next_request();
            for (level, &p) in SKIP_PERCENTS.iter().enumerate() {
                out.push(LoggedRequest {
                    prompt: format!("request {i} (prompt {})", req.prompt),
                    context: req.context.clone(),
                    skip_percent: p,
                    quality: self.quality(&req, level),
                });
            }
        }
        out
    }
}

/// What [`run`] observed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimRun {
    /// The regret of each request.
    pub regrets: Vec<f64>,
    /// The fraction of steps each request skipped.
    pub skipped: Vec<f64>,
    /// Requests where the gater fell back.
    pub fallbacks: usize,
    /// Requests where the chosen skip (in steps) equals the oracle's.
    pub oracle_matches: usize,
}

impl SimRun {
    /// Mean regret over `range` of the requests.
    pub fn mean_regret(&self, range: std::ops::Range<usize>) -> f64 {
        let v =
            &self.regrets[range.start.min(self.regrets.len())..range.end.min(self.regrets.len())];
        v.iter().sum::<f64>() / v.len().max(1) as f64
    }
}

/// Serves `n` requests of `sim` with `gater`, updating it online after each.
pub fn run(gater: &mut Gater, sim: &mut Simulator, n: usize) -> Result<SimRun> {
    let mut out = SimRun::default();
    for _ in 0..n {
        let req = sim.next_request();
        let d: Decision = gater.decide(&req.context)?;
        let q = sim.quality(&req, d.level);
        gater.update(&d, q)?;
        out.regrets.push(sim.regret(&req, d.level));
        out.skipped
            .push(d.skip_steps as f64 / d.steps.max(1) as f64);
        out.fallbacks += usize::from(d.fallback.is_some());
        let o = sim.oracle(&req);
        out.oracle_matches += usize::from(skip_steps(SKIP_PERCENTS[o], d.steps) == d.skip_steps);
    }
    Ok(out)
}
