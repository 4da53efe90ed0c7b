//! Weight loading: the sa3-tiny fixtures, hostile and corrupt files (each a typed error naming
//! the file and tensor), agreement with the reference `safetensors` parser, sharded checkpoints,
//! `save_safetensors` round trips and JSON config helpers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;

use aria_core::config::{json_path, read_config, read_json};
use aria_core::loader::{parse_header, SafeTensorsErrorKind as K};
use aria_core::{
    bf16, f16, save_safetensors, CoreError, DType, SafeTensorsFile, Tensor, WeightLoader,
};
use aria_testing::fixtures::fixture;
use aria_testing::TempDir;

/// A safetensors file from a header string and a data section.
fn build(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

/// Deterministic pseudo-random numbers (splitmix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A small valid file with several dtypes, a zero-element tensor and metadata.
fn sample_file() -> Vec<u8> {
    let d = TempDir::new("core-loader-sample");
    let p = d.join("s.safetensors");
    let a = Tensor::from_vec((0..6).map(|i| i as f32 * 0.5 - 1.0).collect(), &[2, 3]).unwrap();
    let b = Tensor::from_vec(vec![bf16::from_f32(1.5), bf16::from_f32(-2.0)], &[2]).unwrap();
    let c = Tensor::from_vec(vec![7i64, -3, 1 << 40], &[3, 1]).unwrap();
    let e = Tensor::zeros(&[1, 0, 1], DType::F32);
    let h = Tensor::from_vec(vec![f16::from_f32(0.25); 3], &[3]).unwrap();
    let q = Tensor::from_vec(vec![-1i8, 2, 3, 4, 5], &[5]).unwrap();
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    save_safetensors(
        &p,
        &[
            ("a.w", &a),
            ("b", &b),
            ("ids", &c),
            ("empty", &e),
            ("h", &h),
            ("q", &q),
        ],
        Some(&meta),
    )
    .unwrap();
    std::fs::read(&p).unwrap()
}

fn kind(e: &CoreError) -> Option<K> {
    match e {
        CoreError::SafeTensors { kind, .. } => Some(*kind),
        _ => None,
    }
}

const NAME: &str = "probe.safetensors";

/// Parse `bytes` with ours, expecting an error of `kind`; the message must name the file.
fn expect_kind(bytes: &[u8], want: K) -> String {
    let e = parse_header(Path::new(NAME), bytes).expect_err("must be rejected");
    assert_eq!(
        kind(&e),
        Some(want),
        "wrong error for {:?}: {e}",
        String::from_utf8_lossy(bytes)
    );
    let msg = e.to_string();
    assert!(msg.contains(NAME), "message does not name the file: {msg}");
    msg
}

/// Compare our parser with the reference one on `bytes`: same verdict and, when both accept,
/// the same tensor table (names, dtypes, shapes and byte ranges). A file the reference accepts
/// may be rejected by ours only for a dtype aria does not handle. When accepted, every tensor is
/// also read through `SafeTensorsFile` and `WeightLoader`.
fn differential(bytes: &[u8]) -> bool {
    let ours = parse_header(Path::new(NAME), bytes);
    let theirs = safetensors::SafeTensors::deserialize(bytes);
    match (&ours, &theirs) {
        (Ok((table, meta)), Ok(st)) => {
            let views = st.tensors();
            assert_eq!(views.len(), table.len(), "tables differ in size");
            for (name, view) in &views {
                let info = table
                    .get(name)
                    .unwrap_or_else(|| panic!("`{name}` missing"));
                let theirs_dt = format!("{:?}", view.dtype());
                let ours_dt = if theirs_dt == "BOOL" {
                    "U8"
                } else {
                    theirs_dt.as_str()
                };
                assert_eq!(info.dtype.safetensors_name(), ours_dt, "{name}");
                assert_eq!(info.shape, view.shape(), "{name}");
                let ours_data = &bytes[info.start..info.end];
                assert_eq!(
                    ours_data.as_ptr(),
                    view.data().as_ptr(),
                    "{name}: start differs"
                );
                assert_eq!(ours_data.len(), view.data().len(), "{name}: length differs");
            }
            let (_, m) = safetensors::SafeTensors::read_metadata(bytes).unwrap();
            assert_eq!(m.metadata().clone().unwrap_or_default(), *meta);
            let file = SafeTensorsFile::from_bytes(NAME, bytes).unwrap();
            let loader = WeightLoader::from_files(vec![file]).unwrap();
            for name in loader.names() {
                let t = loader.get_any(&name).unwrap();
                assert_eq!(t.shape(), table[&name].shape.as_slice());
                assert_eq!(
                    t.as_bytes().unwrap(),
                    &bytes[table[&name].start..table[&name].end]
                );
                t.to_vec_f32().unwrap();
            }
            true
        }
        (Err(CoreError::UnsupportedDType { dtype, .. }), Ok(st)) => {
            let supported = ["F32", "F16", "BF16", "I8", "U8", "BOOL", "I64"];
            assert!(
                st.tensors()
                    .iter()
                    .any(|(_, v)| !supported.contains(&format!("{:?}", v.dtype()).as_str())),
                "UnsupportedDType({dtype}) on a file whose dtypes are all supported"
            );
            false
        }
        (Err(e), Err(_)) => {
            assert!(
                e.to_string().contains(NAME),
                "message does not name the file: {e}"
            );
            false
        }
        (Ok(_), Err(t)) => panic!(
            "we accept what the reference rejects ({t}): {:?}",
            String::from_utf8_lossy(bytes)
        ),
        (Err(o), Ok(_)) => panic!(
            "we reject what the reference accepts ({o}): {:?}",
            String::from_utf8_lossy(bytes)
        ),
    }
}

#[test]
fn fixture_every_tensor_loads_mapped() {
    let Some(p) = fixture("sa3-tiny/model.safetensors") else {
        return;
    };
    let loader = WeightLoader::open(&[&p]).unwrap();
    let names = loader.names();
    assert_eq!(names.len(), 155);
    let bytes = std::fs::read(&p).unwrap();
    let reference = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for name in &names {
        let (file, info) = loader.info(name).unwrap();
        assert_eq!(file, p.as_path());
        let t = loader.get(name, &info.shape.clone()).unwrap();
        assert_eq!(t.dtype(), DType::F32, "{name}");
        let view = reference.tensor(name).unwrap();
        assert_eq!(t.shape(), view.shape(), "{name}");
        assert_eq!(t.as_bytes().unwrap(), view.data(), "{name}: bytes differ");
        if t.elem_count() > 0 {
            assert!(
                t.is_mapped(),
                "{name} was copied instead of borrowed from the map"
            );
        }
        assert_eq!(t.to_vec_f32().unwrap().len(), t.elem_count());
    }
    let nsf = loader.pp("pretransform.model.bottleneck");
    let z = nsf.get("noise_scaling_factor", &[1, 0, 1]).unwrap();
    assert_eq!(z.elem_count(), 0);
    assert!(z.to_vec::<f32>().unwrap().is_empty());
    assert!(z.as_slice::<f32>().unwrap().is_empty());
    assert_eq!(z.to_dtype(DType::BF16).unwrap().shape(), &[1, 0, 1]);
    assert_eq!(
        loader
            .file_metadata("model.model.preprocess_conv.weight")
            .unwrap()["format"],
        "pt"
    );
}

#[test]
fn prefix_stack() {
    let Some(p) = fixture("sa3-tiny/model.safetensors") else {
        return;
    };
    let loader = WeightLoader::open(&[&p]).unwrap();
    let dit = loader.pp("model").pp("model");
    assert_eq!(dit.prefix(), "model.model");
    assert_eq!(dit.pp("").prefix(), "model.model");
    assert_eq!(loader.pp("model.model").prefix(), dit.prefix());
    let w = dit.get("preprocess_conv.weight", &[16, 16, 1]).unwrap();
    let full = loader
        .get("model.model.preprocess_conv.weight", &[16, 16, 1])
        .unwrap();
    assert_eq!(w.to_vec::<f32>().unwrap(), full.to_vec::<f32>().unwrap());
    assert!(dit.contains("preprocess_conv.weight"));
    assert!(!dit.contains("model.model.preprocess_conv.weight"));
    let names = dit.names();
    assert_eq!(names.len(), 60);
    assert!(names
        .iter()
        .all(|n| loader.contains(&format!("model.model.{n}"))));
    // A prefix only matches whole components.
    assert!(loader.pp("model.mod").names().is_empty());
}

#[test]
fn fixture_bf16_mapped_and_converted() {
    let Some(p) = fixture("sa3-tiny/t5gemma-b-b-ul2/model.safetensors") else {
        return;
    };
    let loader = WeightLoader::open(&[&p]).unwrap().pp("encoder");
    let w = loader.get("embed_tokens.weight", &[512, 768]).unwrap();
    assert_eq!(w.dtype(), DType::BF16);
    assert!(w.is_mapped());
    let f = loader
        .get_as("embed_tokens.weight", &[512, 768], DType::F32)
        .unwrap();
    assert_eq!(f.dtype(), DType::F32);
    assert!(!f.is_mapped());
    let raw = w.as_slice::<bf16>().unwrap();
    let conv = f.as_slice::<f32>().unwrap();
    assert!(raw.iter().zip(conv).all(|(a, b)| a.to_f32() == *b));
    // Every bf16 tensor is borrowed; the dtype policy converts all of them.
    let all32 = loader.with_dtype(Some(DType::F32));
    for n in loader.names() {
        let t = loader.get_any(&n).unwrap();
        if t.dtype() == DType::BF16 && t.elem_count() > 0 {
            assert!(t.is_mapped(), "{n}");
        }
        assert_eq!(all32.get_any(&n).unwrap().dtype(), DType::F32, "{n}");
    }
    // Exact dtype requests do not convert.
    let e = loader
        .get_exact("embed_tokens.weight", &[512, 768], DType::F32)
        .unwrap_err();
    assert!(
        matches!(
            e,
            CoreError::WeightDType {
                found: DType::BF16,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("encoder.embed_tokens.weight"), "{e}");
    assert!(e.to_string().contains("model.safetensors"), "{e}");
    loader
        .get_exact("embed_tokens.weight", &[512, 768], DType::BF16)
        .unwrap();
}

#[test]
fn missing_tensor_wrong_shape_and_dtype_errors_name_everything() {
    let Some(p) = fixture("sa3-tiny/model.safetensors") else {
        return;
    };
    let loader = WeightLoader::open(&[&p]).unwrap().pp("model.model");
    let e = loader.get("no.such.weight", &[1]).unwrap_err();
    assert!(matches!(e, CoreError::MissingTensor { .. }), "{e}");
    let m = e.to_string();
    assert!(
        m.contains("model.model.no.such.weight") && m.contains("model.safetensors"),
        "{m}"
    );
    let e = loader.get("preprocess_conv.weight", &[16, 16]).unwrap_err();
    let m = e.to_string();
    match &e {
        CoreError::WeightShape {
            expected, found, ..
        } => {
            assert_eq!(expected, &[16, 16]);
            assert_eq!(found, &[16, 16, 1]);
        }
        _ => panic!("{e}"),
    }
    assert!(m.contains("model.model.preprocess_conv.weight") && m.contains("model.safetensors"));
    assert!(matches!(
        loader.get_any("x").unwrap_err(),
        CoreError::MissingTensor { .. }
    ));
    assert!(matches!(
        loader.info("x").unwrap_err(),
        CoreError::MissingTensor { .. }
    ));
    assert!(matches!(
        loader.file_metadata("x").unwrap_err(),
        CoreError::MissingTensor { .. }
    ));
    // Integer tensors never convert to float.
    let ids = SafeTensorsFile::from_bytes("ids.safetensors", &sample_file()).unwrap();
    let l = WeightLoader::from_files(vec![ids]).unwrap();
    let e = l.get_as("ids", &[3, 1], DType::F32).unwrap_err();
    assert!(
        matches!(
            e,
            CoreError::WeightDType {
                found: DType::I64,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("ids.safetensors") && e.to_string().contains("`ids`"),
        "{e}"
    );
    let e = l.get_as("a.w", &[2, 3], DType::I8).unwrap_err();
    assert!(matches!(e, CoreError::WeightDType { .. }), "{e}");
}

#[test]
fn truncated_at_every_offset() {
    let good = sample_file();
    assert!(differential(&good));
    let n = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    for cut in 0..good.len() {
        let bytes = &good[..cut];
        let want = if cut < 8 {
            K::TooSmall
        } else if cut < 8 + n {
            K::HeaderLength
        } else {
            K::DataLength
        };
        let msg = expect_kind(bytes, want);
        if want == K::DataLength {
            assert!(msg.contains("truncated"), "{msg}");
            assert!(msg.contains('`'), "message does not name a tensor: {msg}");
        }
        assert!(!differential(bytes));
    }
    // Truncated files on disk give the same errors through the loader.
    let d = TempDir::new("core-loader-trunc");
    for cut in [0, 5, 8, 9, n + 8, good.len() - 1] {
        let p = d.join(format!("cut{cut}.safetensors"));
        std::fs::write(&p, &good[..cut]).unwrap();
        let e = WeightLoader::open(&[&p]).unwrap_err();
        assert!(kind(&e).is_some(), "{e}");
        assert!(
            e.to_string().contains(&format!("cut{cut}.safetensors")),
            "{e}"
        );
    }
}

#[test]
fn flipped_header_bytes() {
    let good = sample_file();
    let n = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let mut accepted = 0;
    let mut total = 0;
    for pos in 0..8 + n {
        for mask in [0x01u8, 0x02, 0x08, 0x20, 0x80, 0xFF] {
            let mut b = good.clone();
            b[pos] ^= mask;
            total += 1;
            accepted += usize::from(differential(&b));
        }
    }
    // Most flips break the file; a few land in names, metadata values or padding.
    assert!(
        accepted > 0 && accepted < total / 2,
        "{accepted} of {total} accepted"
    );
}

#[test]
fn random_mutations_agree_with_reference() {
    let good = sample_file();
    let mut rng = Rng(0x5eed);
    let mut accepted = 0;
    for _ in 0..3000 {
        let mut b = good.clone();
        for _ in 0..1 + rng.below(3) {
            let len = b.len();
            match rng.below(5) {
                0 => b[rng.below(len)] = rng.next() as u8,
                1 => {
                    b.remove(rng.below(len));
                }
                2 => b.insert(rng.below(len + 1), b"0123456789{}[],:\" "[rng.below(18)]),
                3 => {
                    // Re-declare the header length to a nearby value.
                    let n = u64::from_le_bytes(b[..8].try_into().unwrap());
                    let m = n.wrapping_add(rng.below(17) as u64).wrapping_sub(8);
                    b[..8].copy_from_slice(&m.to_le_bytes());
                }
                _ => b.truncate(rng.below(len + 1).max(8)),
            }
        }
        accepted += usize::from(differential(&b));
    }
    assert!(
        accepted > 0,
        "no mutant was valid: the generator is too destructive"
    );
}

#[test]
fn hostile_headers() {
    let f4 = [0u8; 4];
    // Absurd header lengths.
    let mut b = u64::MAX.to_le_bytes().to_vec();
    b.extend_from_slice(b"{}");
    expect_kind(&b, K::HeaderTooLarge);
    let mut b = 100_000_001u64.to_le_bytes().to_vec();
    b.extend_from_slice(b"{}");
    expect_kind(&b, K::HeaderTooLarge);
    let mut b = 1_000u64.to_le_bytes().to_vec();
    b.extend_from_slice(b"{}");
    expect_kind(&b, K::HeaderLength);
    // Non-object JSON and broken JSON.
    for h in [
        "[]",
        "\"x\"",
        "1",
        "null",
        "true",
        "",
        "{",
        "{\"a\":}",
        "{}}",
        "{\"a\":1}",
    ] {
        expect_kind(&build(h, &[]), K::Header);
    }
    expect_kind(&[2, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFE], K::Header);
    // Malformed entries name the tensor.
    for h in [
        r#"{"t":{"dtype":"F32","shape":[1]}}"#,
        r#"{"t":{"dtype":"F32","data_offsets":[0,4]}}"#,
        r#"{"t":{"shape":[1],"data_offsets":[0,4]}}"#,
        r#"{"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#,
        r#"{"t":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}"#,
        r#"{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}"#,
        r#"{"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}}"#,
        r#"{"t":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}"#,
        r#"{"t":{"dtype":"F32","shape":"1","data_offsets":[0,4]}}"#,
        r#"{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616]}}"#,
    ] {
        let msg = expect_kind(&build(h, &f4), K::Header);
        assert!(msg.contains("`t`"), "{msg}");
        assert!(!differential(&build(h, &f4)));
    }
    // Metadata must map strings to strings; null is allowed.
    expect_kind(&build(r#"{"__metadata__":{"a":1}}"#, &[]), K::Header);
    expect_kind(&build(r#"{"__metadata__":[]}"#, &[]), K::Header);
    assert!(differential(&build(r#"{"__metadata__":null}"#, &[])));
    assert!(differential(&build(r#"{"__metadata__":{"a":"b"}}"#, &[])));
    // Unknown and unsupported dtypes name the tensor and the file.
    for dt in ["Q4", "F64", "I32", "f32", ""] {
        let h = format!(r#"{{"w.x":{{"dtype":"{dt}","shape":[1],"data_offsets":[0,4]}}}}"#);
        let e = parse_header(Path::new(NAME), &build(&h, &f4)).unwrap_err();
        match &e {
            CoreError::UnsupportedDType { name, file, dtype } => {
                assert_eq!(
                    (name.as_str(), file.as_str(), dtype.as_str()),
                    ("w.x", NAME, dt)
                );
            }
            _ => panic!("{e}"),
        }
        differential(&build(&h, &f4));
    }
    // Layout errors: size mismatch, reversed, overlap, gap, out of range, trailing bytes.
    let cases: &[(&str, usize, K)] = &[
        (
            r#"{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
            4,
            K::TensorSize,
        ),
        (
            r#"{"t":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}"#,
            4,
            K::Offsets,
        ),
        (
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            8,
            K::Offsets,
        ),
        (
            r#"{"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            8,
            K::Offsets,
        ),
        (
            r#"{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            2,
            K::DataLength,
        ),
        (
            r#"{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            5,
            K::DataLength,
        ),
        (
            r#"{"t":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}"#,
            0,
            K::TensorSize,
        ),
        (
            r#"{"t":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}}"#,
            0,
            K::TensorSize,
        ),
        (
            r#"{"t":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551611,18446744073709551615]}}"#,
            4,
            K::Offsets,
        ),
    ];
    for (h, len, want) in cases {
        let b = build(h, &vec![0u8; *len]);
        let msg = expect_kind(&b, *want);
        assert!(msg.contains('`'), "message does not name a tensor: {msg}");
        assert!(!differential(&b));
    }
    // serde corner cases where both parsers must agree, whatever the verdict: repeated keys
    // (tensor, metadata, entry field), the map form of a dtype, numbers in exponent notation.
    let t = r#""t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}"#;
    for h in [
        format!("{{{t},{t}}}"),
        format!(r#"{{{t},"__metadata__":{{}},"__metadata__":{{}}}}"#),
        r#"{"t":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#.to_string(),
        r#"{"t":{"dtype":{"F32":null},"shape":[1],"data_offsets":[0,4]}}"#.to_string(),
        r#"{"t":{"dtype":"F32","shape":[1e0],"data_offsets":[0,4]}}"#.to_string(),
        r#"{"t":{"dtype":"F32","shape":[1],"data_offsets":{"0":0,"1":4}}}"#.to_string(),
        r#"{"t":null}"#.to_string(),
    ] {
        differential(&build(&h, &f4));
    }
    // Valid edge cases: zero-size tensors sharing an offset, out-of-order entries, the
    // sequence form of an entry that serde also accepts, unknown entry fields.
    for (h, len) in [
        (r#"{}"#, 0),
        (
            r#"{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}"#,
            1,
        ),
        (
            r#"{"z":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},"a":{"dtype":"F16","shape":[1],"data_offsets":[2,4]}}"#,
            4,
        ),
        (r#"{"s":["F32",[1],[0,4]]}"#, 4),
        (
            r#"{"t":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2],"extra":1}}"#,
            2,
        ),
        (
            "{\"t\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}      ",
            1,
        ),
    ] {
        assert!(differential(&build(h, &vec![1u8; len])), "{h}");
    }
}

#[test]
fn sharded_index() {
    let d = TempDir::new("core-loader-shards");
    let a = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2]).unwrap();
    let b = Tensor::from_vec(vec![5f32, 6.], &[2]).unwrap();
    save_safetensors(d.join("m-00001.safetensors"), &[("x.a", &a)], None).unwrap();
    save_safetensors(
        d.join("m-00002.safetensors"),
        &[("x.b", &b), ("y", &b)],
        None,
    )
    .unwrap();
    let idx = d.join("m.safetensors.index.json");
    let write_index = |map: &str| {
        std::fs::write(
            &idx,
            format!(r#"{{"metadata":{{"total_size":24}},"weight_map":{map}}}"#),
        )
        .unwrap()
    };
    write_index(
        r#"{"x.a":"m-00001.safetensors","x.b":"m-00002.safetensors","y":"m-00002.safetensors"}"#,
    );
    let l = WeightLoader::open_checkpoint(&idx).unwrap();
    assert_eq!(l.names(), vec!["x.a", "x.b", "y"]);
    assert_eq!(
        l.pp("x")
            .get("a", &[2, 2])
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![1., 2., 3., 4.]
    );
    assert_eq!(
        l.pp("x").get("b", &[2]).unwrap().to_vec::<f32>().unwrap(),
        vec![5., 6.]
    );
    assert!(l.get("y", &[2]).unwrap().is_mapped());
    let (file, _) = l.info("x.a").unwrap();
    assert!(file.ends_with("m-00001.safetensors"));
    // A single file opens directly.
    let one = WeightLoader::open_checkpoint(d.join("m-00001.safetensors")).unwrap();
    assert_eq!(one.names(), vec!["x.a"]);
    // The index lists a tensor its shard lacks.
    write_index(r#"{"x.a":"m-00001.safetensors","x.c":"m-00002.safetensors"}"#);
    let e = WeightLoader::open_checkpoint(&idx).unwrap_err();
    assert!(matches!(e, CoreError::MissingTensor { .. }), "{e}");
    assert!(
        e.to_string().contains("x.c") && e.to_string().contains("m-00002"),
        "{e}"
    );
    // ... or puts it in the wrong shard.
    write_index(r#"{"x.a":"m-00002.safetensors","x.b":"m-00002.safetensors"}"#);
    let e = WeightLoader::open_checkpoint(&idx).unwrap_err();
    assert!(matches!(e, CoreError::MissingTensor { .. }), "{e}");
    // A shard that does not exist is an I/O error naming it.
    write_index(r#"{"x.a":"gone.safetensors"}"#);
    let e = WeightLoader::open_checkpoint(&idx).unwrap_err();
    assert!(
        matches!(e, CoreError::Io { .. }) && e.to_string().contains("gone.safetensors"),
        "{e}"
    );
    // Shards must stay inside the index's folder.
    for bad in [
        r#""../m-00001.safetensors""#,
        r#""/etc/passwd""#,
        r#""""#,
        "3",
    ] {
        write_index(&format!(r#"{{"x.a":{bad}}}"#));
        let e = WeightLoader::open_checkpoint(&idx).unwrap_err();
        assert!(matches!(e, CoreError::Json { .. }), "{e}");
        assert!(
            e.to_string().contains("m.safetensors.index.json") && e.to_string().contains("x.a")
        );
    }
    for bad in [
        "{}",
        r#"{"weight_map":{}}"#,
        r#"{"weight_map":[]}"#,
        "not json",
    ] {
        std::fs::write(&idx, bad).unwrap();
        let e = WeightLoader::open_checkpoint(&idx).unwrap_err();
        assert!(matches!(e, CoreError::Json { .. }), "{e}");
        assert!(e.to_string().contains("m.safetensors.index.json"), "{e}");
    }
    // Two shards holding one name.
    let e = WeightLoader::open(&[d.join("m-00002.safetensors"), d.join("m-00002.safetensors")])
        .unwrap_err();
    assert_eq!(kind(&e), Some(K::DuplicateTensor), "{e}");
    assert!(
        e.to_string().contains("x.b") || e.to_string().contains("`y`"),
        "{e}"
    );
    let e = WeightLoader::open::<&Path>(&[]).unwrap_err();
    assert!(matches!(e, CoreError::Invalid(_)), "{e}");
    let e = WeightLoader::open(&[d.join("absent.safetensors")]).unwrap_err();
    assert!(matches!(e, CoreError::Io { .. }) && e.to_string().contains("absent.safetensors"));
}

#[test]
fn save_round_trip_every_dtype() {
    let d = TempDir::new("core-loader-save");
    let p = d.join("rt.safetensors");
    let base =
        Tensor::from_vec((0..24).map(|i| i as f32 * 0.37 - 3.0).collect(), &[2, 3, 4]).unwrap();
    let strided = base.permute(&[2, 0, 1]).unwrap().narrow(0, 1, 2).unwrap();
    assert!(!strided.is_contiguous());
    let tensors: Vec<(String, Tensor)> = vec![
        ("f32".into(), base.clone()),
        ("strided".into(), strided.clone()),
        ("f16".into(), base.to_dtype(DType::F16).unwrap()),
        ("bf16".into(), base.to_dtype(DType::BF16).unwrap()),
        ("i8".into(), base.to_dtype(DType::I8).unwrap()),
        (
            "u8".into(),
            Tensor::from_vec(vec![0u8, 1, 255], &[3]).unwrap(),
        ),
        (
            "i64".into(),
            Tensor::from_vec(vec![i64::MIN, 0, i64::MAX], &[3]).unwrap(),
        ),
        ("scalar".into(), Tensor::from_vec(vec![42f32], &[]).unwrap()),
        ("empty".into(), Tensor::zeros(&[3, 0], DType::BF16)),
    ];
    let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let meta = HashMap::from([("k".to_string(), "v \"quoted\"".to_string())]);
    save_safetensors(&p, &refs, Some(&meta)).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    assert!(differential(&bytes));
    let f = SafeTensorsFile::open(&p).unwrap();
    assert_eq!(f.metadata(), &meta);
    assert_eq!(f.path(), p.as_path());
    let l = WeightLoader::open(&[&p]).unwrap();
    for (name, t) in &tensors {
        let back = l.get(name, t.shape()).unwrap();
        assert_eq!(back.dtype(), t.dtype(), "{name}");
        assert_eq!(
            back.as_bytes().unwrap(),
            t.contiguous().unwrap().as_bytes().unwrap(),
            "{name}"
        );
    }
    assert_eq!(
        l.get("strided", &[2, 2, 3])
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        strided.to_vec::<f32>().unwrap()
    );
    // The 8-byte header length keeps the data section 8-aligned, so every tensor maps.
    assert_eq!(u64::from_le_bytes(bytes[..8].try_into().unwrap()) % 8, 0);
    for (name, t) in &tensors {
        if t.elem_count() > 0 {
            assert!(l.get_any(name).unwrap().is_mapped(), "{name}");
        }
    }
    // Reserved or repeated names are refused.
    let e = save_safetensors(&p, &[("a", &base), ("a", &base)], None).unwrap_err();
    assert_eq!(kind(&e), Some(K::Write), "{e}");
    let e = save_safetensors(&p, &[("__metadata__", &base)], None).unwrap_err();
    assert_eq!(kind(&e), Some(K::Write), "{e}");
    let e = save_safetensors(d.join("no/such/dir.safetensors"), &[("a", &base)], None).unwrap_err();
    assert!(matches!(e, CoreError::Io { .. }), "{e}");
}

#[test]
fn in_memory_matches_file() {
    let good = sample_file();
    let d = TempDir::new("core-loader-mem");
    let p = d.join("m.safetensors");
    std::fs::write(&p, &good).unwrap();
    let a = SafeTensorsFile::open(&p).unwrap();
    let b = SafeTensorsFile::from_bytes("mem", &good).unwrap();
    assert_eq!(b.path(), Path::new("mem"));
    assert_eq!(a.tensors().len(), b.tensors().len());
    for name in a.tensors().keys() {
        let (x, y) = (a.tensor(name).unwrap(), b.tensor(name).unwrap());
        assert_eq!(x.as_bytes().unwrap(), y.as_bytes().unwrap(), "{name}");
        assert_eq!(x.is_mapped(), y.is_mapped(), "{name}");
    }
    let e = a.tensor("nope").unwrap_err();
    assert!(
        matches!(e, CoreError::MissingTensor { .. }) && e.to_string().contains("m.safetensors")
    );
    // An empty file and an empty buffer.
    std::fs::write(&p, b"").unwrap();
    assert_eq!(
        kind(&SafeTensorsFile::open(&p).unwrap_err()),
        Some(K::TooSmall)
    );
    assert_eq!(
        kind(&SafeTensorsFile::from_bytes("e", &[]).unwrap_err()),
        Some(K::TooSmall)
    );
    // A header whose length is not a multiple of 8 leaves f32 data misaligned: copied, not
    // mapped, and still correct.
    let h = r#"{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    assert_ne!(h.len() % 4, 0);
    let mut data = 1.5f32.to_le_bytes().to_vec();
    data.extend_from_slice(&(-2.25f32).to_le_bytes());
    let f = SafeTensorsFile::from_bytes("odd", &build(h, &data)).unwrap();
    let t = f.tensor("t").unwrap();
    assert!(!t.is_mapped());
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.5, -2.25]);
}

#[test]
fn json_config_helpers() {
    let d = TempDir::new("core-loader-json");
    let p = d.join("model_config.json");
    std::fs::write(&p, r#"{"model": {"io_channels": 16, "name": "x"}}"#).unwrap();
    let v = read_json(&p).unwrap();
    assert_eq!(json_path(&v, &p, "model/io_channels").unwrap(), 16);
    let e = json_path(&v, &p, "model/missing").unwrap_err();
    assert!(matches!(e, CoreError::Json { .. }), "{e}");
    assert!(e.to_string().contains("model/missing") && e.to_string().contains("model_config.json"));
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Cfg {
        model: Inner,
    }
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Inner {
        io_channels: usize,
    }
    let c: Cfg = read_config(&p).unwrap();
    assert_eq!(c.model.io_channels, 16);
    std::fs::write(&p, r#"{"model": {"io_channels": "sixteen"}}"#).unwrap();
    let e = read_config::<Cfg>(&p).unwrap_err();
    assert!(matches!(e, CoreError::Json { .. }), "{e}");
    assert!(e.to_string().contains("model_config.json"), "{e}");
    for bad in ["{", "", "\u{0}", "{\"a\":1,}"] {
        std::fs::write(&p, bad).unwrap();
        let e = read_json(&p).unwrap_err();
        assert!(matches!(e, CoreError::Json { .. }) && e.to_string().contains("model_config.json"));
    }
    std::fs::write(&p, [0xFFu8, 0xFE]).unwrap();
    assert!(read_json(&p).is_err());
    let e = read_json(d.join("absent.json")).unwrap_err();
    assert!(matches!(e, CoreError::Io { .. }) && e.to_string().contains("absent.json"));
    // The fixture config parses.
    if let Some(p) = fixture("sa3-tiny/model_config.json") {
        let v = read_json(&p).unwrap();
        assert_eq!(json_path(&v, &p, "model_type").unwrap(), "diffusion_cond");
    }
}
