//! Where B of a product comes from ([`BSrc`], [`WData`]) and how its panels are packed.

use half::{bf16, f16, slice::HalfFloatSliceExt};

use super::KC;
use crate::{transpose, Isa};

/// The float element types a product reads (`WData::Raw` carries one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Float {
    /// f32.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
}

impl Float {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Float::F32 => 4,
            Float::F16 | Float::Bf16 => 2,
        }
    }
}

/// Elements of a contiguous float tensor, typed when the storage is aligned for it.
#[derive(Clone, Copy)]
pub enum WData<'a> {
    /// f32 elements.
    F32(&'a [f32]),
    /// f16 elements.
    F16(&'a [f16]),
    /// bf16 elements.
    Bf16(&'a [bf16]),
    /// Little-endian bytes of a float type whose storage is not aligned for it.
    Raw(Float, &'a [u8]),
}

impl<'a> WData<'a> {
    /// View little-endian bytes of `ty` elements (typed when aligned for the type).
    pub fn from_bytes(ty: Float, bytes: &'a [u8]) -> WData<'a> {
        match ty {
            Float::F32 => bytemuck::try_cast_slice(bytes).map_or(WData::Raw(ty, bytes), WData::F32),
            Float::F16 => bytemuck::try_cast_slice(bytes).map_or(WData::Raw(ty, bytes), WData::F16),
            Float::Bf16 => {
                bytemuck::try_cast_slice(bytes).map_or(WData::Raw(ty, bytes), WData::Bf16)
            }
        }
    }

    /// Elements `start..start + out.len()` converted to f32 (the caller keeps them in range).
    #[inline]
    pub fn read(&self, start: usize, out: &mut [f32]) {
        let n = out.len();
        match *self {
            WData::F32(s) => out.copy_from_slice(&s[start..start + n]),
            WData::F16(s) => s[start..start + n].convert_to_f32_slice(out),
            WData::Bf16(s) => s[start..start + n].convert_to_f32_slice(out),
            WData::Raw(d, b) => {
                let sz = d.size();
                let b = &b[start * sz..(start + n) * sz];
                for (o, c) in out.iter_mut().zip(b.chunks_exact(sz)) {
                    *o = match d {
                        Float::F16 => f16::from_le_bytes([c[0], c[1]]).to_f32(),
                        Float::Bf16 => bf16::from_le_bytes([c[0], c[1]]).to_f32(),
                        _ => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                    };
                }
            }
        }
    }
}

/// Rows of a `[N, K]` weight held in a format the product does not read itself (a quantized
/// format, say): the product asks for a row's columns as f32 while it packs B, a KC slab at a
/// time, so no f32 copy of the whole weight is made.
pub trait RowSource: Sync {
    /// Weight row `row`, columns `k0..k0 + out.len()`, as f32 into `out`. The product calls
    /// it with `k0` a multiple of 256 and `k0 + out.len()` at most the row's length.
    fn read_row(&self, row: usize, k0: usize, out: &mut [f32]);

    /// The same columns as int8 values with one scale (and offset) per [`I8_GROUP`] columns,
    /// where the format has that form: `q.len()` columns from `k0`, `scale` and `offset`
    /// holding `q.len().div_ceil(I8_GROUP)` values. Column `c`'s weight is then
    /// `scale[c / I8_GROUP] · q[c]` ([`I8Rows::Scaled`]) or that less `offset[c / I8_GROUP]`
    /// ([`I8Rows::ScaledOffset`]), each step rounded in f32, and must be the bits
    /// [`RowSource::read_row`] gives. The product then dequantizes in registers as it
    /// transposes, a quarter of the bytes through the cache. `None` (the default): no such form,
    /// the product reads f32 rows.
    fn read_row_i8(
        &self,
        _row: usize,
        _k0: usize,
        _q: &mut [i8],
        _scale: &mut [f32],
        _offset: &mut [f32],
    ) -> Option<I8Rows> {
        None
    }

    /// The bytes the rows' columns `k0..k0 + kc` are read from, for prefetching them while the
    /// product multiplies the previous slab. `None` (the default): not known, no prefetch.
    fn layout(&self, _k0: usize, _kc: usize) -> Option<RowLayout<'_>> {
        None
    }
}

/// Where a [`RowSource`]'s bytes for a range of columns lie ([`RowSource::layout`]): row `r`'s
/// run is `bytes[start + r·stride..][..run]`.
#[derive(Debug, Clone, Copy)]
pub struct RowLayout<'a> {
    /// The storage of every row.
    pub bytes: &'a [u8],
    /// Offset of row 0's run.
    pub start: usize,
    /// Bytes from one row to the next.
    pub stride: usize,
    /// Bytes of one row's run.
    pub run: usize,
}

/// Columns sharing one scale (and offset) in [`RowSource::read_row_i8`].
pub const I8_GROUP: usize = 16;

/// How [`RowSource::read_row_i8`]'s values make weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum I8Rows {
    /// `w = scale · q`.
    Scaled,
    /// `w = scale · q − offset` (the product rounded, then the difference).
    ScaledOffset,
}

/// Where the B operand comes from.
#[derive(Clone, Copy)]
pub enum BSrc<'a> {
    /// `B[k][n]` = column `k` of row `n` of a weight read through a [`RowSource`].
    Rows(&'a dyn RowSource),
    /// `B[k][n] = w[n·ld + k]`: the rows of a `[N, K]` weight (linear layers, `K` of attention).
    Nk(WData<'a>, usize),
    /// `B[k][n] = b[k·ld + n]`: a row-major `[K, N]` f32 matrix.
    Kn(&'a [f32], usize),
    /// Implicit im2col of `x [Cin, L]` for a stride-1 convolution with kernel `kw` and `pad`
    /// zeros each side: `B[ci·kw + j][t] = x[ci][t + j − pad]` (0 outside).
    Conv {
        /// The input, `[Cin, L]` row-major.
        x: &'a [f32],
        /// Input length.
        l: usize,
        /// Kernel size.
        kw: usize,
        /// Zero padding on each side.
        pad: usize,
    },
}

impl BSrc<'_> {
    /// Pack rows `k0..k0+kc` of the `nb` columns from `n0` into consecutive panels of `nr`
    /// columns, panel `p` at `out[p · KC · nr..]`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pack_slab(
        &self,
        nr: usize,
        k0: usize,
        kc: usize,
        n0: usize,
        nb: usize,
        out: &mut [f32],
        tmp: &mut Vec<f32>,
    ) {
        for p in 0..nb.div_ceil(nr) {
            let nc = nr.min(nb - p * nr);
            self.pack(
                nr,
                k0,
                kc,
                n0 + p * nr,
                nc,
                &mut out[p * KC * nr..(p + 1) * KC * nr],
                tmp,
            );
        }
    }

    /// Pack `B[k0..k0+kc][j0..j0+nc]` into `out[kk·nr + jj]`, zero-padding columns `nc..nr`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pack(
        &self,
        nr: usize,
        k0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        out: &mut [f32],
        tmp: &mut Vec<f32>,
    ) {
        let out = &mut out[..kc * nr];
        if nc < nr {
            out.fill(0.0);
        }
        match *self {
            BSrc::Nk(WData::F32(w), ld) => transpose_rows(&w[j0 * ld + k0..], ld, kc, nc, nr, out),
            BSrc::Nk(w, ld) => {
                // Convert up to TB rows at a time, then transpose them like f32 rows.
                tmp.resize(TB * kc, 0.0);
                for g0 in (0..nc).step_by(TB) {
                    let g = TB.min(nc - g0);
                    for r in 0..g {
                        w.read((j0 + g0 + r) * ld + k0, &mut tmp[r * kc..(r + 1) * kc]);
                    }
                    transpose_rows(tmp, kc, kc, g, nr, &mut out[g0..]);
                }
            }
            BSrc::Rows(src) => {
                if pack_rows_i8(src, k0, kc, j0, nc, nr, out, tmp) {
                    return;
                }
                tmp.resize(TB * kc, 0.0);
                for g0 in (0..nc).step_by(TB) {
                    let g = TB.min(nc - g0);
                    for r in 0..g {
                        src.read_row(j0 + g0 + r, k0, &mut tmp[r * kc..(r + 1) * kc]);
                    }
                    transpose_rows(tmp, kc, kc, g, nr, &mut out[g0..]);
                }
            }
            BSrc::Kn(b, ld) => {
                for kk in 0..kc {
                    let s = (k0 + kk) * ld + j0;
                    out[kk * nr..kk * nr + nc].copy_from_slice(&b[s..s + nc]);
                }
            }
            BSrc::Conv { x, l, kw, pad } => {
                for kk in 0..kc {
                    let (ci, j) = ((k0 + kk) / kw, (k0 + kk) % kw);
                    let row = &x[ci * l..(ci + 1) * l];
                    let o = &mut out[kk * nr..kk * nr + nc];
                    for (jj, ov) in o.iter_mut().enumerate() {
                        let p = (j0 + jj + j).wrapping_sub(pad);
                        *ov = if p < l { row[p] } else { 0.0 };
                    }
                }
            }
        }
    }
}

