//! Where the cgroup hierarchies are: the cgroup mounts read from
//! `/proc/self/mountinfo` (v2, or v1 with their controllers) and the
//! directory of this process's own cgroup in each, from `/proc/self/cgroup`.
//!
//! It only parses text: it must not know what a job group is or write to
//! any cgroup.

use std::path::PathBuf;

/// A cgroup mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CgroupMount {
    /// Where it is mounted.
    pub(super) point: PathBuf,
    /// The hierarchy path shown at the mount point (usually "/").
    pub(super) root: String,
    pub(super) v2: bool,
    /// v1 controllers (from the super options); empty for v2.
    pub(super) controllers: Vec<String>,
}

impl CgroupMount {
    /// The directory of this process's own cgroup in this hierarchy.
    pub(super) fn dir_of(&self, own: &[(Vec<String>, String)]) -> Option<PathBuf> {
        let path = own.iter().find_map(|(ctrls, path)| {
            let matches = if self.v2 {
                ctrls.is_empty()
            } else {
                ctrls.iter().any(|c| self.controllers.contains(c))
            };
            matches.then_some(path.as_str())
        })?;
        let rel = path.strip_prefix(self.root.as_str()).unwrap_or(path);
        let rel = rel.trim_start_matches('/');
        // Our own supervisor leaf (see `v2_base`) is not where jobs go.
        let rel = rel.strip_suffix("/gleaner-supervisor").unwrap_or(rel);
        let rel = if rel == "gleaner-supervisor" { "" } else { rel };
        Some(if rel.is_empty() {
            self.point.clone()
        } else {
            self.point.join(rel)
        })
    }
}

pub(super) fn parse_cgroup_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split_whitespace().collect();
            let mut right = right.split_whitespace();
            let fstype = right.next()?;
            let _source = right.next();
            let options = right.next().unwrap_or("");
            let (root, point) = (left.get(3)?, left.get(4)?);
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            let controllers = if v2 {
                Vec::new()
            } else {
                options
                    .split(',')
                    .filter(|o| !matches!(*o, "rw" | "ro") && !o.contains('='))
                    .map(String::from)
                    .collect()
            };
            Some(CgroupMount {
                point: PathBuf::from(unescape_mount(point)),
                root: unescape_mount(root),
                v2,
                controllers,
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// `(controllers, path)` per line of `/proc/self/cgroup`; v2 has none.
pub(super) fn parse_own_cgroups(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            let ctrls = parts.next()?;
            let path = parts.next()?;
            let ctrls = ctrls
                .split(',')
                .filter(|c| !c.is_empty())
                .map(|c| c.trim_start_matches("name=").to_string())
                .collect();
            Some((ctrls, path.to_string()))
        })
        .collect()
}
