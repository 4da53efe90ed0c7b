//! The fusion path's global view: PyTorch's `F.interpolate(mel[None, None], size=[rows, 64],
//! mode="bilinear", align_corners=False)` (no antialiasing) on an f32 `[frames, 64]` mel.
//!
//! The mel-bin axis keeps its size, for which PyTorch copies (weights 1 and 0), so only the
//! time axis is interpolated. The arithmetic is PyTorch's CPU kernel as its vectorised (AVX2)
//! build evaluates it, bit for bit: f32 throughout, the scale `in / out`, the source row
//! `scale · (o + ½) − ½` clamped at 0 and the blend `x0 · λ0 + x1 · λ1`, both as fused
//! multiply-adds; `λ1` is the fractional part and `λ0 = 1 − λ1`.

/// Interpolates the rows of `x` (`rows_in × cols`, row-major) to `rows_out` rows.
pub(crate) fn shrink_rows(x: &[f32], rows_in: usize, cols: usize, rows_out: usize) -> Vec<f32> {
    if rows_in == rows_out || rows_in == 0 {
        return x.to_vec();
    }
    let scale = rows_in as f32 / rows_out as f32;
    let mut out = Vec::with_capacity(rows_out * cols);
    for o in 0..rows_out {
        let src = scale.mul_add(o as f32 + 0.5, -0.5).max(0.0);
        let i0 = (src as usize).min(rows_in - 1);
        let i1 = if i0 < rows_in - 1 { i0 + 1 } else { i0 };
        let l1 = (src - i0 as f32).clamp(0.0, 1.0);
        let l0 = 1.0 - l1;
        let (r0, r1) = (
            &x[i0 * cols..(i0 + 1) * cols],
            &x[i1 * cols..(i1 + 1) * cols],
        );
        out.extend(r0.iter().zip(r1).map(|(&a, &b)| a.mul_add(l0, b * l1)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::shrink_rows;

    #[test]
    fn halving_averages_row_pairs() {
        let x: Vec<f32> = (0..8).map(|i| i as f32).collect(); // 8 rows × 1 col
        assert_eq!(shrink_rows(&x, 8, 1, 4), [0.5, 2.5, 4.5, 6.5]);
    }

    #[test]
    fn equal_sizes_copy() {
        let x = [1.0f32, 2.0, 3.0, 4.0];
        assert_eq!(shrink_rows(&x, 2, 2, 2), x);
    }
}
