//! Software prefetch of the B operand: the next KC slab of a weight fetched into L2 while the
//! current one is multiplied, so that packing it reads cache instead of memory (x86-64).

use super::gemm::{BSrc, WData};

/// The bytes of B a slab reads, as `rows` runs of `run` bytes `stride` bytes apart from `base`,
/// for prefetching them (into L2) while the previous slab is being multiplied.
pub struct Prefetch {
    base: *const u8,
    stride: usize,
    run: usize,
    rows: usize,
}

impl Prefetch {
    /// Cache lines of one run (one more than the bytes need, for a run that starts mid-line).
    fn lines_per_run(&self) -> usize {
        self.run.div_ceil(64) + 1
    }

    /// Cache lines in all.
    pub fn lines(&self) -> usize {
        self.rows * self.lines_per_run()
    }

    /// Prefetch lines `l0..l1` (of [`Prefetch::lines`]).
    pub fn fetch(&self, l0: usize, l1: usize) {
        let lpr = self.lines_per_run();
        for l in l0..l1.min(self.lines()) {
            let (r, i) = (l / lpr, l % lpr);
            // Stay inside the run's bytes (the last line of a run may start past its end).
            let off = (i * 64).min(self.run.saturating_sub(1));
            // SAFETY: `base + r·stride + off` lies inside B's storage (the runs were taken
            // from its slices), and a prefetch reads nothing into the program either way.
            unsafe {
                let p = self.base.add(r * self.stride + off);
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p.cast());
            }
        }
    }
}

impl BSrc<'_> {
    /// What `BSrc::pack_slab` of rows `k0..k0 + kc`, columns `n0..n0 + nb` reads, for
    /// prefetching (`None` for the implicit im2col matrix, which reads its input in place).
    pub fn prefetch(&self, k0: usize, kc: usize, n0: usize, nb: usize) -> Option<Prefetch> {
        if kc == 0 || nb == 0 {
            return None;
        }
        match *self {
            BSrc::Nk(w, ld) => {
                let (bytes, sz): (&[u8], usize) = match w {
                    WData::F32(s) => (bytemuck::cast_slice(s), 4),
                    WData::F16(s) => (bytemuck::cast_slice(s), 2),
                    WData::Bf16(s) => (bytemuck::cast_slice(s), 2),
                    WData::Raw(d, b) => (b, d.size()),
                };
                let start = (n0 * ld + k0) * sz;
                let end = ((n0 + nb - 1) * ld + k0 + kc) * sz;
                (end <= bytes.len()).then(|| Prefetch {
                    // SAFETY: start < end ≤ the length of the slice.
                    base: unsafe { bytes.as_ptr().add(start) },
                    stride: ld * sz,
                    run: kc * sz,
                    rows: nb,
                })
            }
            BSrc::Kn(b, ld) => {
                let (start, end) = (k0 * ld + n0, (k0 + kc - 1) * ld + n0 + nb);
                (end <= b.len()).then(|| Prefetch {
                    // SAFETY: start < end ≤ the length of the slice.
                    base: unsafe { b.as_ptr().add(start) }.cast(),
                    stride: ld * 4,
                    run: nb * 4,
                    rows: kc,
                })
            }
            BSrc::Rows(src) => {
                let l = src.layout(k0, kc)?;
                let start = l.start + n0 * l.stride;
                let end = start + (nb - 1) * l.stride + l.run;
                (l.run > 0 && end <= l.bytes.len()).then(|| Prefetch {
                    // SAFETY: start < end ≤ the length of the slice.
                    base: unsafe { l.bytes.as_ptr().add(start) },
                    stride: l.stride,
                    run: l.run,
                    rows: nb,
                })
            }
            BSrc::Conv { .. } => None,
        }
    }
}
