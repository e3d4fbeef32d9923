//! Jobs that bring their image (issue 31) on a pool of real `gleaner node`
//! processes on 127.0.0.1: a batch whose every task runs in an image the
//! test builds itself (`tests/shared/guest_image.rs`, the probe the sandbox
//! tests run) sees the image's `/etc/os-release`, never its host's, for an
//! image packed as a docker-archive and for another packed as an OCI
//! layout on the same base layer; each image crosses to each host at most
//! once, layer by layer, and the base layer the two share crosses to each
//! host once (the hosts' own counts of bytes read from the consumer,
//! relayed in their "inputs ready" events, and their logs of each part
//! they read, by its content hash, and of what they unpacked); a host
//! whose owner denies images refuses the tasks with its reason and runs
//! none of them.
//! Hosts say in their summaries which images they hold (scope 3): after an
//! image moved from the host the policy prefers to the other one (a prune
//! there, a `run-local` here), a task in it goes to the holder and reads
//! nothing, where the policy alone would have sent it back across; and a
//! task in the same image packed as an OCI layout (the same id) too.

use crate::guest_image::{
    docker_archive, docker_archive_of, layered_probe_image, oci_archive, oci_archive_of,
    probe_image, static_probe, view_namespaces_allowed,
};
use crate::node_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use node_support::{addr, history, peer, pool_node, started, test_config, NodeFixture, QUIET_HOST};
use serde_json::Value;

/// Tasks in the batch: more than the hosts, so each host runs several.
const TASKS: usize = 8;

/// A host of the pool whose owner denies images.
fn denying_host(bootstrap: &str) -> NodeFixture {
    let config = format!("{}\n[guest]\nimages = \"deny\"\n", test_config(60, ""));
    let mut node = NodeFixture::new(&config, Some(QUIET_HOST));
    let trace = node.dir.join("history.csv");
    std::fs::write(&trace, history(0)).unwrap();
    node.run_ok(&["history", "import", trace.to_str().unwrap()]);
    node.node_args = vec!["--bootstrap".into(), bootstrap.into()];
    started(node)
}

/// Two hosts with a history, the second bootstrapped from the first, and
/// the first's address to bootstrap more from. `None` where the kernel
/// refuses user and mount namespaces: without them a guest gets no narrow
/// view, so no image (a host refuses to run one on its own root): proven,
/// then skipped.
fn image_hosts() -> Option<(NodeFixture, NodeFixture, String)> {
    if !view_namespaces_allowed() {
        eprintln!("SKIP: the kernel refuses user/mount/PID namespaces to an unprivileged user");
        return None;
    }
    let first = started(pool_node(Some(&history(0)), &[]));
    let boot = addr(&first);
    let second = started(pool_node(Some(&history(0)), &["--bootstrap", &boot]));
    Some((first, second, boot))
}

