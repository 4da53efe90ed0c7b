//! The torch-compatible generator against PyTorch 2.7.1's own CPU draws, bit for bit: the
//! eleven draws the reference `generate(seed=123)` made (`sa3-tiny/e2e.safetensors`), and
//! values recorded from `torch.manual_seed(s)` followed by `torch.randn` / `torch.rand` calls on
//! the AVX2 kernel and on the default kernel (`ATEN_CPU_CAPABILITY=default`). Recorded values
//! are pinned as the bit patterns of the first and last element and an FNV-1a hash of every
//! element's bits, so a single flipped bit fails.
#![allow(clippy::unwrap_used)]

use aria_core::noise::{NoiseSource, TorchNoise};
use aria_core::rng::{RandnKernel, TorchGenerator};
use aria_core::WeightLoader;
use aria_testing::fixtures::fixture;

/// FNV-1a over 64-bit words (each f32's bits widened, each f64's bits as they are).
fn fnv(words: impl IntoIterator<Item = u64>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in words {
        h ^= w;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn fnv32(v: &[f32]) -> u64 {
    fnv(v.iter().map(|x| u64::from(x.to_bits())))
}

#[test]
fn reproduces_the_reference_generate_draws_bit_for_bit() {
    let Some(path) = fixture("sa3-tiny/e2e.safetensors") else {
        return;
    };
    let w = WeightLoader::open(&[&path]).unwrap();
    // generate(seed=123) calls torch.manual_seed(123), then every draw in this order.
    let mut noise = TorchNoise::new(123);
    for i in 0..=10 {
        let want = w.get_any(&format!("draw_{i:02}")).unwrap();
        let got = noise.draw(want.shape(), "draw").unwrap();
        let (g, r) = (got.to_vec_f32().unwrap(), want.to_vec_f32().unwrap());
        let differ = g
            .iter()
            .zip(&r)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            differ,
            0,
            "draw_{i:02} {:?}: {differ} values differ",
            want.shape()
        );
    }
}

/// `torch.manual_seed(0)`, then `torch.randn(n)` for each n in turn: (n, first bits, last bits,
/// FNV-1a of all bits) per kernel. Sizes under 16 take the scalar float64 path (whose cached
/// second value carries over from one call to the next), 16 and more the block path, sizes
/// that 16 does not divide the redrawn tail.
const SIZES: [usize; 9] = [1, 5, 15, 16, 17, 31, 33, 100, 1000];

const AVX2: [(u32, u32, u64); 9] = [
    (0x3fc53f5c, 0x3fc53f5c, 0x745d11ab49b5619b),
    (0xbe963c50, 0xbfb3052d, 0x5f41ca8c883a742e),
    (0x3ece837a, 0x3ebda439, 0x116f937f2f4c5af5),
    (0xbe3222d5, 0x405a45ad, 0x09811ed19d52689f),
    (0x3f18258e, 0xbf85c1dc, 0xcaad1ca3ce636883),
    (0x3f4a9f9e, 0xbf9f390a, 0x66e2db13c8aab8e3),
    (0xbcccf69e, 0x3f2ab22a, 0xc0a9e7ef0b25b34a),
    (0xbf519daa, 0xbf8f3037, 0x48e7ab39b126de8f),
    (0xbe5d6f6b, 0x3e638e42, 0xe3ccc8f32a411e82),
];

const SCALAR: [(u32, u32, u64); 9] = [
    (0x3fc53f5c, 0x3fc53f5c, 0x745d11ab49b5619b),
    (0xbe963c50, 0xbfb3052d, 0x5f41ca8c883a742e),
    (0x3ece837a, 0x3ebda439, 0x116f937f2f4c5af5),
    (0xbe3222d5, 0x405a45ad, 0x2a76ab0d947c118b),
    (0x3f18258e, 0xbf85c1dc, 0x7f545aebdcfe69bb),
    (0x3f4a9f9f, 0xbf9f390d, 0x05b8b818c72067ef),
    (0xbcccf69e, 0x3f2ab22a, 0x583d2d449b9c43eb),
    (0xbf519db6, 0xbf8f3038, 0x706e88ef71aa1c58),
    (0xbe5d6f6b, 0x3e638e42, 0x1c9f9caa2bee4b5d),
];

fn check_sequence(kernel: RandnKernel, want: &[(u32, u32, u64); 9]) {
    let mut g = TorchGenerator::manual_seed(0).with_kernel(kernel);
    for (n, &(first, last, hash)) in SIZES.iter().zip(want) {
        let mut v = vec![0f32; *n];
        g.randn_f32(&mut v);
        assert_eq!(
            (v[0].to_bits(), v[n - 1].to_bits(), fnv32(&v)),
            (first, last, hash),
            "{kernel:?} randn({n})"
        );
    }
}

#[test]
fn randn_sequence_matches_torch_avx2_kernel() {
    check_sequence(RandnKernel::Avx2, &AVX2);
}

/// The default kernel calls the C library's `logf`/`cosf`/`sinf`; the pinned values are those
/// of glibc, which is what the platform functions are on Linux.
#[test]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn randn_sequence_matches_torch_default_kernel() {
    check_sequence(RandnKernel::Scalar, &SCALAR);
}

