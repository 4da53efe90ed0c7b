//! Thread-count control for the CPU kernels (rayon underneath).
//!
//! Every op runs inside [`install`]: on the pool built by [`set_num_threads`], or on rayon's
//! global pool (sized by `RAYON_NUM_THREADS` or the number of CPUs) when none was set. Kernels
//! split work only between independent outputs and never split a reduction, so results are
//! bit-identical whatever the thread count.
//!
//! A [`Pool`] is the same thing as a value: a pipeline (or one call) can carry its own thread
//! count without touching the process-wide setting.
//!
//! ```
//! let pool = aria_core::threads::Pool::new(3)?;
//! assert_eq!(pool.install(aria_core::threads::num_threads), 3);
//! # Ok::<(), aria_core::CoreError>(())
//! ```
//!
//! ```
//! aria_core::threads::set_num_threads(2)?;
//! assert_eq!(aria_core::threads::num_threads(), 2);
//! aria_core::threads::set_num_threads(0)?; // back to the default pool
//! # Ok::<(), aria_core::CoreError>(())
//! ```

use std::sync::{Arc, RwLock};

use crate::{CoreError, Result};

static POOL: RwLock<Option<Arc<rayon::ThreadPool>>> = RwLock::new(None);

/// Run CPU ops on `n` threads from now on (`0` = rayon's global pool, the default).
///
/// Ops already running keep the pool they started on.
pub fn set_num_threads(n: usize) -> Result<()> {
    let pool = if n == 0 {
        None
    } else {
        let p = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("aria-cpu-{i}"))
            .build()
            .map_err(|e| CoreError::Invalid(format!("cannot start {n} CPU threads: {e}")))?;
        Some(Arc::new(p))
    };
    *POOL.write().unwrap_or_else(|e| e.into_inner()) = pool;
    Ok(())
}

/// The number of threads ops run on.
pub fn num_threads() -> usize {
    match current_pool() {
        Some(p) => p.current_num_threads(),
        None => rayon::current_num_threads(),
    }
}

fn current_pool() -> Option<Arc<rayon::ThreadPool>> {
    POOL.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Run `f` on the configured pool (rayon's parallel iterators inside use that pool). Called from
/// a thread of any rayon pool (an op inside another op, or inside [`with_threads`]), `f` runs
/// there, on that pool.
///
/// With no pool configured, `f` runs on a worker of rayon's global pool while the calling thread
/// waits, just as [`rayon::ThreadPool::install`] does for a built pool. Running `f` on the
/// calling thread instead would hand every parallel loop inside it over to the workers one by
/// one, and the serial parts between them would run on another core than the loops that touch
/// the same data: a one-thread DiT forward measured 25 % slower that way.
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    match current_pool() {
        Some(p) => p.install(f),
        None => rayon::scope(|_| f()),
    }
}

/// Run `f` on a pool of exactly `n` threads built for the call (tests and benchmarks comparing
/// thread counts; `n = 0` uses the configured pool).
pub fn with_threads<R: Send>(n: usize, f: impl FnOnce() -> R + Send) -> Result<R> {
    if n == 0 {
        return Ok(install(f));
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build()
        .map_err(|e| CoreError::Invalid(format!("cannot start {n} CPU threads: {e}")))?;
    Ok(p.install(f))
}

/// A CPU thread pool passed as a value: every op run inside [`Pool::install`] uses it,
/// whatever [`set_num_threads`] says. Cloning is cheap (shared).
#[derive(Clone)]
pub struct Pool {
    pool: Arc<rayon::ThreadPool>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pool({} threads)", self.pool.current_num_threads())
    }
}

impl Pool {
    /// A pool of `n ≥ 1` threads.
    pub fn new(n: usize) -> Result<Pool> {
        if n == 0 {
            return Err(CoreError::Invalid(
                "a thread pool needs at least one thread".into(),
            ));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("aria-cpu-{i}"))
            .build()
            .map_err(|e| CoreError::Invalid(format!("cannot start {n} CPU threads: {e}")))?;
        Ok(Pool {
            pool: Arc::new(pool),
        })
    }

    /// The number of threads.
    pub fn num_threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Run `f` with every op inside it on this pool.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_runs_on_a_pool_worker() {
        // Configured pool or not, the closure runs on a worker thread, never on the caller.
        assert!(rayon::current_thread_index().is_none());
        assert!(install(|| rayon::current_thread_index().is_some()));
        let pool = Pool::new(1).unwrap();
        assert!(pool.install(|| install(|| rayon::current_thread_index() == Some(0))));
    }
}
