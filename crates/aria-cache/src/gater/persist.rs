//! The gater's byte format (little endian):
//!
//! ```text
//! "ARIAGATE" | version u32 = 1 | config | embed_dim u64 | d u64 | arms u64
//! | rng u64 | Σwδ² f64 | Σw f64 | updates u64 | window: n u64, n × f64
//! | pooled design, then the quality baseline, each: flag u8 (0: still the prior, nothing follows; 1:) A⁻¹'s upper triangle
//!   row by row d(d+1)/2 f64, b d f64, b_u d f64, weight f64 | per arm model: the same
//! | FNV-1a 64 checksum of everything before
//! ```
//!
//! The projection is not stored: it is redrawn from the seed.

use super::linear::Ridge;
use super::reward::RankWindow;
use super::rng::Rng;
use super::{
    Exploration, Featurizer, Gater, GaterConfig, FIXED_FEATURES, MAX_EMBED_DIM, SKIP_PERCENTS,
};
use crate::{CacheError, Result};

const MAGIC: &[u8; 8] = b"ARIAGATE";
const VERSION: u32 = 1;
/// Largest rank window accepted.
pub const MAX_WINDOW: usize = 1 << 20;

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

struct W(Vec<u8>);

impl W {
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn f64(&mut self, v: f64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn f64s(&mut self, v: &[f64]) {
        v.iter().for_each(|x| self.f64(*x));
    }
    fn ridge(&mut self, r: &Ridge, lambda: f64) {
        if r.is_prior(lambda) {
            self.0.push(0);
            return;
        }
        self.0.push(1);
        for i in 0..r.d {
            self.f64s(&r.a_inv[i * r.d + i..(i + 1) * r.d]);
        }
        self.f64s(&r.b);
        self.f64s(&r.b_u);
        self.f64(r.weight);
    }
}

pub(crate) fn encode(g: &Gater) -> Vec<u8> {
    let mut w = W(Vec::new());
    w.0.extend_from_slice(MAGIC);
    w.0.extend_from_slice(&VERSION.to_le_bytes());
    let c = &g.cfg;
    w.f64(c.alpha);
    let (tag, p) = match c.exploration {
        Exploration::Ucb { beta } => (0u8, beta),
        Exploration::EpsilonGreedy { epsilon } => (1, epsilon),
        Exploration::Greedy => (2, 0.0),
    };
    w.0.push(tag);
    w.f64(p);
    w.f64(c.ridge);
    w.u64(c.rank_window as u64);
    w.u64(c.prompt_dims as u64);
    w.u64(c.seed);
    w.u64(c.conservative_level as u64);
    w.f64(c.min_support);
    w.f64(c.max_uncertainty);
    w.f64(c.variance_eps);
    w.0.push(u8::from(c.prompt_weighting));
    w.u64(g.feat.embed_dim() as u64);
    w.u64(g.feat.len() as u64);
    w.u64(g.arms.len() as u64);
    w.u64(g.rng.0);
    w.f64(g.sq_delta);
    w.f64(g.sq_weight);
    w.u64(g.updates);
    w.u64(g.window.buf.len() as u64);
    for q in &g.window.buf {
        w.f64(*q);
    }
    w.ridge(&g.pool, c.ridge);
    w.ridge(&g.baseline, c.ridge);
    for a in &g.arms {
        w.ridge(a, c.ridge);
    }
    let h = fnv1a(&w.0);
    w.u64(h);
    w.0
}

fn corrupt(reason: impl Into<String>) -> CacheError {
    CacheError::Invalid {
        name: "saved skip gater".into(),
        reason: reason.into(),
    }
}

struct R<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> R<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(corrupt(format!(
                "truncated: {what} needs {n} bytes at offset {}, {} left",
                self.at,
                self.b.len() - self.at
            )));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let s = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    fn usize(&mut self, what: &str, max: usize) -> Result<usize> {
        let v = self.u64(what)?;
        if v > max as u64 {
            return Err(corrupt(format!("{what} is {v}, above {max}")));
        }
        Ok(v as usize)
    }
    fn f64(&mut self, what: &str) -> Result<f64> {
        let v = f64::from_bits(self.u64(what)?);
        if !v.is_finite() {
            return Err(corrupt(format!("{what} is not finite")));
        }
        Ok(v)
    }
    fn f64s(&mut self, n: usize, what: &str) -> Result<Vec<f64>> {
        // Checked before allocating.
        let bytes = n
            .checked_mul(8)
            .ok_or_else(|| corrupt(format!("{what}: {n} values overflow")))?;
        if self.b.len() - self.at < bytes {
            return Err(corrupt(format!(
                "truncated: {what} needs {bytes} bytes at offset {}, {} left",
                self.at,
                self.b.len() - self.at
            )));
        }
        (0..n).map(|_| self.f64(what)).collect()
    }
    fn ridge(&mut self, d: usize, lambda: f64, what: &str) -> Result<Ridge> {
        match self.u8(&format!("{what} flag"))? {
            0 => return Ok(Ridge::new(d, lambda)),
            1 => {}
            f => return Err(corrupt(format!("{what} flag is {f}"))),
        }
        let tri = self.f64s(d * (d + 1) / 2, &format!("{what} design"))?;
        let mut a_inv = vec![0.0; d * d];
        let mut k = 0;
        for i in 0..d {
            for j in i..d {
                a_inv[i * d + j] = tri[k];
                a_inv[j * d + i] = tri[k];
                k += 1;
            }
        }
        let b = self.f64s(d, &format!("{what} reward head"))?;
        let b_u = self.f64s(d, &format!("{what} uncertainty head"))?;
        let weight = self.f64(&format!("{what} weight"))?;
        if weight < 0.0 {
            return Err(corrupt(format!("{what} weight is negative")));
        }
        Ok(Ridge::from_parts(d, a_inv, b, b_u, weight))
    }
}

