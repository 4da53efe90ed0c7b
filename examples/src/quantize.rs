//! `aria quantize` (a pre-quantized model folder), the `--precision`/`--w8a8` flags of
//! `aria generate`, and the per-precision memory plan of `aria info`.

use std::path::PathBuf;

use aria::discover::{resolve_model, ModelFiles, SearchPaths};
use aria::quant::WeightPrecision;
use aria::Result;
use clap::{Args, ValueEnum};
use serde_json::json;

use crate::Ctx;

/// `--precision`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    /// As stored (f32).
    F32,
    /// 16-bit IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// bf16 weights with bf16 products (AMX tile unit or AVX-512 BF16 where the CPU has them).
    #[value(name = "bf16-dot")]
    Bf16Dot,
    /// 8-bit blocks (q8_0).
    Q8,
    /// 4-bit k-quant blocks (q4_k).
    Q4,
    /// q4_k FFN, q6_k FFN output, q8_0 attention and the rest.
    #[value(name = "q4-mixed")]
    Q4Mixed,
    /// The fastest measured mode for this machine: bf16-dot where the CPU runs bf16 products
    /// faster than f32 (AMX-BF16, or AVX-512 BF16 on AMD cores), else f32.
    Fast,
}

impl From<PrecisionArg> for WeightPrecision {
    fn from(p: PrecisionArg) -> WeightPrecision {
        match p {
            PrecisionArg::F32 => WeightPrecision::F32,
            PrecisionArg::F16 => WeightPrecision::F16,
            PrecisionArg::Bf16 => WeightPrecision::Bf16,
            PrecisionArg::Bf16Dot => WeightPrecision::Bf16Dot,
            PrecisionArg::Q8 => WeightPrecision::Q8,
            PrecisionArg::Q4 => WeightPrecision::Q4,
            PrecisionArg::Q4Mixed => WeightPrecision::Q4Mixed,
            PrecisionArg::Fast => WeightPrecision::Fast,
        }
    }
}

/// The weight-precision flags of `aria generate`.
#[derive(Args, Clone)]
pub struct PrecisionArgs {
    /// Precision of the DiT weights; the full-precision pages are released once packed
    /// (default: as stored; a pre-quantized folder loads at its own precision).
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// Run the 8-bit layers with int8 activations (W8A8; needs --precision q8 or q4-mixed).
    #[arg(long)]
    pub w8a8: bool,
    /// Pack the autoencoder decoder's matrices as q8_0 too (less memory while decoding).
    #[arg(long)]
    pub quantize_decoder: bool,
    /// Pack the T5Gemma text encoder's matrices as q8_0 (needs f32 text precision).
    #[arg(long)]
    pub quantize_text: bool,
    /// Keep every weight page resident between the stages of a run (by default the pages of
    /// weights a stage no longer needs are released, lowering the peak memory).
    #[arg(long)]
    pub keep_resident: bool,
}

impl PrecisionArgs {
    /// The precision for `LoadOptions::precision`.
    pub fn precision(&self) -> Option<WeightPrecision> {
        self.precision.map(Into::into)
    }
}

/// `aria quantize`.
#[derive(Args)]
pub struct QuantizeArgs {
    /// The model folder (or name) to quantize.
    #[arg(long, short)]
    pub model: String,
    /// The packed precision.
    #[arg(long, value_enum)]
    pub precision: PrecisionArg,
    /// The new model folder.
    #[arg(long, short)]
    pub output: PathBuf,
    /// Keep the autoencoder decoder's matrices dense (by default they are packed as q8_0,
    /// as --quantize-decoder packs them at load).
    #[arg(long)]
    pub dense_decoder: bool,
}

/// Run `aria quantize`.
pub fn run(a: &QuantizeArgs, cx: &Ctx) -> Result<()> {
    let files = resolve_model(&a.model, &SearchPaths::from_env())?;
    let precision: WeightPrecision = a.precision.into();
    let mut last = 0usize;
    let quiet = cx.ui.quiet || cx.json;
    let opts = aria::quant::QuantizeOptions {
        precision,
        dense_decoder: a.dense_decoder,
    };
    let summary =
        aria::quant::quantize_model_with(&files, &opts, &a.output, &mut |done, total| {
            if !quiet && (done == total || done >= last + total.div_ceil(10).max(1)) {
                last = done;
                eprintln!("  writing tensors: {done}/{total}");
            }
        })?;
    let formats: Vec<String> = summary
        .formats
        .iter()
        .map(|(f, n)| format!("{n} {f}"))
        .collect();
    if cx.json {
        crate::print_json(&json!({
            "command": "quantize",
            "output": summary.dir.display().to_string(),
            "precision": precision.name(),
            "formats": summary.formats,
            "decoder": summary.decoder,
            "dense_tensors": summary.dense_tensors,
            "source_bytes": summary.source_bytes,
            "packed_bytes": summary.packed_bytes,
            "source": summary.source,
        }));
        return Ok(());
    }
    println!(
        "wrote {} ({precision}, decoder {}): packed {} ({:.3} GB -> {:.3} GB), {} tensors as they were; source {}",
        summary.dir.display(),
        summary.decoder.as_deref().unwrap_or("dense"),
        formats.join(", "),
        summary.source_bytes as f64 / 1e9,
        summary.packed_bytes as f64 / 1e9,
        summary.dense_tensors,
        summary.source
    );
    Ok(())
}

/// The per-precision memory plan `aria info` prints.
pub fn memory_plan(files: &ModelFiles) -> Result<String> {
    aria::quant::memory_plan(files)
}
