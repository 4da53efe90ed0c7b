//! Starting and stopping a server: [`start`] and [`RunningServer`].

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioTimer;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::sync::{watch, Semaphore};

use crate::config::{ModelSource, ServeConfig, StoreSpec};
use crate::jobs::registry::Registration;
use crate::jobs::retention::{self, Sweeper};
use crate::jobs::sqlite::SqliteStore;
use crate::jobs::JobStore;
use crate::state::{list_dir, ModelInfo, Shared, Wake};
use crate::worker::Worker;
use crate::{Result, ServeError};

/// A server that is running: its address and the means to stop it. Dropping it starts a
/// shutdown without waiting for it.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    done: Option<tokio::task::JoinHandle<Result<()>>>,
}

/// Stops a server from elsewhere (a signal handler, another task); clones share it.
#[derive(Debug, Clone)]
pub struct ShutdownHandle(watch::Sender<bool>);

impl ShutdownHandle {
    /// Begin the graceful shutdown (idempotent).
    pub fn shutdown(&self) {
        let _ = self.0.send(true);
    }
}

impl RunningServer {
    /// The address the server listens on (the port chosen when bound to port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A handle that stops the server.
    pub fn handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.stop.clone())
    }

    /// Stop gracefully and wait until done: no new connections or jobs; the running batch may
    /// finish within `drain_timeout`, after which it is stopped and its jobs go back to the
    /// queue; queued jobs stay in the store for the next start.
    pub async fn shutdown(mut self) -> Result<()> {
        let _ = self.stop.send(true);
        self.join().await
    }

    /// Wait until the server stops (after a signal or a [`ShutdownHandle::shutdown`]).
    pub async fn wait(mut self) -> Result<()> {
        self.join().await
    }

    async fn join(&mut self) -> Result<()> {
        match self.done.take() {
            Some(h) => h
                .await
                .map_err(|e| ServeError::Config(format!("the server task failed: {e}")))?,
            None => Ok(()),
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn load_model(cfg: &ServeConfig) -> Result<aria::Pipeline> {
    let files = match &cfg.model {
        ModelSource::DemoTiny(dir) => {
            if !aria::discover::missing_files(dir).is_empty() {
                aria::synth::write_model(
                    dir,
                    aria::synth::Preset::Tiny,
                    aria_core::DType::F32,
                    0,
                    &mut |_, _| {},
                )?;
            }
            aria::discover::resolve_model(
                &dir.display().to_string(),
                &aria::discover::SearchPaths::default(),
            )?
        }
        ModelSource::Spec(s) => {
            aria::discover::resolve_model(s, &aria::discover::SearchPaths::from_env())?
        }
    };
    let mut opts = cfg.load.clone();
    opts.loras.clear();
    Ok(aria::Pipeline::load(&files, &opts)?)
}

fn model_info(cfg: &ServeConfig, pipe: &aria::Pipeline) -> ModelInfo {
    let d = pipe.sampling_defaults();
    ModelInfo {
        name: pipe
            .files()
            .dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        precision: pipe.quant_report().precision.to_string(),
        device: cfg.load.device.name().to_string(),
        sample_rate: pipe.sample_rate(),
        channels: pipe.autoencoder().config().audio_channels,
        max_seconds: pipe.max_seconds(),
        default_steps: d.steps,
        default_cfg: d.cfg_scale,
        default_sampler: d.sampler.name().to_string(),
    }
}

fn check_config(cfg: &ServeConfig) -> Result<()> {
    let ip = cfg.bind.ip();
    let has_token = cfg.token.as_deref().is_some_and(|t| !t.trim().is_empty());
    if !ip.is_loopback() && !has_token {
        return Err(ServeError::Config(format!(
            "binding {} (not a loopback address) needs a bearer token: pass --token \
             (or set ServeConfig::token)",
            cfg.bind
        )));
    }
    if cfg.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
        return Err(ServeError::Config("token: must not be empty".into()));
    }
    if cfg
        .admin_token
        .as_deref()
        .is_some_and(|t| t.trim().is_empty())
    {
        return Err(ServeError::Config("admin_token: must not be empty".into()));
    }
    if cfg.queue_max == 0 || cfg.max_batch == 0 {
        return Err(ServeError::Config(
            "queue_max and max_batch must be at least 1".into(),
        ));
    }
    if cfg.worker_id.is_empty() {
        return Err(ServeError::Config("worker_id: must not be empty".into()));
    }
    if cfg.lease < Duration::from_millis(300) {
        return Err(ServeError::Config("lease: must be at least 0.3 s".into()));
    }
    Ok(())
}

/// Start a server: check the configuration (a bearer token is required off loopback), open
/// the job store and the results directory, register the worker id (refused while another
/// live process holds it), settle the jobs this id held when its process stopped without a
/// clean shutdown (the attempt counts), sweep the results directory
/// ([`crate::jobs::retention`]), load the model, start the worker thread, bind, and serve.
/// Returns once the socket is bound; the server runs on the current tokio runtime until
/// [`RunningServer::shutdown`], a [`ShutdownHandle`], `SIGINT`/`SIGTERM` (with
/// [`ServeConfig::handle_signals`]) or the drop of the [`RunningServer`].
///
/// Errors: [`ServeError::Config`] for an unusable configuration, [`ServeError::Store`],
/// [`ServeError::Io`] (results directory, bind), [`ServeError::Aria`] (model load).
pub async fn start(cfg: ServeConfig) -> Result<RunningServer> {
    check_config(&cfg)?;
    let results = cfg.results_dir.clone();
    std::fs::create_dir_all(results.join("inputs"))
        .map_err(|e| ServeError::io(format!("results directory {}", results.display()), e))?;
    let cfg2 = cfg.clone();
    let (store, pipe, registration) = tokio::task::spawn_blocking(move || -> Result<_> {
        let store: Arc<dyn JobStore> = match &cfg2.store {
            StoreSpec::Sqlite(p) => Arc::new(SqliteStore::open(p)?),
            StoreSpec::Custom(s) => s.clone(),
        };
        // Refused while another live process holds the id. Jobs still held under it were
        // left by a process that stopped without a clean shutdown: their attempt counts.
        let (registration, _) = Registration::acquire(store.clone(), &cfg2.worker_id, cfg2.lease)?;
        let settled = store.release_crashed(&cfg2.worker_id, cfg2.max_attempts)?;
        for id in settled.failed.iter().chain(&settled.cancelled) {
            retention::remove_uploads(&cfg2.results_dir, id);
        }
        retention::sweep(store.as_ref(), &cfg2.results_dir, cfg2.result_retention)?;
        let pipe = load_model(&cfg2)?;
        Ok((store, pipe, registration))
    })
    .await
    .map_err(|e| ServeError::Config(format!("startup task failed: {e}")))??;
    let listener = tokio::net::TcpListener::bind(cfg.bind)
        .await
        .map_err(|e| ServeError::io(format!("binding {}", cfg.bind), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::io("reading the bound address", e))?;
    let shared = Arc::new(Shared {
        store,
        model: model_info(&cfg, &pipe),
        allow_listed: (
            list_dir(cfg.lora_dir.as_deref()),
            list_dir(cfg.steer_dir.as_deref()),
        ),
        cfg,
        live: Default::default(),
        metrics: Default::default(),
        wake: Wake::default(),
        stop: Default::default(),
        abort: aria::CancelToken::new(),
    });
    // The worker is built on its own thread (the warm-start cache stays there).
    let (ready_tx, ready_rx) =
        std::sync::mpsc::channel::<Result<Arc<std::sync::RwLock<aria::Pipeline>>>>();
    let s2 = shared.clone();
    let sweeper = Sweeper::start(
        shared.store.clone(),
        &shared.cfg.results_dir,
        shared.cfg.result_retention,
    )?;
    let worker = std::thread::Builder::new()
        .name("aria-serve-model".into())
        .spawn(move || {
            // Held until the worker has handed back its jobs.
            let _held = (registration, sweeper);
            match Worker::new(s2, pipe) {
                Ok(w) => {
                    let _ = ready_tx.send(Ok(w.pipeline()));
                    w.run();
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
        })
        .map_err(|e| ServeError::io("starting the model thread", e))?;
    let model = tokio::task::spawn_blocking(move || ready_rx.recv())
        .await
        .map_err(|e| ServeError::Config(format!("startup task failed: {e}")))?
        .map_err(|_| ServeError::Config("the model thread stopped while starting".into()))??;
    let (stop_tx, stop_rx) = watch::channel(false);
    if shared.cfg.handle_signals {
        let tx = stop_tx.clone();
        tokio::spawn(async move {
            wait_signal().await;
            let _ = tx.send(true);
        });
    }
    let hub = Arc::new(crate::api::StreamHub::new(model));
    let done = tokio::spawn(serve(listener, shared, hub, worker, stop_rx));
    Ok(RunningServer {
        addr,
        stop: stop_tx,
        done: Some(done),
    })
}

async fn wait_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    hub: Arc<crate::api::StreamHub>,
    worker: std::thread::JoinHandle<()>,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let app = crate::api::router(shared.clone(), hub);
    let graceful = GracefulShutdown::new();
    let max = shared.cfg.max_connections.max(1);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(shared.cfg.limits.header_timeout)
        .keep_alive(true);
    let listen = Arc::new(crate::listen::Listen {
        app,
        builder,
        slots: Arc::new(Semaphore::new(max)),
        header_timeout: shared.cfg.limits.header_timeout,
        stop: stop.clone(),
    });
    let waiting = Arc::new(Semaphore::new(crate::listen::max_pending(max)));
    loop {
        let conn = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            c = listener.accept() => c,
        };
        let Ok((tcp, _peer)) = conn else {
            // Out of descriptors and the like: back off a little.
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let Ok(wait) = waiting.clone().try_acquire_owned() else {
            crate::listen::refuse_now(tcp, max);
            continue;
        };
        let task = crate::listen::connection(listen.clone(), tcp, wait, graceful.watcher(), max);
        tokio::spawn(task);
    }
    drop(listener);
    // Refuse new jobs; let the running batch finish within the drain timeout.
    shared.stop.store(true, Ordering::SeqCst);
    shared.wake.notify();
    let drain = shared.cfg.drain_timeout;
    let t0 = Instant::now();
    while !worker.is_finished() && t0.elapsed() < drain {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shared.abort.cancel();
    let _ = tokio::task::spawn_blocking(move || worker.join()).await;
    // Open connections (audio streams of finished jobs, slow clients) get a moment.
    let _ = tokio::time::timeout(Duration::from_secs(2), graceful.shutdown()).await;
    Ok(())
}

/// Run a server on a runtime of its own until it stops (a signal with
/// [`ServeConfig::handle_signals`]); `on_ready` is told the bound address once it listens.
/// For programs without a tokio runtime (the `aria serve` command).
pub fn serve_blocking(cfg: ServeConfig, on_ready: impl FnOnce(SocketAddr)) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("aria-serve-http")
        .build()
        .map_err(|e| ServeError::io("starting the async runtime", e))?;
    rt.block_on(async move {
        let server = start(cfg).await?;
        on_ready(server.addr());
        server.wait().await
    })
}
