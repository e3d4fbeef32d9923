//! The node's side of the pool: the network settings its config implies, and
//! the host's handling of peers' requests — reliability answers from its own
//! history, remote job submissions checked against its limits, job events sent
//! back to the consumer in order, and output fetches confined to the job's
//! directory.
//!
//! The node loop calls these; this module owns no task of its own except the
//! per-job event sender. It must not know the Swarm (that is `net`) nor how a
//! guest is sandboxed (`guest`).

use std::collections::{HashSet, VecDeque};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use libp2p::PeerId;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use crate::guest::{ExitInfo, GuestEventKind, KillCause};
use crate::model::ids::JobId;
use crate::model::relpath::RelPath;
use crate::net::protocol::{
    GuestUsage, JobEventKind, JobRequest, JobSubmit, OutputName, RejectReason, WireState,
    OUTPUT_CHUNK_MAX,
};
use crate::net::{read_swarm_key, BuildError, NetConfig, NetError, NetHandle};
use crate::node::config::{GuestSection, NetSection};

/// The network settings `[net]` implies. Addresses and peer ids were checked
/// when the config was loaded; the swarm key file is read here.
pub fn net_config(net: &NetSection) -> Result<NetConfig, BuildError> {
    let mut cfg = NetConfig::lan(&net.pool);
    cfg.listen = net.listen.clone();
    cfg.bootstrap = net.bootstrap.clone();
    cfg.mdns = net.mdns;
    cfg.kad_server = net.kad_server || net.relay;
    cfg.autonat = net.autonat;
    cfg.relay_server = net.relay;
    cfg.swarm_key = match &net.swarm_key_file {
        Some(path) => Some(read_swarm_key(path)?),
        None => None,
    };
    cfg.allowlist = if net.allowlist.is_empty() {
        None
    } else {
        Some(net.allowlist.iter().copied().collect::<HashSet<_>>())
    };
    cfg.request_timeout = net.request_timeout;
    cfg.announce_interval = net.announce_interval;
    // announce_interval is at most an hour (validated), so this cannot overflow.
    cfg.member_ttl = net
        .announce_interval
        .saturating_mul(3)
        .saturating_add(Duration::from_secs(5));
    Ok(cfg)
}

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

    pub fn by_consumer(&self, consumer: PeerId, job_id: &str) -> Option<&RemoteJob> {
        self.jobs
            .iter()
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

/// The wire event for a guest event, if the consumer needs to hear of it;
/// `usage` is what the guest used, sent with its end.
pub fn wire_event(kind: &GuestEventKind, usage: Option<GuestUsage>) -> Option<JobEventKind> {
    match kind {
        GuestEventKind::Checkpointed { size, hash } => Some(JobEventKind::Checkpointed {
            size: *size,
            hash: *hash,
        }),
        GuestEventKind::CheckpointRefused { reason } => Some(JobEventKind::CheckpointRefused {
            reason: reason.clone(),
        }),
        GuestEventKind::Started { .. } => Some(JobEventKind::Started),
        GuestEventKind::Reniced { nice, .. } if *nice > 0 => Some(JobEventKind::Reniced),
        GuestEventKind::Suspended => Some(JobEventKind::Suspended),
        GuestEventKind::Resumed => Some(JobEventKind::Resumed),
        GuestEventKind::Exited {
            cause: Some(KillCause::OverDeclaredMemory),
            ..
        } => Some(JobEventKind::KilledOverMemory),
        GuestEventKind::Exited { cause: Some(c), .. } => Some(JobEventKind::Killed {
            cause: kill_state(*c),
            usage,
        }),
        GuestEventKind::Exited { exit, cause: None } => Some(JobEventKind::Finished {
            exit_status: match exit {
                ExitInfo::Code(c) => *c,
                ExitInfo::Signal(s) => 128 + s,
            },
            usage,
        }),
        _ => None,
    }
}

/// The failure state behind a kill; `None` for the wall-time limit, and S5 for a cancel
/// (the host withdrew the job).
fn kill_state(cause: KillCause) -> Option<WireState> {
    match cause {
        KillCause::Cancelled => Some(WireState::S5),
        other => other.state().map(WireState::from),
    }
}

/// Starts the task that sends a job's events to its consumer one at a time,
/// in order, each retried a few times.
pub fn spawn_event_sender(
    net: NetHandle,
    consumer: PeerId,
    tracker: &TaskTracker,
) -> mpsc::UnboundedSender<JobRequest> {
    let (tx, mut rx) = mpsc::unbounded_channel::<JobRequest>();
    tracker.spawn(async move {
        while let Some(event) = rx.recv().await {
            let attempts = event_attempts(&event);
            for attempt in 0..attempts {
                match net.job_request(consumer, event.clone()).await {
                    Ok(_) => break,
                    // The node is shutting down: no retry can succeed.
                    Err(NetError::Stopped) => return,
                    Err(e) => {
                        tracing::debug!(%consumer, error = %e, attempt, "cannot send a job event");
                        if attempt + 1 < attempts {
                            tokio::time::sleep(event_retry_delay(attempt)).await;
                        }
                    }
                }
            }
        }
    });
    tx
}

/// How often an event is tried. The end of a job (killed or finished) is
/// worth a minute of retries: a consumer that misses it waits for the
/// wall-time limit before it tries elsewhere. Progress events are not.
fn event_attempts(event: &JobRequest) -> u32 {
    match event {
        JobRequest::Event {
            kind:
                JobEventKind::Killed { .. }
                | JobEventKind::KilledOverMemory
                | JobEventKind::Finished { .. },
            ..
        } => 16,
        _ => 3,
    }
}

/// Backoff between tries: 300 ms doubling up to 8 s (16 tries span ~90 s).
fn event_retry_delay(attempt: u32) -> Duration {
    Duration::from_millis(300u64.saturating_mul(1 << attempt.min(5))).min(Duration::from_secs(8))
}

/// The file behind an output name, confined to the job: stdout and stderr,
/// or a declared output file whose real path (symlinks resolved) lies inside
/// the work directory.
pub fn output_path(job: &RemoteJob, name: &OutputName) -> Option<PathBuf> {
    match name {
        OutputName::Stdout => Some(job.dir.join("stdout")),
        OutputName::Stderr => Some(job.dir.join("stderr")),
        OutputName::Checkpoint => Some(job.dir.join(crate::guest::checkpoint::SNAPSHOT_NAME)),
        OutputName::File(f) => {
            if !job.outputs.iter().any(|o| o == f) || !RelPath::is_valid(f) {
                return None;
            }
            let work = job.dir.join("work").canonicalize().ok()?;
            let real = work.join(f).canonicalize().ok()?;
            real.starts_with(&work).then_some(real)
        }
    }
}

/// Reads up to `len` bytes (at most one chunk) from `offset`; returns them with
/// the file's size. The last component is opened without following symlinks.
pub fn read_chunk(path: &Path, offset: u64, len: u32) -> std::io::Result<(Vec<u8>, u64)> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let total = meta.len();
    let want = u64::from(len.min(OUTPUT_CHUNK_MAX));
    let mut data = Vec::new();
    if offset < total && want > 0 {
        file.seek(SeekFrom::Start(offset))?;
        Read::by_ref(&mut file).take(want).read_to_end(&mut data)?;
    }
    Ok((data, total))
}