/// `torch.manual_seed(0); torch.randn(2**18)`: every block of a large draw.
#[test]
fn large_randn_matches_torch() {
    let mut g = TorchGenerator::manual_seed(0);
    let mut v = vec![0f32; 1 << 18];
    g.randn_f32(&mut v);
    assert_eq!(fnv32(&v), 0x980906eea73e9361);
}

/// `torch.manual_seed(42)`, then `rand(7)`, `rand(3, float64)`, `randn(5, float64)`,
/// `randn(40, float64)`: float32 uniforms use 24 bits of one 32-bit output, float64 uniforms 53
/// bits of two.
#[test]
fn rand_and_float64_randn_match_torch() {
    let mut g = TorchGenerator::manual_seed(42);
    let mut f = vec![0f32; 7];
    g.rand_f32(&mut f);
    let bits: Vec<u32> = f.iter().map(|x| x.to_bits()).collect();
    assert_eq!(
        bits,
        [0x3f61dc66, 0x3f6a3db3, 0x3ec406b8, 0x3f75950e, 0x3ec7e8d4, 0x3f19d447, 0x3e835d78]
    );
    let mut d = vec![0f64; 3];
    g.rand_f64(&mut d);
    let bits: Vec<u64> = d.iter().map(|x| x.to_bits()).collect();
    assert_eq!(
        bits,
        [0x3fd658284fe1accc, 0x3fb0c3c93f7a0e90, 0x3fe7f4d60ede914a]
    );
    let mut d = vec![0f64; 5];
    g.randn_f64(&mut d);
    let bits: Vec<u64> = d.iter().map(|x| x.to_bits()).collect();
    assert_eq!(
        bits,
        [
            0xbff084e7d9e357b7,
            0xbfd1bae98b705775,
            0xbfc564a7bd89d907,
            0xbfbb9f186f546d12,
            0xbff6db46108f49ae
        ]
    );
    let mut d = vec![0f64; 40];
    g.randn_f64(&mut d);
    assert_eq!(
        (d[0].to_bits(), d[1].to_bits()),
        (0x3fe00e6c558a6461, 0xbff363443e82e02f)
    );
    assert_eq!(fnv(d.iter().map(|x| x.to_bits())), 0xcd789b25b19c215e);
}

/// torch keeps only the low 32 bits of the seed; small draws come from the scalar path.
#[test]
fn seed_is_taken_mod_2_pow_32_and_small_draws_match() {
    let mut a = vec![0f32; 20];
    let mut b = vec![0f32; 20];
    TorchGenerator::manual_seed((1 << 32) + 5).randn_f32(&mut a);
    TorchGenerator::manual_seed(5).randn_f32(&mut b);
    assert_eq!(a, b);
    let x = TorchNoise::new(123)
        .draw(&[3], "x")
        .unwrap()
        .to_vec_f32()
        .unwrap();
    let bits: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
    assert_eq!(bits, [0xbde448df, 0x3df680d9, 0xbebd40bc]);
}
