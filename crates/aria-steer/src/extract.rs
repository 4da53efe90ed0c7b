//! Extraction: residual capture through hooks, difference in means, the per-block
//! separability report (cross-validated logistic probe) and direction-file assembly.
//!
//! A run over a contrast set installs a [`ResidualCapture`] and generates each example; after
//! each generation [`ResidualCapture::take_samples`] gives, per block and per conditional batch
//! row, the residual averaged over the valid latent tokens (memory tokens and padding skipped)
//! and over every step. The direction of a block is the normalized difference of the positive
//! and negative means ([`difference_in_means`]); its baseline mean norm is
//! [`ResidualCapture::mean_norm`] over the runs of both sets.

use std::collections::BTreeMap;
use std::sync::Mutex;

use aria_core::hooks::{ActivationHook, HookContext, HookSite};
use aria_core::{CoreError, Tensor};

use crate::direction::{
    normalize, ContrastSet, DirectionEntry, DirectionFile, DirectionMeta, NormScope, Site,
    StrengthConvention, FORMAT_VERSION,
};
use crate::identity::ModelIdentity;
use crate::{Result, SteerError};

#[derive(Debug, Default)]
struct BlockAcc {
    /// Per conditional batch row: sum of valid latent token vectors and their count.
    rows: Vec<(Vec<f64>, usize)>,
    norm_sum: f64,
    norm_count: u64,
}

/// A hook that records the residual stream after the chosen blocks (it never modifies it).
#[derive(Debug)]
pub struct ResidualCapture {
    blocks: Vec<usize>,
    scope: NormScope,
    state: Mutex<BTreeMap<usize, BlockAcc>>,
}

fn poisoned() -> CoreError {
    CoreError::Invalid("residual capture state poisoned".into())
}

impl ResidualCapture {
    /// Capture after `blocks`, with mean norms over `scope`.
    pub fn new(blocks: &[usize], scope: NormScope) -> Self {
        ResidualCapture {
            blocks: blocks.to_vec(),
            scope,
            state: Mutex::new(blocks.iter().map(|&b| (b, BlockAcc::default())).collect()),
        }
    }

    /// The blocks captured.
    pub fn blocks(&self) -> &[usize] {
        &self.blocks
    }

    /// Per block, the mean residual of each conditional batch row of the generation(s) since
    /// the last call (averaged over valid latent tokens and steps), and reset those averages.
    /// The mean-norm statistics keep accumulating.
    pub fn take_samples(&self) -> Result<BTreeMap<usize, Vec<Vec<f32>>>> {
        let mut st = self.state.lock().map_err(|_| poisoned())?;
        let mut out = BTreeMap::new();
        for (&b, acc) in st.iter_mut() {
            let rows = std::mem::take(&mut acc.rows);
            let mut v = Vec::with_capacity(rows.len());
            for (i, (sum, n)) in rows.into_iter().enumerate() {
                if n == 0 {
                    return Err(SteerError::Invalid(format!(
                        "residual capture: block {b} row {i} saw no valid latent token"
                    )));
                }
                v.push(sum.iter().map(|s| (s / n as f64) as f32).collect());
            }
            out.insert(b, v);
        }
        Ok(out)
    }

    /// Mean L2 norm of the token vectors seen after `block` so far (over the tokens the
    /// [`NormScope`] names), `None` when nothing was seen.
    pub fn mean_norm(&self, block: usize) -> Result<Option<f64>> {
        let st = self.state.lock().map_err(|_| poisoned())?;
        Ok(st
            .get(&block)
            .filter(|a| a.norm_count > 0)
            .map(|a| a.norm_sum / a.norm_count as f64))
    }
}

impl ActivationHook for ResidualCapture {
    fn wants(&self, site: HookSite) -> bool {
        matches!(site, HookSite::Residual(k) if self.blocks.contains(&k))
    }

