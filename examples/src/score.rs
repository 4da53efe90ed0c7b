//! `aria clap` (embed texts and clips with CLAP, print their similarities) and `aria score`
//! (the papers' measures over folders of clips: CLAP score, FAD over CLAP embeddings and drift,
//! each beside the re-seed spread).

use std::path::{Path, PathBuf};

use aria::{Error, Result};
use aria_clap::eval::{self, Prompts, Sets, DEFAULT_LUFS};
use aria_clap::measure::{normalize_loudness, svg_histogram};
use aria_clap::{Clap, ClapError};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::Ctx;

fn err(e: ClapError) -> Error {
    Error::Input(e.to_string())
}

/// Where the CLAP files come from.
#[derive(Args, Clone)]
pub struct ClapModelArg {
    /// CLAP checkpoint: a folder (config.json, model.safetensors, preprocessor_config.json,
    /// tokenizer files) or a repository id in the Hugging Face cache (laion/clap-htsat-unfused,
    /// laion/larger_clap_music, …). Default: $ARIA_CLAP.
    #[arg(long = "clap", value_name = "DIR|REPO")]
    pub clap: Option<String>,
    /// A folder with the tokenizer files, when the checkpoint folder has none.
    #[arg(long, value_name = "DIR")]
    pub tokenizer: Option<PathBuf>,
    /// Arithmetic of CLAP's matrix products: f32 (the reference's), bf16-dot (bf16 products on
    /// packed weights), fast (bf16-dot where the CPU runs it faster than f32).
    #[arg(long = "clap-precision", default_value = "f32", value_parser = parse_precision)]
    pub precision: aria_clap::Precision,
}

fn parse_precision(s: &str) -> std::result::Result<aria_clap::Precision, String> {
    aria_clap::Precision::parse(s).ok_or_else(|| format!("`{s}` is not f32, bf16-dot or fast"))
}

impl ClapModelArg {
    fn load(&self, cx: &Ctx) -> Result<Clap> {
        if cx.device != aria::DeviceKind::Cpu {
            return Err(Error::Input(
                "CLAP runs on the CPU only for now (--device cpu)".into(),
            ));
        }
        let dir = aria_clap::discover::find(self.clap.as_deref()).map_err(err)?;
        let pb = cx
            .ui
            .spinner(&format!("loading CLAP from {}", dir.display()));
        let mut clap = Clap::load_with(&dir, self.precision).map_err(err)?;
        if let Some(t) = &self.tokenizer {
            clap = clap
                .with_tokenizer(aria_clap::tokenizer::RobertaTokenizer::from_dir(t).map_err(err)?);
        }
        pb.finish_and_clear();
        let a = &clap.config().audio_config;
        cx.ui.detail(&format!(
            "CLAP: {} (audio {}→{}, depths {:?}, fusion {}; text {} layers; space {}; {})",
            dir.display(),
            a.patch_embeds_hidden_size,
            a.hidden_size,
            a.depths,
            a.enable_fusion,
            clap.config().text_config.num_hidden_layers,
            clap.dim(),
            clap.precision().name()
        ));
        Ok(clap)
    }
}

/// `aria clap`.
#[derive(Args)]
pub struct ClapArgs {
    #[command(flatten)]
    pub model: ClapModelArg,
    /// A text to embed (repeatable).
    #[arg(long = "text", value_name = "TEXT")]
    pub texts: Vec<String>,
    /// An audio file to embed (repeatable; any rate and channel count).
    #[arg(long = "audio", value_name = "FILE")]
    pub audio: Vec<PathBuf>,
    /// Loudness target before embedding, in LUFS (the paper's −14); `none` embeds as read.
    #[arg(long, default_value = "-14", value_parser = parse_lufs)]
    pub lufs: Lufs,
    /// Write every embedding (JSON: texts and files with their vectors) to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// `--lufs`.
#[derive(Clone, Copy, Debug)]
pub struct Lufs(pub Option<f64>);

fn parse_lufs(s: &str) -> std::result::Result<Lufs, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(Lufs(None));
    }
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a loudness in LUFS (e.g. -14) or `none`"))?;
    if !(-70.0..=0.0).contains(&v) {
        return Err(format!("{v} LUFS is outside −70…0"));
    }
    Ok(Lufs(Some(v)))
}

fn embed_file(clap: &Clap, path: &Path, lufs: Option<f64>) -> Result<Vec<f32>> {
    let clip = eval::read_clip(path).map_err(err)?;
    let samples = match lufs {
        Some(t) => match normalize_loudness(&clip.samples, clip.channels, clip.sample_rate, t) {
            Ok(s) => s,
            // Too short or silent to measure: embedded as read.
            Err(_) => clip.samples,
        },
        None => clip.samples,
    };
    clap.embed_audio(&samples, clip.channels, clip.sample_rate)
        .map_err(|e| Error::Input(format!("{}: {e}", path.display())))
}

