//! The CLAP measures of `cargo xtask bench quant --clap DIR`: each precision's clips against
//! f32's, beside the re-seed floor (f32 clips of other seeds), with `aria_clap::eval`.

use aria::pipeline::{AudioOutput, RunOptions};
use aria::{GenerateRequest, Pipeline, SeededNoise};
use aria_clap::eval::{self, EmbeddedSet, Prompts, Sets};
use aria_clap::measure::normalize_loudness;
use aria_clap::Clap;

fn e<E: std::fmt::Display>(x: E) -> String {
    x.to_string()
}

/// Planar stereo at 44.1 kHz → one CLAP vector (at −14 LUFS).
fn embed(clap: &Clap, planar: &[f32]) -> Result<Vec<f32>, String> {
    let n = planar.len() / 2;
    let mut inter = vec![0f32; 2 * n];
    for i in 0..n {
        inter[2 * i] = planar[i];
        inter[2 * i + 1] = planar[n + i];
    }
    let x = normalize_loudness(&inter, 2, 44_100, -14.0).unwrap_or(inter);
    clap.embed_audio(&x, 2, 44_100).map_err(e)
}

fn set(clap: &Clap, names: &[String], clips: &[Vec<f32>]) -> Result<EmbeddedSet, String> {
    Ok(EmbeddedSet {
        dir: "generated".into(),
        names: names.to_vec(),
        embeddings: clips
            .iter()
            .map(|c| embed(clap, c))
            .collect::<Result<_, _>>()?,
        loudness: vec![None; clips.len()],
    })
}

/// Print the CLAP table: `clips` holds, per precision (f32 first), the decoded audio of each
/// prompt × seed in the order the quality run made them.
#[allow(clippy::too_many_arguments)]
pub fn report(
    spec: &str,
    f32p: &Pipeline,
    prompts: usize,
    seeds: usize,
    seconds: f64,
    steps: usize,
    texts: &[&str],
    clips: &[(String, Vec<Vec<f32>>)],
) -> Result<(), String> {
    let dir = aria_clap::discover::find(Some(spec)).map_err(e)?;
    let clap = Clap::load(&dir).map_err(e)?;
    let names: Vec<String> = (0..prompts)
        .flat_map(|p| (0..seeds).map(move |s| format!("p{p}s{s}")))
        .collect();
    let per_file = names
        .iter()
        .map(|n| {
            let p: usize = n[1..n.find('s').unwrap_or(2)].parse().unwrap_or(0);
            (n.clone(), texts[p].to_string())
        })
        .collect();
    let prompts_map = Prompts::PerFile(per_file);
    // The floor: f32 with other seeds, same prompts.
    let mut reseed = Vec::new();
    for p in texts.iter().take(prompts) {
        for s in 0..seeds {
            let mut req = GenerateRequest::new(*p, seconds);
            req.steps = steps;
            req.duration_padding_sec = 1.0;
            let opts = RunOptions {
                audio: AudioOutput::Skip,
                ..Default::default()
            };
            let out = f32p
                .run(&req, &mut SeededNoise::new(1000 + s as u64), opts)
                .map_err(e)?;
            let audio = f32p
                .decode_latents(&out.latents, &mut SeededNoise::new(7))
                .map_err(e)?;
            reseed.push(audio.to_vec_f32().map_err(e)?);
        }
    }
    let against = set(&clap, &names, &clips[0].1)?;
    let reseed = set(&clap, &names, &reseed)?;
    println!(
        "\n## CLAP ({}): each precision's clips against f32's; floor = f32 with other seeds against f32",
        dir.display()
    );
    println!(
        "| precision | CLAP score | drift from f32 | drift floor | FAD from f32 | FAD floor |"
    );
    println!("|---|---|---|---|---|---|");
    for (name, c) in clips {
        let sets = Sets {
            variant: set(&clap, &names, c)?,
            against: Some(against.clone()),
            reseed: Some(reseed.clone()),
        };
        let r = eval::evaluate(&clap, &sets, &prompts_map).map_err(e)?;
        let get = |n: &str| r.measures.iter().find(|m| m.name == n);
        let score = get("clap_score.variant").map_or(f64::NAN, |m| m.value);
        let (d, df) = get("drift.variant_vs_against").map_or((f64::NAN, f64::NAN), |m| {
            (m.value, m.baseline.as_ref().map_or(f64::NAN, |b| b.value))
        });
        let (f, ff) = get("fad.variant_vs_against").map_or((f64::NAN, f64::NAN), |m| {
            (m.value, m.baseline.as_ref().map_or(f64::NAN, |b| b.value))
        });
        println!("| {name} | {score:.4} | {d:.2e} | {df:.2e} | {f:.3e} | {ff:.3e} |");
    }
    println!(
        "({} clips per precision; with fewer clips than CLAP's {} dimensions the FAD is biased upward; with random CLAP weights the scores say nothing about sound)",
        names.len(),
        clap.dim()
    );
    Ok(())
}
