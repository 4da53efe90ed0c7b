//! Dense `f64` linear algebra for the Fréchet distance: mean and covariance of a set of rows,
//! products of square matrices, and the symmetric eigendecomposition (Householder reduction to
//! tridiagonal form, then the implicit QL algorithm with Wilkinson-like shifts: EISPACK's
//! `tred2`/`tql2`, as in JAMA).
//!
//! Matrices are row-major `Vec<f64>`. The eigensolver stores the transformation transposed so
//! that every inner loop runs over contiguous memory; eigenvectors come back as rows.

use rayon::prelude::*;

use crate::{ClapError, Result};

/// QL iterations allowed per eigenvalue before giving up (EISPACK uses 30; symmetric
/// tridiagonal QL converges in two or three almost always).
const MAX_QL_ITERATIONS: usize = 60;

/// Mean (length `dim`) and sample covariance (`dim × dim`, divisor `n − 1`) of `rows`
/// (`n ≥ 2` rows of length `dim`, already validated).
pub(crate) fn mean_and_covariance<R: AsRef<[f32]> + Sync>(
    rows: &[R],
    dim: usize,
) -> (Vec<f64>, Vec<f64>) {
    let n = rows.len();
    let mut mean = vec![0.0f64; dim];
    for r in rows {
        for (m, &x) in mean.iter_mut().zip(r.as_ref()) {
            *m += f64::from(x);
        }
    }
    for m in &mut mean {
        *m /= n as f64;
    }
    // Centred data, transposed: column j of the data is row j here (contiguous dot products).
    let mut xt = vec![0.0f64; dim * n];
    for (i, r) in rows.iter().enumerate() {
        for (j, (&x, m)) in r.as_ref().iter().zip(&mean).enumerate() {
            xt[j * n + i] = f64::from(x) - m;
        }
    }
    let denom = (n - 1) as f64;
    let mut cov = vec![0.0f64; dim * dim];
    cov.par_chunks_mut(dim).enumerate().for_each(|(i, row)| {
        let xi = &xt[i * n..(i + 1) * n];
        for (j, c) in row.iter_mut().enumerate().skip(i) {
            *c = dot(xi, &xt[j * n..(j + 1) * n]) / denom;
        }
    });
    for i in 0..dim {
        for j in 0..i {
            cov[i * dim + j] = cov[j * dim + i];
        }
    }
    (mean, cov)
}

/// `Σ a_k b_k`, four independent accumulators (lets the compiler vectorise).
pub(crate) fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0f64; 4];
    let mut ca = a.chunks_exact(4);
    let mut cb = b.chunks_exact(4);
    for (x, y) in (&mut ca).zip(&mut cb) {
        acc[0] += x[0] * y[0];
        acc[1] += x[1] * y[1];
        acc[2] += x[2] * y[2];
        acc[3] += x[3] * y[3];
    }
    let tail: f64 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// `A · B` for `A` (`r × k`) and `B` (`k × c`).
pub(crate) fn matmul(a: &[f64], b: &[f64], k: usize, c: usize) -> Vec<f64> {
    let r = a.len() / k.max(1);
    let mut out = vec![0.0f64; r * c];
    out.par_chunks_mut(c.max(1))
        .zip(a.par_chunks(k.max(1)))
        .for_each(|(orow, arow)| {
            for (&aik, brow) in arow.iter().zip(b.chunks_exact(c)) {
                if aik != 0.0 {
                    for (o, &bkj) in orow.iter_mut().zip(brow) {
                        *o += aik * bkj;
                    }
                }
            }
        });
    out
}

/// `A · Bᵀ` for `A` (`r × k`) and `B` (`s × k`).
pub(crate) fn matmul_bt(a: &[f64], b: &[f64], k: usize) -> Vec<f64> {
    let s = b.len() / k.max(1);
    let mut out = vec![0.0f64; (a.len() / k.max(1)) * s];
    out.par_chunks_mut(s.max(1))
        .zip(a.par_chunks(k.max(1)))
        .for_each(|(orow, arow)| {
            for (o, brow) in orow.iter_mut().zip(b.chunks_exact(k)) {
                *o = dot(arow, brow);
            }
        });
    out
}

