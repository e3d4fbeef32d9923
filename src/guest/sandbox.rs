//! What isolation a guest gets on this kernel: the layers probed once when
//! the supervisor starts ([`Layers`]: each probe forks, so `status` must not
//! run them) and, per guest, the plan decided before the fork
//! ([`SandboxPlan`]: namespaces, the narrow view, the Landlock ruleset and
//! the report of what the guest got, with a warning for each layer missing).
//!
//! It must not know about jobs, processes or events: the supervisor hands
//! the plan to the launcher and the report to the node.

use super::event::SandboxReport;
use super::ids::{default_ids, Ids};
use super::{landlock, launch, view, GuestConfig, GuestImage};
use std::path::{Path, PathBuf};

/// The namespace layers and quota a guest gets here, probed once (each
/// probe forks, so `status` must not run them).
#[derive(Debug, Clone, Copy)]
pub struct Layers {
    /// User, mount, PID and IPC namespaces and the mounts of the narrow view.
    pub view: bool,
    /// A user and network namespace (the layer without the view).
    pub netns: bool,
    /// The node can mount the work dir's tmpfs (it is root).
    pub quota: bool,
}

impl Layers {
    /// Probes what this kernel allows a guest of the config's user.
    pub fn probe(config: &GuestConfig) -> Layers {
        let ids = default_ids(config);
        Layers {
            view: view::can_build(ids, VIEW_FLAGS | libc::CLONE_NEWNET),
            netns: launch::can_unshare_net(ids),
            quota: nix::unistd::geteuid().is_root() && config.disk_mib > 0,
        }
    }
}

/// The namespaces of the narrow view (the network one is added when the job
/// has no network).
pub const VIEW_FLAGS: libc::c_int =
    libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;

/// The isolation this kernel allows for one guest, decided before the fork.
pub struct SandboxPlan {
    pub unshare_flags: libc::c_int,
    pub landlock: Option<landlock::Ruleset>,
    pub view: Option<view::ViewPlan>,
    pub report: SandboxReport,
}

impl SandboxPlan {
    pub fn prepare(
        work_dir: &Path,
        ids: Option<Ids>,
        allow_network: bool,
        layers: Layers,
        hidden: &[PathBuf],
        image: Option<&GuestImage>,
    ) -> SandboxPlan {
        let mut warnings = Vec::new();
        let uid = ids.map_or_else(|| nix::unistd::geteuid().as_raw(), |i| i.uid);
        let gid = ids.map_or_else(|| nix::unistd::getegid().as_raw(), |i| i.gid);
        // The narrow view (user, mount, PID and IPC namespaces, and a network
        // one when the job has no network) wherever the kernel allows it.
        let view = if layers.view {
            let planned = match image {
                Some(img) => view::ViewPlan::with_image(uid, gid, &img.rootfs, &img.work_dir),
                None => view::ViewPlan::new(work_dir, uid, gid, hidden),
            };
            match planned {
                Ok(v) => Some(v),
                Err(e) => {
                    warnings.push(format!("no narrow view: {e}"));
                    None
                }
            }
        } else {
            warnings.push(
                "no narrow view (the kernel refused the namespaces or mounts in them)".into(),
            );
            None
        };
        let net_flag = if allow_network { 0 } else { libc::CLONE_NEWNET };
        let unshare_flags = if view.is_some() {
            VIEW_FLAGS | net_flag
        } else if layers.netns {
            // A user namespace with an IPC namespace of its own, so System V
            // objects die with the job; a network namespace too without network.
            libc::CLONE_NEWUSER | libc::CLONE_NEWIPC | net_flag
        } else {
            0
        };
        let net_namespace = unshare_flags & libc::CLONE_NEWNET != 0;
        if !allow_network && !net_namespace {
            warnings.push("no user and network namespace (the kernel refused unshare)".into());
        }
        // Without the view, Landlock confines reads too.
        let mut readable: Vec<&Path> = view::SYSTEM_DIRS.iter().map(Path::new).collect();
        readable.extend(["/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"].map(Path::new));
        let landlock = match landlock::abi_version() {
            Some(abi) => match landlock::build(
                abi,
                work_dir,
                !allow_network && !net_namespace,
                view.is_none().then_some(readable.as_slice()),
            ) {
                Ok(r) => Some(r),
                Err(e) => {
                    warnings.push(format!("Landlock ruleset not built: {e}"));
                    None
                }
            },
            None => {
                warnings.push("Landlock is not available: writes are not confined".into());
                None
            }
        };
        let tcp_denied = landlock.as_ref().is_some_and(|r| r.denies_tcp);
        let network_blocked = !allow_network && (net_namespace || tcp_denied);
        if !allow_network && !network_blocked {
            warnings.push("the guest can reach the network".into());
        }
        SandboxPlan {
            unshare_flags,
            report: SandboxReport {
                uid,
                namespaces: net_namespace,
                landlock: landlock.is_some(),
                network_blocked,
                narrow_view: view.is_some(),
                pid_namespace: view.is_some(),
                work_quota_bytes: None,
                warnings,
            },
            view,
            landlock,
        }
    }
}
