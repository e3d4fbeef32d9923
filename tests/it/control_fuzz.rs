//! The control API under hostile bodies (issue 9, scope 3): proptest sends
//! random bytes, random JSON and well-formed requests with hostile values
//! (u64::MAX, negatives, floats, deep nesting, long strings) to every route
//! of an in-process node's real control socket. After every case the node
//! must still answer `status`, and every refusal must be a 4xx whose body is
//! a JSON `ApiError` saying what is wrong. The node is in a pool of its own
//! (a real libp2p swarm on 127.0.0.1, no peers), so the batch routes reach
//! the consumer's queue and its checks, not only the JSON decoder.

use gleaner::clock::SystemClock;
use gleaner::daemon::NetResources;
use gleaner::net::NetConfig;
use gleaner::node::config::Config;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::in_process;
use in_process::{Node, NodeSetup};

/// One node for all cases, on a multi-threaded runtime that outlives them.
struct Fixture {
    runtime: tokio::runtime::Runtime,
    socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
    _node: Node,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        // The socket and the node's tasks need the runtime's reactor.
        let guard = runtime.enter();
        let text =
            "[net]\nenabled = false\n\n[monitor]\nmin_period_secs = 1\nmax_period_secs = 1\n\
                    extra_sample_chance = 0.0\n\n[guest]\nmax_runtime_secs = 2\n\n\
                    [history]\ntz = \"UTC\"\nhost = \"fuzz\"\n";
        let config = Config::parse(text, Path::new("fuzz.toml")).unwrap();
        let mut setup = NodeSetup::new(dir.path(), config, Arc::new(SystemClock));
        setup.owner_script = "0 5 4000\n".into();
        let pool = gleaner::model::ids::PoolName::new("fuzz").unwrap();
        let (handle, events, event_loop) = gleaner::net::start(
            libp2p::identity::Keypair::generate_ed25519(),
            NetConfig::loopback(&pool),
            setup.shutdown.clone(),
        )
        .unwrap();
        setup.net = Some(NetResources {
            handle,
            events,
            event_loop,
        });
        let socket_path = dir.path().join("control.sock");
        drop(guard);
        let node = runtime.block_on(setup.start());
        Fixture {
            runtime,
            socket: socket_path,
            _dir: dir,
            _node: node,
        }
    })
}

/// The routes and the method each takes.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/status"),
    ("POST", "/v1/pause"),
    ("POST", "/v1/resume"),
    ("POST", "/v1/predict"),
    ("POST", "/v1/run"),
    ("POST", "/v1/hosts"),
    ("POST", "/v1/batches"),
    ("GET", "/v1/batches"),
    ("GET", "/v1/batches/b1"),
    ("GET", "/v1/batches/not-an-id"),
    ("POST", "/v1/batches/estimate"),
    ("POST", "/v1/batches/b1/cancel"),
    ("POST", "/v1/batches/b1/wait"),
    ("POST", "/v1/batches/b1/results"),
    ("GET", "/v1/history/export"),
    ("POST", "/v1/history/import"),
];

/// Sends one request (HTTP/1.1, `Connection: close`) on the socket; returns
/// the status and the raw body, so the test sees exactly what the server
/// wrote.
fn send(method: &str, path: &str, body: Vec<u8>, content_type: &str) -> (u16, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let f = fixture();
    f.runtime.block_on(async {
        let exchange = async {
            let mut stream = tokio::net::UnixStream::connect(&f.socket).await.unwrap();
            let head = format!(
                "{method} {path} HTTP/1.1\r\nHost: gleaner\r\nContent-Type: {content_type}\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            // A route that answers without reading the body (GET status)
            // may close first: a reset is the server's answer, not a failure,
            // as long as the answer came in before it.
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(&body).await;
            let mut answer = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => answer.extend_from_slice(&buf[..n]),
                }
            }
            answer
        };
        let answer = tokio::time::timeout(Duration::from_secs(30), exchange)
            .await
            .unwrap_or_else(|_| panic!("{path}: no answer within 30 s"));
        let split = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("{path}: not HTTP: {}", String::from_utf8_lossy(&answer)));
        let head = String::from_utf8_lossy(&answer[..split]).to_string();
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{path}: no status in {head}"));
        let mut body = answer[split + 4..].to_vec();
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            body = dechunk(&body);
        }
        (status, body)
    })
}

/// The payload of a chunked body.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&raw[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        out.extend_from_slice(&raw[start..(start + size).min(raw.len())]);
        raw = &raw[(start + size + 2).min(raw.len())..];
    }
    out
}

/// The checks after every case: never a 5xx; a refusal is a 4xx whose body
/// is a JSON `ApiError` with that status and a message; and the node still
/// answers `status`.
fn check(route: &str, status: u16, body: &[u8]) -> Result<(), TestCaseError> {
    let text = String::from_utf8_lossy(body);
    prop_assert!(status < 500, "{route}: answered {status}: {text}");
    if status >= 400 {
        let error: Value = serde_json::from_slice(body).map_err(|e| {
            TestCaseError::fail(format!("{route}: {status} body is not JSON ({e}): {text}"))
        })?;
        prop_assert_eq!(
            error["status"].as_u64(),
            Some(u64::from(status)),
            "{}",
            text
        );
        prop_assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{route}: a {status} without a message: {text}"
        );
    }
    let (s, b) = send("GET", "/v1/status", Vec::new(), "application/json");
    prop_assert_eq!(
        s,
        200,
        "status after {}: {}",
        route,
        String::from_utf8_lossy(&b)
    );
    Ok(())
}