    fn on_activation(
        &self,
        ctx: &HookContext<'_>,
        x: &Tensor,
    ) -> aria_core::Result<Option<Tensor>> {
        let HookSite::Residual(k) = ctx.site else {
            return Ok(None);
        };
        let s = x.shape();
        if s.len() != 3 {
            return Err(CoreError::shape(
                "residual capture",
                "expected [B, N, E]",
                &[s],
            ));
        }
        let (b, n, e) = (s[0], s[1], s[2]);
        let data = x.to_cpu()?.contiguous()?.to_vec_f32()?;
        let mask = match ctx.token_mask {
            Some(m) if m.shape() == [b, n] => Some(m.to_cpu()?.to_vec_f32()?),
            Some(m) => {
                return Err(CoreError::shape(
                    "residual capture",
                    "token_mask must be [B, N]",
                    &[s, m.shape()],
                ))
            }
            None => None,
        };
        let cond_rows = ctx.guidance_rows.unwrap_or(b).min(b);
        let prefix = ctx.prefix_tokens.min(n);
        let mut st = self.state.lock().map_err(|_| poisoned())?;
        let acc = st.entry(k).or_default();
        if acc.rows.len() < cond_rows {
            acc.rows.resize_with(cond_rows, || (vec![0f64; e], 0));
        }
        for bi in 0..b {
            for ni in 0..n {
                let row = &data[(bi * n + ni) * e..(bi * n + ni + 1) * e];
                let valid = bi < cond_rows
                    && ni >= prefix
                    && mask.as_ref().is_none_or(|m| m[bi * n + ni] != 0.0);
                let counted = match self.scope {
                    NormScope::AllTokens => true,
                    NormScope::ValidLatentTokens => valid,
                };
                if counted {
                    acc.norm_sum += row
                        .iter()
                        .map(|v| (*v as f64) * (*v as f64))
                        .sum::<f64>()
                        .sqrt();
                    acc.norm_count += 1;
                }
                if valid {
                    let (sum, cnt) = &mut acc.rows[bi];
                    sum.iter_mut().zip(row).for_each(|(s, v)| *s += *v as f64);
                    *cnt += 1;
                }
            }
        }
        Ok(None)
    }
}

fn mean(xs: &[Vec<f32>], what: &str) -> Result<Vec<f64>> {
    let first = xs
        .first()
        .ok_or_else(|| SteerError::Invalid(format!("{what}: no samples")))?;
    let d = first.len();
    let mut m = vec![0f64; d];
    for (i, x) in xs.iter().enumerate() {
        if x.len() != d {
            return Err(SteerError::Invalid(format!(
                "{what}: sample {i} has {} dimensions, the first has {d}",
                x.len()
            )));
        }
        m.iter_mut().zip(x).for_each(|(a, v)| *a += *v as f64);
    }
    m.iter_mut().for_each(|a| *a /= xs.len() as f64);
    Ok(m)
}

/// `normalize(mean(pos) − mean(neg))`, with the norm of the raw difference.
pub fn difference_in_means(pos: &[Vec<f32>], neg: &[Vec<f32>]) -> Result<(Vec<f32>, f64)> {
    let p = mean(pos, "positive set")?;
    let q = mean(neg, "negative set")?;
    if p.len() != q.len() {
        return Err(SteerError::Invalid(format!(
            "positive samples have {} dimensions, negative {}",
            p.len(),
            q.len()
        )));
    }
    let diff: Vec<f32> = p.iter().zip(&q).map(|(a, b)| (a - b) as f32).collect();
    normalize(&diff, "difference in means")
}

/// Train an L2-regularized logistic regression (standardized features, full-batch gradient
/// descent) on `(x, y)` and return its weights and bias in standardized space plus the
/// standardization.
struct Probe {
    mu: Vec<f64>,
    sd: Vec<f64>,
    w: Vec<f64>,
    b: f64,
}

impl Probe {
    fn fit(x: &[&[f32]], y: &[bool]) -> Probe {
        let d = x.first().map_or(0, |r| r.len());
        let n = x.len().max(1) as f64;
        let mut mu = vec![0f64; d];
        for r in x {
            mu.iter_mut().zip(*r).for_each(|(m, v)| *m += *v as f64 / n);
        }
        let mut sd = vec![0f64; d];
        for r in x {
            sd.iter_mut()
                .zip(*r)
                .zip(&mu)
                .for_each(|((s, v), m)| *s += (*v as f64 - m).powi(2) / n);
        }
        sd.iter_mut().for_each(|s| *s = s.sqrt().max(1e-8));
        let z: Vec<Vec<f64>> = x
            .iter()
            .map(|r| {
                r.iter()
                    .zip(&mu)
                    .zip(&sd)
                    .map(|((v, m), s)| (*v as f64 - m) / s)
                    .collect()
            })
            .collect();
        let (mut w, mut b) = (vec![0f64; d], 0f64);
        let (lambda, lr) = (1e-2, 0.5);
        for _ in 0..300 {
            let mut gw = vec![0f64; d];
            let mut gb = 0f64;
            for (zi, &yi) in z.iter().zip(y) {
                let logit = b + zi.iter().zip(&w).map(|(a, c)| a * c).sum::<f64>();
                let p = 1.0 / (1.0 + (-logit).exp());
                let g = p - if yi { 1.0 } else { 0.0 };
                gw.iter_mut().zip(zi).for_each(|(a, v)| *a += g * v / n);
                gb += g / n;
            }
            w.iter_mut()
                .zip(&gw)
                .for_each(|(wi, g)| *wi -= lr * (g + lambda * *wi));
            b -= lr * gb;
        }
        Probe { mu, sd, w, b }
    }

