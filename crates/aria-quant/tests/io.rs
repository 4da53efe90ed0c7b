//! Packed safetensors files: round trip, and clear errors for mismatched, corrupt and
//! truncated files.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use aria_core::{save_safetensors, CoreError, SafeTensorsFile, Tensor};
use aria_quant::io::{
    write_packed, write_packed_stream, Entry, Item, PackMeta, PackedFile, Spec, CONTAINER_VERSION,
    META_DECODER, META_POLICY, META_SOURCE, META_TABLE, META_VERSION,
};
use aria_quant::{Format, PackedMatrix, QuantError};
use common::Rng;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aria-quant-io-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    dir.join(name)
}

struct Model {
    mats: Vec<(String, PackedMatrix)>,
    bias: Tensor,
}

fn model() -> Model {
    let mut rng = Rng::new(30);
    let mats = [
        ("blk.0.attn.to_qkv.weight", Format::Q8_0, 96, 64),
        ("blk.0.ff.ff.0.weight", Format::Q4K, 40, 512),
        ("blk.0.ff.ff.2.weight", Format::Q6K, 64, 256),
        ("embed.0.weight", Format::Q8_0, 16, 257),
    ]
    .into_iter()
    .map(|(n, f, r, c)| {
        let w = rng.normals(r * c, 0.05);
        (
            n.to_string(),
            PackedMatrix::from_f32(n, r, c, &w, f).expect("quantize"),
        )
    })
    .collect();
    let bias = Tensor::from_vec(rng.normals(96, 0.1), &[96]).expect("bias");
    Model { mats, bias }
}

fn meta() -> PackMeta {
    PackMeta {
        policy: "q4-mixed".into(),
        source: "0123456789abcdef".into(),
        decoder: None,
    }
}

