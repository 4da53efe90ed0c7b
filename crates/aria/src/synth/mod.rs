//! Random checkpoints with the exact names and shapes of the released SA3 models, in the
//! official folder layout (`model_config.json`, `model.safetensors`, `t5gemma-b-b-ul2/`).
//!
//! Used by benchmarks (real shapes, no download) and by the no-download demo (tiny preset).
//! Tensors are written to disk one chunk at a time, so even the 9 GB medium checkpoint never
//! lives in memory. Values are small (`N(0, 0.02)` weights, unit gains, zero biases, unit
//! `running_std`, exact RoPE frequencies) so that a forward pass stays finite; the audio such a
//! model produces is noise.

mod layout;
mod presets;

use std::io::Write;
use std::path::{Path, PathBuf};

use aria_core::DType;
use serde_json::{json, Value};

pub use layout::{sa3_layout, t5_layout, Init, TensorSpec, WEIGHT_STD};
pub use presets::{stand_in_tokenizer, stand_in_tokenizer_config, Preset};

use crate::rng::{hash_str, Rng};
use crate::{Error, Result};

/// Name of the text-encoder subfolder of a model folder.
pub const T5_FOLDER: &str = "t5gemma-b-b-ul2";

/// What [`write_model`] wrote.
#[derive(Debug, Clone)]
pub struct SynthSummary {
    /// The model folder.
    pub dir: PathBuf,
    /// Tensors in `model.safetensors`.
    pub tensors: usize,
    /// Parameters (elements) in `model.safetensors`.
    pub params: usize,
    /// Bytes of `model.safetensors`.
    pub bytes: u64,
    /// Tensors in the text encoder's `model.safetensors`.
    pub t5_tensors: usize,
    /// Bytes of the text encoder's `model.safetensors`.
    pub t5_bytes: u64,
}

/// The tiny random-weight model of `aria demo` in `dir` (written there unless a complete one
/// is already there), resolved for [`Pipeline::load`](crate::Pipeline::load). Its output is
/// noise, but every stage of a generation runs: for examples and tests without a download.
pub fn tiny_model(dir: &Path) -> Result<crate::discover::ModelFiles> {
    let resolve = || {
        crate::discover::resolve_model(
            &dir.display().to_string(),
            &crate::discover::SearchPaths::default(),
        )
    };
    if let Ok(f) = resolve() {
        return Ok(f);
    }
    write_model(dir, Preset::Tiny, DType::F32, 0, &mut |_, _| {})?;
    resolve()
}

/// Write a random model folder for `preset`: `model_config.json`, `model.safetensors` (in
/// `dtype`, F32 or F16), and `t5gemma-b-b-ul2/` (`config.json`, BF16 encoder
/// `model.safetensors`, stand-in `tokenizer.json`, `tokenizer_config.json`). `progress` is
/// called with `(bytes written, bytes total)` as the big file is written.
pub fn write_model(
    dir: &Path,
    preset: Preset,
    dtype: DType,
    seed: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SynthSummary> {
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(Error::Input(format!(
            "synthetic checkpoints are f32, f16 or bf16, not {dtype}"
        )));
    }
    let t5_dir = dir.join(T5_FOLDER);
    std::fs::create_dir_all(&t5_dir).map_err(|e| Error::io(&t5_dir, e))?;
    let config = preset.model_config();
    write_json(&dir.join("model_config.json"), &config)?;
    let t5_config = preset.t5_config();
    write_json(&t5_dir.join("config.json"), &t5_config)?;
    write_json(&t5_dir.join("tokenizer.json"), &stand_in_tokenizer())?;
    write_json(
        &t5_dir.join("tokenizer_config.json"),
        &stand_in_tokenizer_config(256),
    )?;
    let specs = sa3_layout(&config)?;
    let t5_specs = t5_layout(&t5_config)?;
    let t5_total = safetensors_size(&t5_specs, DType::BF16)?;
    let total = safetensors_size(&specs, dtype)? + t5_total;
    let bytes = write_safetensors(
        &dir.join("model.safetensors"),
        &specs,
        dtype,
        seed,
        &mut |b| progress(b, total),
    )?;
    let t5_bytes = write_safetensors(
        &t5_dir.join("model.safetensors"),
        &t5_specs,
        DType::BF16,
        seed ^ 0x7435,
        &mut |b| progress(bytes + b, total),
    )?;
    Ok(SynthSummary {
        dir: dir.to_path_buf(),
        tensors: specs.len(),
        params: specs.iter().map(TensorSpec::numel).sum(),
        bytes,
        t5_tensors: t5_specs.len(),
        t5_bytes,
    })
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| Error::Config(e.to_string()))?;
    std::fs::write(path, text + "\n").map_err(|e| Error::io(path, e))
}

