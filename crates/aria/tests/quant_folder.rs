//! Pre-quantized folders pack the autoencoder decoder too: its matrices are stored as `q8_0`
//! blocks (no dense copy in the file), load packed from the mapping, and decode bit for bit
//! as the same checkpoint loaded with `quantize_decoder`; `dense_decoder` keeps them dense.
#![cfg(feature = "quant")]
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use aria::discover::{resolve_model, ModelFiles, SearchPaths};
use aria::pipeline::RunOptions;
use aria::quant::{QuantizeOptions, WeightPrecision};
use aria::{GenerateRequest, LoadOptions, Pipeline, TorchNoise};
use aria_testing::fixtures::fixture;

fn files() -> Option<ModelFiles> {
    let dir = fixture("sa3-tiny-extra")?;
    Some(resolve_model(&dir.display().to_string(), &SearchPaths::default()).unwrap())
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("aria-qfolder-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Latent and audio bits of a short generation.
fn audio(p: &Pipeline, seed: u64) -> (Vec<u32>, Vec<u32>) {
    let mut r = GenerateRequest::new("warm ambient pad", 0.5);
    r.steps = 3;
    r.duration_padding_sec = 0.1;
    let out = p
        .run(&r, &mut TorchNoise::new(seed), RunOptions::default())
        .unwrap();
    let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    (
        bits(out.latents.to_vec_f32().unwrap()),
        bits(out.audio.to_vec_f32().unwrap()),
    )
}

fn load(files: &ModelFiles, opts: LoadOptions) -> Pipeline {
    Pipeline::load(files, &opts).unwrap()
}

fn quantize(files: &ModelFiles, name: &str, dense_decoder: bool) -> (PathBuf, ModelFiles) {
    let out = tmp(name);
    let opts = QuantizeOptions {
        precision: WeightPrecision::Q8,
        dense_decoder,
    };
    let s = aria::quant::quantize_model_with(files, &opts, &out, &mut |_, _| {}).unwrap();
    assert_eq!(s.decoder.is_some(), !dense_decoder);
    let qf = resolve_model(&out.display().to_string(), &SearchPaths::default()).unwrap();
    (out, qf)
}

#[test]
fn folder_decoder_is_packed_and_decodes_as_packing_at_load() {
    let Some(files) = files() else { return };
    let (out, qf) = quantize(&files, "packed", false);

    // The file: decoder format recorded; every decoder matrix stored as U8 blocks, none dense.
    let w = aria_core::WeightLoader::open(&[&qf.weights]).unwrap();
    let names = w.names();
    let md = w.file_metadata(&names[0]).unwrap();
    assert_eq!(
        md.get(aria_quant::io::META_DECODER).map(String::as_str),
        Some("q8_0/v1")
    );
    let file = aria_quant::io::PackedFile::open(&qf.weights).unwrap();
    let decoder: Vec<&String> = file
        .table()
        .keys()
        .filter(|n| n.starts_with("pretransform.model.decoder."))
        .collect();
    assert!(!decoder.is_empty());
    for n in &decoder {
        let (_, info) = w.info(n).unwrap();
        assert_eq!(info.dtype, aria_core::DType::U8, "{n}");
    }
    for n in &names {
        if n.starts_with("pretransform.model.decoder.") {
            let (_, info) = w.info(n).unwrap();
            let matrix = info.shape.len() >= 2 && n.ends_with(".weight");
            assert!(
                !matrix || file.is_packed(n),
                "dense decoder matrix {n} {:?} in the file",
                info.shape
            );
        }
    }
    drop((w, file));
    let plan = aria::quant::memory_plan(&qf).unwrap();
    assert!(plan.contains("decoder too (q8_0/v1)"), "{plan}");

    for w8a8 in [false, true] {
        let pre = load(
            &qf,
            LoadOptions {
                w8a8,
                ..Default::default()
            },
        );
        let at_load = load(
            &files,
            LoadOptions {
                precision: Some(WeightPrecision::Q8),
                w8a8,
                quantize_decoder: true,
                ..Default::default()
            },
        );
        let kinds = &pre.quant_report().decoder_kinds;
        assert_eq!(kinds.len(), 1, "{kinds:?}");
        let want = if w8a8 {
            "packed q8_0/v1+w8a8"
        } else {
            "packed q8_0/v1"
        };
        assert!(kinds.keys().all(|k| k == want), "{kinds:?}");
        assert_eq!(kinds, &at_load.quant_report().decoder_kinds);
        let (l, a) = audio(&pre, 4);
        let (l2, a2) = audio(&at_load, 4);
        assert_eq!(l, l2, "latents (w8a8 {w8a8})");
        assert_eq!(a, a2, "audio (w8a8 {w8a8})");
        // Pages released between requests read back the same bits.
        assert_eq!(audio(&pre, 4).1, a);
        if !w8a8 {
            // ... and the packed decoder is not the dense one.
            let dense = load(
                &files,
                LoadOptions {
                    precision: Some(WeightPrecision::Q8),
                    ..Default::default()
                },
            );
            let (l3, a3) = audio(&dense, 4);
            assert_eq!(l3, l);
            assert_ne!(a3, a, "the decoder was not packed");
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn dense_decoder_folder_decodes_with_the_stored_weights() {
    let Some(files) = files() else { return };
    let (out, qf) = quantize(&files, "dense", true);
    let w = aria_core::WeightLoader::open(&[&qf.weights]).unwrap();
    let md = w.file_metadata(&w.names()[0]).unwrap();
    assert!(!md.contains_key(aria_quant::io::META_DECODER));
    drop(w);
    let plan = aria::quant::memory_plan(&qf).unwrap();
    assert!(plan.contains("decoder dense"), "{plan}");
    let pre = load(&qf, LoadOptions::default());
    let at_load = load(
        &files,
        LoadOptions {
            precision: Some(WeightPrecision::Q8),
            ..Default::default()
        },
    );
    let kinds = &pre.quant_report().decoder_kinds;
    assert!(kinds.keys().all(|k| k.starts_with("dense")), "{kinds:?}");
    assert_eq!(audio(&pre, 2), audio(&at_load, 2));
    let _ = std::fs::remove_dir_all(&out);
}