/// Eigenvalues (unordered) of the symmetric `n × n` matrix `a`, and, when `vectors`, the
/// matching orthonormal eigenvectors as the rows of an `n × n` matrix. Only the lower triangle
/// of `a` is read.
pub(crate) fn symmetric_eigen(
    a: Vec<f64>,
    n: usize,
    vectors: bool,
) -> Result<(Vec<f64>, Option<Vec<f64>>)> {
    if n == 0 {
        return Ok((Vec::new(), vectors.then(Vec::new)));
    }
    // `vt[c * n + r]` holds the algorithm's V[r][c]; for the symmetric input, vt = a.
    let mut vt = a;
    let mut d = vec![0.0f64; n];
    let mut e = vec![0.0f64; n];
    tridiagonalize(&mut vt, n, &mut d, &mut e, vectors);
    tql2(
        &mut d,
        &mut e,
        if vectors { Some(&mut vt) } else { None },
        n,
    )?;
    Ok((d, vectors.then_some(vt)))
}

/// Householder reduction to tridiagonal form (EISPACK `tred2`): on return `d` is the diagonal,
/// `e[1..]` the subdiagonal, and with `accumulate` the rows of `vt` hold the orthogonal
/// transformation's columns.
fn tridiagonalize(vt: &mut [f64], n: usize, d: &mut [f64], e: &mut [f64], accumulate: bool) {
    for j in 0..n {
        d[j] = vt[j * n + n - 1];
    }
    for i in (1..n).rev() {
        let scale: f64 = d[..i].iter().map(|x| x.abs()).sum();
        let mut h = 0.0;
        if scale == 0.0 {
            e[i] = d[i - 1];
            for j in 0..i {
                d[j] = vt[j * n + i - 1];
                vt[j * n + i] = 0.0;
                vt[i * n + j] = 0.0;
            }
        } else {
            for dk in &mut d[..i] {
                *dk /= scale;
                h += *dk * *dk;
            }
            let f = d[i - 1];
            let mut g = h.sqrt();
            if f > 0.0 {
                g = -g;
            }
            e[i] = scale * g;
            h -= f * g;
            d[i - 1] = f - g;
            e[..i].fill(0.0);
            for j in 0..i {
                let f = d[j];
                vt[i * n + j] = f;
                let row = &vt[j * n..j * n + i];
                let mut g = e[j] + row[j] * f;
                for ((&v, &dk), ek) in row[j + 1..].iter().zip(&d[j + 1..i]).zip(&mut e[j + 1..i]) {
                    g += v * dk;
                    *ek += v * f;
                }
                e[j] = g;
            }
            let mut f = 0.0;
            for (ej, &dj) in e[..i].iter_mut().zip(&d[..i]) {
                *ej /= h;
                f += *ej * dj;
            }
            let hh = f / (h + h);
            for (ej, &dj) in e[..i].iter_mut().zip(&d[..i]) {
                *ej -= hh * dj;
            }
            for j in 0..i {
                let f = d[j];
                let g = e[j];
                let row = &mut vt[j * n..j * n + i];
                for ((v, &ek), &dk) in row[j..].iter_mut().zip(&e[j..i]).zip(&d[j..i]) {
                    *v -= f * ek + g * dk;
                }
                d[j] = vt[j * n + i - 1];
                vt[j * n + i] = 0.0;
            }
        }
        d[i] = h;
    }
    if !accumulate {
        for (i, di) in d.iter_mut().enumerate() {
            *di = vt[i * n + i];
        }
        e[0] = 0.0;
        return;
    }
    for i in 0..n - 1 {
        vt[i * n + n - 1] = vt[i * n + i];
        vt[i * n + i] = 1.0;
        let h = d[i + 1];
        let (head, tail) = vt.split_at_mut((i + 1) * n);
        let next = &mut tail[..n];
        if h != 0.0 {
            for (dk, &v) in d[..=i].iter_mut().zip(&next[..=i]) {
                *dk = v / h;
            }
            let dd = &d[..=i];
            let nx = &next[..=i];
            head.par_chunks_mut(n).for_each(|row| {
                let g = dot(nx, &row[..=i]);
                for (v, &dk) in row[..=i].iter_mut().zip(dd) {
                    *v -= g * dk;
                }
            });
        }
        next[..=i].fill(0.0);
    }
    for j in 0..n {
        d[j] = vt[j * n + n - 1];
        vt[j * n + n - 1] = 0.0;
    }
    vt[(n - 1) * n + n - 1] = 1.0;
    e[0] = 0.0;
}