/// BLAKE3 hash of an output file, read in chunks; the last component is
/// opened without following symlinks. A missing file (stdout never written)
/// hashes as empty, as it reads.
pub fn hash_output(path: &Path) -> std::io::Result<[u8; 32]> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(*blake3::hash(b"").as_bytes())
        }
        other => other?,
    };
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(file)?;
    Ok(*hasher.finalize().as_bytes())
}

/// A file that may not exist yet (stdout before the first write) reads as empty.
pub fn read_chunk_or_empty(path: &Path, offset: u64, len: u32) -> std::io::Result<(Vec<u8>, u64)> {
    match read_chunk(path, offset, len) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((Vec::new(), 0)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::protocol::InputRef;

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

    #[test]
    fn the_end_of_a_job_is_retried_longer_than_progress() {
        let event = |kind| JobRequest::Event {
            job_id: "j".into(),
            seq: 0,
            time_unix: 0,
            kind,
        };
        let finished = event(JobEventKind::Finished {
            exit_status: 0,
            usage: None,
        });
        let killed = event(JobEventKind::Killed {
            cause: None,
            usage: None,
        });
        let started = event(JobEventKind::Started);
        assert!(event_attempts(&finished) > event_attempts(&started));
        assert_eq!(event_attempts(&finished), event_attempts(&killed));
        let total: Duration = (0..event_attempts(&finished) - 1)
            .map(event_retry_delay)
            .sum();
        assert!(total >= Duration::from_secs(60), "{total:?}");
        assert!(total <= Duration::from_secs(120), "{total:?}");
        assert_eq!(event_retry_delay(0), Duration::from_millis(300));
        assert_eq!(event_retry_delay(30), Duration::from_secs(8));
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
    fn outputs_cannot_escape_the_work_dir_through_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::write(work.join("out.txt"), b"result").unwrap();
        std::fs::write(dir.path().join("secret"), b"owner's").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), work.join("link")).unwrap();
        let (tx, _rx) = mpsc::unbounded_channel();
        let job = RemoteJob {
            consumer: PeerId::random(),
            consumer_job_id: JobId::new("j").unwrap(),
            local_id: JobId::new("l").unwrap(),
            dir: dir.path().to_path_buf(),
            outputs: vec!["out.txt".into(), "link".into()],
            seq: 0,
            ended: None,
            events: tx,
            usage: None,
        };
        let out = output_path(&job, &OutputName::File("out.txt".into())).unwrap();
        assert_eq!(read_chunk(&out, 0, 1024).unwrap(), (b"result".to_vec(), 6));
        assert_eq!(read_chunk(&out, 2, 2).unwrap(), (b"su".to_vec(), 6));
        assert_eq!(read_chunk(&out, 99, 2).unwrap(), (Vec::new(), 6));
        assert!(output_path(&job, &OutputName::File("link".into())).is_none());
        assert!(output_path(&job, &OutputName::File("undeclared".into())).is_none());
        assert!(read_chunk(&work.join("link"), 0, 10).is_err());
    }

    #[test]
    fn guest_events_map_to_wire_events() {
        assert_eq!(
            wire_event(
                &GuestEventKind::Exited {
                    exit: ExitInfo::Signal(9),
                    cause: Some(KillCause::CpuContention)
                },
                Some(GuestUsage {
                    cpu_millis: 5,
                    wall_millis: 9
                })
            ),
            Some(JobEventKind::Killed {
                cause: Some(WireState::S3),
                usage: Some(GuestUsage {
                    cpu_millis: 5,
                    wall_millis: 9
                })
            })
        );
        assert_eq!(
            wire_event(
                &GuestEventKind::Exited {
                    exit: ExitInfo::Code(3),
                    cause: None
                },
                None
            ),
            Some(JobEventKind::Finished {
                exit_status: 3,
                usage: None
            })
        );
        assert_eq!(
            wire_event(
                &GuestEventKind::Exited {
                    exit: ExitInfo::Signal(9),
                    cause: Some(KillCause::WallTimeLimit)
                },
                None
            ),
            Some(JobEventKind::Killed {
                cause: None,
                usage: None
            })
        );
        assert_eq!(
            wire_event(&GuestEventKind::Suspended, None),
            Some(JobEventKind::Suspended)
        );
    }
}
