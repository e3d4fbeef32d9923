//! Unit tests of the containment's pure parts: reading the mounts and
//! this process's own cgroups, the counters, the node's key and the report.

use super::files::counter;
use super::*;

#[test]
fn finds_v1_and_v2_mounts_and_own_paths() {
    let mi = "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
              31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
              32 25 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate\n\
              33 25 0:29 / /proc rw - proc proc rw\n";
    let mounts = parse_cgroup_mounts(mi);
    assert_eq!(mounts.len(), 3);
    assert_eq!(mounts[1].controllers, vec!["cpu", "cpuacct"]);
    assert!(mounts[2].v2);
    let own = parse_own_cgroups("4:memory:/a/b\n1:cpu,cpuacct:/\n0::/user.slice\n");
    assert_eq!(
        mounts[0].dir_of(&own),
        Some(PathBuf::from("/sys/fs/cgroup/memory/a/b"))
    );
    assert_eq!(
        mounts[1].dir_of(&own),
        Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"))
    );
    assert_eq!(
        mounts[2].dir_of(&own),
        Some(PathBuf::from("/sys/fs/cgroup/unified/user.slice"))
    );
    let leaf = parse_own_cgroups("0::/system.slice/g.service/gleaner-supervisor\n");
    assert_eq!(
        mounts[2].dir_of(&leaf),
        Some(PathBuf::from(
            "/sys/fs/cgroup/unified/system.slice/g.service"
        ))
    );
}

#[test]
fn reads_counters_and_keys_are_stable() {
    assert_eq!(counter("oom 2\noom_kill 3\n", "oom_kill"), 3);
    assert_eq!(counter("oom_kill_disable 0\nunder_oom 0\n", "oom_kill"), 0);
    assert_eq!(node_key(Path::new("/x/y")), node_key(Path::new("/x/y")));
    assert_ne!(node_key(Path::new("/x/y")), node_key(Path::new("/x/z")));
}

#[test]
fn the_report_says_what_holds() {
    let r = ContainmentReport {
        cgroup: "none".into(),
        group_controls: vec![],
        no_cgroup_reason: Some("no pids controller mounted".into()),
        namespaces: vec!["user".into(), "pid".into()],
        view: "new root".into(),
        landlock_abi: Some(7),
        work_quota_bytes: None,
    };
    let text = r.to_string();
    assert!(
        text.contains("job group: none (no pids controller mounted)"),
        "{text}"
    );
    assert!(text.contains("namespaces: user, pid"), "{text}");
}