/// [`BSrc::pack`] for a [`RowSource`] with an int8 form: up to [`TB`] rows read as int8 with
/// their scales, then dequantized and transposed together ([`transpose_i8_on`]). `false`
/// (nothing written that the f32 route would not overwrite) when the source has no int8 form.
#[allow(clippy::too_many_arguments)]
fn pack_rows_i8(
    src: &dyn RowSource,
    k0: usize,
    kc: usize,
    j0: usize,
    nc: usize,
    nr: usize,
    out: &mut [f32],
    tmp: &mut Vec<f32>,
) -> bool {
    let ng = kc.div_ceil(I8_GROUP);
    // tmp: TB rows of kc int8 (in f32 words), then TB × ng scales and TB × ng offsets.
    let qw = (TB * kc).div_ceil(4);
    tmp.resize(qw + 2 * TB * ng, 0.0);
    let (qpart, rest) = tmp.split_at_mut(qw);
    let q: &mut [i8] = &mut bytemuck::cast_slice_mut::<f32, i8>(qpart)[..TB * kc];
    let (sc, off) = rest.split_at_mut(TB * ng);
    for g0 in (0..nc).step_by(TB) {
        let g = TB.min(nc - g0);
        let mut mode = None;
        for r in 0..g {
            let m = src.read_row_i8(
                j0 + g0 + r,
                k0,
                &mut q[r * kc..(r + 1) * kc],
                &mut sc[r * ng..(r + 1) * ng],
                &mut off[r * ng..(r + 1) * ng],
            );
            match (m, mode) {
                (None, _) => return false,
                (Some(m), Some(prev)) if m != prev => return false,
                (m, _) => mode = m,
            }
        }
        let off = (mode == Some(I8Rows::ScaledOffset)).then_some(&off[..]);
        transpose_i8_on(Isa::detect(), (q, kc), (sc, off, ng), g, nr, &mut out[g0..]);
    }
    true
}

