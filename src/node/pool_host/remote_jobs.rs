//! The jobs peers submitted to this host: a submission checked against the
//! owner's limits before anything is written, the bounded record of recent
//! jobs, and their directories (removed even when a guest took write
//! permission off, and swept at start); and the one mapping of the
//! admission rule's refusal into the reason a consumer reads. It must not
//! know the Swarm nor how a guest is run.

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};

use libp2p::PeerId;
use tokio::sync::mpsc;

use crate::model::admit::Refusal;
use crate::model::ids::JobId;
use crate::model::relpath::RelPath;
use crate::net::protocol::{
    GuestUsage, ImageRef, InputRef, JobEventKind, JobRequest, JobSubmit, LayeredImageRef,
    RejectReason, WireState,
};
use crate::node::config::GuestSection;

/// Most arguments, environment entries, inputs or outputs a job may carry.
const MAX_LIST: usize = 256;
/// Longest argument or environment entry, bytes.
const MAX_TEXT: usize = 64 * 1024;

/// Checks a submission against this host's limits, before anything is
/// written, and returns the consumer's job id. The reason goes back to the
/// consumer.
pub fn check_submit(s: &JobSubmit, guest: &GuestSection) -> Result<JobId, RejectReason> {
    let invalid = |why: String| Err(RejectReason::Invalid(why));
    let job_id = JobId::new(s.job_id.as_str()).map_err(|e| RejectReason::Invalid(e.to_string()))?;
    if s.argv.is_empty() || s.argv[0].is_empty() {
        return invalid("the command line is empty".into());
    }
    if [s.argv.len(), s.env.len(), s.inputs.len(), s.outputs.len()]
        .iter()
        .any(|&n| n > MAX_LIST)
    {
        return invalid(format!(
            "more than {MAX_LIST} arguments, variables, inputs or outputs"
        ));
    }
    let texts = s.argv.iter().chain(s.env.iter().flat_map(|(k, v)| [k, v]));
    for t in texts {
        if t.len() > MAX_TEXT || t.contains('\0') {
            return invalid("an argument or variable is too long or holds NUL".into());
        }
    }
    if s.env.iter().any(|(k, _)| k.is_empty() || k.contains('=')) {
        return invalid("an environment variable has an empty name or '=' in it".into());
    }
    let paths = s
        .inputs
        .iter()
        .map(|i| &i.path)
        .chain(s.outputs.iter())
        .chain(s.checkpoint.iter().map(|c| &c.path));
    for p in paths {
        if let Err(e) = RelPath::new(p.as_str()) {
            return invalid(format!(
                "{p:?} is not a relative path inside the job directory: {}",
                e.fault()
            ));
        }
    }
    if let Some(clash) = input_clash(s) {
        return invalid(clash);
    }
    if s.memory_mib > guest.max_mem_mib || s.wall_time_limit_secs > guest.max_runtime_secs {
        return Err(RejectReason::TooBig);
    }
    let cap = guest.max_input_mib.saturating_mul(1 << 20);
    if let Some(big) = s.inputs.iter().find(|i| i.size > cap) {
        return Err(RejectReason::InputTooBig {
            path: big.path.clone(),
            size: big.size,
            cap,
        });
    }
    let total = s.inputs.iter().fold(0u64, |t, i| t.saturating_add(i.size));
    let job_cap = guest.max_job_input_mib.saturating_mul(1 << 20);
    if total > job_cap {
        return Err(RejectReason::InputsTooBig {
            total,
            cap: job_cap,
        });
    }
    if s.wall_time_limit_secs == 0 {
        return invalid("the wall-time limit must be at least one second".into());
    }
    Ok(job_id)
}

/// Largest image archive a host reads, bytes: the image cache's own
/// limits (4 GiB of contents, 200,000 entries) as a tar, with room for its
/// headers and documents. What it unpacks to is bounded again, counted
/// while it is read.
pub const IMAGE_ARCHIVE_MAX: u64 = 5 << 30;
/// Longest name of an image archive, or of one of its parts (they only
/// name the image in messages).
const IMAGE_NAME_MAX: usize = 255;

/// A name that fits a message: 1 to [`IMAGE_NAME_MAX`] bytes without NUL.
fn check_image_name(name: &str) -> Result<(), RejectReason> {
    if name.is_empty() || name.len() > IMAGE_NAME_MAX || name.contains('\0') {
        return Err(RejectReason::Invalid(format!(
            "the image's name must be 1 to {IMAGE_NAME_MAX} bytes without NUL"
        )));
    }
    Ok(())
}

