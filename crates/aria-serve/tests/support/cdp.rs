//! A minimal Chrome DevTools Protocol client: launches a headless Chromium with a throwaway
//! profile, attaches to one page over the browser's WebSocket (flattened sessions), and offers
//! what a page test needs — navigate, evaluate, type, click, wait, screenshot.

use std::io::ErrorKind;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aria_testing::TempDir;
use base64::Engine;
use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

/// What went wrong, in words.
pub type Result<T> = std::result::Result<T, String>;

/// The browser executable: `ARIA_CHROMIUM`, else the first of the usual names on `PATH`.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ARIA_CHROMIUM") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome", "chrome"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// A running headless browser with one attached page.
pub struct Browser {
    child: Child,
    /// Removed after the browser has been killed (fields drop after `Drop::drop`).
    _profile: TempDir,
    ws: WebSocket<TcpStream>,
    next_id: u64,
    session: String,
    width: u32,
    /// Uncaught page exceptions and `console.error` lines seen so far.
    pub page_errors: Vec<String>,
}

impl Browser {
    /// Launch `exe` headless with a `width`×`height` viewport and attach to a blank page.
    pub fn launch(exe: &Path, width: u32, height: u32) -> Result<Browser> {
        let profile = TempDir::new("cdp");
        let child = Command::new(exe)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--mute-audio",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("--window-size={width},{height}"))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", exe.display()))?;
        // Chromium writes the port it chose and the browser endpoint's path to this file.
        let port_file = profile.join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(60);
        let (port, path) = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                let mut lines = text.lines();
                if let (Some(p), Some(path)) = (lines.next(), lines.next()) {
                    if let Ok(port) = p.trim().parse::<u16>() {
                        break (port, path.trim().to_string());
                    }
                }
            }
            if Instant::now() > deadline {
                let mut c = child;
                let _ = c.kill();
                let _ = c.wait();
                return Err("chromium did not open its DevTools port within 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let stream = TcpStream::connect(("127.0.0.1", port))
            .map_err(|e| format!("connecting to DevTools on port {port}: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        let url = format!("ws://127.0.0.1:{port}{path}");
        let (ws, _) = tungstenite::client(url.as_str(), stream)
            .map_err(|e| format!("DevTools handshake: {e}"))?;
        let mut b = Browser {
            child,
            _profile: profile,
            ws,
            next_id: 0,
            session: String::new(),
            width,
            page_errors: Vec::new(),
        };
        let target = b.call_raw(None, "Target.createTarget", json!({ "url": "about:blank" }))?;
        let target_id = target["targetId"]
            .as_str()
            .ok_or("Target.createTarget gave no targetId")?
            .to_string();
        let att = b.call_raw(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
        )?;
        b.session = att["sessionId"]
            .as_str()
            .ok_or("Target.attachToTarget gave no sessionId")?
            .to_string();
        b.call("Page.enable", json!({}))?;
        b.call("Runtime.enable", json!({}))?;
        b.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        )?;
        Ok(b)
    }

    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<u64> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(Message::text(msg.to_string()))
            .map_err(|e| format!("{method}: sending: {e}"))?;
        Ok(id)
    }

    fn note_event(&mut self, v: &Value) {
        match v["method"].as_str() {
            Some("Runtime.exceptionThrown") => {
                let d = &v["params"]["exceptionDetails"];
                let text = d["exception"]["description"]
                    .as_str()
                    .or(d["text"].as_str())
                    .unwrap_or("exception");
                self.page_errors.push(format!("uncaught: {text}"));
            }
            Some("Runtime.consoleAPICalled") if v["params"]["type"] == "error" => {
                let args: Vec<String> = v["params"]["args"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|x| x["value"].to_string().trim_matches('"').to_string())
                            .collect()
                    })
                    .unwrap_or_default();
                self.page_errors
                    .push(format!("console.error: {}", args.join(" ")));
            }
            _ => {}
        }
    }

    fn call_raw(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value> {
        let id = self.send(session, method, params)?;
        loop {
            let msg = match self.ws.read() {
                Ok(m) => m,
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    return Err(format!("{method}: no answer within 60 s"));
                }
                Err(e) => return Err(format!("{method}: reading: {e}")),
            };
            let Message::Text(text) = msg else { continue };
            let v: Value =
                serde_json::from_str(text.as_str()).map_err(|e| format!("{method}: {e}"))?;
            if v["id"].as_u64() == Some(id) {
                if let Some(err) = v.get("error") {
                    return Err(format!("{method}: {err}"));
                }
                return Ok(v["result"].clone());
            }
            self.note_event(&v);
        }
    }

    /// A command on the attached page.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let s = self.session.clone();
        self.call_raw(Some(&s), method, params)
    }

    /// Evaluate `expr` in the page (promises awaited) and return its value.
    pub fn eval(&mut self, expr: &str) -> Result<Value> {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expr, "returnByValue": true, "awaitPromise": true }),
        )?;
        if let Some(ex) = r.get("exceptionDetails") {
            let text = ex["exception"]["description"]
                .as_str()
                .or(ex["text"].as_str())
                .unwrap_or("exception");
            return Err(format!("evaluating `{expr}`: {text}"));
        }
        Ok(r["result"]["value"].clone())
    }

    /// Load `url` and wait until the document is complete.
    pub fn navigate(&mut self, url: &str) -> Result<()> {
        let r = self.call("Page.navigate", json!({ "url": url }))?;
        if let Some(e) = r["errorText"].as_str() {
            return Err(format!("navigating to {url}: {e}"));
        }
        self.wait_for(
            "document.readyState === 'complete'",
            Duration::from_secs(30),
        )?;
        Ok(())
    }

    /// Poll `expr` until it is truthy; its last value comes back.
    pub fn wait_for(&mut self, expr: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(expr)?;
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return Ok(v);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "waited {:.0} s for `{expr}` (last value {v})",
                    timeout.as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Focus the element `selector`, clear it, and type `text` as keyboard input.
    pub fn type_into(&mut self, selector: &str, text: &str) -> Result<()> {
        let sel = serde_json::to_string(selector).map_err(|e| e.to_string())?;
        let found = self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); if (!e) return false; \
             e.focus(); e.select && e.select(); return document.activeElement === e; }})()"
        ))?;
        if found != Value::Bool(true) {
            return Err(format!("no focusable element `{selector}`"));
        }
        // Typing over the selection replaces what was there.
        self.call("Input.insertText", json!({ "text": text }))?;
        Ok(())
    }

    /// Click the middle of the element `selector` with the mouse.
    pub fn click(&mut self, selector: &str) -> Result<()> {
        let sel = serde_json::to_string(selector).map_err(|e| e.to_string())?;
        let r = self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); if (!e) return null; \
             e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); \
             return [r.left + r.width / 2, r.top + r.height / 2, r.width, r.height]; }})()"
        ))?;
        let xy = r
            .as_array()
            .filter(|a| a.len() == 4)
            .ok_or_else(|| format!("no element `{selector}` to click"))?;
        let (x, y) = (xy[0].as_f64().unwrap_or(0.0), xy[1].as_f64().unwrap_or(0.0));
        if xy[2].as_f64().unwrap_or(0.0) <= 0.0 {
            return Err(format!("`{selector}` is not visible"));
        }
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": x, "y": y, "button": "left", "clickCount": 1 }),
            )?;
        }
        Ok(())
    }

    /// A PNG of the whole page (beyond the viewport), at the viewport's width.
    pub fn screenshot(&mut self) -> Result<Vec<u8>> {
        let m = self.call("Page.getLayoutMetrics", json!({}))?;
        let h = m["cssContentSize"]["height"]
            .as_f64()
            .or(m["contentSize"]["height"].as_f64())
            .unwrap_or(800.0)
            .ceil();
        let r = self.call(
            "Page.captureScreenshot",
            json!({
                "format": "png",
                "captureBeyondViewport": true,
                "clip": { "x": 0, "y": 0, "width": self.width, "height": h, "scale": 1 },
            }),
        )?;
        let data = r["data"].as_str().ok_or("captureScreenshot gave no data")?;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| format!("screenshot base64: {e}"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.ws.close(None);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