fn hostile_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(i64::MAX)),
        Just(json!(-1)),
        Just(json!(0)),
        Just(json!(1.5)),
        Just(json!(1e308)),
        Just(json!("18446744073709551615")),
        Just(json!(null)),
        Just(json!([])),
        Just(json!({})),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        (0u64..100_000).prop_map(|n| json!(n)),
    ]
}

fn hostile_string() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!("")),
        Just(json!("x".repeat(70_000))),
        Just(json!("km")),
        Just(json!("nonsense-method")),
        ".{0,40}".prop_map(|s| json!(s)),
        hostile_number(),
    ]
}

/// Arbitrary JSON, nested up to a few levels.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,20}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::hash_map(".{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A body shaped like the route's request, with hostile values.
fn shaped_body(route: &'static str) -> BoxedStrategy<Value> {
    match route {
        "/v1/pause" => hostile_number().prop_map(|n| json!({ "for_secs": n })).boxed(),
        "/v1/predict" => (
            hostile_number(),
            hostile_number(),
            hostile_number(),
            hostile_string(),
            hostile_number(),
            hostile_number(),
        )
            .prop_map(|(w, at, mem, method, days, step)| {
                json!({ "window_secs": w, "at": at, "mem_mib": mem, "method": method,
                        "days": days, "step_secs": step })
            })
            .boxed(),
        "/v1/run" => (hostile_number(), hostile_number(), hostile_string())
            .prop_map(|(mem, runtime, arg)| {
                // A command that cannot start, so no guest outlives the case.
                json!({ "argv": ["/nonexistent/gleaner-fuzz", arg], "mem_mib": mem,
                        "runtime_secs": runtime })
            })
            .boxed(),
        "/v1/hosts" => (hostile_number(), hostile_number(), hostile_number(), hostile_number())
            .prop_map(|(at, w, mem, rounds)| {
                json!({ "at": at, "window_secs": w, "mem_mib": mem, "rounds": rounds })
            })
            .boxed(),
        "/v1/batches" | "/v1/batches/estimate" => (
            (hostile_number(), hostile_number(), hostile_number()),
            (hostile_string(), hostile_string(), hostile_string()),
            (hostile_number(), hostile_number(), hostile_number()),
        )
            .prop_map(|((mem, runtime, limit), (arg, output, remote), (a, b, max))| {
                // Inputs that are missing or not regular files, outputs and
                // remote names that may escape: all refused by name. No
                // output_dir, so nothing is created outside the node's dir.
                json!({ "argv": ["/nonexistent/gleaner-fuzz", arg, "{}"],
                        "mem_mib": mem, "runtime_secs": runtime, "limit_secs": limit,
                        "outputs": [output],
                        "inputs": [{ "local": "/dev/zero", "remote": remote }],
                        "range": [a, b], "max_running": max,
                        "policy": remote, "deadline_unix": a })
            })
            .boxed(),
        "/v1/batches/b1/results" => hostile_string()
            .prop_map(|out| json!({ "out": out }))
            .boxed(),
        _ => any_json().boxed(),
    }
}

fn deep_nesting(depth: usize) -> Vec<u8> {
    let mut s = "[".repeat(depth);
    s.push_str(&"]".repeat(depth));
    s.into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_break_a_route(
        route in 0..ROUTES.len(),
        body in prop::collection::vec(any::<u8>(), 0..512),
        json_type in any::<bool>(),
    ) {
        let (method, path) = ROUTES[route];
        let ct = if json_type { "application/json" } else { "text/plain" };
        let (status, answer) = send(method, path, body, ct);
        check(path, status, &answer)?;
    }

    #[test]
    fn random_json_never_breaks_a_route(route in 0..ROUTES.len(), body in any_json()) {
        let (method, path) = ROUTES[route];
        let (status, answer) = send(method, path, serde_json::to_vec(&body).unwrap(), "application/json");
        check(path, status, &answer)?;
    }

    #[test]
    fn hostile_values_in_well_formed_requests_are_refused_or_served(
        (route, body) in prop::sample::select(vec![
            "/v1/pause", "/v1/predict", "/v1/run", "/v1/hosts", "/v1/batches",
            "/v1/batches/estimate", "/v1/batches/b1/results",
        ])
            .prop_flat_map(|r| (Just(r), shaped_body(r))),
    ) {
        let (status, answer) = send("POST", route, serde_json::to_vec(&body).unwrap(), "application/json");
        check(route, status, &answer)?;
        if route == "/v1/pause" && status == 200 {
            let (s, b) = send("POST", "/v1/resume", Vec::new(), "application/json");
            prop_assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
        }
    }
}

#[test]
fn the_issue_s_pause_panic_is_a_400_naming_the_field() {
    let (status, body) = send(
        "POST",
        "/v1/pause",
        br#"{"for_secs":18446744073709551615}"#.to_vec(),
        "application/json",
    );
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("for_secs"), "{text}");
    for (bad, field) in [
        (r#"{"for_secs":-1}"#, "for_secs"),
        (r#"{"for_secs":1.5}"#, "for_secs"),
        (r#"{"for_secs":"1"}"#, "for_secs"),
    ] {
        let (status, body) = send("POST", "/v1/pause", bad.into(), "application/json");
        let text = String::from_utf8_lossy(&body);
        assert!((400..500).contains(&status), "{bad}: {text}");
        assert!(text.contains(field), "{bad}: {text}");
    }
    let (status, body) = send(
        "POST",
        "/v1/predict",
        deep_nesting(10_000),
        "application/json",
    );
    assert!(
        (400..500).contains(&status),
        "{status} {}",
        String::from_utf8_lossy(&body)
    );
    let (status, body) = send("POST", "/v1/nowhere", Vec::new(), "application/json");
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
    let (s, _) = send("GET", "/v1/status", Vec::new(), "application/json");
    assert_eq!(s, 200);
}
