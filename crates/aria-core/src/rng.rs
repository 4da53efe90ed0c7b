//! Portable pseudo-random building blocks shared by the noise sources of the model crates and
//! the random-checkpoint writer: a seed gives the same stream on every platform and with every
//! dependency version, so a seed written in a log reproduces the same numbers everywhere.
//!
//! - [`splitmix64`] / [`SplitMix64`]: SplitMix64 (Steele, Lea, Flood 2014). Each step adds
//!   `0x9E3779B97F4A7C15` to the 64-bit state and returns the state passed through the
//!   finaliser `z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
//!   z ^= z >> 31` (wrapping products). The first output of seed `s` is the finaliser of
//!   `s + 0x9E3779B97F4A7C15`.
//! - [`Xoshiro256pp`]: xoshiro256++ (Blackman, Vigna 2019), state `[s0, s1, s2, s3]` filled with
//!   the first four SplitMix64 outputs of the seed; each step returns
//!   `rotl(s0 + s3, 23) + s0` and then advances the state.
//! - [`box_muller`]: the Box–Muller transform in f64 of two uniforms `u1 ∈ (0, 1]`,
//!   `u2 ∈ [0, 1)`: with `r = sqrt(−2 ln u1)` and `a = 2π·u2`, the pair `(r·cos a, r·sin a)`,
//!   each rounded to f32. The Gaussian generators that use it return the cosine value first
//!   and the sine value on the next call; how each maps 64-bit words to `u1` and `u2` is part of
//!   its own documented stream.
//! - [`Rng`]: aria's own seeded generator: [`Xoshiro256pp`] words mapped to uniforms
//!   `((x >> 11) + 0.5)·2⁻⁵³` in the open interval (0, 1), both Box–Muller inputs drawn that
//!   way, the sine value cached for the next draw.
//! - [`TorchGenerator`]: PyTorch's CPU generator ([`Mt19937`] seeded like
//!   `torch.manual_seed`) with `torch.rand` / `torch.randn` sampling reproduced bit for bit
//!   (see [`torch`] for the exact rules).

pub mod torch;

pub use torch::{Mt19937, RandnKernel, TorchGenerator};

/// One SplitMix64 step on `state` (see the module docs): advances the state, returns the next
/// output.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The SplitMix64 generator: its state is the seed, each output one [`splitmix64`] step.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose state starts at `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64-bit output.
    pub fn next_u64(&mut self) -> u64 {
        splitmix64(&mut self.state)
    }
}

/// The xoshiro256++ generator, seeded through SplitMix64 (see the module docs).
#[derive(Debug, Clone)]
pub struct Xoshiro256pp {
    s: [u64; 4],
}

impl Xoshiro256pp {
    /// A generator whose state is the first four SplitMix64 outputs of `seed`.
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        Xoshiro256pp {
            s: [
                splitmix64(&mut sm),
                splitmix64(&mut sm),
                splitmix64(&mut sm),
                splitmix64(&mut sm),
            ],
        }
    }

    /// The next 64-bit output.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let r = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        r
    }
}

/// aria's own seeded standard-normal generator (see the module docs): the same stream on every
/// platform and with every dependency version.
#[derive(Debug, Clone)]
pub struct Rng {
    g: Xoshiro256pp,
    spare: Option<f32>,
}

impl Rng {
    /// A generator seeded from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng {
            g: Xoshiro256pp::new(seed),
            spare: None,
        }
    }

    /// Next raw 64-bit value.
    pub fn next_u64(&mut self) -> u64 {
        self.g.next_u64()
    }

    /// Uniform in the open interval (0, 1), 53-bit resolution.
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
    }

    /// A standard normal draw.
    pub fn normal(&mut self) -> f32 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        let u1 = self.uniform();
        let u2 = self.uniform();
        let (c, s) = box_muller(u1, u2);
        self.spare = Some(s);
        c
    }

    /// Fill `out` with standard normal draws: the values `out.len()` calls of [`Rng::normal`]
    /// would give, bit for bit. The uniforms are drawn in stream order; the Box–Muller
    /// transforms (a pure function of each pair) run on the current rayon pool, blocks of
    /// [`FILL_BLOCK`] pairs at a time, so no buffer outgrows one block.
    pub fn fill_normal(&mut self, out: &mut [f32]) {
        use rayon::prelude::*;
        let start = match (self.spare, out.first_mut()) {
            (Some(v), Some(first)) => {
                *first = v;
                self.spare = None;
                1
            }
            _ => 0,
        };
        let out = &mut out[start..];
        let mut pairs: Vec<(f64, f64)> = Vec::new();
        for block in out.chunks_mut(2 * FILL_BLOCK) {
            pairs.clear();
            pairs.extend((0..block.len().div_ceil(2)).map(|_| {
                let u1 = self.uniform();
                (u1, self.uniform())
            }));
            block
                .par_chunks_mut(2 * 1024)
                .zip(pairs.par_chunks(1024))
                .for_each(|(o, p)| {
                    for (o, &(u1, u2)) in o.chunks_mut(2).zip(p) {
                        let (c, s) = box_muller(u1, u2);
                        o[0] = c;
                        if let Some(v) = o.get_mut(1) {
                            *v = s;
                        }
                    }
                });
            // An odd block is the last one: its last pair's sine value is the next draw.
            if block.len() % 2 == 1 {
                if let Some(&(u1, u2)) = pairs.last() {
                    self.spare = Some(box_muller(u1, u2).1);
                }
            }
        }
    }
}