/// Checks a job's image by its parts before anything is fetched: names
/// that fit a message, a config no larger than an image's config may be,
/// no more layers than an image may have, and no more bytes in all than
/// an archive the host would read.
pub fn check_layers(image: &LayeredImageRef) -> Result<(), RejectReason> {
    check_image_name(&image.name)?;
    let parts = || std::iter::once(&image.config).chain(&image.layers);
    parts().try_for_each(|p: &InputRef| check_image_name(&p.path))?;
    let limits = crate::image::ImageLimits::default();
    if image.config.size > limits.max_json_bytes {
        return Err(RejectReason::Invalid(format!(
            "the image's config is {} bytes (at most {})",
            image.config.size, limits.max_json_bytes
        )));
    }
    if image.layers.len() > limits.max_layers {
        return Err(RejectReason::Invalid(format!(
            "the image has {} layers (at most {})",
            image.layers.len(),
            limits.max_layers
        )));
    }
    let total = parts().fold(0u64, |t, p| t.saturating_add(p.size));
    if total > IMAGE_ARCHIVE_MAX {
        return Err(RejectReason::InputTooBig {
            path: image.name.clone(),
            size: total,
            cap: IMAGE_ARCHIVE_MAX,
        });
    }
    Ok(())
}

/// Checks a job's image reference before anything is fetched: a name that
/// fits a message, an archive the host would read.
pub fn check_image(image: &ImageRef) -> Result<(), RejectReason> {
    let name = &image.archive.path;
    check_image_name(name)?;
    if image.archive.size > IMAGE_ARCHIVE_MAX {
        return Err(RejectReason::InputTooBig {
            path: name.clone(),
            size: image.archive.size,
            cap: IMAGE_ARCHIVE_MAX,
        });
    }
    Ok(())
}

/// Two inputs that would land on the same place in the work dir: the same
/// path twice, or one input inside another (a file where the other needs a
/// directory), named. Paths are already checked ([`RelPath`]: no `.`, no
/// empty component), so equal places are equal texts. At most 256 inputs of
/// at most 1 KiB each: the set and the walk up each path stay small.
fn input_clash(s: &JobSubmit) -> Option<String> {
    let mut seen: HashSet<&str> = HashSet::new();
    for input in &s.inputs {
        if !seen.insert(input.path.as_str()) {
            return Some(format!("input {:?} is given twice", input.path));
        }
    }
    for input in &s.inputs {
        let path = input.path.as_str();
        let mut cut = path.len();
        while let Some(slash) = path[..cut].rfind('/') {
            if seen.contains(&path[..slash]) {
                return Some(format!(
                    "input {path:?} is inside input {:?}, a file",
                    &path[..slash]
                ));
            }
            cut = slash;
        }
    }
    None
}

/// A job a peer submitted here.
#[derive(Debug)]
pub struct RemoteJob {
    /// The consumer that submitted it; the only peer it answers.
    pub consumer: PeerId,
    /// The consumer's id for it.
    pub consumer_job_id: JobId,
    /// Our id (its directory name).
    pub local_id: JobId,
    /// Job directory (`stdout`, `stderr`, `work/`).
    pub dir: PathBuf,
    /// Output files the consumer declared.
    pub outputs: Vec<String>,
    /// Next event sequence number.
    pub seq: u32,
    /// The event that ended the job, once it has ended: what a consumer
    /// that lost its events is told (`JobRequest::Query`).
    pub ended: Option<JobEventKind>,
    /// The ordered event queue to the consumer.
    pub events: mpsc::UnboundedSender<JobRequest>,
    /// What the guest used, reported just before its end and sent with it.
    pub usage: Option<GuestUsage>,
}

/// A peer's job as `status` could list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteJobSummary {
    pub consumer: PeerId,
    pub consumer_job_id: JobId,
    pub local_id: JobId,
}

/// Remote jobs, the running one and the last few finished (their outputs stay
/// fetchable until they fall off).
#[derive(Debug, Default)]
pub struct RemoteJobs {
    jobs: VecDeque<RemoteJob>,
}

/// Finished remote jobs whose outputs can still be fetched.
const KEEP_JOBS: usize = 16;