/// Waits until `consumer` lists every one of `hosts` with a TR.
fn until_listed(consumer: &NodeFixture, hosts: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let report: Value =
            serde_json::from_str(&consumer.run_ok(&["hosts", "--json", "--window", "1h"])).unwrap();
        let listed = report["hosts"].as_array().unwrap();
        let ready = hosts.iter().all(|h| {
            listed
                .iter()
                .any(|l| l["peer"] == h.as_str() && l["tr"].is_number())
        });
        if ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the consumer never listed every host: {report:#}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The os-release of the second image: the first's with a line of its
/// own, so a task shows which of the two it ran in.
const OCI_OS: &str =
    "ID=gleaner-image-test\nVERSION_ID=oci\nPRETTY_NAME=\"Gleaner test image (OCI)\"\n";

/// Runs a batch of [`TASKS`] tasks in `archive` through `consumer`, its
/// results under `work/results-NAME`; returns its JSON lines.
fn batch_in(consumer: &NodeFixture, archive: &std::path::Path, name: &str) -> Vec<Value> {
    let results = consumer.dir.join("work").join(format!("results-{name}"));
    let (code, lines) = consumer
        .json_stream(
            "batch",
            &[
                "submit",
                "--wait",
                "--image",
                archive.to_str().unwrap(),
                "--range",
                &format!("0..{TASKS}"),
                "--runtime",
                "1m",
                "--output",
                "out.txt",
                "--output-dir",
                results.to_str().unwrap(),
                // After `--`: the image's Entrypoint (the probe) runs with
                // these in place of its Cmd.
                "--",
                "task-{}",
            ],
        )
        .finish(Duration::from_secs(300));
    assert_eq!(code, 0, "{lines:#?}\n{}", consumer.log());
    lines
}

/// Checks that every task of the batch `name` ran in the image whose
/// os-release is `os` on one of `running`: its os-release (never its
/// host's), its WorkingDir and Env, its Entrypoint with the task's
/// argument, and its output came back.
fn ran_in_image(consumer: &NodeFixture, name: &str, os: &str, running: &[String]) {
    let results = consumer.dir.join("work").join(format!("results-{name}"));
    let host_os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let host_id = host_os
        .lines()
        .find(|l| l.starts_with("ID="))
        .unwrap_or("ID=none");
    for i in 0..TASKS {
        let dir = results.join(i.to_string());
        let out = std::fs::read_to_string(dir.join("stdout")).unwrap();
        assert!(
            out.contains(&format!("os-release:{os}")),
            "{name} task {i}: {out}"
        );
        assert!(
            !out.contains(&format!("os-release:{host_id}\n")),
            "{name} task {i} saw its host's: {out}"
        );
        assert!(out.contains("cwd:/srv\n"), "{name} task {i}: {out}");
        assert!(out.contains("env:from-image\n"), "{name} task {i}: {out}");
        assert!(
            out.contains(&format!("args:[\"task-{i}\"]")),
            "{name} task {i}: {out}"
        );
        assert!(out.contains("write-image:false"), "{name} task {i}: {out}");
        assert_eq!(
            std::fs::read_to_string(dir.join("out.txt")).unwrap(),
            "from the image"
        );
        let p: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("provenance.json")).unwrap())
                .unwrap();
        assert!(
            running.iter().any(|h| p["host"] == h.as_str()),
            "{name} task {i} ran on {}, not a host that runs images",
            p["host"]
        );
    }
}

/// Per host, the (bytes fetched, bytes from the host's caches) its tasks'
/// "inputs ready" events said as they started, in order; adds to
/// `refusals` who refused a task for running no images (from the reasons
/// a waiting task shows, "refused by HOST: ...").
fn inputs_ready(
    lines: &[Value],
    refusals: &mut std::collections::BTreeSet<String>,
) -> BTreeMap<String, Vec<(u64, u64)>> {
    let mut per_host: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for l in lines {
        let host = l["host"].as_str().unwrap_or_default().to_string();
        if let Some(reason) = l["reason"].as_str() {
            if let Some((who, why)) = reason
                .strip_prefix("refused by ")
                .and_then(|r| r.split_once(": "))
            {
                if why.contains("runs no images") {
                    refusals.insert(who.to_string());
                }
            }
        }
        let Some(event) = l["event"].as_str() else {
            continue;
        };
        let Some(rest) = event.strip_prefix("inputs ready: ") else {
            continue;
        };
        let (fetched, cached) = rest
            .strip_suffix(" bytes from the host's cache")
            .and_then(|r| r.split_once(" bytes fetched, "))
            .unwrap_or_else(|| panic!("{event}"));
        per_host
            .entry(host)
            .or_default()
            .push((fetched.parse().unwrap(), cached.parse().unwrap()));
    }
    per_host
}

/// How many times `node`'s log says it read the image part whose content
/// (BLAKE3) is `hex` from the consumer, and found it in its input cache.
fn part_log(node: &NodeFixture, hex: &str) -> (usize, usize) {
    let log = node.log();
    let count = |what: &str| {
        log.lines()
            .filter(|l| l.contains(what) && l.contains(hex))
            .count()
    };
    (
        count("image part read from the consumer"),
        count("image part found in the input cache"),
    )
}