pub fn run_clap(a: &ClapArgs, cx: &Ctx) -> Result<()> {
    if a.texts.is_empty() && a.audio.is_empty() {
        return Err(Error::Input(
            "nothing to embed: give --text and/or --audio".into(),
        ));
    }
    let clap = a.model.load(cx)?;
    let texts: Vec<&str> = a.texts.iter().map(String::as_str).collect();
    let t = if texts.is_empty() {
        Vec::new()
    } else {
        clap.embed_texts(&texts).map_err(err)?
    };
    let mut au = Vec::with_capacity(a.audio.len());
    for f in &a.audio {
        au.push(embed_file(&clap, f, a.lufs.0)?);
    }
    let cos: Vec<Vec<f32>> = t
        .iter()
        .map(|x| {
            au.iter()
                .map(|y| aria_clap::measure::clap_score(x, y).unwrap_or(f32::NAN))
                .collect()
        })
        .collect();
    if let Some(p) = &a.out {
        let v = json!({
            "model": clap.dir(),
            "dim": clap.dim(),
            "texts": a.texts.iter().zip(&t).map(|(s, e)| json!({"text": s, "embedding": e})).collect::<Vec<_>>(),
            "audio": a.audio.iter().zip(&au).map(|(f, e)| json!({"file": f, "embedding": e})).collect::<Vec<_>>(),
        });
        std::fs::write(p, v.to_string()).map_err(|source| Error::Io {
            path: p.clone(),
            source,
        })?;
        cx.ui.note(&format!(
            "wrote {} embeddings to {}",
            t.len() + au.len(),
            p.display()
        ));
    }
    if cx.json {
        println!(
            "{}",
            json!({
                "model": clap.dir(),
                "texts": a.texts,
                "audio": a.audio,
                "cosine": cos,
                "logits_per_text": clap.logits_per_text(&t, &au).map_err(err)?,
            })
        );
        return Ok(());
    }
    if cos.is_empty() || au.is_empty() {
        println!(
            "embedded {} text(s) and {} clip(s) into {} dimensions{}",
            t.len(),
            au.len(),
            clap.dim(),
            if a.out.is_none() {
                " (give both --text and --audio for similarities, --out to keep the vectors)"
            } else {
                ""
            }
        );
        return Ok(());
    }
    println!("cosine similarity (CLAP score), text × audio:");
    for (i, row) in cos.iter().enumerate() {
        for (j, c) in row.iter().enumerate() {
            println!("  {c:+.4}  {:?} × {}", a.texts[i], a.audio[j].display());
        }
    }
    Ok(())
}

/// `aria score`.
#[derive(Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    pub model: ClapModelArg,
    /// The folder of clips under test (wav, flac, mp3, ogg).
    pub audio: PathBuf,
    /// One prompt for every clip (CLAP score).
    #[arg(long, conflicts_with = "prompts")]
    pub prompt: Option<String>,
    /// Prompts per file: CSV/TSV lines `file,prompt`, or JSON lines {"file", "prompt"}.
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
    /// The baseline folder: the same prompts and seeds through the reference configuration
    /// (file names pair clips). Gives FAD and drift of the clips under test from it.
    #[arg(long, value_name = "DIR")]
    pub against: Option<PathBuf>,
    /// The re-seed folder: the reference configuration with other seeds (same file names). Its
    /// FAD and drift from --against are the noise floor printed beside each measure.
    #[arg(long, value_name = "DIR", requires = "against")]
    pub reseed: Option<PathBuf>,
    /// Loudness target before embedding, in LUFS (the paper's −14); `none` embeds as read.
    #[arg(long, default_value = "-14", value_parser = parse_lufs)]
    pub lufs: Lufs,
    /// Write the report as CSV (long form: measure,set,stat,index,value).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write a plot (SVG): the measures against the re-seed floor, and the per-clip drift and
    /// CLAP score distributions.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