impl RemoteJobs {
    /// Adds a job; returns the oldest one when it falls off the list (its
    /// directory is then the caller's to delete: nobody can fetch it any more).
    pub fn add(&mut self, job: RemoteJob) -> Option<RemoteJob> {
        let evicted = if self.jobs.len() >= KEEP_JOBS {
            self.jobs.pop_front()
        } else {
            None
        };
        self.jobs.push_back(job);
        evicted
    }

    pub fn by_local_id(&mut self, id: &str) -> Option<&mut RemoteJob> {
        self.jobs.iter_mut().find(|j| j.local_id.as_str() == id)
    }

    /// Who submitted each job kept here, oldest first.
    pub fn summaries(&self) -> Vec<RemoteJobSummary> {
        self.jobs
            .iter()
            .map(|j| RemoteJobSummary {
                consumer: j.consumer,
                consumer_job_id: j.consumer_job_id.clone(),
                local_id: j.local_id.clone(),
            })
            .collect()
    }

    /// The newest job `consumer` submitted as `job_id`: a consumer that
    /// used an id again (its data dir reset, or a hostile one) is answered
    /// for the job it submitted last, never for an older one that happens
    /// to be first on the list.
    pub fn by_consumer(&self, consumer: PeerId, job_id: &str) -> Option<&RemoteJob> {
        self.jobs
            .iter()
            .rev()
            .find(|j| j.consumer == consumer && j.consumer_job_id.as_str() == job_id)
    }
}

/// Prefix of the directory names of peers' jobs under the jobs dir.
pub const REMOTE_PREFIX: &str = "remote-";

/// Deletes a remote job's directory (stdout, stderr, work dir), logging failures:
/// a peer's outputs must not fill the volunteer's disk. A guest running as the
/// node's user may have taken write permission off its own directories, so
/// permission is given back (to directories only, never through a symlink)
/// before a second try. True when the directory is gone.
pub fn remove_job_dir(dir: &Path) -> bool {
    let mut result = std::fs::remove_dir_all(dir);
    if matches!(&result, Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied) {
        make_dirs_writable(dir);
        result = std::fs::remove_dir_all(dir);
    }
    match result {
        Ok(()) => {
            tracing::debug!(dir = %dir.display(), "removed a finished remote job");
            true
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a remote job's directory");
            false
        }
    }
}

/// Sets every directory under `dir` (itself included) to mode 0700; symlinks
/// are neither followed nor changed.
fn make_dirs_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let is_dir = std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_dir());
    if !is_dir {
        return;
    }
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            make_dirs_writable(&entry.path());
        }
    }
}

/// Deletes the directories of peers' jobs left by an earlier run of the node:
/// their consumers can no longer fetch them (the job list lives in memory).
/// The owner's own `run-local` jobs are kept.
pub fn remove_stale_remote_dirs(jobs_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(jobs_dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let is_remote = entry
            .file_name()
            .to_string_lossy()
            .starts_with(REMOTE_PREFIX);
        // file_type does not follow symlinks: only real directories go.
        if is_remote && entry.file_type().is_ok_and(|t| t.is_dir()) && remove_job_dir(&entry.path())
        {
            removed += 1;
        }
    }
    removed
}

