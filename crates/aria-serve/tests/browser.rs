//! The web page in a real browser: headless Chromium, driven over the DevTools protocol, fills
//! the form of a server running the tiny demo model, submits, waits for the audio player and the
//! pictures, checks the DOM (a finished job, a refused request's error, a cancelled job) and
//! saves a screenshot under the target directory.
//!
//! Without a Chromium (`chromium`, or `ARIA_CHROMIUM`) the test is skipped with a message,
//! except under `CI=true`, where that fails. `.ci/chromium.sh` installs Debian's `chromium`.

#[path = "support/cdp.rs"]
mod cdp;

use std::path::PathBuf;
use std::time::Duration;

use cdp::Browser;

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// A JS expression: the text of `selector`'s first match, or null.
fn text_of(selector: &str) -> String {
    let sel = serde_json::to_string(selector).unwrap_or_default();
    format!(
        "(() => {{ const e = document.querySelector({sel}); return e ? e.textContent : null; }})()"
    )
}

#[test]
fn the_page_generates_plays_and_cancels_in_chromium() {
    let Some(exe) = cdp::find_chromium() else {
        assert!(
            !ci(),
            "CI=true but no Chromium found (install it with .ci/chromium.sh or set ARIA_CHROMIUM)"
        );
        aria_testing::skip("no chromium on PATH (set ARIA_CHROMIUM or run .ci/chromium.sh)");
        return;
    };

    let dir = aria_testing::TempDir::new("serve-browser");
    // A direction folder with one entry, so that /info lists it and the page shows a slider.
    let steer_dir = dir.join("directions");
    std::fs::create_dir_all(&steer_dir).expect("direction folder");
    std::fs::write(steer_dir.join("brightness.safetensors"), b"").expect("direction entry");
    let mut cfg = aria_serve::ServeConfig::demo(&dir);
    cfg.steer_dir = Some(steer_dir);
    // Steps slow enough that a long job can be cancelled while it runs.
    cfg.throttle = Some(Duration::from_millis(40));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let server = rt
        .block_on(aria_serve::start(cfg))
        .expect("the demo server starts");
    let base = format!("http://{}", server.addr());
    eprintln!("server at {base}, browser {}", exe.display());

    let mut b = Browser::launch(&exe, 1280, 900).expect("chromium starts");
    b.navigate(&format!("{base}/")).expect("the page loads");

    // /info arrived: the model line is filled and the direction has its slider.
    let model = b
        .wait_for(
            &format!(
                "(() => {{ const t = {}; return t && t !== 'connecting…' ? t : null; }})()",
                text_of("#model-info")
            ),
            Duration::from_secs(20),
        )
        .expect("the model line");
    eprintln!("model line: {model}");
    assert!(!model.to_string().contains("unavailable"), "{model}");
    b.wait_for(
        "!document.getElementById('steer-section').hidden && \
         document.querySelector('#steer-list input[type=range]').dataset.name === 'brightness'",
        Duration::from_secs(5),
    )
    .expect("a steering slider for the listed direction");

    // A job, typed and clicked as a user would.
    b.type_into("#prompt", "warm analog synth pad, slow attack")
        .expect("prompt");
    b.type_into("#negative_prompt", "noise")
        .expect("negative prompt");
    b.type_into("#seconds", "1.5").expect("seconds");
    b.type_into("#steps", "4").expect("steps");
    b.type_into("#cfg", "3").expect("cfg");
    b.type_into("#seed", "42").expect("seed");
    b.click("#generate").expect("submit");
    let done = b
        .wait_for(
            "(() => { const j = document.querySelector('.job[data-state=done]'); if (!j) return null; \
             const a = j.querySelector('audio'); \
             const imgs = [...j.querySelectorAll('img')]; \
             if (!(a.readyState >= 1 && imgs.length === 2 && imgs.every(i => i.complete && i.naturalWidth > 0))) return null; \
             return { id: j.dataset.id, src: a.getAttribute('src'), duration: a.duration, \
               badge: j.querySelector('.job-state').textContent, \
               wave: [imgs[0].naturalWidth, imgs[0].naturalHeight], spec: [imgs[1].naturalWidth, imgs[1].naturalHeight], \
               jobs: document.querySelectorAll('.job').length, \
               cancelHidden: j.querySelector('.job-cancel').hidden }; })()",
            Duration::from_secs(300),
        )
        .unwrap_or_else(|e| {
            let state = b.eval("document.getElementById('jobs').innerText").unwrap_or_default();
            panic!("the job did not finish with a player and pictures: {e}; jobs: {state}")
        });
    eprintln!("finished job: {done}");
    let id = done["id"].as_str().expect("job id").to_string();
    // The page names its per-browser client key on links the browser follows itself.
    let src = done["src"].as_str().expect("audio src");
    let key = src
        .strip_prefix(&format!("/v1/jobs/{id}/audio?client="))
        .unwrap_or_else(|| panic!("audio src {src}"));
    assert!(
        key.len() >= 16 && key.chars().all(|c| c.is_ascii_alphanumeric()),
        "client key {key}"
    );
    assert_eq!(done["badge"], "done");
    assert_eq!(done["jobs"], 1);
    assert_eq!(done["cancelHidden"], true);
    let secs = done["duration"].as_f64().expect("a duration");
    assert!(
        (secs - 1.5).abs() < 0.1,
        "the player reports {secs} s, asked 1.5 s"
    );
    assert!(done["wave"][0].as_u64() > Some(0) && done["spec"][1].as_u64() > Some(0));
    // The request went as typed.
    let req = b
        .eval(&format!(
            "fetch('/v1/jobs/{id}', {{ headers: {{ 'X-Aria-Client': '{key}' }} }}).then(r => r.json()).then(j => j.request)"
        ))
        .expect("the job's request");
    // Another client (no key) does not see it.
    let other = b
        .eval(&format!("fetch('/v1/jobs/{id}').then(r => r.status)"))
        .expect("a status");
    assert_eq!(other, 404, "a job is visible to its submitter only");
    assert_eq!(req["seed"], 42);
    assert_eq!(req["steps"], 4);
    assert_eq!(req["negative_prompt"], "noise");

    // A refused request: the error is shown, naming the limit.
    b.type_into("#seconds", "9999").expect("seconds");
    b.click("#generate").expect("submit");
    let err = b
        .wait_for(
            "(() => { const e = document.getElementById('error'); return e.hidden ? null : e.textContent; })()",
            Duration::from_secs(20),
        )
        .expect("an error message");
    eprintln!("error shown: {err}");
    assert!(err.to_string().contains("seconds"), "{err}");
    assert_eq!(
        b.eval("document.querySelectorAll('.job').length").ok(),
        Some(1.into())
    );

    // A long job, cancelled from its button.
    b.type_into("#seconds", "1").expect("seconds");
    b.type_into("#steps", "150").expect("steps");
    b.type_into("#prompt", "a very long job to cancel")
        .expect("prompt");
    b.click("#generate").expect("submit");
    b.wait_for(
        "document.getElementById('error').hidden && document.querySelectorAll('.job').length === 2",
        Duration::from_secs(20),
    )
    .expect("a second job");
    b.wait_for(
        "(() => { const j = document.querySelector('.job'); return ['queued', 'running'].includes(j.dataset.state) \
         && !j.querySelector('.job-cancel').hidden; })()",
        Duration::from_secs(20),
    )
    .expect("the second job is active");
    b.click(".job .job-cancel").expect("cancel");
    let cancelled = b
        .wait_for(
            "(() => { const j = document.querySelector('.job'); return j.dataset.state === 'cancelled' ? j.dataset.id : null; })()",
            Duration::from_secs(60),
        )
        .expect("the second job is cancelled");
    eprintln!("cancelled job: {cancelled}");

    // Leave the first job's card on top for the screenshot, and the form as a user left it.
    b.type_into("#prompt", "warm analog synth pad, slow attack")
        .expect("prompt");
    b.eval("document.querySelector('.job[data-state=cancelled] .job-remove').click()")
        .expect("dismiss");
    std::thread::sleep(Duration::from_millis(300));
    let shot = b.screenshot().expect("a screenshot");
    assert!(shot.starts_with(b"\x89PNG"), "the screenshot is a PNG");
    let path = target_dir().join("aria-serve-browser.png");
    std::fs::create_dir_all(target_dir()).expect("target dir");
    std::fs::write(&path, &shot).expect("saving the screenshot");
    eprintln!("screenshot: {} ({} bytes)", path.display(), shot.len());

    assert!(b.page_errors.is_empty(), "page errors: {:?}", b.page_errors);
    drop(b);
    rt.block_on(server.shutdown()).expect("clean shutdown");
}
