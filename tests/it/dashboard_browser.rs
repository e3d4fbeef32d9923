//! The web dashboard in a real headless Chromium, driven over WebDriver
//! (chromedriver) with fantoccini: a real node (the built binary, a temp
//! data dir, a replayed owner load, a recent history imported), on
//! 127.0.0.1 only.
//!
//! It checks what the owner relies on: the page opens with the token and
//! not without it; it shows the live state and follows it without a
//! reload; the Pause and Resume buttons pause and resume the node (checked
//! through the control API, not the page); a POST from another origin is
//! refused even with the session cookie and the CSRF token. It also takes
//! the README's screenshot (`GLEANER_UPDATE_SCREENSHOT=1` writes it to
//! `docs/dashboard.png`; otherwise it goes to the target dir).
//!
//! With no Chromium or chromedriver on the machine the test says so loudly
//! and passes without running; `.ci/run` installs both, so in CI it runs.

use crate::node_support;

use fantoccini::{Client, ClientBuilder, Locator};
use node_support::{wait_until, NodeFixture};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The first of `names` found on PATH.
fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in names {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// chromedriver on a free loopback port, killed on drop.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start(program: &PathBuf) -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(program)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let up = wait_until(Duration::from_secs(20), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "chromedriver did not listen on 127.0.0.1:{port}");
        Driver { child, port }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A recent history with an office week: busy (95 % CPU, S3 once
/// sustained) 09:00–17:00 UTC on weekdays and a busy hour at 20:00 every
/// day, quiet otherwise; 21 days, one row a minute.
fn office_history() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let end = now - now % 60 - 120;
    let mut text = String::from(
        "# gleaner-trace v1\n# host: test\n# tz: UTC\n# step: 60\ntime,cpu,free_mib,up\n",
    );
    let mut t = end - 21 * 86_400;
    while t <= end {
        // 1970-01-01 was a Thursday: day 0 = Monday after shifting by 3.
        let weekday = ((t / 86_400) + 3) % 7;
        let hour = (t % 86_400) / 3600;
        let busy = (weekday < 5 && (9..17).contains(&hour)) || hour == 20;
        let cpu = if busy { 95.0 } else { 5.0 };
        text.push_str(&format!("{t},{cpu},8000,1\n"));
        t += 60;
    }
    text
}

/// One raw HTTP/1.1 request to the dashboard; returns the status code.
fn http_status(port: u16, request: &str) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"))
}

fn paused(node: &NodeFixture) -> bool {
    node.status()["paused"].as_bool().unwrap()
}

