//! [`quantize_model`]: write a pre-quantized model folder.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use aria_codec::{Autoencoder, AutoencoderConfig};
use aria_core::WeightLoader;
use aria_dit::config::ModelConfig;
use aria_dit::dit::Dit;
use aria_quant::io::{write_packed_stream, Item, PackMeta, Spec};
use aria_quant::{Format, PackedMatrix, QuantError, Xxh64};

use super::{qerr, WeightPrecision};
use crate::discover::ModelFiles;
use crate::{Error, Result};

/// What [`quantize_model`] wrote.
#[derive(Debug, Clone)]
pub struct QuantizeSummary {
    /// The new model folder.
    pub dir: PathBuf,
    /// The policy.
    pub precision: WeightPrecision,
    /// Packed tensors per format tag (DiT and decoder).
    pub formats: BTreeMap<String, usize>,
    /// The format of the decoder's packed matrices (`None`: kept dense).
    pub decoder: Option<String>,
    /// Tensors written as they were.
    pub dense_tensors: usize,
    /// Bytes of the packed weights' source tensors.
    pub source_bytes: usize,
    /// Bytes of the packed weights.
    pub packed_bytes: usize,
    /// The source checksum recorded in the file (XXH64 of the source weight files).
    pub source: String,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// XXH64 of the bytes of `paths`, in order, read in 1 MiB pieces (nothing stays resident).
pub(super) fn source_checksum(paths: &[PathBuf]) -> Result<String> {
    let mut h = Xxh64::new(0);
    let mut buf = vec![0u8; 1 << 20];
    for p in paths {
        let mut f = std::fs::File::open(p).map_err(io_err(p))?;
        loop {
            let n = f.read(&mut buf).map_err(io_err(p))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
    }
    Ok(format!("{:016x}", h.finish()))
}

/// The weight files of a checkpoint (the file, or the shards of an index, sorted).
fn weight_files(weights: &Path) -> Result<Vec<PathBuf>> {
    if !weights.to_string_lossy().ends_with(".index.json") {
        return Ok(vec![weights.to_path_buf()]);
    }
    let v = aria_core::config::read_json(weights)?;
    let dir = weights.parent().unwrap_or(Path::new("."));
    let mut files: Vec<PathBuf> = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .map(|m| {
            m.values()
                .filter_map(|f| f.as_str())
                .map(|f| dir.join(f))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files.dedup();
    Ok(files)
}

/// Link `src` to `dst` (a hard link; a copy across file systems).
fn link_or_copy(src: &Path, dst: &Path) -> Result<()> {
    if std::fs::hard_link(src, dst).is_ok() {
        return Ok(());
    }
    std::fs::copy(src, dst).map_err(io_err(src))?;
    Ok(())
}

fn link_dir(src: &Path, dst: &Path) -> Result<()> {
    std::fs::create_dir_all(dst).map_err(io_err(dst))?;
    for e in std::fs::read_dir(src).map_err(io_err(src))? {
        let e = e.map_err(io_err(src))?;
        let p = e.path();
        let to = dst.join(e.file_name());
        if p.is_dir() {
            link_dir(&p, &to)?;
        } else {
            link_or_copy(&p, &to)?;
        }
    }
    Ok(())
}

/// What [`quantize_model_with`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantizeOptions {
    /// The packed precision of the DiT linears (`q8`, `q4`, `q4-mixed`).
    pub precision: WeightPrecision,
    /// Keep the autoencoder decoder's matrices dense (by default they are packed as `q8_0`,
    /// the blocks [`LoadOptions::quantize_decoder`](crate::LoadOptions::quantize_decoder)
    /// packs at load).
    pub dense_decoder: bool,
}

impl QuantizeOptions {
    /// `precision`, with the decoder packed.
    pub fn new(precision: WeightPrecision) -> QuantizeOptions {
        QuantizeOptions {
            precision,
            dense_decoder: false,
        }
    }
}

/// [`quantize_model_with`] at `precision`, with the decoder packed as `q8_0`.
pub fn quantize_model(
    files: &ModelFiles,
    precision: WeightPrecision,
    out: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<QuantizeSummary> {
    quantize_model_with(files, &QuantizeOptions::new(precision), out, progress)
}

/// Where a written tensor comes from.
enum Src {
    /// A DiT linear the policy packs: checkpoint key, logical shape.
    Dit([usize; 2]),
    /// A decoder matrix: index into the decoder's linears.
    Decoder(usize),
    /// A checkpoint tensor written as it is.
    Dense,
}

/// Write a pre-quantized copy of the model folder `files` to `out` (see [`QuantizeOptions`]):
/// `out/model.safetensors` holds the DiT linears the policy packs and (unless
/// [`QuantizeOptions::dense_decoder`]) the autoencoder decoder's matrices, as `q8_0`, as U8
/// blocks, and every other tensor as it was, with the container version, policy, decoder
/// format and the source checksum in its metadata; `model_config.json` and the text-encoder
/// folder are linked or copied. `out` must not hold a model already.
///
/// The file is written one tensor at a time ([`aria_quant::io::write_packed_stream`]): a
/// matrix is quantized, written and dropped, and the pages of its source released, so the
/// memory held stays near one matrix whatever the model's size. `progress(done, total)`
/// counts tensors written.
pub fn quantize_model_with(
    files: &ModelFiles,
    opts: &QuantizeOptions,
    out: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<QuantizeSummary> {
    let precision = opts.precision;
    let policy = precision.policy().ok_or_else(|| {
        Error::Input(format!(
            "quantize writes a packed precision (q8, q4, q4-mixed), not {precision}"
        ))
    })?;
    let target = out.join("model.safetensors");
    if target.exists() || out.join("model.safetensors.index.json").exists() {
        return Err(Error::Input(format!(
            "{} already holds a model; choose an empty or new folder",
            out.display()
        )));
    }
    let weights = WeightLoader::open_checkpoint(&files.weights)?;
    if let Some(p) = super::packed_policy(&weights)? {
        return Err(Error::Input(format!(
            "{} is already pre-quantized ({p}); quantize the original checkpoint",
            files.weights.display()
        )));
    }
    let source = source_checksum(&weight_files(&files.weights)?)?;
    let config = ModelConfig::from_file(&files.config)?;
    let dit = Dit::load(&config.model.diffusion.config, &weights.pp("model.model"))?;
    let layers: Vec<(String, [usize; 2])> = dit
        .linears()
        .into_iter()
        .map(|l| (format!("{}.weight", l.name()), l.weight().shape()))
        .collect();
    drop(dit);
    // Declared up front: every tensor's name and what it will be.
    let mut specs: Vec<(String, Spec)> = Vec::new();
    let mut srcs: Vec<Src> = Vec::new();
    let mut replaced = std::collections::HashSet::new();
    for (key, shape) in &layers {
        if let Some(format) = policy.format_for(key, *shape) {
            specs.push((
                key.clone(),
                Spec::Packed {
                    format,
                    shape: *shape,
                },
            ));
            srcs.push(Src::Dit(*shape));
            replaced.insert(key.clone());
        }
    }
    // The decoder as the model builds it (the mapping's weight-normalised kernel folded),
    // so its blocks are the ones packing at load makes.
    let mut ae = if opts.dense_decoder {
        None
    } else {
        let ae_cfg = AutoencoderConfig::from_model_config(&files.config)?;
        let ae = Autoencoder::load(&ae_cfg, &weights)?;
        release_folded(&weights)?;
        Some(ae)
    };
    let decoder: Vec<&mut aria_core::nn::Linear> = ae
        .as_mut()
        .map(|a| a.decoder_linears_mut())
        .unwrap_or_default();
    for (k, lin) in decoder.iter().enumerate() {
        let key = format!("{}.weight", lin.name());
        specs.push((
            key.clone(),
            Spec::Packed {
                format: Format::Q8_0,
                shape: lin.weight().shape(),
            },
        ));
        srcs.push(Src::Decoder(k));
        replaced.insert(key);
    }
    for n in weights.names() {
        if replaced.contains(&n) {
            continue;
        }
        let (_, info) = weights.info(&n)?;
        specs.push((
            n.clone(),
            Spec::Dense {
                dtype: info.dtype,
                shape: info.shape.clone(),
            },
        ));
        srcs.push(Src::Dense);
    }
    let mut formats: BTreeMap<String, usize> = BTreeMap::new();
    for (_, s) in &specs {
        if let Spec::Packed { format, .. } = s {
            *formats.entry(format.tag()).or_default() += 1;
        }
    }
    let dense_tensors = srcs.iter().filter(|s| matches!(s, Src::Dense)).count();
    let (mut source_bytes, mut packed_bytes) = (0usize, 0usize);
    let total = specs.len();
    let mut done = 0usize;
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let meta = PackMeta {
        policy: policy.name().to_string(),
        source: source.clone(),
        decoder: (!decoder.is_empty()).then(|| Format::Q8_0.tag()),
    };
    progress(0, total);
    let mut produce = |i: usize| -> aria_quant::Result<Item> {
        let (key, spec) = &specs[i];
        Ok(match (&srcs[i], spec) {
            (Src::Dit(shape), Spec::Packed { format, .. }) => {
                let w = weights.get_any(key)?;
                let w = if w.rank() == 3 { w.reshape(shape)? } else { w };
                source_bytes += w.elem_count() * w.dtype().size();
                let m = PackedMatrix::quantize(key, &w, *format)?;
                packed_bytes += m.nbytes();
                Item::Packed(m)
            }
            (Src::Decoder(k), _) => {
                let lin = &decoder[*k];
                let w = lin.weight().dense().ok_or_else(|| QuantError::File {
                    path: files.weights.clone(),
                    reason: format!("decoder matrix `{key}` did not load dense"),
                })?;
                source_bytes += w.elem_count() * w.dtype().size();
                let m = PackedMatrix::quantize(key, w, Format::Q8_0)?;
                packed_bytes += m.nbytes();
                Item::Packed(m)
            }
            _ => Item::Dense(weights.get_any(key)?),
        })
    };
    let mut written = |i: usize| -> aria_quant::Result<()> {
        let key = &specs[i].0;
        match &srcs[i] {
            Src::Decoder(k) => {
                decoder[*k].weight().release_pages()?;
            }
            _ => {
                weights.release(key)?;
            }
        }
        done += 1;
        progress(done, total);
        Ok(())
    };
    write_packed_stream(&target, &specs, &meta, &mut produce, &mut written).map_err(qerr)?;
    drop(ae);
    link_or_copy(&files.config, &out.join("model_config.json"))?;
    let t5_rel = files
        .t5_dir
        .strip_prefix(&files.dir)
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| PathBuf::from(crate::synth::T5_FOLDER));
    link_dir(&files.t5_dir, &out.join(t5_rel))?;
    Ok(QuantizeSummary {
        dir: out.to_path_buf(),
        precision,
        formats,
        decoder: meta.decoder,
        dense_tensors,
        source_bytes,
        packed_bytes,
        source,
    })
}

/// Release the pages of the weight-normalised kernels (`weight_v`) the autoencoder read to
/// fold its mapping convolutions.
pub(super) fn release_folded(weights: &WeightLoader) -> Result<()> {
    for n in weights.names() {
        if n.starts_with("pretransform.") && n.ends_with(".weight_v") {
            weights.release(&n)?;
        }
    }
    Ok(())
}
