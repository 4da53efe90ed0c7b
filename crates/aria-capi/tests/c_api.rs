//! The C API from its callers' side: the checked-in header is what cbindgen makes of the code;
//! a C program (built with AddressSanitizer and UBSan where the compiler has them) loads a model,
//! generates into a buffer and through callbacks, cancels, gets errors for bad input and frees
//! everything; the Python `ctypes` example of the docs writes a WAV that Python's `wave` reads.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use aria_testing::{SharedTempDir, TempDir};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The tiny random model, written once for the tests of this binary.
fn model() -> Arc<TempDir> {
    static DIR: SharedTempDir = SharedTempDir::new("capi-model");
    DIR.get(|d| {
        aria::synth::write_model(
            d,
            aria::synth::Preset::Tiny,
            aria_core::DType::F32,
            3,
            &mut |_, _| {},
        )
        .unwrap();
    })
}

/// The folder cargo wrote the shared library to (`target/<profile>`), found from this test's
/// own path (`target/<profile>/deps/c_api-…`).
fn lib_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?.to_path_buf();
    let names = ["libaria_capi.so", "libaria_capi.dylib", "aria_capi.dll"];
    names.iter().any(|n| dir.join(n).exists()).then_some(dir)
}

/// [`lib_dir`], or a skip naming `test` and what to run first.
fn lib_or_skip(test: &str) -> Option<PathBuf> {
    let dir = lib_dir();
    if dir.is_none() {
        aria_testing::skip(format!(
            "c_api::{test}: the shared library is not built \
             (`cargo build -p aria-capi` first; .ci/test does)"
        ));
    }
    dir
}

fn lib_file(dir: &Path) -> PathBuf {
    ["libaria_capi.so", "libaria_capi.dylib", "aria_capi.dll"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.exists())
        .unwrap()
}

#[test]
fn header_is_current() {
    let dir = crate_dir();
    let cfg = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(cfg)
        .generate()
        .unwrap()
        .write(&mut out);
    let header = dir.join("include/aria.h");
    if std::env::var("ARIA_UPDATE_HEADER").as_deref() == Ok("1") {
        std::fs::write(&header, &out).unwrap();
    }
    let have = std::fs::read(&header).unwrap_or_default();
    assert!(
        have == out,
        "include/aria.h differs from what cbindgen makes of src/lib.rs; regenerate it with \
         ARIA_UPDATE_HEADER=1 cargo test -p aria-capi --test c_api header_is_current"
    );
}

/// Whether `cc` builds a program with `flags`.
fn cc_accepts(flags: &[&str], tmp: &Path) -> bool {
    let src = tmp.join("probe.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    Command::new("cc")
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(tmp.join("probe"))
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn c_program_runs_clean() {
    let Some(lib) = lib_or_skip("c_program_runs_clean") else {
        return;
    };
    let tmp = TempDir::new("capi-c");
    if !cc_accepts(&[], &tmp) {
        aria_testing::skip("c_api::c_program_runs_clean: no C compiler (`cc`)");
        return;
    }
    let mut flags = vec!["-std=c11", "-Wall", "-Wextra", "-Werror", "-g"];
    let sanitize = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"];
    let sanitized = cc_accepts(&sanitize, &tmp);
    if sanitized {
        flags.extend(sanitize);
    } else {
        aria_testing::skip("c_api: the C compiler has no AddressSanitizer; the program runs plain");
    }
    let exe = tmp.join("smoke");
    let st = Command::new("cc")
        .args(&flags)
        .arg(crate_dir().join("tests/c/smoke.c"))
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg("-L")
        .arg(&lib)
        .arg("-laria_capi")
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(st.success(), "compiling tests/c/smoke.c failed");
    let m = model();
    let out = Command::new(&exe)
        .arg(m.as_os_str())
        .env("LD_LIBRARY_PATH", &lib)
        .env("DYLD_LIBRARY_PATH", &lib)
        .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
        .output()
        .unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "smoke failed:\n{so}\n{se}");
    assert!(so.contains("ok"), "{so}\n{se}");
    assert!(
        !se.contains("ERROR: AddressSanitizer") && !se.contains("runtime error"),
        "{se}"
    );
}

#[test]
fn python_ctypes_example_runs() {
    let Some(lib) = lib_or_skip("python_ctypes_example_runs") else {
        return;
    };
    let tmp = TempDir::new("capi-py");
    let Ok(py) = Command::new("python3").arg("--version").output() else {
        aria_testing::skip("c_api::python_ctypes_example_runs: no python3");
        return;
    };
    assert!(py.status.success());
    let m = model();
    let wav = tmp.join("out.wav");
    let out = Command::new("python3")
        .arg(crate_dir().join("python/aria_ctypes.py"))
        .arg(lib_file(&lib))
        .arg(m.as_os_str())
        .arg(&wav)
        .output()
        .unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{so}\n{se}");
    let r = hound::WavReader::open(&wav).unwrap();
    assert_eq!(r.spec().channels, 2);
    assert_eq!(r.spec().sample_rate, 44100);
    assert_eq!(r.duration(), 22050);
}
