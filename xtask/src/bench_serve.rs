//! `cargo xtask bench serve`: a resident `aria-serve` against one `aria generate` process per
//! job, side by side, on the same model and the same jobs.
//!
//! Three ways to run `--jobs` jobs of `--seconds` s at `--steps` steps (distinct prompts and
//! seeds, one batch key):
//! * **cli**: one `aria generate` process per job, one after another (load, generate, write);
//! * **resident, serial**: the server, each job submitted once the previous one's audio is in;
//! * **resident, batched**: the server, all jobs submitted at once (`--max-batch` per batch).
//!
//! Reported: wall seconds, seconds per job, and the ratio to the CLI. The resident figures
//! include the HTTP round trips and fetching each WAV; the server's model load is reported
//! apart (it is paid once per process). With `--rounds R` the three modes run R times,
//! alternating (so a change of machine load hits them alike), and the median and the best
//! round of each are reported, with the load average before and after.
//!
//! Options: `--model DIR` (default: the tiny random-weight model, written once under
//! `target/bench-models/tiny`), `--jobs N` (default 8), `--seconds S` (default 2), `--steps N`
//! (default 8), `--max-batch N` (default 4), `--threads N` (CPU threads of the server and of
//! every CLI process; default: every core), `--rounds R` (default 1), `--cli PATH` (default:
//! the `aria` binary next to this program, built with `cargo build --release -p aria-cli` when
//! missing).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use aria::synth::{self, Preset};
use serde_json::{json, Value};

struct Opts {
    model: Option<PathBuf>,
    jobs: usize,
    seconds: f64,
    steps: usize,
    max_batch: usize,
    threads: Option<usize>,
    rounds: usize,
    cli: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        model: None,
        jobs: 8,
        seconds: 2.0,
        steps: 8,
        max_batch: 4,
        threads: None,
        rounds: 1,
        cli: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |n: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{n} needs a value"))
        };
        let int = |n: &str, v: String| {
            v.parse::<usize>()
                .ok()
                .filter(|&x| x > 0)
                .ok_or_else(|| format!("{n} needs a positive integer, got `{v}`"))
        };
        match a.as_str() {
            "--model" => o.model = Some(PathBuf::from(val("--model")?)),
            "--cli" => o.cli = Some(PathBuf::from(val("--cli")?)),
            "--jobs" => o.jobs = int("--jobs", val("--jobs")?)?,
            "--steps" => o.steps = int("--steps", val("--steps")?)?,
            "--max-batch" => o.max_batch = int("--max-batch", val("--max-batch")?)?,
            "--threads" => o.threads = Some(int("--threads", val("--threads")?)?),
            "--rounds" => o.rounds = int("--rounds", val("--rounds")?)?,
            "--seconds" => {
                let v = val("--seconds")?;
                o.seconds = v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| format!("--seconds needs a positive number, got `{v}`"))?
            }
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    Ok(o)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

fn model_dir(o: &Opts) -> Result<PathBuf, String> {
    if let Some(m) = &o.model {
        return Ok(m.clone());
    }
    let d = target_dir().join("bench-models/tiny");
    if !aria::discover::missing_files(&d).is_empty() {
        eprintln!("writing the random tiny model to {}", d.display());
        synth::write_model(&d, Preset::Tiny, aria_core::DType::F32, 0, &mut |_, _| {})
            .map_err(|e| e.to_string())?;
    }
    Ok(d)
}

