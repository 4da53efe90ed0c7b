#![allow(clippy::unwrap_used)]
//! `Autoencoder::decode_part` gives the bits of a whole decode for the latents it keeps, with the
//! noise on or off, and leaves a call-order noise source where a whole decode leaves it; the
//! chunked decode built on it equals decoding every window whole.

mod common;

use aria_codec::{chunk_starts, Autoencoder, NoiseSource, SeededNoise};
use aria_core::Tensor;
use common::{assert_bits_eq, model};

fn latents(c: usize, t: usize, seed: u64) -> Tensor {
    SeededNoise::new(seed).draw(&[1, c, t], "latents").unwrap()
}

fn check_parts(ae: &Autoencoder, folder: &str) {
    let c = ae.config().latent_dim;
    let spl = ae.samples_per_latent();
    for t in [5usize, 12, 31, 40] {
        let z = latents(c, t, 300 + t as u64);
        for noisy in [false, true] {
            let mut n1 = SeededNoise::new(7);
            let whole = if noisy {
                ae.decode(&z, Some(&mut n1)).unwrap()
            } else {
                ae.decode(&z, None).unwrap()
            };
            for keep in [
                0..1,
                0..t,
                t - 1..t,
                t / 3..t / 2 + 1,
                2..t.min(9),
                t / 2..t,
            ] {
                let (a, at) = if noisy {
                    let mut n = SeededNoise::new(7);
                    let r = ae.decode_part(&z, keep.clone(), Some(&mut n)).unwrap();
                    // The source is left where a whole decode leaves it.
                    let next = n.draw(&[4], "after").unwrap();
                    let want = n1.clone().draw(&[4], "after").unwrap();
                    assert_bits_eq(&format!("{folder} T={t} noise after"), &next, &want);
                    r
                } else {
                    ae.decode_part(&z, keep.clone(), None).unwrap()
                };
                assert!(at <= keep.start, "{folder} T={t} {keep:?}: starts at {at}");
                let len = (keep.end - keep.start) * spl;
                let got = a.narrow(2, (keep.start - at) * spl, len).unwrap();
                let want = whole.narrow(2, keep.start * spl, len).unwrap();
                let what = format!("{folder} T={t} keep {keep:?} noise {noisy}");
                assert_bits_eq(
                    &what,
                    &got.contiguous().unwrap(),
                    &want.contiguous().unwrap(),
                );
            }
        }
    }
    // Bad ranges are errors, not panics.
    let z = latents(c, 8, 1);
    assert!(ae.decode_part(&z, 3..3, None).is_err());
    assert!(ae.decode_part(&z, 2..9, None).is_err());
}

/// The chunked decode (windows of 128 latents, hop 96) equals decoding every window whole and
/// keeping its part, with the noise drawn in window order.
fn check_chunked(ae: &Autoencoder, folder: &str) {
    let c = ae.config().latent_dim;
    let spl = ae.samples_per_latent();
    for t in [128usize, 131, 174, 230] {
        let z = latents(c, t, 900 + t as u64);
        let mut n = SeededNoise::new(11);
        let got = ae.decode_chunked(&z, Some(&mut n)).unwrap();
        // By hand: each window decoded whole, its kept part cut out.
        let starts = chunk_starts(t, 128, 32);
        let mut m = SeededNoise::new(11);
        let mut parts = Vec::new();
        for (i, &s) in starts.iter().enumerate() {
            let win = z.narrow(2, s, 128).unwrap().contiguous().unwrap();
            let a = ae.decode(&win, Some(&mut m)).unwrap();
            let last = i + 1 == starts.len();
            let at = if last { t - 128 } else { s };
            let mut b = at + if i == 0 { 0 } else { 16 };
            let mut e = at + if last { 128 } else { 112 };
            if let Some(&next) = starts.get(i + 1) {
                let nat = if i + 2 == starts.len() { t - 128 } else { next };
                e = e.min(nat + 16);
            }
            b = b.min(e);
            parts.push(
                a.narrow(2, (b - at) * spl, (e - b) * spl)
                    .unwrap()
                    .contiguous()
                    .unwrap(),
            );
        }
        let refs: Vec<&Tensor> = parts.iter().collect();
        let want = Tensor::cat(&refs, 2).unwrap();
        assert_bits_eq(&format!("{folder} T={t} chunked"), &got, &want);
    }
}

#[test]
fn same_s_part_decodes_have_the_whole_decodes_bits() {
    let Some(ae) = model("sa3-tiny") else { return };
    check_parts(&ae, "sa3-tiny");
    check_chunked(&ae, "sa3-tiny");
    // 174 latents (a 10 s request): windows at 0 and 46 keep 0..62 and 62..174 (the last
    // window wins from 46 + 16); with the 2-latent halo in 2-latent chunks they run 64 and 114
    // latents instead of 2 × 128.
    assert_eq!(ae.chunked_spans(174), vec![0..64, 14..128]);
    assert_eq!(ae.chunked_spans(100), vec![0..100]);
    assert_eq!(ae.chunked_spans(101), vec![0..102]);
}

#[test]
fn same_l_part_decodes_have_the_whole_decodes_bits() {
    let Some(ae) = model("sa3-tiny-medium") else {
        return;
    };
    check_parts(&ae, "sa3-tiny-medium");
    check_chunked(&ae, "sa3-tiny-medium");
}