fn write(m: &Model, path: &Path) {
    let mut entries: Vec<(&str, Entry<'_>)> = m
        .mats
        .iter()
        .map(|(n, p)| (n.as_str(), Entry::Packed(p)))
        .collect();
    entries.push(("blk.0.attn.to_qkv.bias", Entry::Dense(&m.bias)));
    write_packed(path, &entries, &meta()).expect("write");
}

#[test]
fn round_trip() {
    let m = model();
    let path = tmp("round_trip.safetensors");
    write(&m, &path);
    let f = PackedFile::open(&path).expect("open");
    assert_eq!(f.meta(), &meta());
    f.check_source("0123456789abcdef").expect("source");
    f.check_policy("q4-mixed").expect("policy");
    assert_eq!(f.table().len(), 4);
    for (name, p) in &m.mats {
        assert!(f.is_packed(name));
        let q = f.packed(name, Some([p.rows(), p.cols()])).expect("packed");
        assert_eq!(q.format(), p.format());
        assert_eq!(q.bytes().expect("b"), p.bytes().expect("b"), "{name}");
        assert!(q.data().is_mapped(), "{name} is borrowed from the mapping");
    }
    let b = f.dense("blk.0.attn.to_qkv.bias").expect("bias");
    assert_eq!(
        b.to_vec::<f32>().expect("b"),
        m.bias.to_vec::<f32>().expect("b")
    );
    assert!(f.dense("blk.0.ff.ff.0.weight").is_err());
    assert!(f.packed("blk.0.attn.to_qkv.bias", None).is_err());
}

#[test]
fn mismatches() {
    let m = model();
    let path = tmp("mismatch.safetensors");
    write(&m, &path);
    let f = PackedFile::open(&path).expect("open");
    let e = f
        .check_source("fedcba9876543210")
        .expect_err("other source");
    assert!(matches!(e, QuantError::SourceMismatch { .. }), "{e}");
    assert!(e.to_string().contains("0123456789abcdef"), "{e}");
    let e = f.check_policy("q8").expect_err("other policy");
    assert!(e.to_string().contains("q4-mixed"), "{e}");
    let e = f
        .packed("blk.0.attn.to_qkv.weight", Some([64, 96]))
        .expect_err("other shape");
    assert!(e.to_string().contains("[96, 64]"), "{e}");
}

/// One flipped byte in a packed tensor is caught by its checksum, naming the tensor.
#[test]
fn corrupt_bytes() {
    let m = model();
    let path = tmp("corrupt.safetensors");
    write(&m, &path);
    let mut bytes = std::fs::read(&path).expect("read");
    let f = SafeTensorsFile::open(&path).expect("open");
    let info = &f.tensors()["blk.0.ff.ff.0.weight"];
    bytes[info.start + 100] ^= 0x10;
    drop(f);
    let bad = tmp("corrupt2.safetensors");
    std::fs::write(&bad, &bytes).expect("write");
    let f = PackedFile::open(&bad).expect("header is intact");
    let e = f.packed("blk.0.ff.ff.0.weight", None).expect_err("corrupt");
    assert!(matches!(e, QuantError::Checksum { .. }), "{e}");
    assert!(e.to_string().contains("blk.0.ff.ff.0.weight"), "{e}");
    f.packed("blk.0.ff.ff.2.weight", None)
        .expect("others are fine");
}

/// A truncated file fails in the safetensors parser, naming the file.
#[test]
fn truncated() {
    let m = model();
    let path = tmp("trunc.safetensors");
    write(&m, &path);
    let bytes = std::fs::read(&path).expect("read");
    for cut in [4, 20, bytes.len() / 2, bytes.len() - 1] {
        let t = tmp("trunc2.safetensors");
        std::fs::write(&t, &bytes[..cut]).expect("write");
        let e = PackedFile::open(&t).expect_err("truncated");
        assert!(
            matches!(e, QuantError::Core(CoreError::SafeTensors { .. })),
            "cut {cut}: {e}"
        );
        assert!(e.to_string().contains("trunc2.safetensors"), "{e}");
    }
}

/// Files whose metadata breaks the container rules: each error names the rule.
#[test]
fn bad_metadata() {
    let m = model();
    let (name, p) = &m.mats[0];
    let good_table = format!(
        r#"{{"{name}": {{"format": "q8_0/v1", "shape": [96, 64], "xxh64": "{:016x}"}}}}"#,
        aria_quant::xxh64(p.bytes().expect("b"))
    );
    let base = |table: &str, version: &str| {
        let mut md = HashMap::new();
        md.insert(META_VERSION.to_string(), version.to_string());
        md.insert(META_POLICY.to_string(), "q8".to_string());
        md.insert(META_SOURCE.to_string(), "x".to_string());
        md.insert(META_TABLE.to_string(), table.to_string());
        md
    };
    let try_open = |md: &HashMap<String, String>, data: &Tensor| {
        let path = tmp("meta.safetensors");
        save_safetensors(&path, &[(name.as_str(), data)], Some(md)).expect("save");
        PackedFile::open(&path).map(|_| ())
    };
    let data = p.data();
    try_open(&base(&good_table, &CONTAINER_VERSION.to_string()), data).expect("valid");
    let cases: Vec<(HashMap<String, String>, &str)> = vec![
        (base(&good_table, "2"), "container version"),
        (base("not json", "1"), "not JSON"),
        (base("[1, 2]", "1"), "not a JSON object"),
        (
            base(&good_table.replace("q8_0/v1", "q8_0/v9"), "1"),
            "unknown packed format",
        ),
        (
            base(&good_table.replace("[96, 64]", "[96, 65]"), "1"),
            "expected U8 [96, 102]",
        ),
        (
            base(&good_table.replace("[96, 64]", "[96]"), "1"),
            "is not [out, in]",
        ),
        (
            base(&good_table.replace(name.as_str(), "missing.weight"), "1"),
            "not in the file",
        ),
        (
            base(&good_table.replace("\"xxh64\": \"", "\"xxh64\": \"zz"), "1"),
            "16 hex digits",
        ),
    ];
    for (md, want) in cases {
        let e = try_open(&md, data).expect_err(want);
        assert!(e.to_string().contains(want), "want `{want}`: {e}");
    }
    let mut md = base(&good_table, "1");
    md.remove(META_SOURCE);
    let e = try_open(&md, data).expect_err("missing key");
    assert!(e.to_string().contains(META_SOURCE), "{e}");
    // Stored as f32 instead of U8 blocks.
    let f = Tensor::from_vec(vec![0f32; 96 * 17], &[96, 17]).expect("t");
    let e = try_open(&base(&good_table, "1"), &f).expect_err("dtype");
    assert!(e.to_string().contains("stored as F32"), "{e}");
}

/// The streaming writer's file is byte for byte the one written in a single piece by
/// `save_safetensors` with the same tensors and metadata (the container's layout).
#[test]
fn streamed_file_is_the_one_piece_file() {
    let m = model();
    let wide = Tensor::from_vec(vec![1i64, -2, 3], &[3]).expect("i64");
    for decoder in [None, Some("q8_0".to_string())] {
        let meta = PackMeta {
            decoder: decoder.clone(),
            ..meta()
        };
        let path = tmp("stream.safetensors");
        let mut entries: Vec<(&str, Entry<'_>)> = m
            .mats
            .iter()
            .map(|(n, p)| (n.as_str(), Entry::Packed(p)))
            .collect();
        entries.push(("blk.0.attn.to_qkv.bias", Entry::Dense(&m.bias)));
        entries.push(("steps", Entry::Dense(&wide)));
        write_packed(&path, &entries, &meta).expect("write");
        // The one-piece reference.
        let mut table = serde_json::Map::new();
        for (n, p) in &m.mats {
            table.insert(
                n.clone(),
                serde_json::json!({
                    "format": p.format().tag(),
                    "shape": [p.rows(), p.cols()],
                    "xxh64": format!("{:016x}", aria_quant::xxh64(p.bytes().expect("b"))),
                }),
            );
        }
        let mut md = HashMap::new();
        md.insert(META_VERSION.to_string(), CONTAINER_VERSION.to_string());
        md.insert(META_POLICY.to_string(), meta.policy.clone());
        md.insert(META_SOURCE.to_string(), meta.source.clone());
        if let Some(d) = &decoder {
            md.insert(META_DECODER.to_string(), d.clone());
        }
        md.insert(
            META_TABLE.to_string(),
            serde_json::Value::Object(table).to_string(),
        );
        let mut tensors: Vec<(&str, &Tensor)> =
            m.mats.iter().map(|(n, p)| (n.as_str(), p.data())).collect();
        tensors.push(("blk.0.attn.to_qkv.bias", &m.bias));
        tensors.push(("steps", &wide));
        let want = tmp("one_piece.safetensors");
        save_safetensors(&want, &tensors, Some(&md)).expect("save");
        assert_eq!(
            std::fs::read(&path).expect("read"),
            std::fs::read(&want).expect("read"),
            "decoder {decoder:?}"
        );
        let f = PackedFile::open(&path).expect("open");
        assert_eq!(f.meta(), &meta);
    }
}

/// Streamed tensors come one at a time in file order (widest dtype first), each followed by
/// its `written` call; a tensor unlike its declaration, or a failing producer, is an error
/// naming it and leaves no file behind.
#[test]
fn stream_order_and_errors() {
    let m = model();
    let mut specs: Vec<(String, Spec)> = m
        .mats
        .iter()
        .map(|(n, p)| {
            (
                n.clone(),
                Spec::Packed {
                    format: p.format(),
                    shape: [p.rows(), p.cols()],
                },
            )
        })
        .collect();
    specs.push((
        "blk.0.attn.to_qkv.bias".into(),
        Spec::Dense {
            dtype: m.bias.dtype(),
            shape: m.bias.shape().to_vec(),
        },
    ));
    let item = |i: usize| -> Item {
        match m.mats.get(i) {
            Some((_, p)) => Item::Packed(p.clone()),
            None => Item::Dense(m.bias.clone()),
        }
    };
    let path = tmp("stream_order.safetensors");
    let (mut made, mut done) = (Vec::new(), Vec::new());
    write_packed_stream(
        &path,
        &specs,
        &meta(),
        &mut |i| {
            made.push(i);
            Ok(item(i))
        },
        &mut |i| {
            done.push(i);
            Ok(())
        },
    )
    .expect("stream");
    assert_eq!(made, vec![4, 0, 1, 2, 3], "the f32 bias comes first");
    assert_eq!(done, made);
    PackedFile::open(&path).expect("open");
    let dir = path.parent().expect("dir");
    let bad = tmp("stream_bad.safetensors");
    let wrong = |i: usize| -> Item { item(if i == 1 { 2 } else { i }) };
    let e = write_packed_stream(
        &bad,
        &specs,
        &meta(),
        &mut |i| Ok(wrong(i)),
        &mut |_| Ok(()),
    )
    .expect_err("mismatch");
    assert!(e.to_string().contains("blk.0.ff.ff.0.weight"), "{e}");
    assert!(!bad.exists());
    let e = write_packed_stream(
        &bad,
        &specs,
        &meta(),
        &mut |i| {
            if i == 2 {
                Err(QuantError::File {
                    path: PathBuf::from("source"),
                    reason: "gone".into(),
                })
            } else {
                Ok(item(i))
            }
        },
        &mut |_| Ok(()),
    )
    .expect_err("producer failed");
    assert!(e.to_string().contains("gone"), "{e}");
    assert!(!bad.exists());
    assert!(
        !dir.join(".stream_bad.safetensors.partial").exists(),
        "partial file left"
    );
}