/// Box–Muller pairs drawn ahead by [`Rng::fill_normal`] (16 bytes each: 1 MiB).
pub const FILL_BLOCK: usize = 1 << 16;

/// The Box–Muller transform of `u1 ∈ (0, 1]` and `u2 ∈ [0, 1)` in f64: two independent
/// standard-normal values `(r·cos 2πu2, r·sin 2πu2)` with `r = sqrt(−2 ln u1)`, rounded to f32.
pub fn box_muller(u1: f64, u2: f64) -> (f32, f32) {
    let r = (-2.0 * u1.ln()).sqrt();
    let a = 2.0 * std::f64::consts::PI * u2;
    ((r * a.cos()) as f32, (r * a.sin()) as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Values recorded from the generators as the model crates implemented them before they
    // shared this module; the streams must never change.
    #[test]
    fn splitmix64_stream_is_pinned() {
        let mut g = SplitMix64::new(0);
        let got: Vec<u64> = (0..3).map(|_| g.next_u64()).collect();
        assert_eq!(
            got,
            [0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f]
        );
    }

    #[test]
    fn xoshiro256pp_stream_is_pinned() {
        let mut g = Xoshiro256pp::new(7);
        let got: Vec<u64> = (0..3).map(|_| g.next_u64()).collect();
        assert_eq!(
            got,
            [0x0e2c1a002aae913d, 0x2c0fc8ddfa4e9e14, 0xb7b311b3b0d45872]
        );
    }

    #[test]
    fn rng_normal_stream_is_pinned_and_normal() {
        let mut a = Rng::new(7);
        let n = 200_000;
        let mut v = vec![0f32; n];
        a.fill_normal(&mut v);
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n as f64;
        let var = v
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n as f64;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");
        let first: Vec<u32> = v[..4].iter().map(|x| x.to_bits()).collect();
        assert_eq!(first, [0x3f90c02f, 0x4007e629, 0xbf3b2155, 0x3eb831f8]);
    }

    /// `fill_normal` gives the bits of as many `normal` calls, whatever the length's parity,
    /// a pending sine value, block boundaries or the thread count.
    #[test]
    fn fill_normal_equals_sequential_draws() {
        for (skip, n) in [
            (0usize, 0usize),
            (0, 1),
            (1, 1),
            (1, 2),
            (0, 5),
            (1, 4097),
            (0, 2 * FILL_BLOCK + 3),
            (1, 2 * FILL_BLOCK),
        ] {
            let mut want_rng = Rng::new(7);
            let mut got_rng = Rng::new(7);
            for _ in 0..skip {
                want_rng.normal();
                got_rng.normal();
            }
            let want: Vec<u32> = (0..n).map(|_| want_rng.normal().to_bits()).collect();
            for threads in [1, 2, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .expect("thread pool");
                let mut r = got_rng.clone();
                let mut got = vec![0f32; n];
                pool.install(|| r.fill_normal(&mut got));
                let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                assert!(got == want, "skip {skip} n {n} threads {threads}");
                // The stream goes on where the sequential one does.
                let mut w = want_rng.clone();
                assert_eq!(r.normal().to_bits(), w.normal().to_bits(), "after n {n}");
            }
        }
    }

    #[test]
    fn box_muller_of_simple_uniforms() {
        let (c, s) = box_muller(1.0, 0.25);
        assert_eq!((c, s), (0.0, 0.0));
        let (c, s) = box_muller((-0.5f64).exp(), 0.0);
        assert!((c - 1.0).abs() < 1e-6 && s == 0.0, "{c} {s}");
    }
}
