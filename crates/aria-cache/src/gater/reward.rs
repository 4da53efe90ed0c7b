//! The reward of eq. 3 with the rank normalization of eq. 4 and the prompt-variance weights of
//! eq. 5, and the quality `Q` it is built on ([`QualityScore`]).

use std::collections::VecDeque;

use crate::Result;

/// Eq. 3: `r = α·ΔE + (1 − α)·Q̃`.
pub fn reward(alpha: f64, delta_e: f64, q_tilde: f64) -> f64 {
    alpha * delta_e + (1.0 - alpha) * q_tilde
}

/// `ΔE`, the normalized efficiency gain: the fraction of the `T` steps skipped.
pub fn efficiency(skipped: usize, steps: usize) -> f64 {
    skipped as f64 / steps.max(1) as f64
}

/// Eq. 4 over a set: `Q̃ = rank(Q)/(N − 1)` with `rank` the number of values below `q` plus
/// half the other values equal to it (ties share their mean rank); 0.5 when `N = 1`.
pub fn rank_normalize(q: f64, others: impl Iterator<Item = f64>) -> f64 {
    let (mut below, mut equal, mut n) = (0.0, 0.0, 0usize);
    for o in others {
        n += 1;
        if o < q {
            below += 1.0;
        } else if o == q {
            equal += 1.0;
        }
    }
    if n == 0 {
        return 0.5;
    }
    (below + 0.5 * equal) / n as f64
}

/// Online rank normalization: `Q_t` ranked among the last `W − 1` observed qualities (eq. 4
/// with `N_p` = `W`; offline, [`super::Gater::train_offline`] ranks among a prompt's logged
/// arms, the paper's exact setting). A capacity of 0 disables it (`Q̃ = Q`).
#[derive(Debug, Clone, PartialEq)]
pub struct RankWindow {
    pub(crate) cap: usize,
    pub(crate) buf: VecDeque<f64>,
}

impl RankWindow {
    /// A window of `cap` values (the current one included).
    pub fn new(cap: usize) -> RankWindow {
        RankWindow {
            cap,
            buf: VecDeque::with_capacity(cap),
        }
    }

    /// `Q̃_t`, then remembers `Q_t`.
    pub fn normalize(&mut self, q: f64) -> f64 {
        if self.cap == 0 {
            return q;
        }
        let out = rank_normalize(q, self.buf.iter().copied());
        self.push(q);
        out
    }

    /// Remembers `q` without normalizing it.
    pub fn push(&mut self, q: f64) {
        if self.cap == 0 {
            return;
        }
        while self.buf.len() >= self.cap.saturating_sub(1).max(1) {
            self.buf.pop_front();
        }
        self.buf.push_back(q);
    }

    /// Changes the capacity, dropping the oldest values as needed.
    pub fn set_capacity(&mut self, cap: usize) {
        self.cap = cap;
        while self.buf.len() > cap.saturating_sub(1) {
            self.buf.pop_front();
        }
    }
}

/// Eq. 5: `w_p = σ_p² / (σ̄² + ε)` for each prompt's variance `σ_p²`, `σ̄²` their mean.
pub fn variance_weights(variances: &[f64], eps: f64) -> Vec<f64> {
    if variances.is_empty() {
        return Vec::new();
    }
    let mean = variances.iter().sum::<f64>() / variances.len() as f64;
    variances.iter().map(|v| v / (mean + eps)).collect()
}

/// The population variance of `v` (0 for fewer than two values).
pub fn variance(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64
}

/// What a quality score may look at, after a warm-started generation.
#[derive(Debug, Clone, Copy)]
pub struct QualityInput<'a> {
    /// The prompt's embedding (unit vector).
    pub prompt: &'a [f32],
    /// The result's audio embedding in the same space, where the embedder has an audio side.
    pub audio: Option<&'a [f32]>,
    /// The reference's similarity to the prompt, `s_pos`.
    pub s_pos: f32,
    /// σ of the schedule at the start step (1: cold, the reference did not enter).
    pub sigma_start: f32,
}