fn header(specs: &[TensorSpec], dtype: DType) -> Result<Vec<u8>> {
    let mut map = serde_json::Map::new();
    map.insert("__metadata__".into(), json!({ "format": "pt" }));
    let mut off = 0usize;
    for s in specs {
        let n = s.numel() * dtype.size();
        map.insert(
            s.name.clone(),
            json!({ "dtype": dtype.safetensors_name(), "shape": s.shape, "data_offsets": [off, off + n] }),
        );
        off += n;
    }
    let mut h =
        serde_json::to_vec(&Value::Object(map)).map_err(|e| Error::Config(e.to_string()))?;
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    Ok(h)
}

/// Size in bytes of the safetensors file [`write_safetensors`] writes for `specs`.
pub fn safetensors_size(specs: &[TensorSpec], dtype: DType) -> Result<u64> {
    let data: usize = specs.iter().map(|s| s.numel() * dtype.size()).sum();
    Ok((8 + header(specs, dtype)?.len() + data) as u64)
}

/// Stream `specs` to a safetensors file in `dtype`, filling each tensor as its [`Init`] says
/// (Gaussian values from a generator seeded by `seed` and the tensor's name, so a tensor's
/// content does not depend on the others). Returns the file size.
pub fn write_safetensors(
    path: &Path,
    specs: &[TensorSpec],
    dtype: DType,
    seed: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = std::io::BufWriter::with_capacity(8 << 20, file);
    let h = header(specs, dtype)?;
    let mut written = 0u64;
    let put = |w: &mut std::io::BufWriter<std::fs::File>,
               written: &mut u64,
               bytes: &[u8]|
     -> Result<()> {
        w.write_all(bytes).map_err(|e| Error::io(path, e))?;
        *written += bytes.len() as u64;
        Ok(())
    };
    put(&mut w, &mut written, &(h.len() as u64).to_le_bytes())?;
    put(&mut w, &mut written, &h)?;
    const CHUNK: usize = 1 << 20;
    let mut vals = vec![0f32; CHUNK];
    let mut bytes = Vec::with_capacity(CHUNK * 4);
    for s in specs {
        let mut rng = Rng::new(seed ^ hash_str(&s.name));
        let n = s.numel();
        let mut done = 0;
        while done < n {
            let m = CHUNK.min(n - done);
            let chunk = &mut vals[..m];
            match s.init {
                Init::Normal(std) => {
                    rng.fill_normal(chunk);
                    chunk.iter_mut().for_each(|v| *v *= std);
                }
                Init::Const(c) => chunk.fill(c),
                Init::InvFreq => {
                    for (i, v) in chunk.iter_mut().enumerate() {
                        let k = (done + i) as f64;
                        *v = (1.0 / 10000f64.powf(2.0 * k / (2 * n) as f64)) as f32;
                    }
                }
            }
            bytes.clear();
            match dtype {
                DType::F16 => chunk
                    .iter()
                    .for_each(|v| bytes.extend_from_slice(&half::f16::from_f32(*v).to_le_bytes())),
                DType::BF16 => chunk
                    .iter()
                    .for_each(|v| bytes.extend_from_slice(&half::bf16::from_f32(*v).to_le_bytes())),
                _ => chunk
                    .iter()
                    .for_each(|v| bytes.extend_from_slice(&v.to_le_bytes())),
            }
            put(&mut w, &mut written, &bytes)?;
            done += m;
        }
        progress(written);
    }
    w.flush().map_err(|e| Error::io(path, e))?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(specs: &[TensorSpec], prefix: &str) -> (usize, usize) {
        let v: Vec<_> = specs
            .iter()
            .filter(|s| s.name.starts_with(prefix))
            .collect();
        (v.len(), v.iter().map(|s| s.numel()).sum())
    }

    #[test]
    fn small_layout_matches_published_counts() {
        let specs = sa3_layout(&Preset::SmallMusic.model_config()).unwrap();
        assert_eq!(specs.len(), 685);
        assert_eq!(count(&specs, "model.model."), (438, 459_130_896));
        assert_eq!(count(&specs, "pretransform.model."), (244, 108_244_721));
        assert_eq!(count(&specs, "conditioner.conditioners."), (3, 198_144));
        assert_eq!(specs, sa3_layout(&Preset::SmallSfx.model_config()).unwrap());
        let noise = specs
            .iter()
            .find(|s| s.name.ends_with("noise_scaling_factor"))
            .unwrap();
        assert_eq!(noise.shape, vec![1, 0, 1]);
    }

    #[test]
    fn medium_layout_matches_published_counts() {
        let specs = sa3_layout(&Preset::Medium.model_config()).unwrap();
        assert_eq!(specs.len(), 997);
        assert_eq!(count(&specs, "model.model."), (522, 1_453_170_192));
        assert_eq!(count(&specs, "pretransform.model."), (472, 852_127_457));
        assert_eq!(count(&specs, "conditioner.conditioners."), (3, 198_144));
        let total: usize = specs.iter().map(TensorSpec::numel).sum();
        assert_eq!(total, 2_305_495_793);
    }

    #[test]
    fn t5_layout_has_134_encoder_tensors() {
        let specs = t5_layout(&Preset::SmallMusic.t5_config()).unwrap();
        assert_eq!(specs.len(), 134);
        let emb = specs
            .iter()
            .find(|s| s.name == "encoder.embed_tokens.weight")
            .unwrap();
        assert_eq!(emb.shape, vec![256_000, 768]);
    }

    #[test]
    fn stand_in_tokenizer_maps_bytes_to_four_plus_byte() {
        let t = stand_in_tokenizer();
        let vocab = t["model"]["vocab"].as_object().unwrap();
        assert_eq!(vocab.len(), 260);
        assert_eq!(vocab["a"], json!(4 + u32::from(b'a')));
        assert_eq!(vocab["\u{120}"], json!(4 + 32)); // space
        assert_eq!(vocab["\u{100}"], json!(4));
    }

    #[test]
    fn tiny_model_round_trips_through_the_loader() {
        let dir = aria_testing::TempDir::new("synth-test");
        let s = write_model(&dir, Preset::Tiny, DType::F32, 1, &mut |_, _| {}).unwrap();
        let l = aria_core::WeightLoader::open(&[dir.join("model.safetensors")]).unwrap();
        assert_eq!(l.names().len(), s.tensors);
        let inv = l
            .get_any("model.model.transformer.rotary_pos_emb.inv_freq")
            .unwrap()
            .to_vec_f32()
            .unwrap();
        assert_eq!(inv.len(), 16);
        assert!((inv[1] - 1.0 / 10000f32.powf(2.0 / 32.0)).abs() < 1e-7);
        let g = l
            .get_any("pretransform.model.bottleneck.running_std")
            .unwrap()
            .to_vec_f32()
            .unwrap();
        assert_eq!(g, vec![1.0]);
        let e = l
            .get_any("pretransform.model.bottleneck.noise_scaling_factor")
            .unwrap();
        assert_eq!(e.shape(), &[1, 0, 1]);
        let w = l
            .get_any("model.model.to_cond_embed.0.weight")
            .unwrap()
            .to_vec_f32()
            .unwrap();
        let std = (w.iter().map(|v| v * v).sum::<f32>() / w.len() as f32).sqrt();
        assert!((std - WEIGHT_STD).abs() < 0.002, "std {std}");
        let t5 = aria_core::WeightLoader::open(&[dir.join(T5_FOLDER).join("model.safetensors")])
            .unwrap();
        assert_eq!(t5.names().len(), s.t5_tensors);
        assert_eq!(
            t5.get_any("encoder.norm.weight").unwrap().dtype(),
            DType::BF16
        );
    }
}