/// Polls the page until `pred` holds for the `#state` element's attribute.
async fn wait_for_attr(c: &Client, id: &str, attr: &str, want: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    while Instant::now() < deadline {
        if let Ok(e) = c.find(Locator::Id(id)).await {
            last = e.attr(attr).await.ok().flatten();
            if last.as_deref() == Some(want) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("#{id} {attr} stayed {last:?}, wanted {want:?}");
}

/// A page on another origin (127.0.0.1, another port) that posts a form to
/// the dashboard's pause action as soon as it loads, with the real CSRF
/// token (as if it had leaked): only the Origin check can stop it. Serves
/// one request per connection until the test ends.
fn evil_origin(target: String, csrf: String) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let body = format!(
                "<!doctype html><html><body><form id=\"f\" method=\"post\" action=\"{target}/action/pause\">\
<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"></form>\
<script>document.getElementById('f').submit();</script></body></html>"
            );
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_works_in_a_real_browser_and_refuses_what_it_must() {
    let chromium = find_program(&["chromium", "chromium-browser", "google-chrome"]);
    let chromedriver = find_program(&["chromedriver"]);
    let (Some(chromium), Some(chromedriver)) = (chromium, chromedriver) else {
        // `.ci/run` installs both: there, a missing browser is a failure.
        assert!(
            std::env::var_os("GLEANER_CI").is_none(),
            "no chromium and chromedriver on PATH under .ci/run"
        );
        eprintln!(
            "\n\n*** SKIPPED dashboard_browser: no chromium (or chromium-browser, google-chrome) and chromedriver on PATH; \
             install them with `apt-get install -y chromium chromium-driver` (.ci/run does) ***\n\n"
        );
        return;
    };

    let config = format!(
        "{}\n[ui]\nlisten = \"127.0.0.1:0\"\n",
        node_support::test_config(5, "")
    );
    let mut node = NodeFixture::new(&config, Some(node_support::QUIET_HOST));
    let history = node.dir.join("history.csv");
    std::fs::write(&history, office_history()).unwrap();
    node.run_ok(&["history", "import", history.to_str().unwrap()]);
    node.node_args = vec!["--no-net".into()];
    node.start();
    let url = node
        .ready_value("dashboard")
        .expect("the node prints the dashboard's URL");
    let (base, token) = url.split_once("/?token=").expect("URL with token");
    let port: u16 = base.rsplit(':').next().unwrap().parse().unwrap();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    let token_file = node.data_dir().join("dashboard-token");
    assert_eq!(std::fs::read_to_string(&token_file).unwrap().trim(), token);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "token file mode {mode:o}");
    }

    let driver = Driver::start(&chromedriver);
    let profile = tempfile::tempdir().unwrap();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": chromium,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1100,900", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-sync", "--disable-component-update",
                format!("--user-data-dir={}", profile.path().display()),
            ]
        }),
    );
    let c = ClientBuilder::rustls()
        .unwrap()
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a WebDriver session with headless Chromium");

    // Without the token: refused, in the browser and on the wire.
    c.goto(&format!("{base}/")).await.unwrap();
    let body = c
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.contains("no access token"), "{body}");
    assert!(c.find(Locator::Id("state")).await.is_err());
    let host = format!("127.0.0.1:{port}");
    assert_eq!(
        http_status(
            port,
            &format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
        ),
        401
    );
    assert_eq!(
        http_status(
            port,
            &format!("GET /?token={token} HTTP/1.1\r\nHost: evil.example:{port}\r\nConnection: close\r\n\r\n")
        ),
        403,
        "a rebound Host is refused even with the token"
    );

    // With the token: the cookie is set, the token leaves the address bar,
    // and the live state shows (S1, not paused, from the replayed load).
    c.goto(&url).await.unwrap();
    let here = c.current_url().await.unwrap();
    assert_eq!(here.as_str(), format!("{base}/"), "the token left the URL");
    wait_for_attr(&c, "state", "data-state", "S1", Duration::from_secs(20)).await;
    wait_for_attr(&c, "state", "data-paused", "false", Duration::from_secs(5)).await;
    let text = c
        .find(Locator::Id("live"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("Owner's CPU load"), "{text}");

    // Live: paused through the CLI, the open page follows without a reload.
    node.run_ok(&["pause"]);
    wait_for_attr(&c, "state", "data-paused", "true", Duration::from_secs(10)).await;
    wait_for_attr(&c, "state", "data-state", "S5", Duration::from_secs(5)).await;
    node.run_ok(&["resume"]);
    wait_for_attr(&c, "state", "data-paused", "false", Duration::from_secs(10)).await;

    // The buttons act on the node (checked through the control API).
    assert!(!paused(&node));
    c.find(Locator::Id("pause"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || paused(&node)),
        "the Pause button did not pause the node"
    );
    wait_for_attr(&c, "state", "data-paused", "true", Duration::from_secs(10)).await;
    c.find(Locator::Id("resume"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || !paused(&node)),
        "the Resume button did not resume the node"
    );

    // The screenshot for the README: the "now" page with a live state.
    wait_for_attr(&c, "state", "data-paused", "false", Duration::from_secs(10)).await;
    let png = c.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let shots = if std::env::var_os("GLEANER_UPDATE_SCREENSHOT").is_some() {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs")
    } else {
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
    };
    std::fs::create_dir_all(&shots).unwrap();
    std::fs::write(shots.join("dashboard.png"), &png).unwrap();

    // The other pages render from the imported history.
    c.goto(&format!("{base}/reliability")).await.unwrap();
    let chart = c.find(Locator::Css("svg.chart")).await.unwrap();
    let svg = chart.html(false).await.unwrap();
    assert!(svg.contains("<polyline"), "no curve drawn: {svg}");
    std::fs::write(
        shots.join("dashboard-reliability.png"),
        c.screenshot().await.unwrap(),
    )
    .unwrap();
    c.goto(&format!("{base}/week")).await.unwrap();
    let rects = c.find_all(Locator::Css("svg.heatmap rect")).await.unwrap();
    assert_eq!(rects.len(), 7 * 24);
    std::fs::write(
        shots.join("dashboard-week.png"),
        c.screenshot().await.unwrap(),
    )
    .unwrap();
    c.goto(&format!("{base}/jobs")).await.unwrap();
    c.goto(&format!("{base}/batches")).await.unwrap();
    let body = c
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.contains("not in a pool"), "{body}");

    // A cross-origin POST is refused: a page on another origin submits the
    // pause form with the session cookie (same site: 127.0.0.1) and even
    // the right CSRF token; the Origin check stops it.
    c.goto(&format!("{base}/")).await.unwrap();
    let csrf = c
        .find(Locator::Css("input[name=csrf]"))
        .await
        .unwrap()
        .attr("value")
        .await
        .unwrap()
        .unwrap();
    let evil = evil_origin(base.to_string(), csrf.clone());
    c.goto(&format!("http://127.0.0.1:{evil}/")).await.unwrap();
    let refused = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = match c.find(Locator::Css("body")).await {
                Ok(b) => b.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if text.contains("another origin") || Instant::now() > deadline {
                break text;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    assert!(refused.contains("another origin"), "{refused}");
    assert!(!paused(&node), "a cross-origin POST paused the node");
    // The same on the wire, with the cookie and CSRF token: only the Origin differs.
    let form = format!("csrf={csrf}");
    let post = |origin: &str| {
        format!(
            "POST /action/pause HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\nCookie: gleaner_ui_{port}={token}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
            form.len()
        )
    };
    assert_eq!(http_status(port, &post("http://evil.example")), 403);
    assert!(!paused(&node));
    // And a POST without the CSRF token from our own origin is refused too.
    let no_csrf = format!(
        "POST /action/pause HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\nCookie: gleaner_ui_{port}={token}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(http_status(port, &no_csrf), 403);
    assert!(!paused(&node));
    // The control: the same request from our origin works.
    assert_eq!(http_status(port, &post(&format!("http://{host}"))), 303);
    assert!(paused(&node));

    c.close().await.unwrap();
    drop(driver);
    node.stop();
}