/// `out[kk·nr + jj] = sc[jj·ng + kk/16] · q[jj·kc + kk]` (less `off[jj·ng + kk/16]`) for
/// `jj < nc`, `kk < kc`: int8 rows dequantized into the columns of a panel of width `nr`,
/// through [`transpose::square_i8`] where the path has it (whole blocks of s rows and s
/// columns), element by element elsewhere. The same bits on every path.
fn transpose_i8_on(
    isa: Isa,
    (q, kc): (&[i8], usize),
    (sc, off, ng): (&[f32], Option<&[f32]>, usize),
    nc: usize,
    nr: usize,
    out: &mut [f32],
) {
    let one = |jj: usize, kk: usize| {
        let g = jj * ng + kk / I8_GROUP;
        let v = sc[g] * q[jj * kc + kk] as f32;
        match off {
            Some(o) => v - o[g],
            None => v,
        }
    };
    let s = transpose::block(isa);
    let mut jj = 0;
    if s > 0 && nr.is_multiple_of(s) && I8_GROUP.is_multiple_of(s) && kc >= s {
        let (mut bs, mut bo) = ([0f32; 16], [0f32; 16]);
        while jj + s <= nc {
            let mut kk = 0;
            while kk + s <= kc {
                for r in 0..s {
                    let g = (jj + r) * ng + kk / I8_GROUP;
                    bs[r] = sc[g];
                    if let Some(o) = off {
                        bo[r] = o[g];
                    }
                }
                transpose::square_i8(
                    isa,
                    &q[jj * kc + kk..],
                    kc,
                    &bs[..s],
                    off.map(|_| &bo[..s]),
                    &mut out[kk * nr + jj..],
                    nr,
                );
                kk += s;
            }
            for kk in kk..kc {
                for r in 0..s {
                    out[kk * nr + jj + r] = one(jj + r, kk);
                }
            }
            jj += s;
        }
    }
    for jj in jj..nc {
        for kk in 0..kc {
            out[kk * nr + jj] = one(jj, kk);
        }
    }
}

