//! A worker id's registration in the store, held while a server runs: registered at start
//! (refused while another live process holds the id), renewed every third of the lease by a
//! thread of its own, removed on a clean stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{new_job_id, JobStore};
use crate::{Result, ServeError};

/// A live registration of a worker id; dropping it stops the renewals and removes it.
pub struct Registration {
    store: Arc<dyn JobStore>,
    worker: String,
    instance: String,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("worker", &self.worker)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl Registration {
    /// Register `worker` for this process ([`JobStore::register_worker`], refused while
    /// another live process holds the id) and renew it every third of `lease` until dropped.
    /// The flag is `true` when an expired registration (a process that died) was taken over.
    pub fn acquire(
        store: Arc<dyn JobStore>,
        worker: &str,
        lease: Duration,
    ) -> Result<(Registration, bool)> {
        let instance = new_job_id();
        let took_over = store.register_worker(worker, &instance, lease)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, st, w, inst) = (
            stop.clone(),
            store.clone(),
            worker.to_string(),
            instance.clone(),
        );
        let thread = std::thread::Builder::new()
            .name("aria-serve-registry".into())
            .spawn(move || {
                let every = (lease / 3).max(Duration::from_millis(50));
                let mut last = Instant::now();
                while !flag.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50).min(every));
                    if last.elapsed() >= every {
                        last = Instant::now();
                        // A failed renewal is retried at the next tick; the jobs' own leases
                        // guard them meanwhile.
                        let _ = st.renew_worker(&w, &inst, lease);
                    }
                }
            });
        let mut reg = Registration {
            store,
            worker: worker.to_string(),
            instance,
            stop,
            thread: None,
        };
        // On an error `reg` is dropped, which removes the registration.
        reg.thread =
            Some(thread.map_err(|e| ServeError::io("starting the worker registry thread", e))?);
        Ok((reg, took_over))
    }

    /// The registered worker id.
    pub fn worker(&self) -> &str {
        &self.worker
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = self.store.unregister_worker(&self.worker, &self.instance);
    }
}
