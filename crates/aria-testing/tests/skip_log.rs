//! A skip is recorded in the skip log with the test's name and reason, and fails under
//! `CI=true` unless the machine lacks the hardware. One test: it sets process-wide variables.

use std::panic::catch_unwind;

use aria_testing::skip::{skip, skip_for_hardware, SKIP_LOG_ENV};

#[test]
fn skips_are_logged_and_fail_under_ci_unless_for_hardware() {
    let dir = aria_testing::TempDir::new("skip-log");
    let log = dir.path().join("skips.log");
    let ci = std::env::var_os("CI");
    std::env::set_var(SKIP_LOG_ENV, &log);

    std::env::remove_var("CI");
    skip("no data\there");
    skip_for_hardware("no AMX");
    std::env::set_var("CI", "true");
    let failed = catch_unwind(|| skip("no data under CI")).is_err();
    skip_for_hardware("no AVX-512F");

    std::env::remove_var(SKIP_LOG_ENV);
    match ci {
        Some(v) => std::env::set_var("CI", v),
        None => std::env::remove_var("CI"),
    }
    assert!(failed, "a skip under CI=true did not fail");
    let name = "skip_log::skips_are_logged_and_fail_under_ci_unless_for_hardware";
    let text = std::fs::read_to_string(&log).expect("skip log written");
    let want = format!("{name}\tno data here\n{name}\tno AMX\n{name}\tno AVX-512F\n");
    assert_eq!(text, want);
}