/// Rows transposed together by [`transpose_rows`].
pub(super) const TB: usize = 16;

/// `out[kk·nr + jj] = src[jj·ld + kk]` for `jj < nc`, `kk < kc`: `nc` rows of `kc` elements
/// written as columns of a panel of width `nr`, on the detected path ([`transpose_rows_on`]).
pub(super) fn transpose_rows(
    src: &[f32],
    ld: usize,
    kc: usize,
    nc: usize,
    nr: usize,
    out: &mut [f32],
) {
    transpose_rows_on(Isa::detect(), src, ld, kc, nc, nr, out)
}

/// [`transpose_rows`] on `isa`: where it has a register-block transpose
/// ([`transpose::square`], s × s with s = 16 on AVX-512F, 8 on AVX2), groups of s rows go
/// through it s columns at a time; the rest (and every row on other paths) through
/// [`TB`] × [`TB`] blocks copied element by element, which is ~2.6× the speed of the
/// element-by-element transpose on weights streamed from memory. The same values in the same
/// places on every path.
pub(super) fn transpose_rows_on(
    isa: Isa,
    src: &[f32],
    ld: usize,
    kc: usize,
    nc: usize,
    nr: usize,
    out: &mut [f32],
) {
    let s = transpose::block(isa);
    let mut jj = 0;
    if s > 0 && nr.is_multiple_of(s) && kc >= s {
        while jj + s <= nc {
            let mut kk = 0;
            while kk + s <= kc {
                transpose::square(isa, &src[jj * ld + kk..], ld, &mut out[kk * nr + jj..], nr);
                kk += s;
            }
            for kk in kk..kc {
                for r in 0..s {
                    out[kk * nr + jj + r] = src[(jj + r) * ld + kk];
                }
            }
            jj += s;
        }
    }
    if jj < nc {
        transpose_portable(&src[jj * ld..], ld, kc, nc - jj, nr, &mut out[jj..]);
    }
}

/// The portable blocked transpose of [`transpose_rows_on`].
fn transpose_portable(src: &[f32], ld: usize, kc: usize, nc: usize, nr: usize, out: &mut [f32]) {
    let mut jj = 0;
    while jj + TB <= nc {
        let rows: [&[f32]; TB] = std::array::from_fn(|r| &src[(jj + r) * ld..(jj + r) * ld + kc]);
        let mut kk = 0;
        while kk + TB <= kc {
            let mut blk = [[0f32; TB]; TB];
            for (b, row) in blk.iter_mut().zip(&rows) {
                b.copy_from_slice(&row[kk..kk + TB]);
            }
            for c in 0..TB {
                let o = &mut out[(kk + c) * nr + jj..(kk + c) * nr + jj + TB];
                for (ov, b) in o.iter_mut().zip(&blk) {
                    *ov = b[c];
                }
            }
            kk += TB;
        }
        for kk in kk..kc {
            for (r, row) in rows.iter().enumerate() {
                out[kk * nr + jj + r] = row[kk];
            }
        }
        jj += TB;
    }
    for jj in jj..nc {
        for (kk, v) in src[jj * ld..jj * ld + kc].iter().enumerate() {
            out[kk * nr + jj] = *v;
        }
    }
}
