//! A headless Chromium driven over the DevTools protocol, for dashboard tests that click: the
//! browser speaks CDP on a pipe (`--remote-debugging-pipe`: it reads commands on fd 3 and writes
//! replies and events on fd 4, each a JSON text ended by a NUL byte). The workspace forbids
//! `unsafe`, so the two descriptors are wired by a shell through named pipes (`mkfifo`) rather than
//! by a `pre_exec` hook. Every wait is bounded; dropping the browser kills it.
//!
//! Chromium keeps files of its own in the temporary directory (`$TMPDIR`): the socket of its
//! process singleton, in an `org.chromium.Chromium.XXXXXX` directory that a browser killed rather
//! than closed leaves behind. Every Chromium a test starts gets a `TMPDIR` of its own
//! ([`chromium_tmp`]), removed once the browser is gone.

use hetsched_core::testkit::ScratchDir;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// The first Chromium binary found on PATH.
pub fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// A `TMPDIR` for one Chromium, removed with what Chromium left in it when it drops (kept when the
/// test failed). Not inside the test's directory: the singleton's socket path, `TMPDIR` plus 45
/// bytes, must stay under the 108 bytes of a Unix socket's address, or Chromium stops at its start
/// ("Socket path too long").
pub fn chromium_tmp() -> ScratchDir {
    ScratchDir::new("chromium", "tmp")
}

pub struct Browser {
    child: Child,
    /// Chromium's `TMPDIR`; declared after `child`, it drops after [`Drop`] killed the browser.
    tmp: ScratchDir,
    to: std::fs::File,
    from: Receiver<serde_json::Value>,
    next_id: u64,
    /// The page's session (flat mode: commands for the page carry it).
    session: String,
}

impl Browser {
    /// Starts `bin` headless with a blank page; `dir` holds its profile and the two pipes.
    pub fn start(bin: &str, dir: &Path) -> Browser {
        Browser::start_with(bin, dir, &[])
    }