pub(crate) fn decode(bytes: &[u8]) -> Result<Gater> {
    if bytes.len() < MAGIC.len() + 4 + 8 {
        return Err(corrupt(format!(
            "truncated: {} bytes, not even a header",
            bytes.len()
        )));
    }
    if &bytes[..8] != MAGIC {
        return Err(corrupt("not a skip gater state (bad magic)"));
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != VERSION {
        return Err(corrupt(format!(
            "format version {version}, this build reads {VERSION}"
        )));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    let mut s = [0u8; 8];
    s.copy_from_slice(sum);
    if fnv1a(body) != u64::from_le_bytes(s) {
        return Err(corrupt("checksum mismatch (truncated or corrupt)"));
    }
    let mut r = R { b: body, at: 12 };
    let alpha = r.f64("alpha")?;
    let tag = r.u8("exploration")?;
    let p = r.f64("exploration parameter")?;
    let exploration = match tag {
        0 => Exploration::Ucb { beta: p },
        1 => Exploration::EpsilonGreedy { epsilon: p },
        2 => Exploration::Greedy,
        t => return Err(corrupt(format!("unknown exploration tag {t}"))),
    };
    let cfg = GaterConfig {
        alpha,
        exploration,
        ridge: r.f64("ridge")?,
        rank_window: r.usize("rank_window", MAX_WINDOW)?,
        prompt_dims: r.usize("prompt_dims", super::MAX_PROMPT_DIMS)?,
        seed: r.u64("seed")?,
        conservative_level: r.usize("conservative_level", SKIP_PERCENTS.len())?,
        min_support: r.f64("min_support")?,
        max_uncertainty: r.f64("max_uncertainty")?,
        variance_eps: r.f64("variance_eps")?,
        prompt_weighting: match r.u8("prompt_weighting")? {
            0 => false,
            1 => true,
            v => return Err(corrupt(format!("prompt_weighting flag is {v}"))),
        },
    };
    cfg.validate().map_err(|e| corrupt(e.to_string()))?;
    let embed_dim = r.usize("embedding dimension", MAX_EMBED_DIM)?;
    let d = r.usize("feature count", FIXED_FEATURES + super::MAX_PROMPT_DIMS)?;
    if d != FIXED_FEATURES + cfg.prompt_dims {
        return Err(corrupt(format!(
            "{d} features, expected {} for prompt_dims {}",
            FIXED_FEATURES + cfg.prompt_dims,
            cfg.prompt_dims
        )));
    }
    let want = super::SCHEDULE_CLASSES * SKIP_PERCENTS.len();
    let arms = r.usize("arm count", want)?;
    if arms != want {
        return Err(corrupt(format!("{arms} arm models, expected {want}")));
    }
    let rng = Rng(r.u64("rng state")?);
    let sq_delta = r.f64("error sum")?;
    let sq_weight = r.f64("error weight")?;
    let updates = r.u64("update count")?;
    let n = r.usize("window length", MAX_WINDOW)?;
    if cfg.rank_window > 0 && n >= cfg.rank_window {
        return Err(corrupt(format!(
            "window holds {n} values, its capacity is {}",
            cfg.rank_window
        )));
    }
    let mut window = RankWindow::new(cfg.rank_window);
    window.buf.extend(r.f64s(n, "window")?);
    let pool = r.ridge(d, cfg.ridge, "pooled")?;
    let baseline = r.ridge(d, cfg.ridge, "quality baseline")?;
    let arms = (0..arms)
        .map(|i| r.ridge(d, cfg.ridge, &format!("arm {i}")))
        .collect::<Result<Vec<_>>>()?;
    if r.at != body.len() {
        return Err(corrupt(format!("{} trailing bytes", body.len() - r.at)));
    }
    let feat = Featurizer::new(embed_dim, cfg.prompt_dims, cfg.seed)?;
    Ok(Gater {
        cfg,
        feat,
        arms,
        pool,
        baseline,
        window,
        rng,
        sq_delta,
        sq_weight,
        updates,
    })
}