#[test]
fn a_batch_in_an_image_sees_its_os_release_on_every_host_and_the_image_crosses_once() {
    let Some((first, second, boot)) = image_hosts() else {
        return;
    };
    let denying = denying_host(&boot);
    let consumer = started(pool_node(None, &["--bootstrap", &boot, "--no-guest"]));
    let running = [peer(&first), peer(&second)];
    let denier = peer(&denying);
    until_listed(
        &consumer,
        &[running[0].clone(), running[1].clone(), denier.clone()],
    );

    // Two images the test builds: the probe in a base layer with an
    // os-release on top, packed as a docker-archive; and the same base
    // with another os-release, packed as an OCI layout.
    let work = consumer.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let probe = static_probe(&work);
    let (docker_layers, docker_config) = layered_probe_image(&probe, crate::guest_image::IMAGE_OS);
    let (oci_layers, oci_config) = layered_probe_image(&probe, OCI_OS);
    assert_eq!(docker_layers[0], oci_layers[0], "one base layer");
    let docker = work.join("probe-image.tar");
    std::fs::write(&docker, docker_archive_of(&docker_layers, &docker_config)).unwrap();
    let oci = work.join("probe-image-oci.tar");
    std::fs::write(&oci, oci_archive_of(&oci_layers, &oci_config)).unwrap();

    // Each image's parts, as they cross: its config and its layers, each
    // named by its content (BLAKE3, the data layer's name).
    let blake = |b: &[u8]| blake3::hash(b).to_hex().to_string();
    let base = (blake(&docker_layers[0]), docker_layers[0].len() as u64);
    let own = |config: &[u8], top: &[u8]| {
        [
            (blake(config), config.len() as u64),
            (blake(top), top.len() as u64),
        ]
    };
    let docker_own = own(&docker_config, &docker_layers[1]);
    let oci_own = own(&oci_config, &oci_layers[1]);

    // Who refused, from both batches; which hosts ran each image.
    let mut refusals = std::collections::BTreeSet::new();
    let mut ran: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut events: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for (name, archive, os, mine) in [
        ("docker", &docker, crate::guest_image::IMAGE_OS, &docker_own),
        ("oci", &oci, OCI_OS, &oci_own),
    ] {
        let lines = batch_in(&consumer, archive, name);
        ran_in_image(&consumer, name, os, &running);
        // Each host says, as each task starts, how many bytes it read from
        // the consumer and how many its caches held: all the image's parts
        // either way, read at one start per host at most.
        let whole = base.1 + mine[0].1 + mine[1].1;
        let per_host = inputs_ready(&lines, &mut refusals);
        eprintln!("{name} image per host, (fetched, from its caches) at each start: {per_host:?}");
        assert_eq!(
            per_host.values().map(Vec::len).sum::<usize>(),
            TASKS,
            "every {name} task's host said where its image came from: {per_host:?}"
        );
        for (host, starts) in &per_host {
            assert!(
                starts.iter().all(|(f, c)| f + c == whole),
                "{name} on {host}: {starts:?}, the image's parts are {whole} bytes"
            );
            assert!(
                starts.iter().filter(|(f, _)| *f > 0).count() <= 1,
                "the {name} image crossed to {host} more than once: {starts:?}"
            );
            ran.entry(host.clone()).or_default().push(name);
            events
                .entry(host.clone())
                .or_default()
                .extend(starts.iter().copied());
        }
    }
    eprintln!("refused by: {refusals:?}");
    // The hosts' own logs of each part they read: each part crossed to a
    // host at most once, the shared base layer once to every host that
    // ran either image, and a host that ran both found the base in its
    // input cache for the second; its bytes fetched in all are the bytes
    // of the parts it read, the base counted once.
    let mut both = 0;
    for (node, id) in [(&first, &running[0]), (&second, &running[1])] {
        let images = ran.get(id).cloned().unwrap_or_default();
        let counts: Vec<(&str, (usize, usize))> = [("base", &base.0)]
            .into_iter()
            .chain([
                ("docker config", &docker_own[0].0),
                ("docker top", &docker_own[1].0),
            ])
            .chain([("oci config", &oci_own[0].0), ("oci top", &oci_own[1].0)])
            .map(|(what, hex)| (what, part_log(node, hex)))
            .collect();
        eprintln!("host {id} ran {images:?}; parts (read from the consumer, found in its input cache): {counts:?}");
        let read = |what: &str| counts.iter().find(|c| c.0 == what).unwrap().1 .0;
        let ran_docker = usize::from(images.contains(&"docker"));
        let ran_oci = usize::from(images.contains(&"oci"));
        assert_eq!(
            read("base"),
            usize::from(!images.is_empty()),
            "{id}: {counts:?}"
        );
        assert_eq!(read("docker config"), ran_docker, "{id}: {counts:?}");
        assert_eq!(read("docker top"), ran_docker, "{id}: {counts:?}");
        assert_eq!(read("oci config"), ran_oci, "{id}: {counts:?}");
        assert_eq!(read("oci top"), ran_oci, "{id}: {counts:?}");
        let mut bytes = 0;
        if !images.is_empty() {
            bytes += base.1;
        }
        if ran_docker == 1 {
            bytes += docker_own[0].1 + docker_own[1].1;
        }
        if ran_oci == 1 {
            bytes += oci_own[0].1 + oci_own[1].1;
        }
        // The starts' counts add up to the parts it read, or to less when an
        // attempt ended before its start after reading some (what it read
        // stays in the input cache, and a later start finds it there).
        let fetched: u64 = events.get(id).map_or(0, |e| e.iter().map(|(f, _)| f).sum());
        if fetched != bytes {
            let log = node.log();
            let told: Vec<&str> = log
                .lines()
                .filter(|l| {
                    [
                        "image part",
                        "remote job",
                        "WARN",
                        "ERROR",
                        "failed",
                        "refused",
                    ]
                    .iter()
                    .any(|w| l.contains(w))
                })
                .collect();
            eprintln!(
                "{id} fetched {fetched} bytes over its starts, read {bytes}:\n{}",
                told.join("\n")
            );
        }
        assert!(
            fetched <= bytes,
            "{id}: {fetched} bytes fetched over its starts, parts of {bytes}"
        );
        if ran_docker + ran_oci == 2 {
            both += 1;
            let found_base = counts[0].1 .1;
            assert!(found_base >= 1, "{id} read the base again: {counts:?}");
        }
        // Each image it read, it unpacked once.
        let unpacked = node
            .log()
            .matches("image unpacked into the image cache")
            .count();
        assert_eq!(unpacked, ran_docker + ran_oci, "host {id}:\n{}", node.log());
    }
    assert!(
        both >= 1,
        "no host ran both images, so no base layer was shared: {ran:?}"
    );
    // The denying host took no task: it was asked (it is as free and as
    // reliable as the others) and said why, and the tasks went elsewhere.
    assert!(
        !denying.log().contains("remote job accepted"),
        "{}",
        denying.log()
    );
    assert_eq!(
        refusals.into_iter().collect::<Vec<_>>(),
        vec![denier.clone()],
        "only the denying host refuses, and it does"
    );
}