    /// [`Browser::start`] with more command-line switches (`--host-resolver-rules=…`: host
    /// names of one's choosing that reach loopback).
    pub fn start_with(bin: &str, dir: &Path, extra: &[&str]) -> Browser {
        std::fs::create_dir_all(dir).expect("browser dir");
        let (to_path, from_path) = (dir.join("cdp-in"), dir.join("cdp-out"));
        for p in [&to_path, &from_path] {
            let _ = std::fs::remove_file(p);
            let ok = Command::new("mkfifo").arg(p).status().expect("mkfifo");
            assert!(ok.success(), "mkfifo {}", p.display());
        }
        let tmp = chromium_tmp();
        // Chromium's processes (zygotes, renderers, the GPU and network services) share its
        // process group, led by the browser (the shell execs it): dropping the browser ends
        // them all ([`Browser::drop`]).
        let child = Command::new("sh")
            .process_group(0)
            .arg("-c")
            .arg("exec \"$0\" \"$@\" 3<\"$CDP_IN\" 4>\"$CDP_OUT\"")
            .arg(bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-pipe",
                "--window-size=1400,1300",
            ])
            .arg(format!("--user-data-dir={}", dir.join("profile").display()))
            .args(extra)
            .arg("about:blank")
            .env("CDP_IN", &to_path)
            .env("CDP_OUT", &from_path)
            .env("TMPDIR", &tmp)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromium");
        // Opening a FIFO blocks until its other end opens; the shell opens fd 3 first, then fd 4.
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let to = std::fs::OpenOptions::new().write(true).open(&to_path);
            let from = std::fs::File::open(&from_path);
            let _ = tx.send((to, from));
        });
        let (to, from) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("chromium opened its DevTools pipes");
        let (to, from) = (to.expect("cdp-in"), from.expect("cdp-out"));
        let (tx, from_rx) = channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(from);
            loop {
                let mut buf = Vec::new();
                match r.read_until(0, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if buf.last() == Some(&0) {
                    buf.pop();
                }
                if let Ok(v) = serde_json::from_slice(&buf)
                    && tx.send(v).is_err()
                {
                    break;
                }
            }
        });
        let mut b = Browser {
            child,
            tmp,
            to,
            from: from_rx,
            next_id: 0,
            session: String::new(),
        };
        let target = b.call(
            "Target.createTarget",
            serde_json::json!({ "url": "about:blank" }),
        );
        let target = target["targetId"].as_str().expect("targetId").to_string();
        let attached = b.call(
            "Target.attachToTarget",
            serde_json::json!({ "targetId": target, "flatten": true }),
        );
        b.session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_string();
        b.page("Page.enable", serde_json::json!({}));
        b
    }

    fn send(
        &mut self,
        method: &str,
        params: serde_json::Value,
        session: bool,
    ) -> serde_json::Value {
        let session = session.then(|| self.session.clone());
        match self.try_send(method, params, session.as_deref()) {
            Ok(v) => v,
            Err(e) => panic!("{method}: {e}"),
        }
    }

    /// A command to the browser (`session` `None`) or to a page's session: its result, or the
    /// error Chromium answered (a page that navigates away meanwhile answers one).
    fn try_send(
        &mut self,
        method: &str,
        params: serde_json::Value,
        session: Option<&str>,
    ) -> Result<serde_json::Value, serde_json::Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = serde_json::json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            msg["sessionId"] = serde_json::Value::String(session.to_string());
        }
        let mut bytes = serde_json::to_vec(&msg).expect("json");
        bytes.push(0);
        self.to.write_all(&bytes).expect("write to chromium");
        let start = Instant::now();
        loop {
            let left = Duration::from_secs(30).saturating_sub(start.elapsed());
            match self.from.recv_timeout(left) {
                Ok(v) if v["id"] == id => {
                    return match v.get("error") {
                        Some(e) => Err(e.clone()),
                        None => Ok(v["result"].clone()),
                    };
                }
                Ok(_) => {} // an event
                Err(RecvTimeoutError::Timeout) => panic!("chromium did not answer {method}"),
                Err(RecvTimeoutError::Disconnected) => panic!("chromium went away ({method})"),
            }
        }
    }

    /// A browser-level command.
    pub fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.send(method, params, false)
    }

    /// A command to the page.
    pub fn page(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.send(method, params, true)
    }

    pub fn navigate(&mut self, url: &str) {
        self.page("Page.navigate", serde_json::json!({ "url": url }));
    }

    /// Runs the JavaScript `source` in every page loaded from now on, before the page's own
    /// scripts: a recorder that must see the page from its first frame.
    pub fn on_every_page(&mut self, source: &str) {
        self.page(
            "Page.addScriptToEvaluateOnNewDocument",
            serde_json::json!({ "source": source }),
        );
    }

    /// The value of a JavaScript expression in the page (promises awaited).
    pub fn eval(&mut self, expr: &str) -> serde_json::Value {
        let r = self.page(
            "Runtime.evaluate",
            serde_json::json!({ "expression": expr, "returnByValue": true, "awaitPromise": true }),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{expr} threw: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// The value of `expr` in the page of `session`; `None` when it threw or the page could not
    /// answer (it was navigating away).
    fn try_eval(&mut self, session: &str, expr: &str) -> Option<serde_json::Value> {
        let r = self
            .try_send(
                "Runtime.evaluate",
                serde_json::json!({ "expression": expr, "returnByValue": true, "awaitPromise": true }),
                Some(session),
            )
            .ok()?;
        r.get("exceptionDetails")
            .is_none()
            .then(|| r["result"]["value"].clone())
    }

    /// Waits (bounded) until `expr` is truthy in the page; its value. Errors while the page loads
    /// (an element not there yet, a page navigating away after a click) count as false.
    pub fn wait_for(&mut self, what: &str, expr: &str, timeout: Duration) -> serde_json::Value {
        let session = self.session.clone();
        self.wait_in(&session, what, expr, timeout)
    }

    fn wait_in(
        &mut self,
        session: &str,
        what: &str,
        expr: &str,
        timeout: Duration,
    ) -> serde_json::Value {
        let start = Instant::now();
        let guarded =
            format!("(() => {{ try {{ return ({expr}); }} catch (e) {{ return null; }} }})()");
        loop {
            let v = self.try_eval(session, &guarded).unwrap_or_default();
            let truthy = match &v {
                serde_json::Value::Null => false,
                serde_json::Value::Bool(b) => *b,
                serde_json::Value::Number(n) => n.as_f64() != Some(0.0),
                serde_json::Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return v;
            }
            assert!(
                start.elapsed() < timeout,
                "timed out waiting for {what} ({expr})"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Clicks the element `selector` names as a person does: waits (bounded) until it is shown
    /// and enabled, scrolls it into view, and presses and releases the mouse's left button at its
    /// centre — which must be the element itself (or inside it), not something covering it.
    pub fn click(&mut self, selector: &str, timeout: Duration) {
        let at = self.press(selector, timeout);
        self.release(at);
    }

    /// The first half of [`Browser::click`]: moves the pointer to the centre of `selector` once it
    /// is clickable and presses the left button there; where it pressed. [`Browser::release`]
    /// ends the click, so a test can change the page between the two (a refresh under the
    /// pointer).
    ///
    /// The page can move between the look and the press — a panel or a table above fills in (a
    /// topology or a user that appeared, on the dashboard) and pushes the element down — so
    /// the press counts only when
    /// the page saw it land on the element (a `mousedown` listener notes where each press
    /// lands). One that landed elsewhere is released over the page's top-left corner, where the
    /// click goes to what the two ends share, the page, which does nothing with it; and the
    /// element is looked for and pressed again.
    pub fn press(&mut self, selector: &str, timeout: Duration) -> (f64, f64) {
        let sel = serde_json::to_string(selector).expect("json");
        let start = Instant::now();
        loop {
            let at = self.wait_for(
                &format!("{selector} to be clickable"),
                &format!(
                    "(() => {{ const e = document.querySelector({sel}); \
                     if (!e || e.disabled) return null; \
                     e.scrollIntoView({{block: 'center', inline: 'center'}}); \
                     const r = e.getBoundingClientRect(); \
                     if (r.width === 0 || r.height === 0) return null; \
                     const x = r.left + r.width / 2, y = r.top + r.height / 2; \
                     const hit = document.elementFromPoint(x, y); \
                     if (!hit || (hit !== e && !e.contains(hit))) return null; \
                     if (!window.__pressLanded) {{ document.addEventListener('mousedown', \
                       (ev) => {{ window.__pressLanded.at = ev.target; }}, true); }} \
                     window.__pressLanded = {{ at: null }}; \
                     return [x, y]; }})()"
                ),
                timeout.saturating_sub(start.elapsed()),
            );
            let at = (at[0].as_f64().expect("x"), at[1].as_f64().expect("y"));
            self.mouse("mouseMoved", at);
            self.mouse("mousePressed", at);
            let session = self.session.clone();
            let landed = self.try_eval(
                &session,
                &format!(
                    "(() => {{ const e = document.querySelector({sel}); \
                     const t = window.__pressLanded && window.__pressLanded.at; \
                     return !!(e && t && (t === e || e.contains(t))); }})()"
                ),
            );
            if landed == Some(serde_json::Value::Bool(true)) {
                return at;
            }
            self.mouse("mouseReleased", (0.0, 0.0));
            assert!(
                start.elapsed() < timeout,
                "timed out pressing {selector}: the page moved under the pointer at every press"
            );
        }
    }

    /// Releases the left button at `at`, where [`Browser::press`] pressed it.
    pub fn release(&mut self, at: (f64, f64)) {
        self.mouse("mouseReleased", at);
    }

    fn mouse(&mut self, kind: &str, (x, y): (f64, f64)) {
        self.page(
            "Input.dispatchMouseEvent",
            serde_json::json!({
                "type": kind, "x": x, "y": y, "button": "left",
                "buttons": if kind == "mousePressed" { 1 } else { 0 },
                "clickCount": if kind == "mouseMoved" { 0 } else { 1 },
            }),
        );
    }

    /// Clicks the text field `selector` and types `text` into it, as a person at a keyboard (or
    /// pasting) does: the field fires its `input` events and holds the text.
    pub fn type_into(&mut self, selector: &str, text: &str, timeout: Duration) {
        self.click(selector, timeout);
        self.page("Input.insertText", serde_json::json!({ "text": text }));
    }

    /// The cookies the browser holds for `url` (`HttpOnly` ones too, which the page cannot read).
    pub fn cookies(&mut self, url: &str) -> Vec<serde_json::Value> {
        let r = self.page("Network.getCookies", serde_json::json!({ "urls": [url] }));
        r["cookies"].as_array().cloned().unwrap_or_default()
    }

    /// Waits (bounded) for a tab other than the page whose address contains `url_part` (one a
    /// link opened with `target="_blank"`) to finish loading; its text. Closes that tab.
    pub fn text_of_new_tab(&mut self, url_part: &str, timeout: Duration) -> String {
        let start = Instant::now();
        let target = loop {
            let targets = self.call("Target.getTargets", serde_json::json!({}));
            let found = targets["targetInfos"].as_array().and_then(|all| {
                all.iter().find_map(|t| {
                    let url = t["url"].as_str()?;
                    (t["type"] == "page" && url.contains(url_part))
                        .then(|| t["targetId"].as_str().map(str::to_string))?
                })
            });
            if let Some(id) = found {
                break id;
            }
            assert!(
                start.elapsed() < timeout,
                "timed out waiting for a tab at {url_part}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let attached = self.call(
            "Target.attachToTarget",
            serde_json::json!({ "targetId": target, "flatten": true }),
        );
        let session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_string();
        let left = timeout.saturating_sub(start.elapsed());
        let text = self.wait_in(
            &session,
            &format!("the tab at {url_part} to load"),
            "document.readyState === 'complete' && document.body && document.body.innerText",
            left,
        );
        self.call(
            "Target.closeTarget",
            serde_json::json!({ "targetId": target }),
        );
        text.as_str().unwrap_or_default().to_string()
    }
}

/// Kills the browser's whole process group and waits (bounded) until none of it is left: a
/// network service killed after its browser still writes into the profile for a moment
/// (`Network Persistent State`), racing the removal of the test's directory. Then the `tmp`
/// field drops.
impl Drop for Browser {
    fn drop(&mut self) {
        let group = self.child.id();
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let start = Instant::now();
        while !super::group_members(group).is_empty() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}
