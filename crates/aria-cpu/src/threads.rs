//! Thread-count control for the CPU kernels (rayon underneath).
//!
//! Every op runs inside [`install`]: on the pool of the innermost [`Pool::enter`] on the calling
//! thread, else on the pool built by [`set_num_threads`], else on rayon's global pool (sized by
//! `RAYON_NUM_THREADS` or the number of CPUs). Kernels
//! split work only between independent outputs and never split a reduction, so results are
//! bit-identical whatever the thread count.
//!
//! A [`Pool`] is the same thing as a value: a pipeline (or one call) carries its own thread
//! count without touching the process-wide setting (`aria::LoadOptions::threads` does this);
//! [`set_num_threads`] remains for programs that want one setting for everything.
//!
//! ```
//! let pool = aria_cpu::threads::Pool::new(3)?;
//! assert_eq!(pool.install(aria_cpu::threads::num_threads), 3);
//! # Ok::<(), aria_tensor::CoreError>(())
//! ```
//!
//! ```
//! aria_cpu::threads::set_num_threads(2)?;
//! assert_eq!(aria_cpu::threads::num_threads(), 2);
//! aria_cpu::threads::set_num_threads(0)?; // back to the default pool
//! # Ok::<(), aria_tensor::CoreError>(())
//! ```

use std::cell::RefCell;
use std::sync::{Arc, RwLock};

use aria_tensor::{CoreError, Result};

static POOL: RwLock<Option<Arc<rayon::ThreadPool>>> = RwLock::new(None);

thread_local! {
    /// The pool of the innermost [`Pool::enter`] on this thread (it wins over [`POOL`]).
    static ENTERED: RefCell<Option<Arc<rayon::ThreadPool>>> = const { RefCell::new(None) };
}

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
    ENTERED
        .with(|e| e.borrow().clone())
        .or_else(|| POOL.read().unwrap_or_else(|e| e.into_inner()).clone())
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
    let f = with_callers_isa(f);
    match current_pool() {
        Some(p) => p.install(f),
        None => rayon::scope(|_| f()),
    }
}

/// `f`, run wherever, with the ISA path selected on the calling thread
/// ([`aria_cpu::with_isa`]): the CPU kernels read the selection when they start, and `f` may
/// start on a pool worker.
fn with_callers_isa<R>(f: impl FnOnce() -> R + Send) -> impl FnOnce() -> R + Send {
    let isa = crate::current();
    move || crate::with_isa(isa, f)
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
    Ok(p.install(with_callers_isa(f)))
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
        self.pool.install(with_callers_isa(f))
    }

    /// Run `f` on the calling thread with every op it starts there on this pool (each op's
    /// work is handed to the pool by [`install`]). Unlike [`Pool::install`], `f` need not be
    /// `Send`: a pipeline wraps its calls, which borrow non-`Send` callbacks, in this. Nested
    /// calls use the innermost pool; the previous one comes back when `f` returns or unwinds.
    ///
    /// ```
    /// let pool = aria_cpu::threads::Pool::new(2)?;
    /// let rc = std::rc::Rc::new(()); // not Send
    /// let n = pool.enter(|| {
    ///     let _keep = &rc;
    ///     aria_cpu::threads::num_threads()
    /// });
    /// assert_eq!(n, 2);
    /// # Ok::<(), aria_tensor::CoreError>(())
    /// ```
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Arc<rayon::ThreadPool>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let prev = self.0.take();
                ENTERED.with(|e| *e.borrow_mut() = prev);
            }
        }
        let prev = ENTERED.with(|e| e.borrow_mut().replace(self.pool.clone()));
        let _restore = Restore(prev);
        f()
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

    #[test]
    fn enter_wins_over_the_process_pool_and_is_restored() {
        let outer = Pool::new(3).unwrap();
        let inner = Pool::new(1).unwrap();
        outer.enter(|| {
            assert_eq!(num_threads(), 3);
            assert_eq!(inner.enter(num_threads), 1);
            assert_eq!(install(rayon::current_num_threads), 3);
        });
        // Restored even when the closure unwinds.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            inner.enter(|| panic!("boom"))
        }));
        assert!(r.is_err());
        assert!(ENTERED.with(|e| e.borrow().is_none()));
    }

    /// The ISA path chosen on the calling thread goes with the work to the pool worker that runs
    /// it (the CPU bodies read it there when they start), whichever way the pool is reached.
    #[test]
    fn the_callers_isa_choice_reaches_the_worker() {
        use crate as cpu;
        use crate::Isa;
        let pool = Pool::new(2).unwrap();
        for isa in Isa::available() {
            cpu::with_isa(isa, || {
                assert_eq!(install(cpu::current), isa);
                assert_eq!(pool.install(cpu::current), isa);
                assert_eq!(with_threads(2, cpu::current).unwrap(), isa);
                // On the worker, not on the caller.
                assert!(install(|| rayon::current_thread_index().is_some()));
            });
        }
        // Restored afterwards, on the worker too.
        let best = cpu::current();
        assert_eq!(install(cpu::current), best);
    }
}
