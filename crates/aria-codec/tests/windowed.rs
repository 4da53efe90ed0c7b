#![allow(clippy::unwrap_used)]
//! Windowed and streaming decoding are bit-identical to a whole decode (noise off), for many
//! even and odd lengths, window sizes and push patterns, on both decoder structures.

mod common;

use aria_codec::{Autoencoder, NoiseSource, SeededNoise, StreamingDecoder, WindowedDecoder};
use aria_core::Tensor;
use common::{assert_bits_eq, model};

fn latents(c: usize, t: usize, seed: u64) -> Tensor {
    SeededNoise::new(seed).draw(&[1, c, t], "latents").unwrap()
}

fn check_lengths(ae: &Autoencoder, lengths: &[usize], windows: &[usize]) {
    let c = ae.config().latent_dim;
    for &t in lengths {
        let z = latents(c, t, 1000 + t as u64);
        let whole = ae.decode(&z, None).unwrap();
        for &w in windows {
            let got = WindowedDecoder::new(ae, w).decode(&z).unwrap();
            assert_bits_eq(&format!("T={t} window={w}"), &got, &whole);
        }
        // Streaming with irregular pushes (1, 2, 3, ... latents at a time).
        let mut s = StreamingDecoder::new(ae, windows[0]);
        let mut parts = Vec::new();
        let (mut at, mut step) = (0, 1);
        while at < t {
            let k = step.min(t - at);
            parts.push(
                s.push(&z.narrow(2, at, k).unwrap().contiguous().unwrap())
                    .unwrap(),
            );
            at += k;
            step = step % 4 + 1;
        }
        parts.push(s.finish().unwrap());
        let refs: Vec<&Tensor> = parts.iter().collect();
        let got = Tensor::cat(&refs, 2).unwrap();
        assert_bits_eq(&format!("T={t} streaming"), &got, &whole);
    }
}

#[test]
fn same_s_windowed_and_streaming_are_bit_identical() {
    let Some(ae) = model("sa3-tiny") else { return };
    let lengths: Vec<usize> = (1..=21).chain([32, 33, 47]).collect();
    check_lengths(&ae, &lengths, &[2, 4, 6]);
}

#[test]
fn same_l_windowed_and_streaming_are_bit_identical() {
    let Some(ae) = model("sa3-tiny-medium") else {
        return;
    };
    let lengths: Vec<usize> = (1..=17).chain([30, 31, 48]).collect();
    check_lengths(&ae, &lengths, &[1, 3, 5]);
}

#[test]
fn streaming_emits_before_the_end_and_bounds_its_buffer() {
    let Some(ae) = model("sa3-tiny-medium") else {
        return;
    };
    let c = ae.config().latent_dim;
    let z = latents(c, 60, 7);
    let mut s = StreamingDecoder::new(&ae, 4);
    let mut emitted_early = 0;
    for i in 0..60 {
        let a = s
            .push(&z.narrow(2, i, 1).unwrap().contiguous().unwrap())
            .unwrap();
        emitted_early += a.shape()[2];
    }
    assert!(emitted_early > 0, "nothing emitted before finish");
    assert!(s.emitted() > 40);
    let rest = s.finish().unwrap();
    assert_eq!(
        emitted_early + rest.shape()[2],
        60 * ae.samples_per_latent()
    );
    assert!(s.push(&z).is_err(), "push after finish must fail");
}

/// With position-keyed noise the stochastic terms are on and windows still reproduce the whole
/// decode bit for bit.
#[test]
fn keyed_noise_windowed_matches_whole() {
    for folder in ["sa3-tiny", "sa3-tiny-medium"] {
        let Some(ae) = model(folder) else { return };
        let c = ae.config().latent_dim;
        for t in [7usize, 12, 19] {
            let z = latents(c, t, 50 + t as u64);
            let whole = ae.decode_keyed(&z, 99).unwrap();
            let quiet = ae.decode(&z, None).unwrap();
            let e = aria_testing::fixtures::rel_err(
                &whole.to_vec_f32().unwrap(),
                &quiet.to_vec_f32().unwrap(),
            );
            assert!(
                e > 1e-4,
                "{folder} T={t}: keyed noise had no effect ({e:.2e})"
            );
            let w = WindowedDecoder::new(&ae, 2)
                .with_noise_seed(99)
                .decode(&z)
                .unwrap();
            assert_bits_eq(&format!("{folder} T={t} keyed windowed"), &w, &whole);
            let other = ae.decode_keyed(&z, 100).unwrap();
            assert_ne!(
                other.to_vec_f32().unwrap(),
                whole.to_vec_f32().unwrap(),
                "seed must matter"
            );
        }
    }
}