/// The image ids the consumer's table says `host`'s summary holds (`None`
/// while the host is not listed).
fn images_listed(consumer: &NodeFixture, host: &str) -> Option<Vec<String>> {
    let report: Value =
        serde_json::from_str(&consumer.run_ok(&["hosts", "--json", "--window", "1h"])).unwrap();
    let listed = report["hosts"].as_array().unwrap();
    let h = listed.iter().find(|l| l["peer"] == host)?;
    Some(
        h["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect(),
    )
}

/// Waits until the consumer's table says `host` holds exactly `want`.
fn until_images(consumer: &NodeFixture, host: &str, want: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = images_listed(consumer, host);
        if got.as_deref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{host}'s summary never said it holds {want:?}: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Runs a batch of one task in `archive` through `consumer`; returns the
/// host it ran on and its "inputs ready" event.
fn one_task(consumer: &NodeFixture, archive: &std::path::Path, name: &str) -> (String, String) {
    let results = consumer.dir.join("work").join(name);
    let (code, lines) = consumer
        .json_stream(
            "batch",
            &[
                "submit",
                "--wait",
                "--image",
                archive.to_str().unwrap(),
                "--range",
                "0..1",
                "--runtime",
                "1m",
                "--output",
                "out.txt",
                "--output-dir",
                results.to_str().unwrap(),
                "--",
                name,
            ],
        )
        .finish(Duration::from_secs(120));
    assert_eq!(code, 0, "{lines:#?}\n{}", consumer.log());
    let out = std::fs::read_to_string(results.join("0").join("stdout")).unwrap();
    assert!(out.contains("os-release:ID=gleaner-image-test"), "{out}");
    let p: Value = serde_json::from_str(
        &std::fs::read_to_string(results.join("0").join("provenance.json")).unwrap(),
    )
    .unwrap();
    let host = p["host"].as_str().unwrap().to_string();
    let ready: Vec<String> = lines
        .iter()
        .filter_map(|l| l["event"].as_str())
        .filter(|e| e.starts_with("inputs ready"))
        .map(str::to_string)
        .collect();
    assert_eq!(ready.len(), 1, "one attempt, one start: {lines:#?}");
    (host, ready[0].clone())
}

#[test]
fn a_later_task_in_an_image_goes_to_the_free_host_that_holds_it_and_reads_nothing() {
    let Some((first, second, boot)) = image_hosts() else {
        return;
    };
    let consumer = started(pool_node(None, &["--bootstrap", &boot, "--no-guest"]));
    let hosts = [(&first, peer(&first)), (&second, peer(&second))];
    until_listed(&consumer, &[hosts[0].1.clone(), hosts[1].1.clone()]);
    for (_, id) in &hosts {
        assert_eq!(images_listed(&consumer, id), Some(vec![]), "none held yet");
    }

    let work = consumer.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let probe = static_probe(&work);
    let (layer, config) = probe_image(&probe, crate::guest_image::IMAGE_OS);
    let archive = work.join("probe-image.tar");
    std::fs::write(&archive, docker_archive(&layer, &config)).unwrap();
    let size = std::fs::metadata(&archive).unwrap().len();
    // What crosses is the image's parts (its config and its layer), not the
    // archive that holds them.
    let parts = (config.len() + layer.len()) as u64;
    let fetched = format!("inputs ready: {parts} bytes fetched, 0 bytes from the host's cache");
    let cached = format!("inputs ready: 0 bytes fetched, {parts} bytes from the host's cache");

    // Nobody holds the image: the host the policy prefers reads it, and
    // its summary says so once its cache has it.
    let (preferred, event) = one_task(&consumer, &archive, "first");
    assert_eq!(event, fetched);
    let (p_node, other) = if preferred == hosts[0].1 {
        (hosts[0].0, hosts[1].clone())
    } else {
        (hosts[1].0, hosts[0].clone())
    };
    let list: Value = serde_json::from_str(&p_node.run_ok(&["images", "list", "--json"])).unwrap();
    let digest = list["images"][0]["digest"].as_str().unwrap().to_string();
    until_images(&consumer, &preferred, std::slice::from_ref(&digest));

    // The image moves: the preferred host's owner prunes it (its summary
    // says it holds none), the other host runs it itself (its summary says
    // it holds it).
    p_node.run_ok(&["images", "prune"]);
    until_images(&consumer, &preferred, &[]);
    let ran = other
        .0
        .gleaner()
        .arg("run-local")
        .arg("--image")
        .arg(&archive)
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "run-local: {}\n{}",
        String::from_utf8_lossy(&ran.stderr),
        other.0.log()
    );
    until_images(&consumer, &other.1, std::slice::from_ref(&digest));

    // Both free and equally reliable: the policy alone would choose the
    // preferred host again (and send the image across); the task goes to
    // the holder, which reads nothing.
    // A batch submitted within 10 s of the queue's last round is placed at
    // once on that round's answers, with the images their hosts' summaries
    // named then (`RANKING_FRESH_FOR`): let round A's answers go stale, so
    // this batch's round reads the summaries as they are now.
    std::thread::sleep(Duration::from_secs(11));
    let (host, event) = one_task(&consumer, &archive, "second");
    assert_eq!(
        host,
        other.1,
        "went to the host that no longer holds the image:\n{}",
        consumer.log()
    );
    assert_eq!(event, cached, "the image crossed again");
    // The same image packed as an OCI layout has the same id: a task in
    // it goes to the holder too, which reads nothing of that archive either
    // (its parts are the same bytes).
    let oci = work.join("probe-image-oci.tar");
    std::fs::write(&oci, oci_archive(&layer, &config)).unwrap();
    let oci_size = std::fs::metadata(&oci).unwrap().len();
    assert_ne!(oci_size, size, "another archive of the same image");
    let (host, event) = one_task(&consumer, &oci, "third");
    assert_eq!(host, other.1, "{}", consumer.log());
    assert_eq!(event, cached);
    // The preferred host read the image once (the first task), the
    // holder never from the consumer.
    let unpacked = |n: &NodeFixture| {
        n.log()
            .matches("image unpacked into the image cache")
            .count()
    };
    assert_eq!((unpacked(p_node), unpacked(other.0)), (1, 0));
}
