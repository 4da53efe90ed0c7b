//! Scratch folders for tests that remove themselves, also when the test fails.
//!
//! [`TempDir::new`] creates a fresh, empty folder `$TMPDIR/aria-<name>-<pid>-<n>`; dropping the
//! guard removes it with everything under it. Drop runs while a failing test unwinds, so a test
//! leaves nothing behind whether it passes or not. Set `ARIA_KEEP_TEST_FILES` (to anything but
//! empty or `0`) to keep the folders instead: each kept path is printed to stderr so that a
//! failing test's files can be inspected.
//!
//! [`SharedTempDir`] is for one folder that several tests of a binary use on purpose (a tiny
//! model built once): it hands out reference-counted guards, so the folder is removed when the
//! last test using it finishes and built again if a later test asks for it.
//!
//! The guards hold plain paths (no aria types), so any crate may use them in its tests.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The environment variable that keeps scratch folders after their guards drop.
pub const KEEP_ENV: &str = "ARIA_KEEP_TEST_FILES";

/// Folders made by this process so far (the `<n>` of their names).
static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Whether [`KEEP_ENV`] asks to keep scratch folders.
fn keep_requested() -> bool {
    std::env::var_os(KEEP_ENV).is_some_and(|v| !v.is_empty() && v != OsStr::new("0"))
}

/// A scratch folder, removed with everything under it when dropped.
///
/// ```
/// use aria_testing::TempDir;
///
/// let dir = TempDir::new("doc-demo");
/// std::fs::write(dir.join("a.txt"), "hello").unwrap();
/// assert!(dir.path().join("a.txt").is_file());
/// let path = dir.path().to_path_buf();
/// drop(dir);
/// # if std::env::var_os("ARIA_KEEP_TEST_FILES").is_none() {
/// assert!(!path.exists()); // gone, unless ARIA_KEEP_TEST_FILES is set
/// # }
/// # let _ = std::fs::remove_dir_all(&path);
/// ```
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Create the fresh, empty folder `$TMPDIR/aria-<name>-<pid>-<n>` (`n` counts the folders
    /// made by this process). Panics when it cannot be created: it is meant for tests only.
    pub fn new(name: &str) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("aria-{name}-{}-{n}", std::process::id()));
        // A folder left by an earlier process with the same pid would not be empty.
        if path.exists() {
            if let Err(e) = std::fs::remove_dir_all(&path) {
                panic!("cannot clear stale scratch folder {}: {e}", path.display());
            }
        }
        if let Err(e) = std::fs::create_dir_all(&path) {
            panic!("cannot create scratch folder {}: {e}", path.display());
        }
        Self { path }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the folder (nothing is created).
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if keep_requested() {
            eprintln!("{KEEP_ENV}: kept {}", self.path.display());
            return;
        }
        // Best effort: a folder that cannot be removed must not turn a pass into a panic.
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("cannot remove scratch folder {}: {e}", self.path.display());
            }
        }
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// For `Command::env`, `Command::arg` and the like.
impl AsRef<OsStr> for TempDir {
    fn as_ref(&self) -> &OsStr {
        self.path.as_os_str()
    }
}

/// One scratch folder shared by the tests of a binary, built on first use and removed when the
/// last guard handed out drops (a `static` never drops, so it holds only a weak reference).
///
/// ```
/// use aria_testing::SharedTempDir;
///
/// static MODEL: SharedTempDir = SharedTempDir::new("doc-shared");
///
/// let a = MODEL.get(|dir| std::fs::write(dir.join("model.json"), "{}").unwrap());
/// let b = MODEL.get(|_| unreachable!("built once while a guard is alive"));
/// assert_eq!(a.path(), b.path());
/// let path = a.path().to_path_buf();
/// drop((a, b));
/// # if std::env::var_os("ARIA_KEEP_TEST_FILES").is_none() {
/// assert!(!path.exists());
/// # }
/// # let _ = std::fs::remove_dir_all(&path);
/// ```
#[derive(Debug)]
pub struct SharedTempDir {
    name: &'static str,
    slot: Mutex<Weak<TempDir>>,
}

impl SharedTempDir {
    /// A shared folder named like [`TempDir::new`]`(name)`, not yet created.
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            slot: Mutex::new(Weak::new()),
        }
    }

    /// The folder, created and filled by `build` unless a guard from an earlier call is still
    /// alive. Concurrent callers wait for one `build`; a `build` that panics leaves no folder.
    pub fn get(&self, build: impl FnOnce(&Path)) -> Arc<TempDir> {
        // A test that panicked while building poisons the lock; the slot is still consistent.
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(dir) = slot.upgrade() {
            return dir;
        }
        let dir = TempDir::new(self.name);
        build(dir.path());
        let dir = Arc::new(dir);
        *slot = Arc::downgrade(&dir);
        dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_empty_unique_and_removed() {
        let a = TempDir::new("unit");
        let b = TempDir::new("unit");
        assert_ne!(a.path(), b.path());
        assert!(a.is_dir() && std::fs::read_dir(&a).map(|d| d.count()).ok() == Some(0));
        let name = a.file_name().and_then(|n| n.to_str()).map(str::to_owned);
        let pid = std::process::id();
        assert!(name.is_some_and(|n| n.starts_with(&format!("aria-unit-{pid}-"))));
        std::fs::create_dir_all(a.join("x/y")).ok();
        std::fs::write(a.join("x/y/z.bin"), [1u8; 8]).ok();
        let (pa, pb) = (a.path().to_path_buf(), b.path().to_path_buf());
        drop(a);
        drop(b);
        if !keep_requested() {
            assert!(!pa.exists() && !pb.exists());
        }
    }

    #[test]
    fn removed_when_a_test_panics() {
        let mut seen = None;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let d = TempDir::new("unit-panic");
            seen = Some(d.path().to_path_buf());
            panic!("failing test");
        }));
        assert!(r.is_err());
        let p = seen.unwrap_or_default();
        assert!(p.starts_with(std::env::temp_dir()));
        if !keep_requested() {
            assert!(!p.exists());
        }
    }

    #[test]
    fn shared_is_built_once_per_generation() {
        static S: SharedTempDir = SharedTempDir::new("unit-shared");
        let mut builds = 0;
        let a = S.get(|d| {
            builds += 1;
            std::fs::write(d.join("m"), b"1").ok();
        });
        let b = S.get(|_| builds += 1);
        assert_eq!(builds, 1);
        assert!(b.join("m").is_file());
        let first = a.path().to_path_buf();
        drop((a, b));
        if !keep_requested() {
            assert!(!first.exists());
        }
        let c = S.get(|_| builds += 1);
        assert_eq!(builds, 2);
        assert_ne!(c.path(), first);
    }
}
