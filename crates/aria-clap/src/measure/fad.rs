//! Fréchet distance between two sets of embeddings (FAD when the embeddings are CLAP audio
//! embeddings).

use super::linalg::{matmul, matmul_bt, mean_and_covariance, symmetric_eigen};
use crate::{ClapError, Result};

/// The Fréchet distance between Gaussians fitted to two sets of embeddings:
///
/// `FD = |μa − μb|² + tr(Σa + Σb − 2 (Σa Σb)^{1/2})`,
///
/// with the sample means `μ` and sample covariances `Σ` (divisor `n − 1`, as `numpy.cov`),
/// everything in `f64`.
///
/// The trace of the matrix square root is computed without a general (non-symmetric) matrix
/// square root: `Σa = V Λ Vᵀ` by a symmetric eigendecomposition, then
/// `tr (Σa Σb)^{1/2} = tr (Σa^{1/2} Σb Σa^{1/2})^{1/2} = Σ √μᵢ` over the eigenvalues `μᵢ` of the
/// symmetric positive semi-definite `Λ^{1/2} Vᵀ Σb V Λ^{1/2}`. In both steps eigenvalues at or
/// below `n · ε · λmax` (the numerical-rank threshold of `numpy.linalg.matrix_rank`; this
/// includes the slightly negative ones rounding produces for a PSD matrix) are taken as 0, and
/// the matching eigenvectors of `Σa` are dropped. Keeping that noise instead adds `√noise` per
/// null direction, which is why `scipy.linalg.sqrtm` and a plain eigendecomposition drift by
/// about `1e-6` (relative) from the exact value on rank-deficient covariances. A final result a
/// few ulps below zero (identical sets) is returned as 0.
///
/// **Few embeddings**: with `n ≤ dim` embeddings in a set its covariance has rank `n − 1 < dim`.
/// The distance is still defined and computed exactly as above (this is what `scipy.linalg.sqrtm`
/// approximates less accurately for singular input), but the estimate is strongly biased upward
/// in small samples (the bias shrinks roughly as `1/n`): report the set sizes with it and
/// compare distances only between sets of equal sizes.
///
/// Errors: a set with fewer than two embeddings, embeddings of different (or zero) dimension
/// within or across the sets, a non-finite value.
pub fn frechet_distance<A, B>(a: &[A], b: &[B]) -> Result<f64>
where
    A: AsRef<[f32]> + Sync,
    B: AsRef<[f32]> + Sync,
{
    let dim = check_set("a", a, None)?;
    check_set("b", b, Some(dim))?;
    let (mu_a, cov_a) = mean_and_covariance(a, dim);
    let (mu_b, cov_b) = mean_and_covariance(b, dim);
    let mean_term: f64 = mu_a.iter().zip(&mu_b).map(|(x, y)| (x - y) * (x - y)).sum();
    let trace = |c: &[f64]| (0..dim).map(|i| c[i * dim + i]).sum::<f64>();
    let (tr_a, tr_b) = (trace(&cov_a), trace(&cov_b));
    let tr_sqrt = trace_sqrt_product(cov_a, &cov_b, dim)?;
    let fd = mean_term + tr_a + tr_b - 2.0 * tr_sqrt;
    if !fd.is_finite() {
        return Err(ClapError::invalid(
            "embeddings",
            "the Fréchet distance overflowed (values too large)",
        ));
    }
    Ok(fd.max(0.0))
}

/// `tr (Σa Σb)^{1/2}` for symmetric PSD `Σa`, `Σb` (`dim × dim`).
fn trace_sqrt_product(cov_a: Vec<f64>, cov_b: &[f64], dim: usize) -> Result<f64> {
    let (lambda, vectors) = symmetric_eigen(cov_a, dim, true)?;
    let vectors = vectors.unwrap_or_default();
    // P: the eigenvectors with λ above the numerical-rank threshold, each scaled by √λ, as rows
    // (r × dim).
    let tol_a = rank_threshold(&lambda);
    let mut p = Vec::with_capacity(dim * dim);
    for (i, &l) in lambda.iter().enumerate() {
        if l > tol_a {
            let s = l.sqrt();
            p.extend(vectors[i * dim..(i + 1) * dim].iter().map(|v| v * s));
        }
    }
    let r = p.len() / dim;
    if r == 0 {
        return Ok(0.0);
    }
    // M = P Σb Pᵀ (r × r), symmetric PSD; same non-zero eigenvalues as Σa^{1/2} Σb Σa^{1/2}.
    let pb = matmul(&p, cov_b, dim, dim);
    let mut m = matmul_bt(&pb, &p, dim);
    for i in 0..r {
        for j in 0..i {
            let s = 0.5 * (m[i * r + j] + m[j * r + i]);
            m[i * r + j] = s;
            m[j * r + i] = s;
        }
    }
    let (mu, _) = symmetric_eigen(m, r, false)?;
    let tol_m = rank_threshold(&mu);
    Ok(mu.iter().filter(|&&x| x > tol_m).map(|&x| x.sqrt()).sum())
}

/// `n · ε · max λ`: eigenvalues of a PSD matrix at or below it are rounding noise around 0
/// (the threshold of `numpy.linalg.matrix_rank`), and are treated as 0.
fn rank_threshold(eigenvalues: &[f64]) -> f64 {
    let max = eigenvalues.iter().copied().fold(0.0f64, f64::max);
    eigenvalues.len() as f64 * f64::EPSILON * max
}

/// Validate one set: at least two embeddings, all of one non-zero dimension (equal to `dim`
/// when given), all finite. Returns the dimension.
fn check_set<R: AsRef<[f32]>>(name: &str, set: &[R], dim: Option<usize>) -> Result<usize> {
    if set.len() < 2 {
        return Err(ClapError::invalid(
            format!("embedding set {name}"),
            format!(
                "needs at least 2 embeddings for a covariance, got {}",
                set.len()
            ),
        ));
    }
    let want = dim.unwrap_or(set[0].as_ref().len());
    if want == 0 {
        return Err(ClapError::invalid(
            format!("embedding set {name}"),
            "embeddings have dimension 0",
        ));
    }
    for (i, e) in set.iter().enumerate() {
        let e = e.as_ref();
        if e.len() != want {
            return Err(ClapError::invalid(
                format!("embedding set {name}"),
                format!(
                    "embedding {i} has dimension {}, expected {want}{}",
                    e.len(),
                    if dim.is_some() { " (as set a)" } else { "" }
                ),
            ));
        }
        if let Some(j) = e.iter().position(|v| !v.is_finite()) {
            return Err(ClapError::invalid(
                format!("embedding set {name}"),
                format!("embedding {i} has a non-finite value at {j} ({})", e[j]),
            ));
        }
    }
    Ok(want)
}