    fn predict(&self, x: &[f32]) -> bool {
        let logit = self.b
            + x.iter()
                .zip(&self.mu)
                .zip(&self.sd)
                .zip(&self.w)
                .map(|(((v, m), s), w)| (*v as f64 - m) / s * w)
                .sum::<f64>();
        logit > 0.0
    }
}

/// A probe example: features, label, fold.
type Example<'a> = (&'a [f32], bool, usize);

/// Cross-validated accuracy of a logistic probe separating `pos` from `neg` (stratified
/// `folds`-fold, example `i` of each set in fold `i % folds`; `folds` is capped at the smaller
/// set's size and must be at least 2). 0.5 is chance, 1 perfect separation.
pub fn probe_accuracy(pos: &[Vec<f32>], neg: &[Vec<f32>], folds: usize) -> Result<f32> {
    let k = folds.min(pos.len()).min(neg.len());
    if k < 2 {
        return Err(SteerError::Invalid(format!(
            "probe: cross-validation needs at least 2 examples per set and 2 folds \
             ({} positive, {} negative, {folds} folds)",
            pos.len(),
            neg.len()
        )));
    }
    let d = pos[0].len();
    if pos.iter().chain(neg).any(|r| r.len() != d) {
        return Err(SteerError::Invalid(
            "probe: samples differ in dimension".into(),
        ));
    }
    let all: Vec<Example<'_>> = pos
        .iter()
        .enumerate()
        .map(|(i, r)| (r.as_slice(), true, i % k))
        .chain(
            neg.iter()
                .enumerate()
                .map(|(i, r)| (r.as_slice(), false, i % k)),
        )
        .collect();
    let mut correct = 0usize;
    for f in 0..k {
        let (train, test): (Vec<&Example<'_>>, Vec<_>) = all.iter().partition(|s| s.2 != f);
        let x: Vec<&[f32]> = train.iter().map(|s| s.0).collect();
        let y: Vec<bool> = train.iter().map(|s| s.1).collect();
        let p = Probe::fit(&x, &y);
        correct += test.iter().filter(|s| p.predict(s.0) == s.1).count();
    }
    Ok(correct as f32 / all.len() as f32)
}

/// Per-block inputs of [`build_direction_file`].
#[derive(Debug, Clone)]
pub struct BlockContrast {
    /// The block.
    pub block: usize,
    /// Positive samples (one mean residual per example).
    pub pos: Vec<Vec<f32>>,
    /// Negative samples.
    pub neg: Vec<Vec<f32>>,
    /// Baseline mean norm at the block.
    pub mean_norm: f64,
}

/// What [`build_direction_file`] records besides the directions.
#[derive(Debug, Clone)]
pub struct ExtractionInfo {
    /// The model.
    pub model: ModelIdentity,
    /// Positive contrast set.
    pub positive: ContrastSet,
    /// Negative contrast set.
    pub negative: ContrastSet,
    /// Token scope of the mean norms.
    pub norm_scope: NormScope,
    /// Probe folds (5 is usual).
    pub folds: usize,
}

/// Difference in means per block, the probe report and the metadata, as a direction file.
/// The best block is the one with the highest probe accuracy (the earliest on ties).
pub fn build_direction_file(
    blocks: &[BlockContrast],
    info: &ExtractionInfo,
) -> Result<DirectionFile> {
    let mut entries = Vec::new();
    let mut probe = Vec::new();
    for bc in blocks {
        let (direction, _) = difference_in_means(&bc.pos, &bc.neg)?;
        let acc = probe_accuracy(&bc.pos, &bc.neg, info.folds)?;
        probe.push((bc.block, acc));
        entries.push(DirectionEntry {
            site: Site::Residual(bc.block),
            direction,
            mean_norm: bc.mean_norm as f32,
        });
    }
    let best_block = probe
        .iter()
        .fold(None::<(usize, f32)>, |best, &(b, a)| match best {
            Some((_, ba)) if ba >= a => best,
            _ => Some((b, a)),
        })
        .map(|(b, _)| b);
    Ok(DirectionFile {
        meta: DirectionMeta {
            format_version: FORMAT_VERSION,
            entries: entries.iter().map(|e| e.site).collect(),
            model: info.model.clone(),
            method: "difference-in-means".into(),
            positive: Some(info.positive.clone()),
            negative: Some(info.negative.clone()),
            strength_convention: StrengthConvention::MeanNorm,
            norm_scope: info.norm_scope,
            probe_accuracy: probe,
            best_block,
            default_strength: None,
            settings: None,
        },
        entries,
    })
}
