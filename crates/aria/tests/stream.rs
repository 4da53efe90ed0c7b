//! Open-ended streaming ([`aria::StreamGenerator`]) on the tiny random-weight fixture model:
//! exact chunk lengths, flat memory over a long run, continuous joins, prompt changes.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use aria::discover::{resolve_model, SearchPaths};
use aria::stream::{ContextFrom, Fade};
use aria::{
    Error, GenerateRequest, LoadOptions, Pipeline, SeededNoise, StreamConfig, StreamGenerator,
};
use aria_testing::fixtures::fixture;

fn pipe() -> Option<Pipeline> {
    let dir = fixture("sa3-tiny")?;
    let files = resolve_model(&dir.display().to_string(), &SearchPaths::default()).unwrap();
    Some(Pipeline::load(&files, &LoadOptions::default()).unwrap())
}

fn config() -> StreamConfig {
    StreamConfig {
        chunk_sec: 0.25,
        context_sec: 0.2,
        fade_sec: 0.02,
        fade: Fade::Adaptive,
        padding_sec: 0.1,
        context_from: ContextFrom::Latents,
        align_sec: 0.002,
    }
}

fn request(prompt: &str) -> GenerateRequest {
    let mut r = GenerateRequest::new(prompt, 1.0);
    r.steps = 3;
    r
}

