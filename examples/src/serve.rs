//! `aria serve`: the model resident behind an HTTP API and a web page (`aria-serve`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use aria::{Error, LoadOptions, Result};
use aria_serve::{ModelSource, ServeConfig, StoreSpec};
use clap::Args;

use crate::Ctx;

/// `aria serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Model folder or name ("demo-tiny": the random-weight demo model).
    #[arg(long, short, default_value = "demo-tiny")]
    pub model: String,
    /// Address to listen on; anything but loopback needs --token.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Bearer token the API requires (default: the ARIA_SERVE_TOKEN environment variable).
    #[arg(long)]
    pub token: Option<String>,
    /// Admin token: requests carrying it see and cancel every client's jobs (default: the
    /// ARIA_SERVE_ADMIN_TOKEN environment variable; none: each client sees only its own).
    #[arg(long)]
    pub admin_token: Option<String>,
    /// Most queued jobs (beyond: 429 with Retry-After).
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Most jobs run together as one batch.
    #[arg(long, default_value_t = 4)]
    pub max_batch: usize,
    /// Job store: a SQLite file or a postgres:// URL (default: jobs.sqlite in --results).
    #[arg(long, value_name = "PATH|URL")]
    pub store: Option<String>,
    /// Results directory (WAV files and uploads), shared by the workers of one host.
    #[arg(long, default_value = "aria-results")]
    pub results: PathBuf,
    /// Folder of allow-listed LoRA files.
    #[arg(long)]
    pub lora_dir: Option<PathBuf>,
    /// Folder of allow-listed steering direction files.
    #[arg(long)]
    pub steer_dir: Option<PathBuf>,
    /// Refuse uploaded direction files (only --steer-dir ones).
    #[arg(long)]
    pub no_steer_uploads: bool,
    /// Warm-start cache store (a folder, .sqlite file or URL); enables `warm_start`.
    #[arg(long, value_name = "DIR|URL")]
    pub cache: Option<String>,
    /// Most entries the warm-start cache keeps; beyond it the least important go (0: no bound).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub cache_max_entries: usize,
    /// Most bytes of audio and latents the cache keeps, e.g. 4G, 512M (0: no bound).
    #[arg(long, value_name = "SIZE", default_value = "4G", value_parser = crate::cache::parse_size)]
    pub cache_max_bytes: u64,
    /// Steps a cache hit skips: `gated` (the skip gater decides per request and learns from
    /// each result; its state is kept in the cache's store, shared by the workers) or a
    /// fixed fraction of the steps.
    #[arg(long, default_value = "gated", value_parser = crate::cache::parse_skip)]
    pub cache_skip: crate::cache::SkipArg,
    /// Do not run the cache's refinement worker (by default it regenerates reused entries of
    /// low quality, best of 3, in at most 10 % of the time, requests first).
    #[arg(long)]
    pub cache_no_refine: bool,
    /// This worker's id in the store (default: one unique to the process, HOST-PID-RANDOM).
    /// A start with an id another live process holds is refused; restarted with the same id
    /// after a crash, a process takes back the jobs it held, each attempt counting.
    #[arg(long)]
    pub worker_id: Option<String>,
    /// Seconds running jobs may take to finish on shutdown before they are handed back.
    #[arg(long, default_value_t = 30.0)]
    pub drain: f64,
    /// Lease of a claimed job in seconds (renewed every third of it): how long the other
    /// workers wait before retrying the jobs of a worker that died.
    #[arg(long, default_value_t = 30.0)]
    pub lease: f64,
    /// How many times a job is claimed before a lost lease or a crash fails it.
    #[arg(long, default_value_t = 3)]
    pub max_attempts: u32,
    /// Seconds results are kept after their job ends (then deleted, their jobs marked
    /// expired); 0 keeps them forever. Uploads are deleted as soon as their job ends.
    #[arg(long, default_value_t = 86400.0)]
    pub result_retention: f64,
    /// A pause after every sampler step, in milliseconds: makes the model look slower than
    /// it is (rehearsals with the demo model).
    #[arg(long, hide = true)]
    pub throttle_ms: Option<u64>,
}

/// `aria serve`.
pub fn run(a: &ServeArgs, cx: &Ctx) -> Result<()> {
    let serve_err = |e: aria_serve::ServeError| Error::Config(format!("serve: {e}"));
    let model = if a.model == "demo-tiny" {
        ModelSource::DemoTiny(crate::demo_dir())
    } else {
        ModelSource::Spec(a.model.clone())
    };
    let store = match &a.store {
        Some(s) => StoreSpec::Custom(aria_serve::jobs::open_store(s).map_err(serve_err)?),
        None => StoreSpec::Sqlite(a.results.join("jobs.sqlite")),
    };
    if !(a.drain.is_finite() && a.drain >= 0.0) {
        return Err(Error::Input(format!(
            "--drain must be >= 0, got {}",
            a.drain
        )));
    }
    if !(a.lease.is_finite() && a.lease >= 0.3) {
        return Err(Error::Input(format!(
            "--lease must be at least 0.3 s, got {}",
            a.lease
        )));
    }
    if !(a.result_retention.is_finite() && a.result_retention >= 0.0) {
        return Err(Error::Input(format!(
            "--result-retention must be >= 0, got {}",
            a.result_retention
        )));
    }
    if a.max_attempts == 0 {
        return Err(Error::Input("--max-attempts must be at least 1".into()));
    }
    let cfg = ServeConfig {
        model,
        load: LoadOptions {
            device: cx.device,
            backend: cx.backend.clone(),
            threads: cx.threads,
            ..Default::default()
        },
        bind: a.bind,
        token: a
            .token
            .clone()
            .or_else(|| std::env::var("ARIA_SERVE_TOKEN").ok()),
        admin_token: a
            .admin_token
            .clone()
            .or_else(|| std::env::var("ARIA_SERVE_ADMIN_TOKEN").ok()),
        queue_max: a.queue,
        max_batch: a.max_batch,
        store,
        results_dir: a.results.clone(),
        lora_dir: a.lora_dir.clone(),
        steer_dir: a.steer_dir.clone(),
        steer_uploads: !a.no_steer_uploads,
        cache: a.cache.clone(),
        cache_capacity: crate::cache::capacity(a.cache_max_entries, a.cache_max_bytes),
        cache_skip: a.cache_skip.policy(),
        cache_refine: (!a.cache_no_refine).then(aria_cache::manager::RefineConfig::default),
        drain_timeout: Duration::from_secs_f64(a.drain),
        lease: Duration::from_secs_f64(a.lease),
        max_attempts: a.max_attempts,
        throttle: a.throttle_ms.map(Duration::from_millis),
        handle_signals: true,
        result_retention: Duration::from_secs_f64(a.result_retention),
        ..ServeConfig::demo(&a.results)
    };
    let cfg = match &a.worker_id {
        Some(id) => ServeConfig {
            worker_id: id.clone(),
            ..cfg
        },
        None => cfg,
    };
    let quiet = cx.ui.quiet;
    let json = cx.json;
    aria_serve::serve_blocking(cfg, |addr| {
        if json {
            crate::print_json(&serde_json::json!({ "command": "serve", "addr": addr.to_string() }));
        } else if !quiet {
            eprintln!("aria serve: listening on http://{addr} (Ctrl-C stops)");
        }
    })
    .map_err(serve_err)
}
