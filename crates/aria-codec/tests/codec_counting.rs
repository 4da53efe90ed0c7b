#![allow(clippy::unwrap_used)]
//! The SAME-S and SAME-L decoders and encoders run with weights and activations resident on a
//! device backend (the counting test backend: CPU arithmetic behind a device boundary): no
//! download before the final output, no implicit upload, and bits identical to the CPU path.

mod common;

use aria_codec::{Autoencoder, WindowedDecoder};
use aria_core::Tensor;
use aria_testing::counting::{CountingBackend, Counts};
use common::{assert_bits_eq, model, tensors};

fn report(what: &str, c: &Counts) {
    eprintln!(
        "{what}: {} ops, uploads {}, downloads {}, implicit uploads {}; {:?}",
        c.total_ops(),
        c.uploads,
        c.downloads,
        c.implicit_uploads,
        c.ops
    );
}

/// Move `ae` to a fresh counting backend; returns the backend.
fn on_device(ae: &mut Autoencoder) -> CountingBackend {
    let be = CountingBackend::new();
    ae.to_device(&be.device()).unwrap();
    be
}

fn decode_stays_on_device(folder: &str) {
    let Some(mut ae) = model(folder) else { return };
    let Some(t) = tensors(&format!("{folder}/same_decode.safetensors")) else {
        return;
    };
    let z = t.get_any("in.dec_odd.latents").unwrap();
    let want = ae.decode(&z, None).unwrap();
    let want_keyed = ae.decode_keyed(&z, 5).unwrap();
    let want_windowed = WindowedDecoder::new(&ae, 2).decode(&z).unwrap();

    let be = on_device(&mut ae);
    let zd = be.device().put(&z).unwrap();
    be.reset();
    let out = ae.decode(&zd, None).unwrap();
    let c = be.counts();
    report(&format!("{folder} decode"), &c);
    assert_eq!(c.downloads, 0, "{folder}: downloads before the output");
    assert_eq!(
        c.implicit_uploads, 0,
        "{folder}: implicit uploads {:?}",
        c.mixed_ops
    );
    assert_eq!(c.uploads, 0, "{folder}: uploads during a noise-free decode");
    assert!(c.ops.get("qkv_heads").copied().unwrap_or(0) > 0);
    assert!(c.ops.get("attention").copied().unwrap_or(0) > 0);
    assert!(!out.device().is_cpu());
    assert_bits_eq(&format!("{folder} decode"), &out.to_cpu().unwrap(), &want);

    // Stochastic terms on: the draws are made on the host and uploaded explicitly, one per term.
    be.reset();
    let out = ae.decode_keyed(&zd, 5).unwrap();
    let c = be.counts();
    report(&format!("{folder} keyed decode"), &c);
    assert_eq!((c.downloads, c.implicit_uploads), (0, 0), "{folder} keyed");
    let terms = usize::from(ae.config().bottleneck.noise_regularize)
        + usize::from(ae.config().decoder.mask_noise > 0.0);
    assert_eq!(c.uploads, terms, "{folder}: one upload per noise term");
    assert_bits_eq(
        &format!("{folder} keyed decode"),
        &out.to_cpu().unwrap(),
        &want_keyed,
    );

    // Windowed: one download per window (the audio as it completes), nothing else.
    be.reset();
    let w = WindowedDecoder::new(&ae, 2);
    let out = w.decode(&zd).unwrap();
    let c = be.counts();
    report(&format!("{folder} windowed decode"), &c);
    assert_eq!(c.implicit_uploads, 0);
    assert!(c.downloads > 1 && c.downloads <= z.shape()[2].div_ceil(w.window()) + 1);
    assert_bits_eq(&format!("{folder} windowed decode"), &out, &want_windowed);
}

#[test]
fn same_s_decode_stays_on_device() {
    decode_stays_on_device("sa3-tiny");
}

#[test]
fn same_l_decode_stays_on_device() {
    decode_stays_on_device("sa3-tiny-medium");
}

fn encode_stays_on_device(folder: &str) {
    let Some(mut ae) = model(folder) else { return };
    let Some(t) = tensors(&format!("{folder}/same_encode.safetensors")) else {
        return;
    };
    let w: Tensor = t.get_any("in.enc.waveform").unwrap();
    let want = ae.encode(&w, None).unwrap();
    let be = on_device(&mut ae);
    let wd = be.device().put(&w).unwrap();
    be.reset();
    let out = ae.encode(&wd, None).unwrap();
    let c = be.counts();
    report(&format!("{folder} encode"), &c);
    assert_eq!(
        (c.uploads, c.downloads, c.implicit_uploads),
        (0, 0, 0),
        "{folder} encode: {:?}",
        c.mixed_ops
    );
    assert_bits_eq(&format!("{folder} encode"), &out.to_cpu().unwrap(), &want);
}

#[test]
fn same_s_encode_stays_on_device() {
    encode_stays_on_device("sa3-tiny");
}

#[test]
fn same_l_encode_stays_on_device() {
    encode_stays_on_device("sa3-tiny-medium");
}