/// The quality `Q_t` of one result, for the reward.
pub trait QualityScore: Send + Sync {
    /// A short name, for messages.
    fn name(&self) -> &str;
    /// `Q_t` for `x`.
    fn score(&self, x: &QualityInput<'_>) -> Result<f64>;
}

/// The default [`QualityScore`]: the cache manager's `Q` where the embedder has an audio side
/// (CLAP-like; [`embedding_quality`](crate::manager::embedding_quality), the cosine between the
/// result's audio embedding and the prompt embedding), else [`proxy_quality`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultQuality;

impl QualityScore for DefaultQuality {
    fn name(&self) -> &str {
        "embedder cosine, else reference-share proxy"
    }

    fn score(&self, x: &QualityInput<'_>) -> Result<f64> {
        match x.audio {
            Some(a) => crate::manager::embedding_quality(x.prompt, a),
            None => Ok(proxy_quality(x.s_pos, x.sigma_start)),
        }
    }
}

/// The proxy without an audio embedder: `Q = 1 − (1 − σ_s)·(1 − s_pos)`.
///
/// The warm start is `x_s = (1 − σ_s)·x̂₀ + σ_s·ε`: the reference's share of it is `1 − σ_s`.
/// The proxy interpolates the result's similarity to the prompt between a cold generation
/// (taken as 1) and the reference's own similarity `s_pos`, by that share. It knows nothing of
/// the generated audio; it only makes the trade-off of eq. 3 depend on the skip and on how
/// close the reference is. Inputs are clamped (`σ` to [0, 1], `s_pos` to [−1, 1]).
pub fn proxy_quality(s_pos: f32, sigma_start: f32) -> f64 {
    let s = f64::from(s_pos).clamp(-1.0, 1.0);
    let sigma = if sigma_start.is_finite() {
        f64::from(sigma_start).clamp(0.0, 1.0)
    } else {
        1.0
    };
    1.0 - (1.0 - sigma) * (1.0 - s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_follow_eq_4() {
        // Among 14 arms the best gets 1, the worst 0.
        let qs: Vec<f64> = (0..14).map(f64::from).collect();
        assert_eq!(rank_normalize(13.0, qs[..13].iter().copied()), 1.0);
        assert_eq!(rank_normalize(0.0, qs[1..].iter().copied()), 0.0);
        assert_eq!(rank_normalize(1.0, [1.0, 1.0].into_iter()), 0.5);
        let mut w = RankWindow::new(3);
        assert_eq!(w.normalize(0.5), 0.5);
        assert_eq!(w.normalize(0.7), 1.0);
        assert_eq!(w.normalize(0.6), 0.5);
        assert_eq!(w.buf.len(), 2);
        assert_eq!(RankWindow::new(0).normalize(0.3), 0.3);
    }

    #[test]
    fn weights_follow_eq_5() {
        let w = variance_weights(&[1.0, 3.0], 0.0);
        assert_eq!(w, vec![0.5, 1.5]);
        assert_eq!(variance(&[1.0, 3.0]), 1.0);
    }

    #[test]
    fn proxy_and_cosine() {
        assert_eq!(proxy_quality(0.6, 1.0), 1.0);
        assert!((proxy_quality(0.6, 0.0) - 0.6).abs() < 1e-6);
        let q = DefaultQuality;
        let p = [1.0f32, 0.0];
        let x = QualityInput {
            prompt: &p,
            audio: Some(&[0.0, 2.0]),
            s_pos: 0.9,
            sigma_start: 0.5,
        };
        assert!(q.score(&x).unwrap().abs() < 1e-12);
        let bad = QualityInput {
            audio: Some(&[1.0]),
            ..x
        };
        assert!(q.score(&bad).is_err());
    }
}
