//! Evaluation of folders of clips, as the papers report it: loudness-normalised clips embedded
//! with CLAP, then the CLAP score against prompts, the Fréchet distance between sets and the
//! drift between paired clips — each measure of a variant against a baseline set placed beside
//! the same measure of a re-seeded baseline, the noise floor a difference must clear.
//!
//! The three sets: the **variant** (the clips under test), the **baseline** (`against`: the same
//! prompts and seeds through the reference configuration) and the **re-seed** set (`reseed`:
//! the reference configuration with other seeds). Clips pair up by file stem.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::measure::{
    clap_score_each, drift_each, frechet_distance, integrated_loudness, normalize_loudness,
    Baseline, Measure, Report,
};
use crate::{Clap, ClapError, Result};

/// The loudness every clip is brought to before embedding (the aria paper normalises to −14
/// LUFS).
pub const DEFAULT_LUFS: f64 = -14.0;
/// Files a folder may hold.
pub const MAX_FILES: usize = 100_000;
/// The longest clip read, in seconds (checked from the header before decoding where the format
/// says, else from the file size and then the decoded length).
pub const MAX_CLIP_SECONDS: f64 = 3600.0;
/// The largest compressed file read (bytes).
const MAX_FILE_BYTES: u64 = 1 << 30;
/// The extensions read as audio.
const AUDIO_EXTENSIONS: [&str; 5] = ["wav", "flac", "mp3", "ogg", "m4a"];

/// The audio files of a folder (by extension), sorted by name.
pub fn audio_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let io = |source| ClapError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let p = entry.map_err(io)?.path();
        let ext = p
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        if p.is_file() && ext.is_some_and(|e| AUDIO_EXTENSIONS.contains(&e.as_str())) {
            files.push(p);
            if files.len() > MAX_FILES {
                return Err(ClapError::invalid(
                    "folder",
                    format!("{} holds more than {MAX_FILES} audio files", dir.display()),
                ));
            }
        }
    }
    if files.is_empty() {
        return Err(ClapError::invalid(
            "folder",
            format!(
                "{} holds no audio files ({})",
                dir.display(),
                AUDIO_EXTENSIONS.join(", ")
            ),
        ));
    }
    files.sort();
    Ok(files)
}

/// A clip read from a file: interleaved samples.
#[derive(Debug, Clone)]
pub struct Clip {
    /// Interleaved samples.
    pub samples: Vec<f32>,
    /// Channels.
    pub channels: usize,
    /// Sample rate (Hz).
    pub sample_rate: u32,
}

/// Read a clip, refusing one over [`MAX_CLIP_SECONDS`] before decoding it where the header
/// tells the length (WAV), else before decoding a file over 1 GiB and after decoding.
pub fn read_clip(path: &Path) -> Result<Clip> {
    let name = path.display().to_string();
    let too_long = |secs: f64| {
        ClapError::audio(
            name.clone(),
            format!("{secs:.0} s is longer than the {MAX_CLIP_SECONDS:.0} s a clip may last"),
        )
    };
    let len = std::fs::metadata(path)
        .map_err(|source| ClapError::Io {
            path: path.to_path_buf(),
            source,
        })?
        .len();
    if let Some(secs) = wav_seconds(path) {
        if secs > MAX_CLIP_SECONDS {
            return Err(too_long(secs));
        }
    } else if len > MAX_FILE_BYTES {
        return Err(ClapError::audio(
            name,
            format!("{len} bytes is more than the {MAX_FILE_BYTES} a compressed clip may take"),
        ));
    }
    let clip = aria_codec::audio::read_audio(path)?;
    let (ch, n) = (clip.channels(), clip.frames());
    let secs = n as f64 / f64::from(clip.sample_rate.max(1));
    if secs > MAX_CLIP_SECONDS {
        return Err(too_long(secs));
    }
    // [channels, frames] → interleaved
    let planar = clip.data.to_vec_f32()?;
    let mut samples = vec![0f32; ch * n];
    for c in 0..ch {
        for (i, &x) in planar[c * n..(c + 1) * n].iter().enumerate() {
            samples[i * ch + c] = x;
        }
    }
    Ok(Clip {
        samples,
        channels: ch,
        sample_rate: clip.sample_rate,
    })
}

/// The length a WAV header declares, in seconds (`None` when the file is not a readable WAV).
fn wav_seconds(path: &Path) -> Option<f64> {
    let r = hound::WavReader::open(path).ok()?;
    let spec = r.spec();
    Some(f64::from(r.duration()) / f64::from(spec.sample_rate.max(1)))
}

