//! A headless Chromium driven over the DevTools protocol, for dashboard tests that click: the
//! browser speaks CDP on a pipe (`--remote-debugging-pipe`: it reads commands on fd 3 and writes
//! replies and events on fd 4, each a JSON text ended by a NUL byte). The workspace forbids
//! `unsafe`, so the two descriptors are wired by a shell through named pipes (`mkfifo`) rather than
//! by a `pre_exec` hook. Every wait is bounded; dropping the browser kills it.

use std::io::{BufRead, BufReader, Write};
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

pub struct Browser {
    child: Child,
    to: std::fs::File,
    from: Receiver<serde_json::Value>,
    next_id: u64,
    /// The page's session (flat mode: commands for the page carry it).
    session: String,
}

impl Browser {
    /// Starts `bin` headless with a blank page; `dir` holds its profile and the two pipes.
    pub fn start(bin: &str, dir: &Path) -> Browser {
        std::fs::create_dir_all(dir).expect("browser dir");
        let (to_path, from_path) = (dir.join("cdp-in"), dir.join("cdp-out"));
        for p in [&to_path, &from_path] {
            let _ = std::fs::remove_file(p);
            let ok = Command::new("mkfifo").arg(p).status().expect("mkfifo");
            assert!(ok.success(), "mkfifo {}", p.display());
        }
        let child = Command::new("sh")
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
            .arg("about:blank")
            .env("CDP_IN", &to_path)
            .env("CDP_OUT", &from_path)
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
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = serde_json::json!({ "id": id, "method": method, "params": params });
        if session {
            msg["sessionId"] = serde_json::Value::String(self.session.clone());
        }
        let mut bytes = serde_json::to_vec(&msg).expect("json");
        bytes.push(0);
        self.to.write_all(&bytes).expect("write to chromium");
        let start = Instant::now();
        loop {
            let left = Duration::from_secs(30).saturating_sub(start.elapsed());
            match self.from.recv_timeout(left) {
                Ok(v) if v["id"] == id => {
                    assert!(v.get("error").is_none(), "{method}: {v}");
                    return v["result"].clone();
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

    /// Waits (bounded) until `expr` is truthy in the page; its value. Errors while the page loads
    /// (an element not there yet) count as false.
    pub fn wait_for(&mut self, what: &str, expr: &str, timeout: Duration) -> serde_json::Value {
        let start = Instant::now();
        let guarded =
            format!("(() => {{ try {{ return ({expr}); }} catch (e) {{ return null; }} }})()");
        loop {
            let v = self.eval(&guarded);
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
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
