//! Length bookkeeping of `generate()` against the reference's integers for 18 durations
//! (including negative, zero and beyond-cap values) of the tiny model (256-sample latents).
#![allow(clippy::unwrap_used)]

#[path = "dit_common.rs"]
mod common;

use aria_dit::sampler::LengthParams;
use common::{get, tensors};

#[test]
fn lengths_match_reference() {
    let Some(w) = tensors("sa3-tiny-extra/seconds.safetensors") else {
        return;
    };
    let p = LengthParams {
        downsampling_ratio: 256,
        ..Default::default()
    };
    let vals = get(&w, "in.seconds.values").to_vec_f32().unwrap();
    let int = |n: &str| -> Vec<i64> { w.get_any(n).unwrap().to_vec::<i64>().unwrap() };
    let (samples, t, leff, lvalid) = (
        int("out.seconds.adapted_samples"),
        int("out.seconds.T"),
        int("out.seconds.L_eff"),
        int("out.seconds.L_valid"),
    );
    for (i, &s) in vals.iter().enumerate() {
        // The reference receives the Python float; the fixture stores it as f32.
        let s = s as f64;
        let s = (s * 1e4).round() / 1e4;
        assert_eq!(p.adapted_samples(s) as i64, samples[i], "samples for {s}");
        let tl = p.latent_len(&[s]);
        assert_eq!(tl as i64, t[i], "T for {s}");
        assert_eq!(p.effective_len(s), leff[i], "L_eff for {s}");
        assert_eq!(p.valid_len(s, tl), lvalid[i], "L_valid for {s}");
    }
}