/// Symmetric tridiagonal QL with implicit shifts (EISPACK `tql2`): `d` becomes the eigenvalues;
/// the rotations are applied to the rows of `vt` when given.
fn tql2(d: &mut [f64], e: &mut [f64], mut vt: Option<&mut Vec<f64>>, n: usize) -> Result<()> {
    for i in 1..n {
        e[i - 1] = e[i];
    }
    e[n - 1] = 0.0;
    let eps = f64::EPSILON;
    let mut f = 0.0f64;
    let mut tst1 = 0.0f64;
    for l in 0..n {
        tst1 = tst1.max(d[l].abs() + e[l].abs());
        let mut m = l;
        while m < n - 1 && e[m].abs() > eps * tst1 {
            m += 1;
        }
        if m > l {
            let mut iter = 0;
            loop {
                iter += 1;
                if iter > MAX_QL_ITERATIONS || !tst1.is_finite() {
                    return Err(ClapError::invalid(
                        "covariance",
                        "the symmetric eigensolver did not converge",
                    ));
                }
                let g = d[l];
                let mut p = (d[l + 1] - g) / (2.0 * e[l]);
                let mut r = p.hypot(1.0);
                if p < 0.0 {
                    r = -r;
                }
                d[l] = e[l] / (p + r);
                d[l + 1] = e[l] * (p + r);
                let dl1 = d[l + 1];
                let h = g - d[l];
                for di in &mut d[l + 2..] {
                    *di -= h;
                }
                f += h;
                p = d[m];
                let (mut c, mut c2, mut c3) = (1.0f64, 1.0f64, 1.0f64);
                let el1 = e[l + 1];
                let (mut s, mut s2) = (0.0f64, 0.0f64);
                for i in (l..m).rev() {
                    c3 = c2;
                    c2 = c;
                    s2 = s;
                    let g = c * e[i];
                    let h = c * p;
                    r = p.hypot(e[i]);
                    e[i + 1] = s * r;
                    s = e[i] / r;
                    c = p / r;
                    p = c * d[i] - s * g;
                    d[i + 1] = h + s * (c * g + s * d[i]);
                    if let Some(v) = vt.as_deref_mut() {
                        let (lo, hi) = v.split_at_mut((i + 1) * n);
                        let ri = &mut lo[i * n..];
                        let ri1 = &mut hi[..n];
                        for (a, b) in ri.iter_mut().zip(ri1.iter_mut()) {
                            let h = *b;
                            *b = s * *a + c * h;
                            *a = c * *a - s * h;
                        }
                    }
                }
                p = -s * s2 * c3 * el1 * e[l] / dl1;
                e[l] = s * p;
                d[l] = c * p;
                if e[l].abs() <= eps * tst1 {
                    break;
                }
            }
        }
        d[l] += f;
        e[l] = 0.0;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_symmetric(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        let mut next = || {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        let mut a = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..=i {
                let v = next();
                a[i * n + j] = v;
                a[j * n + i] = v;
            }
        }
        a
    }

    fn check(a: &[f64], n: usize) {
        let (values, vectors) = symmetric_eigen(a.to_vec(), n, true).expect("converges");
        let v = vectors.expect("vectors");
        let scale = a.iter().fold(1e-300f64, |m, x| m.max(x.abs())) * n as f64;
        for i in 0..n {
            // A vᵢ = λᵢ vᵢ and ⟨vᵢ, vⱼ⟩ = δᵢⱼ.
            let vi = &v[i * n..(i + 1) * n];
            for r in 0..n {
                let av = dot(&a[r * n..(r + 1) * n], vi);
                assert!(
                    (av - values[i] * vi[r]).abs() < 1e-12 * scale,
                    "{n}: residual"
                );
            }
            for j in 0..n {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((dot(vi, &v[j * n..(j + 1) * n]) - want).abs() < 1e-12);
            }
        }
        let (mut only, _) = symmetric_eigen(a.to_vec(), n, false).expect("converges");
        let mut with = values;
        only.sort_by(f64::total_cmp);
        with.sort_by(f64::total_cmp);
        for (x, y) in only.iter().zip(&with) {
            assert!((x - y).abs() < 1e-12 * scale, "{n}: {x} vs {y}");
        }
    }

    #[test]
    fn eigendecomposition_reconstructs() {
        for (n, seed) in [(1, 1), (2, 2), (3, 3), (17, 4), (64, 5)] {
            check(&random_symmetric(n, seed), n);
        }
        // Diagonal, zero and rank-one matrices take the zero-scale branches.
        check(&[2.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 5.0], 3);
        check(&[0.0; 16], 4);
        let u = [1.0, -2.0, 0.5, 3.0];
        let r1: Vec<f64> = (0..16).map(|k| u[k / 4] * u[k % 4]).collect();
        check(&r1, 4);
    }

    #[test]
    fn products() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2 × 3
        let b = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]; // 3 × 2
        assert_eq!(matmul(&a, &b, 3, 2), vec![4.0, 5.0, 10.0, 11.0]);
        assert_eq!(matmul_bt(&a, &a, 3), vec![14.0, 32.0, 32.0, 77.0]);
    }
}