fn embed_set(clap: &Clap, dir: &Path, lufs: Option<f64>, cx: &Ctx) -> Result<eval::EmbeddedSet> {
    let n = eval::audio_files(dir).map_err(err)?.len();
    let pb = if cx.ui.quiet {
        ProgressBar::hidden()
    } else {
        let pb = ProgressBar::new(n as u64);
        if let Ok(st) = ProgressStyle::with_template(
            "embedding {msg} {bar:30} {pos}/{len} clips {elapsed_precise}",
        ) {
            pb.set_style(st);
        }
        pb.set_message(dir.display().to_string());
        pb
    };
    let set = eval::embed_folder(clap, dir, lufs, &mut |done, _, _| {
        pb.set_position(done as u64)
    })
    .map_err(err)?;
    pb.finish_and_clear();
    Ok(set)
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

pub fn run_score(a: &ScoreArgs, cx: &Ctx) -> Result<()> {
    let prompts = match (&a.prompt, &a.prompts) {
        (Some(p), _) => Prompts::Same(p.clone()),
        (None, Some(f)) => Prompts::PerFile(eval::read_prompts(f).map_err(err)?),
        (None, None) => Prompts::None,
    };
    if matches!(prompts, Prompts::None) && a.against.is_none() {
        return Err(Error::Input(
            "nothing to measure: give --prompt/--prompts (CLAP score) and/or --against DIR \
             (FAD and drift)"
                .into(),
        ));
    }
    let clap = a.model.load(cx)?;
    let lufs = a.lufs.0;
    let sets = Sets {
        variant: embed_set(&clap, &a.audio, lufs, cx)?,
        against: a
            .against
            .as_deref()
            .map(|d| embed_set(&clap, d, lufs, cx))
            .transpose()?,
        reseed: a
            .reseed
            .as_deref()
            .map(|d| embed_set(&clap, d, lufs, cx))
            .transpose()?,
    };
    let report = eval::evaluate(&clap, &sets, &prompts).map_err(err)?;
    if let Some(p) = &a.csv {
        write(p, &report.to_csv())?;
        cx.ui.note(&format!("wrote {}", p.display()));
    }
    if let Some(p) = &a.plot {
        let mut svg = report.svg_bars().map_err(err)?;
        for m in &report.measures {
            if m.items.len() > 1 {
                let mut series: Vec<(&str, &[f64])> = vec![("clips under test", &m.items)];
                if let Some(b) = &m.baseline {
                    if !b.items.is_empty() {
                        series.push(("re-seed", &b.items));
                    }
                }
                svg.push_str(&svg_histogram(&m.name, &series, &m.name));
            }
        }
        write(p, &svg)?;
        cx.ui.note(&format!("wrote {}", p.display()));
    }
    if cx.json {
        println!("{}", report.to_json().map_err(err)?);
        return Ok(());
    }
    println!(
        "CLAP {} · {} clips · loudness {}",
        clap.dir().display(),
        sets.variant.names.len(),
        match lufs {
            Some(t) => format!("normalised to {t} LUFS"),
            None => "as read".into(),
        }
    );
    println!(
        "{:<28} {:>10} {:>10} {:>10}  note",
        "measure", "value", "re-seed", "ratio"
    );
    for m in &report.measures {
        let base = m
            .baseline
            .as_ref()
            .map(|b| format!("{:.4}", b.value))
            .unwrap_or_else(|| "-".into());
        let ratio = m
            .ratio
            .map(|r| format!("{r:.2}×"))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<28} {:>10.4} {:>10} {:>10}  {}",
            m.name,
            m.value,
            base,
            ratio,
            m.note.as_deref().unwrap_or("")
        );
    }
    Ok(())
}

/// The CLAP columns of `aria steer sweep --clap`.
pub struct SweepClap {
    clap: Clap,
}

/// What [`SweepClap::report`] made.
pub struct SweepClapReport {
    /// The table as printed.
    pub text: String,
    /// The same as JSON.
    pub json: serde_json::Value,
}

impl SweepClap {
    pub fn load(spec: &str) -> Result<SweepClap> {
        let dir = aria_clap::discover::find(Some(spec)).map_err(err)?;
        let clap = Clap::load(&dir).map_err(err)?;
        if clap.tokenizer().is_none() {
            return Err(Error::Input(format!(
                "--clap {}: no tokenizer files in the folder (the CLAP score needs them)",
                dir.display()
            )));
        }
        Ok(SweepClap { clap })
    }

    /// The CLAP vector of a decoded clip `[channels, samples]` (or `[1, channels, samples]`)
    /// at `rate`, brought to −14 LUFS first.
    pub fn embed(&self, audio: &aria_core::Tensor, rate: u32) -> Result<Vec<f32>> {
        let s = audio.shape().to_vec();
        let (ch, n) = (s[s.len().saturating_sub(2)].max(1), s[s.len() - 1]);
        let planar = audio.to_cpu()?.contiguous()?.to_vec_f32()?;
        let mut inter = vec![0f32; ch * n];
        for c in 0..ch {
            for i in 0..n {
                inter[i * ch + c] = planar[c * n + i];
            }
        }
        let x = normalize_loudness(&inter, ch, rate, DEFAULT_LUFS).unwrap_or(inter);
        self.clap.embed_audio(&x, ch, rate).map_err(err)
    }

    /// Score every row against the prompt and measure its drift from the unsteered vector;
    /// write `csv` (`row,clap_score,clap_drift`; the last row, `reseed`, is the floor).
    pub fn report(
        &self,
        prompt: &str,
        base: &[f32],
        rows: &[(String, Vec<f32>)],
        csv: &Path,
    ) -> Result<SweepClapReport> {
        let t = self.clap.embed_texts(&[prompt]).map_err(err)?;
        let mut text = String::from("CLAP (score against the prompt; drift = 1 − cos from strength 0):\nrow,clap_score,clap_drift\n");
        let mut out = Vec::new();
        for (name, e) in rows {
            let score = aria_clap::measure::clap_score(&t[0], e).map_err(err)?;
            let drift = aria_clap::measure::drift_each(&[base], &[e.as_slice()]).map_err(err)?[0];
            text.push_str(&format!("{name},{score:.6},{drift:.6e}\n"));
            out.push(json!({"row": name, "clap_score": score, "clap_drift": drift}));
        }
        write(
            csv,
            text.lines().skip(1).collect::<Vec<_>>().join("\n").as_str(),
        )?;
        Ok(SweepClapReport {
            text,
            json: json!({"model": self.clap.dir(), "rows": out, "floor_row": "reseed"}),
        })
    }
}
