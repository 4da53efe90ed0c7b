//! XXH64 (the 64-bit xxHash), the checksum of packed tensors and of source weights.

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

#[inline(always)]
fn round(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(P2))
        .rotate_left(31)
        .wrapping_mul(P1)
}

#[inline(always)]
fn merge(acc: u64, v: u64) -> u64 {
    (acc ^ round(0, v)).wrapping_mul(P1).wrapping_add(P4)
}

#[inline(always)]
fn read64(b: &[u8]) -> u64 {
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// Streaming XXH64: [`Xxh64::update`] with any split of the input gives the same
/// [`Xxh64::finish`] as [`xxh64`] of the whole.
#[derive(Debug, Clone)]
pub struct Xxh64 {
    v: [u64; 4],
    seed: u64,
    len: u64,
    buf: [u8; 32],
    nbuf: usize,
}

impl Xxh64 {
    /// A hasher with `seed`.
    pub fn new(seed: u64) -> Self {
        Xxh64 {
            v: [
                seed.wrapping_add(P1).wrapping_add(P2),
                seed.wrapping_add(P2),
                seed,
                seed.wrapping_sub(P1),
            ],
            seed,
            len: 0,
            buf: [0; 32],
            nbuf: 0,
        }
    }

    fn stripe(v: &mut [u64; 4], s: &[u8]) {
        for (i, vi) in v.iter_mut().enumerate() {
            *vi = round(*vi, read64(&s[8 * i..]));
        }
    }

    /// Add bytes.
    pub fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if self.nbuf > 0 {
            let take = (32 - self.nbuf).min(data.len());
            self.buf[self.nbuf..self.nbuf + take].copy_from_slice(&data[..take]);
            self.nbuf += take;
            data = &data[take..];
            if self.nbuf < 32 {
                return;
            }
            let buf = self.buf;
            Self::stripe(&mut self.v, &buf);
            self.nbuf = 0;
        }
        let mut chunks = data.chunks_exact(32);
        for s in &mut chunks {
            Self::stripe(&mut self.v, s);
        }
        let rest = chunks.remainder();
        self.buf[..rest.len()].copy_from_slice(rest);
        self.nbuf = rest.len();
    }

    /// The hash of everything added so far.
    pub fn finish(&self) -> u64 {
        let mut h = if self.len >= 32 {
            let v = self.v;
            let mut h = v[0]
                .rotate_left(1)
                .wrapping_add(v[1].rotate_left(7))
                .wrapping_add(v[2].rotate_left(12))
                .wrapping_add(v[3].rotate_left(18));
            for vi in v {
                h = merge(h, vi);
            }
            h
        } else {
            self.seed.wrapping_add(P5)
        };
        h = h.wrapping_add(self.len);
        let mut rest = &self.buf[..self.nbuf];
        while rest.len() >= 8 {
            h ^= round(0, read64(rest));
            h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
            rest = &rest[8..];
        }
        if rest.len() >= 4 {
            let k = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as u64;
            h ^= k.wrapping_mul(P1);
            h = h.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
            rest = &rest[4..];
        }
        for &b in rest {
            h ^= (b as u64).wrapping_mul(P5);
            h = h.rotate_left(11).wrapping_mul(P1);
        }
        h ^= h >> 33;
        h = h.wrapping_mul(P2);
        h ^= h >> 29;
        h = h.wrapping_mul(P3);
        h ^ (h >> 32)
    }
}

/// XXH64 of `data` with seed 0.
pub fn xxh64(data: &[u8]) -> u64 {
    let mut h = Xxh64::new(0);
    h.update(data);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Published XXH64 values (seed 0).
    #[test]
    fn known_values() {
        assert_eq!(xxh64(b""), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"a"), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(xxh64(b"abc"), 0x44BC_2CF5_AD77_0999);
    }

    /// Any split of the input gives the one-shot hash.
    #[test]
    fn streaming_matches_one_shot() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 251) as u8).collect();
        for len in [0, 1, 3, 4, 7, 8, 31, 32, 33, 63, 64, 100, 1000] {
            let want = xxh64(&data[..len]);
            for split in [1, 5, 17, 32, 40] {
                let mut h = Xxh64::new(0);
                for c in data[..len].chunks(split) {
                    h.update(c);
                }
                assert_eq!(h.finish(), want, "len {len} split {split}");
            }
        }
    }
}