impl From<Refusal> for RejectReason {
    /// The one place the admission rule's refusal becomes the reason a
    /// consumer reads: the owner's pause or withholding is S5 to a peer, a
    /// pending `pause --after-job` a busy slot, the node's memory limit the
    /// job being too big.
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::NoGuests => RejectReason::Invalid(r.to_string()),
            Refusal::Paused | Refusal::Withheld(_) => RejectReason::HostState(WireState::S5),
            Refusal::Finishing | Refusal::Busy { .. } => RejectReason::Busy,
            Refusal::TooMuchMemory { .. } => RejectReason::TooBig,
            Refusal::HostState(state) => RejectReason::HostState(state.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submit() -> JobSubmit {
        JobSubmit {
            job_id: "j-1".into(),
            argv: vec!["sh".into(), "-c".into(), "true".into()],
            env: vec![("A".into(), "1".into())],
            inputs: vec![InputRef {
                path: "in/data.txt".into(),
                hash: [0; 32],
                size: 1,
            }],
            outputs: vec!["out.txt".into()],
            memory_mib: 100,
            expected_runtime_secs: 60,
            wall_time_limit_secs: 60,
            checkpoint: None,
        }
    }

    #[test]
    fn submissions_are_checked_against_the_limits() {
        let g = GuestSection::default();
        assert_eq!(
            check_submit(&submit(), &g).map(|id| id.to_string()),
            Ok("j-1".to_string())
        );
        let mut s = submit();
        s.memory_mib = g.max_mem_mib + 1;
        assert_eq!(check_submit(&s, &g), Err(RejectReason::TooBig));
        for bad in ["../x", "/etc/passwd", "a/../../b", "", "a/./b"] {
            let mut s = submit();
            s.outputs = vec![bad.into()];
            assert!(
                matches!(check_submit(&s, &g), Err(RejectReason::Invalid(_))),
                "{bad}"
            );
        }
        // Input caps name the input.
        let mut s = submit();
        s.inputs[0].size = (g.max_input_mib << 20) + 1;
        assert!(
            matches!(check_submit(&s, &g), Err(RejectReason::InputTooBig { ref path, .. }) if path == "in/data.txt")
        );
        let mut s = submit();
        let half = g.max_input_mib << 19;
        s.inputs = (0..(2 * g.max_job_input_mib / g.max_input_mib + 1))
            .map(|i| InputRef {
                path: format!("in/{i}"),
                hash: [0; 32],
                size: half * 2,
            })
            .collect();
        assert!(matches!(
            check_submit(&s, &g),
            Err(RejectReason::InputsTooBig { .. })
        ));
        let mut s = submit();
        s.job_id = "../../x".into();
        assert!(check_submit(&s, &g).is_err());
        let mut s = submit();
        s.argv.clear();
        assert!(check_submit(&s, &g).is_err());
        let mut s = submit();
        s.env = vec![("A=B".into(), "c".into())];
        assert!(check_submit(&s, &g).is_err());
    }

    /// Issue 30, finding 5: two inputs at one path were accepted.
    #[test]
    fn two_inputs_at_one_place_are_refused_by_name() {
        let g = GuestSection::default();
        let input = |path: &str| InputRef {
            path: path.into(),
            hash: [1; 32],
            size: 1,
        };
        let mut s = submit();
        s.inputs = vec![input("in/a"), input("b"), input("in/a")];
        assert_eq!(
            check_submit(&s, &g),
            Err(RejectReason::Invalid(
                "input \"in/a\" is given twice".into()
            ))
        );
        let mut s = submit();
        s.inputs = vec![input("in/a/b/c"), input("in/a")];
        assert_eq!(
            check_submit(&s, &g),
            Err(RejectReason::Invalid(
                "input \"in/a/b/c\" is inside input \"in/a\", a file".into()
            ))
        );
        // Siblings and a shared prefix that is no directory are fine.
        let mut s = submit();
        s.inputs = vec![input("in/a"), input("in/ab"), input("in/b/c")];
        assert!(check_submit(&s, &g).is_ok());
    }

    fn job(local_id: &str, dir: PathBuf) -> RemoteJob {
        let (tx, _rx) = mpsc::unbounded_channel();
        RemoteJob {
            consumer: PeerId::random(),
            consumer_job_id: JobId::new(local_id).unwrap(),
            local_id: JobId::new(local_id).unwrap(),
            dir,
            outputs: Vec::new(),
            seq: 0,
            ended: None,
            events: tx,
            usage: None,
        }
    }

    /// Issue 30: a consumer that submits under an id it used before is
    /// answered for its newest job of that id, not the oldest.
    #[test]
    fn a_reused_job_id_names_the_newest_job() {
        let mut jobs = RemoteJobs::default();
        let mut first = job("first", PathBuf::new());
        let consumer = first.consumer;
        first.consumer_job_id = JobId::new("again").unwrap();
        let mut second = job("second", PathBuf::new());
        second.consumer = consumer;
        second.consumer_job_id = JobId::new("again").unwrap();
        assert!(jobs.add(first).is_none());
        assert!(jobs.add(second).is_none());
        let found = jobs.by_consumer(consumer, "again").unwrap();
        assert_eq!(found.local_id.as_str(), "second");
        assert!(jobs.by_consumer(PeerId::random(), "again").is_none());
    }

    #[test]
    fn the_oldest_job_falls_off_and_stale_remote_dirs_go() {
        let mut jobs = RemoteJobs::default();
        for i in 0..KEEP_JOBS {
            assert!(jobs.add(job(&format!("j{i}"), PathBuf::new())).is_none());
        }
        let evicted = jobs.add(job("last", PathBuf::new())).unwrap();
        assert_eq!(evicted.local_id.as_str(), "j0");
        assert!(jobs.by_local_id("j0").is_none());
        assert!(jobs.by_local_id("last").is_some());
        // Jobs are registered only once they started, so the list holds
        // started jobs only; the next one pushes out the next oldest.
        assert_eq!(
            jobs.add(job("again", PathBuf::new()))
                .unwrap()
                .local_id
                .as_str(),
            "j1"
        );
        assert_eq!(jobs.summaries().len(), KEEP_JOBS);

        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join(format!("{REMOTE_PREFIX}1-0"));
        std::fs::create_dir_all(old.join("work/sub")).unwrap();
        std::fs::write(old.join("work/sub/out"), b"x").unwrap();
        let local = dir.path().join("local-1");
        std::fs::create_dir(&local).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("remote-link")).unwrap();
        assert_eq!(remove_stale_remote_dirs(dir.path()), 1);
        assert!(!old.exists());
        assert!(local.exists(), "the owner's own jobs stay");
        assert!(elsewhere.path().exists(), "symlinks are not followed");
        assert_eq!(remove_stale_remote_dirs(&dir.path().join("none")), 0);
    }

