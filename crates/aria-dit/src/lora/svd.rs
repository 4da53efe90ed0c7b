//! The frozen SVD bases of the LoRA-XS families: the top-`r` left and right singular vectors
//! of a base weight, with the official sign convention.

use faer::Mat;

/// `U [out, r]` and `V [inn, r]` (row-major f32) of the thin SVD `W = U·S·Vᵀ` of `w`
/// (`[out, inn]` row-major), truncated to the `r` largest singular values. Signs are fixed so
/// that the largest-magnitude entry of each `U` column (the first such entry on ties) is
/// positive, the matching `V` column flipped with it. The SVD runs in f64; `Err` names what
/// failed.
pub fn top_bases(
    w: &[f32],
    out: usize,
    inn: usize,
    r: usize,
) -> Result<(Vec<f32>, Vec<f32>), String> {
    if w.len() != out * inn {
        return Err(format!(
            "weight has {} elements, expected {out}×{inn}",
            w.len()
        ));
    }
    if r > out.min(inn) {
        return Err(format!(
            "rank {r} exceeds the {}-dimensional weight {out}×{inn}",
            out.min(inn)
        ));
    }
    let m = Mat::<f64>::from_fn(out, inn, |i, j| w[i * inn + j] as f64);
    let svd = m
        .thin_svd()
        .map_err(|e| format!("SVD of the {out}×{inn} weight failed: {e:?}"))?;
    let (u, v) = (svd.U(), svd.V());
    let mut uo = vec![0f32; out * r];
    let mut vo = vec![0f32; inn * r];
    for k in 0..r {
        let mut best = 0usize;
        let mut best_abs = -1f64;
        for i in 0..out {
            let a = u[(i, k)].abs();
            if a > best_abs {
                best_abs = a;
                best = i;
            }
        }
        let sign = if u[(best, k)] < 0.0 { -1.0 } else { 1.0 };
        for i in 0..out {
            uo[i * r + k] = (sign * u[(i, k)]) as f32;
        }
        for j in 0..inn {
            vo[j * r + k] = (sign * v[(j, k)]) as f32;
        }
    }
    Ok((uo, vo))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A known factorisation is recovered, signs canonical, and `U·S·Vᵀ` rebuilds the matrix.
    #[test]
    fn rank_two_matrix() {
        // W = 3·u1·v1ᵀ + 1·u2·v2ᵀ with orthonormal u, v chosen so the convention flips u1.
        let s = std::f64::consts::FRAC_1_SQRT_2;
        let u1 = [-0.8, 0.6, 0.0];
        let u2 = [0.0, 0.0, 1.0];
        let v1 = [s, s];
        let v2 = [s, -s];
        let mut w = vec![0f32; 6];
        for i in 0..3 {
            for j in 0..2 {
                w[i * 2 + j] = (3.0 * u1[i] * v1[j] + u2[i] * v2[j]) as f32;
            }
        }
        let (u, v) = top_bases(&w, 3, 2, 2).unwrap();
        // Column 0: largest |entry| is -0.8, so the column is flipped to +0.8.
        let want_u0 = [0.8, -0.6, 0.0];
        let want_v0 = [-s, -s];
        for i in 0..3 {
            assert!((u[i * 2] as f64 - want_u0[i]).abs() < 1e-6, "{u:?}");
            assert!((u[i * 2 + 1] as f64 - u2[i]).abs() < 1e-6, "{u:?}");
        }
        for j in 0..2 {
            assert!((v[j * 2] as f64 - want_v0[j]).abs() < 1e-6, "{v:?}");
            assert!((v[j * 2 + 1] as f64 - v2[j]).abs() < 1e-6, "{v:?}");
        }
        assert!(top_bases(&w, 3, 2, 3).is_err());
        assert!(top_bases(&w[..5], 3, 2, 1).is_err());
    }
}
