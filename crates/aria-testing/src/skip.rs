//! Recording skipped tests, so that a skip never looks like a pass.
//!
//! libtest hides the standard error of passing tests, so a test that returns early because its
//! data, service or hardware is absent would otherwise be indistinguishable from one that
//! checked something. Every such early return goes through [`skip`] (or
//! [`skip_for_hardware`]), which prints `SKIPPED <test>: <reason>` and, when
//! [`SKIP_LOG_ENV`] names a file, appends `<test>\t<reason>` to it; `.ci/test` sets that file
//! and ends with a summary of every skip and its reason.

use std::fmt::Display;
use std::io::Write;

/// The environment variable naming the skip log (one `<test>\t<reason>` line per skip).
pub const SKIP_LOG_ENV: &str = "ARIA_SKIP_LOG";

/// Whether `CI=true`, where every test must run.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The running test's name: the test binary (without cargo's hash suffix) and the test, as
/// `binary::module::test`. libtest runs every test on a thread named after it.
pub fn current_test() -> String {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| match s.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
            _ => s,
        })
        .unwrap_or_else(|| "?".to_owned());
    let thread = std::thread::current();
    format!("{binary}::{}", thread.name().unwrap_or("?"))
}

/// Records that the running test skips (all or part of its checks) for `reason`: prints it and
/// appends it to the skip log. Panics under `CI=true`, where every test must run (tests only).
pub fn skip(reason: impl Display) {
    let reason = reason.to_string();
    assert!(
        !under_ci(),
        "{}: {reason}; required under CI=true",
        current_test()
    );
    record(&reason);
}

/// Records a skip caused by the machine itself (an instruction set, a GPU the machine does not
/// have): like [`skip`], but also under `CI=true` it is only recorded, never a failure.
pub fn skip_for_hardware(reason: impl Display) {
    record(&reason.to_string());
}

fn record(reason: &str) {
    let test = current_test();
    eprintln!("SKIPPED {test}: {reason}");
    let Some(path) = std::env::var_os(SKIP_LOG_ENV).filter(|p| !p.is_empty()) else {
        return;
    };
    let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
    let line = format!("{}\t{}\n", clean(&test), clean(reason));
    // One write of one short line on a file opened for appending: lines from concurrent tests
    // do not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        panic!(
            "cannot append to the skip log {}: {e}",
            path.to_string_lossy()
        );
    }
}