    #[test]
    fn a_guest_cannot_keep_its_directory_by_taking_write_permission_off() {
        // Meaningful when the tests run as an ordinary user (root ignores the
        // mode bits); as root it still checks that symlinks are not followed.
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let job = dir.path().join(format!("{REMOTE_PREFIX}2-0"));
        let locked = job.join("work/locked");
        std::fs::create_dir_all(&locked).unwrap();
        std::fs::write(locked.join("f"), b"x").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o500)).unwrap();
        std::os::unix::fs::symlink(outside.path(), job.join("work/link")).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        std::fs::set_permissions(job.join("work"), std::fs::Permissions::from_mode(0o500)).unwrap();
        assert!(remove_job_dir(&job));
        assert!(!job.exists());
        let mode = std::fs::metadata(outside.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o500, "a symlink's target is left alone");
        std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    }

    #[test]
    fn an_image_is_checked_before_anything_is_fetched() {
        let image = |path: &str, size: u64| ImageRef {
            id: [1; 32],
            archive: InputRef {
                path: path.into(),
                hash: [2; 32],
                size,
            },
        };
        assert_eq!(check_image(&image("probe.tar", 10 << 20)), Ok(()));
        assert_eq!(
            check_image(&image("huge.tar", IMAGE_ARCHIVE_MAX + 1)),
            Err(RejectReason::InputTooBig {
                path: "huge.tar".into(),
                size: IMAGE_ARCHIVE_MAX + 1,
                cap: IMAGE_ARCHIVE_MAX,
            })
        );
        for bad in ["", "a\0b", &"x".repeat(IMAGE_NAME_MAX + 1)] {
            assert!(
                matches!(check_image(&image(bad, 1)), Err(RejectReason::Invalid(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn an_image_by_its_layers_is_checked_before_anything_is_fetched() {
        let part = |path: &str, size: u64| InputRef {
            path: path.into(),
            hash: [2; 32],
            size,
        };
        let image = |layers: Vec<InputRef>| LayeredImageRef {
            id: [1; 32],
            name: "probe.tar".into(),
            config: part("probe.tar config", 900),
            layers,
        };
        let good = image(vec![part("probe.tar layer 1", 10 << 20)]);
        assert_eq!(check_layers(&good), Ok(()));
        let mut big_config = good.clone();
        big_config.config.size = (1 << 20) + 1;
        let too_many = image(vec![part("l", 1); 128]);
        let unnamed = image(vec![part("", 1)]);
        for bad in [big_config, too_many, unnamed] {
            assert!(
                matches!(check_layers(&bad), Err(RejectReason::Invalid(_))),
                "{bad:?}"
            );
        }
        let huge = image(vec![part("a", IMAGE_ARCHIVE_MAX), part("b", 1)]);
        assert_eq!(
            check_layers(&huge),
            Err(RejectReason::InputTooBig {
                path: "probe.tar".into(),
                size: IMAGE_ARCHIVE_MAX + 901,
                cap: IMAGE_ARCHIVE_MAX,
            })
        );
    }
}
