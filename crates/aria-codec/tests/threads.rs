#![allow(clippy::unwrap_used)]
//! Decoding and encoding give the same bits on 1, 2 and 3 threads (every parallel loop runs on
//! the library's pool and splits only independent outputs).

mod common;

use aria_core::threads::with_threads;
use common::{assert_bits_eq, model, tensors};

fn same_bits_for_any_thread_count(folder: &str) {
    let Some(ae) = model(folder) else { return };
    let Some(d) = tensors(&format!("{folder}/same_decode.safetensors")) else {
        return;
    };
    let Some(e) = tensors(&format!("{folder}/same_encode.safetensors")) else {
        return;
    };
    let z = d.get_any("in.dec_chunked.latents").unwrap();
    let w = e.get_any("in.enc.waveform").unwrap();
    let run = |n: usize| {
        with_threads(n, || {
            (
                ae.decode(&z, None).unwrap(),
                ae.decode_keyed(&z, 3).unwrap(),
                ae.encode(&w, None).unwrap(),
            )
        })
        .unwrap()
    };
    let one = run(1);
    for n in [2, 3] {
        let got = run(n);
        assert_bits_eq(&format!("{folder} decode, {n} threads"), &got.0, &one.0);
        assert_bits_eq(
            &format!("{folder} keyed decode, {n} threads"),
            &got.1,
            &one.1,
        );
        assert_bits_eq(&format!("{folder} encode, {n} threads"), &got.2, &one.2);
    }
}

#[test]
fn same_s_bits_do_not_depend_on_threads() {
    same_bits_for_any_thread_count("sa3-tiny");
}

#[test]
fn same_l_bits_do_not_depend_on_threads() {
    same_bits_for_any_thread_count("sa3-tiny-medium");
}