/// One folder of clips, embedded.
#[derive(Debug, Clone)]
pub struct EmbeddedSet {
    /// The folder.
    pub dir: PathBuf,
    /// File stems, sorted.
    pub names: Vec<String>,
    /// One unit vector per clip.
    pub embeddings: Vec<Vec<f32>>,
    /// Integrated loudness of each clip as read (LUFS; `None` when the clip is too short or
    /// silent to measure).
    pub loudness: Vec<Option<f64>>,
}

impl EmbeddedSet {
    /// The index of each stem.
    fn index(&self) -> HashMap<&str, usize> {
        self.names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect()
    }
}

/// Embed every clip of a folder, each normalised to `lufs` first (`None`: as read). A clip too
/// short or too quiet to measure is embedded as read. `progress(done, total, file)` is called
/// after each clip.
pub fn embed_folder(
    clap: &Clap,
    dir: &Path,
    lufs: Option<f64>,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<EmbeddedSet> {
    let files = audio_files(dir)?;
    let mut names = Vec::with_capacity(files.len());
    let mut embeddings = Vec::with_capacity(files.len());
    let mut loudness = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let clip = read_clip(f)?;
        let measured = integrated_loudness(&clip.samples, clip.channels, clip.sample_rate).ok();
        let samples = match (lufs, measured) {
            (Some(target), Some(m)) if m.is_finite() => {
                normalize_loudness(&clip.samples, clip.channels, clip.sample_rate, target)?
            }
            _ => clip.samples,
        };
        let e = clap
            .embed_audio(&samples, clip.channels, clip.sample_rate)
            .map_err(|e| match e {
                ClapError::Audio { reason, .. } => {
                    ClapError::audio(f.display().to_string(), reason)
                }
                other => other,
            })?;
        let stem = f
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        names.push(stem);
        embeddings.push(e);
        loudness.push(measured.filter(|m| m.is_finite()));
        progress(i + 1, files.len(), &f.display().to_string());
    }
    Ok(EmbeddedSet {
        dir: dir.to_path_buf(),
        names,
        embeddings,
        loudness,
    })
}

/// Prompts by file stem, from a file: CSV or TSV lines `stem,prompt` (a header line `file,…`
/// is skipped; the prompt is the rest of the line, quotes stripped), or JSON lines
/// `{"file": …, "prompt": …}`. A stem with an extension has it removed.
pub fn read_prompts(path: &Path) -> Result<BTreeMap<String, String>> {
    let text = crate::error::read_text(path)?;
    let bad = |line: usize, why: &str| {
        ClapError::invalid(
            "prompts file",
            format!("{} line {line}: {why}", path.display()),
        )
    };
    let stem = |s: &str| -> String {
        let s = s.trim().trim_matches('"');
        Path::new(s)
            .file_stem()
            .and_then(|x| x.to_str())
            .unwrap_or(s)
            .to_string()
    };
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() {
            continue;
        }
        if l.starts_with('{') {
            let v: serde_json::Value =
                serde_json::from_str(l).map_err(|e| bad(i + 1, &e.to_string()))?;
            let file = v["file"]
                .as_str()
                .ok_or_else(|| bad(i + 1, "no \"file\" string"))?;
            let prompt = v["prompt"]
                .as_str()
                .ok_or_else(|| bad(i + 1, "no \"prompt\" string"))?;
            out.insert(stem(file), prompt.to_string());
            continue;
        }
        let sep = if l.contains('\t') { '\t' } else { ',' };
        let Some((file, prompt)) = l.split_once(sep) else {
            return Err(bad(i + 1, "expected `file,prompt`"));
        };
        if i == 0 && file.trim().eq_ignore_ascii_case("file") {
            continue;
        }
        out.insert(stem(file), prompt.trim().trim_matches('"').to_string());
    }
    if out.is_empty() {
        return Err(ClapError::invalid(
            "prompts file",
            format!("{} holds no prompts", path.display()),
        ));
    }
    Ok(out)
}

/// Where the prompts of the CLAP score come from.
#[derive(Debug, Clone)]
pub enum Prompts {
    /// No CLAP score.
    None,
    /// One prompt for every clip.
    Same(String),
    /// A prompt per file stem.
    PerFile(BTreeMap<String, String>),
}