/// The `aria` program: `--cli`, else next to this one (built when missing).
fn cli_path(o: &Opts) -> Result<PathBuf, String> {
    if let Some(p) = &o.cli {
        return Ok(p.clone());
    }
    let exe = std::env::current_exe().map_err(|e| format!("locating this program: {e}"))?;
    let dir = exe.parent().ok_or("this program has no folder")?;
    let cli = dir.join(format!("aria{}", std::env::consts::EXE_SUFFIX));
    if !cli.is_file() {
        let release = dir.file_name().is_some_and(|n| n == "release");
        eprintln!("building the aria program ({})", cli.display());
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(["build", "-p", "aria-cli"]);
        if release {
            c.arg("--release");
        }
        let st = c.status().map_err(|e| format!("running cargo: {e}"))?;
        if !st.success() || !cli.is_file() {
            return Err(format!(
                "could not build {} (pass --cli PATH)",
                cli.display()
            ));
        }
    }
    Ok(cli)
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` has them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

fn prompt(i: usize) -> String {
    format!("bench job {i}: warm analog synth pad with slow attack")
}

/// One HTTP/1.1 exchange on a fresh connection; the status and the body.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Vec<u8>), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(|e| e.to_string())?;
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if body.is_some() {
        req += &format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            payload.len()
        );
    }
    req += "\r\n";
    req += &payload;
    s.write_all(req.as_bytes())
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("{method} {path}: no HTTP response"))?;
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{method} {path}: bad status line"))?;
    let mut body = raw[end + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = Vec::new();
        let mut rest = &body[..];
        while let Some(nl) = rest.windows(2).position(|w| w == b"\r\n") {
            let n = std::str::from_utf8(&rest[..nl])
                .ok()
                .and_then(|h| usize::from_str_radix(h.split(';').next()?.trim(), 16).ok())
                .unwrap_or(0);
            if n == 0 || rest.len() < nl + 2 + n {
                break;
            }
            out.extend_from_slice(&rest[nl + 2..nl + 2 + n]);
            rest = &rest[(nl + 4 + n).min(rest.len())..];
        }
        body = out;
    }
    Ok((status, body))
}

fn submit(addr: SocketAddr, o: &Opts, i: usize) -> Result<String, String> {
    let req = json!({
        "prompt": prompt(i),
        "seconds": o.seconds,
        "steps": o.steps,
        "seed": i,
    });
    let (st, body) = http(addr, "POST", "/v1/generate", Some(&req))?;
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if st != 202 {
        return Err(format!("submit {i}: HTTP {st}: {v}"));
    }
    v["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("submit {i}: no id in {v}"))
}

/// Wait for `id` to finish and fetch its WAV; the WAV's size.
fn finish(addr: SocketAddr, id: &str) -> Result<usize, String> {
    loop {
        let (_, body) = http(addr, "GET", &format!("/v1/jobs/{id}"), None)?;
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        match v["state"].as_str() {
            Some("done") => break,
            Some("failed" | "cancelled") => return Err(format!("job {id}: {v}")),
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    let (st, wav) = http(addr, "GET", &format!("/v1/jobs/{id}/audio"), None)?;
    if st != 200 || !wav.starts_with(b"RIFF") {
        return Err(format!("job {id}: audio HTTP {st}, {} bytes", wav.len()));
    }
    Ok(wav.len())
}

fn run_cli(o: &Opts, cli: &Path, model: &Path, out: &Path) -> Result<f64, String> {
    let t0 = Instant::now();
    for i in 0..o.jobs {
        let wav = out.join(format!("cli_{i}.wav"));
        let mut c = Command::new(cli);
        if let Some(t) = o.threads {
            c.args(["--threads", &t.to_string()]);
        }
        let r = c
            .arg("--quiet")
            .arg("generate")
            .arg("--model")
            .arg(model)
            .args(["--prompt", &prompt(i)])
            .args(["--seconds", &o.seconds.to_string()])
            .args(["--steps", &o.steps.to_string()])
            .args(["--seed", &i.to_string()])
            .arg("-o")
            .arg(&wav)
            .output()
            .map_err(|e| format!("running {}: {e}", cli.display()))?;
        if !r.status.success() || !wav.is_file() {
            return Err(format!(
                "aria generate (job {i}) failed: {}",
                String::from_utf8_lossy(&r.stderr).trim()
            ));
        }
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// Start the server on a thread of its own; its address and the model-load time.
fn start_server(o: &Opts, model: &Path, dir: &Path) -> Result<(SocketAddr, f64), String> {
    let mut cfg = aria_serve::ServeConfig::demo(dir);
    cfg.model = aria_serve::ModelSource::Spec(model.display().to_string());
    cfg.max_batch = o.max_batch;
    cfg.queue_max = o.jobs.max(64);
    let (tx, rx) = std::sync::mpsc::channel();
    let t0 = Instant::now();
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        let r = aria_serve::serve_blocking(cfg, |addr| {
            let _ = tx2.send(Ok(addr));
        });
        if let Err(e) = r {
            let _ = tx.send(Err(e.to_string()));
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(600))
        .map_err(|_| "the server did not start within 600 s".to_string())??;
    Ok((addr, t0.elapsed().as_secs_f64()))
}

/// `cargo xtask bench serve`.
pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let model = model_dir(&o)?;
    let cli = cli_path(&o)?;
    let work = target_dir().join("bench-serve");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    println!("{}", crate::bench_official::machine_line());
    println!(
        "model {}; {} jobs of {} s at {} steps; max batch {}",
        model.display(),
        o.jobs,
        o.seconds,
        o.steps,
        o.max_batch
    );

    if let Some(t) = o.threads {
        // The server runs in this process: its kernels use this pool.
        aria_core::threads::set_num_threads(t).map_err(|e| e.to_string())?;
    }
    let load_before = load_average();
    let (addr, ready_s) = start_server(&o, &model, &work.join("serve"))?;
    // One warm-up job: first-touch costs (page faults, lazy plans) are paid once per process.
    finish(addr, &submit(addr, &o, o.jobs)?)?;

    let mut walls: [Vec<f64>; 3] = Default::default();
    for round in 0..o.rounds {
        walls[0].push(run_cli(&o, &cli, &model, &work)?);

        let t0 = Instant::now();
        for i in 0..o.jobs {
            finish(addr, &submit(addr, &o, i)?)?;
        }
        walls[1].push(t0.elapsed().as_secs_f64());

        let t0 = Instant::now();
        let ids = (0..o.jobs)
            .map(|i| submit(addr, &o, i))
            .collect::<Result<Vec<_>, _>>()?;
        for id in &ids {
            finish(addr, id)?;
        }
        walls[2].push(t0.elapsed().as_secs_f64());
        eprintln!(
            "round {}: cli {:.2} s, resident serial {:.2} s, resident batched {:.2} s",
            round + 1,
            walls[0][round],
            walls[1][round],
            walls[2][round]
        );
    }
    let load_after = load_average();

    let n = o.jobs as f64;
    let med = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let cli_med = med(&walls[0]);
    println!();
    println!(
        "threads {}; {} round(s), modes alternating; load average {load_before} before, \
         {load_after} after",
        o.threads.map_or("all".to_string(), |t| t.to_string()),
        o.rounds
    );
    println!();
    println!("| mode | median wall s | median s / job | best s / job | vs cli (median) |");
    println!("|---|---:|---:|---:|---:|");
    for (label, w) in [
        ("cli: one `aria generate` per job", &walls[0]),
        ("resident, serial", &walls[1]),
        ("resident, batched", &walls[2]),
    ] {
        let m = med(w);
        println!(
            "| {label} | {m:.2} | {:.3} | {:.3} | {:.2}x |",
            m / n,
            best(w) / n,
            cli_med / m
        );
    }
    println!();
    println!("server model load (once per process): {ready_s:.2} s");
    Ok(())
}