/// Resident set size of this process in KiB.
fn vm_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn percentile(v: &mut [f32], q: f64) -> f32 {
    v.sort_by(f32::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

#[test]
fn long_stream_has_exact_chunks_flat_memory_and_continuous_joins() {
    check_stream(config(), 24);
}

#[test]
fn audio_context_streams_continuously_too() {
    let cfg = StreamConfig {
        context_from: ContextFrom::Audio,
        ..config()
    };
    check_stream(cfg, 8);
}

/// The two streams measure this process's resident memory: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn check_stream(cfg: StreamConfig, n_chunks: usize) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(p) = pipe() else { return };
    let latent = cfg.context_from == ContextFrom::Latents;
    let mut s = StreamGenerator::new(&p, request("slow evolving pad"), cfg).unwrap();
    let sr = p.sample_rate() as usize;
    // The latent context rounds chunk and context up to whole latent frames.
    let ratio = s.latent_frame_samples();
    assert_eq!(ratio, p.geometry().downsampling_ratio);
    let frames = |n: usize| if latent { n.div_ceil(ratio) * ratio } else { n };
    let c = frames((cfg.chunk_sec * sr as f64).round() as usize);
    let ctx = frames((cfg.context_sec * sr as f64).round() as usize);
    let max_lag = (cfg.align_sec * sr as f64).round() as i64;
    let fade = (cfg.fade_sec * sr as f64).round() as usize;
    assert_eq!(s.chunk_samples(), c);
    let ch = s.channels();
    let mut noise = SeededNoise::new(5);
    let mut stream: Vec<Vec<f32>> = vec![Vec::new(); ch];
    let mut rss_warm = None;
    let mut retained = None;
    let mut stages = [0f64; 4];
    let t0 = Instant::now();
    for k in 0..n_chunks {
        let out = s.next_chunk(&mut noise).unwrap();
        assert_eq!(out.index, k);
        assert_eq!(out.start, (k * c) as u64);
        assert_eq!(out.audio.shape(), [ch, c], "chunk {k}");
        let t = &out.timings;
        stages[0] += t.text.as_secs_f64();
        stages[1] += t.encode.as_secs_f64();
        stages[2] += t.steps.iter().map(|d| d.as_secs_f64()).sum::<f64>();
        stages[3] += t.decode.as_secs_f64();
        let v = out.audio.to_vec_f32().unwrap();
        assert!(v.iter().all(|x| x.is_finite()));
        for (i, st) in stream.iter_mut().enumerate() {
            st.extend_from_slice(&v[i * c..(i + 1) * c]);
        }
        // With the latent context nothing is encoded; with the audio context every window
        // after the first encodes its context.
        let encoded = out.timings.encode.as_secs_f64() > 0.0;
        assert_eq!(encoded, !latent && k > 0, "chunk {k}: encoded {encoded}");
        assert!(out.lag.abs() <= max_lag, "chunk {k}: lag {}", out.lag);
        // What the generator keeps: exactly the context tail (audio and latents), every chunk.
        let kept_latents = if latent {
            p.latent_channels() * (ctx / ratio)
        } else {
            0
        };
        assert_eq!(s.retained_floats(), ch * ctx + kept_latents, "chunk {k}");
        let r = *retained.get_or_insert(s.retained_floats());
        assert_eq!(r, s.retained_floats());
        if k == 3 {
            rss_warm = vm_rss_kib();
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    assert_eq!(s.chunks_emitted(), n_chunks);
    let audio_sec = (n_chunks * c) as f64 / sr as f64;
    eprintln!(
        "stream: {n_chunks} chunks, {audio_sec:.2} s of audio in {wall:.2} s (RTF {:.3})",
        wall / audio_sec
    );
    eprintln!(
        "stream: text {:.2} s, encode {:.2} s, steps {:.2} s, decode {:.2} s",
        stages[0], stages[1], stages[2], stages[3]
    );
    if let (Some(a), Some(b)) = (rss_warm, vm_rss_kib()) {
        let growth = b.saturating_sub(a);
        eprintln!("stream: VmRSS after warm-up {a} KiB, at the end {b} KiB (+{growth} KiB)");
        // The test's own copy of the stream is ~2 MiB; the generator must add nothing per chunk.
        assert!(growth < 64 * 1024, "VmRSS grew by {growth} KiB");
    }

    // Joins: window k's new audio starts at k·C + context; the fade ends there.
    let joins: Vec<usize> = (1..n_chunks).map(|k| k * c + ctx).collect();
    let near_join = |n: usize| joins.iter().any(|&j| n + fade + 2 >= j && n <= j + 2);
    for (i, st) in stream.iter().enumerate() {
        let jumps: Vec<f32> = (1..st.len()).map(|n| (st[n] - st[n - 1]).abs()).collect();
        let mut inside: Vec<f32> = (1..st.len())
            .filter(|&n| !near_join(n))
            .map(|n| jumps[n - 1])
            .collect();
        let p999 = percentile(&mut inside, 0.999);
        let p9999 = percentile(&mut inside, 0.9999);
        let p50 = percentile(&mut inside, 0.5);
        // The jumps where the fade starts and ends (two samples each), and every jump inside
        // the fades as a distribution of its own.
        let mut at_edges: Vec<f32> = Vec::new();
        let mut in_fades: Vec<f32> = Vec::new();
        for &j in &joins {
            for n in [j - fade, j - fade + 1, j, j + 1] {
                at_edges.push(jumps[n - 1]);
            }
            in_fades.extend((j - fade..j + 2).map(|n| jumps[n - 1]));
        }
        assert!(at_edges.iter().all(|x| x.is_finite()), "non-finite jump");
        let worst = at_edges.iter().copied().fold(0f32, f32::max);
        let mean_edges =
            at_edges.iter().map(|&x| f64::from(x)).sum::<f64>() / at_edges.len() as f64;
        // The decoder's output has structure periodic in the latent frame, and every join sits
        // at the same phase of it (chunk and context are whole frames): compare the edges with
        // the jumps at the same phases away from the joins.
        let phases: Vec<usize> = joins
            .iter()
            .flat_map(|&j| [j - fade, j - fade + 1, j, j + 1])
            .map(|n| n % ratio)
            .collect();
        let same_phase: Vec<f64> = (1..st.len())
            .filter(|&n| !near_join(n) && phases.contains(&(n % ratio)))
            .map(|n| f64::from(jumps[n - 1]))
            .collect();
        let mean_inside = same_phase.iter().sum::<f64>() / same_phase.len() as f64;
        let fade_p999 = percentile(&mut in_fades, 0.999);
        eprintln!(
            "stream channel {i}: in-chunk jump p50 {p50:.5}, p99.9 {p999:.5}, p99.99 {p9999:.5}, \
             mean at the edges' phases {mean_inside:.5}; at the fade edges ({} joins): mean \
             {mean_edges:.5}, worst {worst:.5}; p99.9 inside fades {fade_p999:.5}",
            joins.len()
        );
        assert!(
            fade_p999 <= 1.25 * p999,
            "jumps in the fades {fade_p999} vs {p999}"
        );
        // A click would stand out of the clip's own jump distribution: the edges' mean stays
        // near the clip's mean, and their worst (of ~100 samples) under its p99.99.
        assert!(
            mean_edges <= 1.25 * mean_inside,
            "mean join jump {mean_edges} vs {mean_inside}"
        );
        assert!(worst <= p9999, "join jump {worst} above p99.99 {p9999}");
    }
}

#[test]
fn prompt_change_takes_effect_at_the_next_chunk() {
    let Some(p) = pipe() else { return };
    let run = |change: bool| {
        let mut s = StreamGenerator::new(&p, request("slow evolving pad"), config()).unwrap();
        let mut noise = SeededNoise::new(11);
        let mut out = Vec::new();
        for k in 0..3 {
            if change && k == 2 {
                s.set_prompt("fast bright percussion");
            }
            out.push(
                s.next_chunk(&mut noise)
                    .unwrap()
                    .audio
                    .to_vec_f32()
                    .unwrap(),
            );
        }
        out
    };
    let same = run(false);
    let changed = run(true);
    assert_eq!(same[0], changed[0]);
    assert_eq!(same[1], changed[1]);
    // The previous chunk's tail is kept until the fade, so the new prompt shows after it.
    assert_ne!(same[2], changed[2]);
}

#[test]
fn bad_lengths_are_refused() {
    let Some(p) = pipe() else { return };
    let bad = |f: &dyn Fn(&mut StreamConfig)| {
        let mut c = config();
        f(&mut c);
        let e = StreamGenerator::new(&p, request("x"), c).unwrap_err();
        assert!(matches!(e, Error::Input(_)), "{e}");
        e.to_string()
    };
    assert!(bad(&|c| c.fade_sec = 0.3).contains("fade"));
    assert!(bad(&|c| c.fade_sec = 0.0).contains("fade"));
    assert!(bad(&|c| c.chunk_sec = 0.0).contains("chunk"));
    assert!(bad(&|c| c.chunk_sec = f64::NAN).contains("chunk"));
    assert!(bad(&|c| c.chunk_sec = 30.0).contains("maximum"));
}