/// The rows of `other` in the order of `set`'s names; an error names the first missing stem.
fn paired<'a>(set: &EmbeddedSet, other: &'a EmbeddedSet) -> Result<Vec<&'a [f32]>> {
    let idx = other.index();
    set.names
        .iter()
        .map(|n| {
            idx.get(n.as_str())
                .map(|&i| other.embeddings[i].as_slice())
                .ok_or_else(|| {
                    ClapError::invalid(
                        "pairing",
                        format!(
                            "{} has `{n}` but {} has no file of that name",
                            set.dir.display(),
                            other.dir.display()
                        ),
                    )
                })
        })
        .collect()
}

/// The CLAP score of each clip of `set` against its prompt.
fn scores(clap: &Clap, set: &EmbeddedSet, prompts: &Prompts) -> Result<Option<Vec<f64>>> {
    let texts: Vec<String> = match prompts {
        Prompts::None => return Ok(None),
        Prompts::Same(p) => vec![p.clone(); set.names.len()],
        Prompts::PerFile(m) => set
            .names
            .iter()
            .map(|n| {
                m.get(n)
                    .cloned()
                    .ok_or_else(|| ClapError::invalid("prompts", format!("no prompt for `{n}`")))
            })
            .collect::<Result<_>>()?,
    };
    // Embed each distinct prompt once.
    let mut uniq: Vec<&str> = texts.iter().map(String::as_str).collect();
    uniq.sort_unstable();
    uniq.dedup();
    let emb = clap.embed_texts(&uniq)?;
    let by: HashMap<&str, &Vec<f32>> = uniq.iter().copied().zip(emb.iter()).collect();
    let t: Vec<&[f32]> = texts
        .iter()
        .map(|p| by.get(p.as_str()).map(|v| v.as_slice()).unwrap_or(&[]))
        .collect();
    Ok(Some(clap_score_each(&t, &set.embeddings)?))
}

/// The sets of an evaluation.
#[derive(Debug, Clone)]
pub struct Sets {
    /// The clips under test.
    pub variant: EmbeddedSet,
    /// The same prompts and seeds through the reference configuration.
    pub against: Option<EmbeddedSet>,
    /// The reference configuration with other seeds: the noise floor.
    pub reseed: Option<EmbeddedSet>,
}

/// The report of an evaluation: the CLAP score of each set (with the re-seed set's spread
/// as baseline of the variant − baseline difference), the Fréchet distance and the drift of
/// the variant from the baseline, each beside the same measure of the re-seed set.
pub fn evaluate(clap: &Clap, sets: &Sets, prompts: &Prompts) -> Result<Report> {
    let mut r = Report::new("CLAP evaluation");
    let v = &sets.variant;
    if let Some(s) = scores(clap, v, prompts)? {
        r.push(Measure::from_items("clap_score.variant", s)?.with_note(
            "cosine of each clip's CLAP audio embedding with its prompt's text embedding",
        ));
    }
    if let Some(a) = &sets.against {
        if let Some(s) = scores(clap, a, prompts)? {
            r.push(Measure::from_items("clap_score.against", s)?);
        }
        // The re-seed set's distance from the baseline is the floor of each measure.
        let floor = |f: &dyn Fn(&EmbeddedSet) -> Result<f64>| -> Result<Option<f64>> {
            sets.reseed.as_ref().map(f).transpose()
        };
        // Pairing first: a folder that does not pair up is a wrong argument, whatever else.
        let pa = paired(v, a)?;
        let fd = frechet_distance(&v.embeddings, &a.embeddings)?;
        let mut m = Measure::scalar("fad.variant_vs_against", fd).with_note(format!(
            "Fréchet distance of CLAP audio embeddings, {} vs {} clips (biased when n < dim {})",
            v.embeddings.len(),
            a.embeddings.len(),
            clap.dim()
        ));
        if let Some(f) = floor(&|s| frechet_distance(&s.embeddings, &a.embeddings))? {
            m = m.with_baseline(Baseline::scalar(f));
        }
        r.push(m);
        let d = drift_each(&v.embeddings, &pa)?;
        let mut m = Measure::from_items("drift.variant_vs_against", d)?
            .with_note("1 − cos between the CLAP audio embeddings of same-named clips");
        if let Some(rs) = &sets.reseed {
            let pr = paired(rs, a)?;
            m = m.with_baseline(Baseline::from_items(drift_each(&rs.embeddings, &pr)?)?);
        }
        r.push(m);
    }
    if let Some(rs) = &sets.reseed {
        if let Some(s) = scores(clap, rs, prompts)? {
            r.push(Measure::from_items("clap_score.reseed", s)?);
        }
    }
    Ok(r)
}
