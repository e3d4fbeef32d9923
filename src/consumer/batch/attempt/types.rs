//! An attempt as values: the plan it follows, what it tells its queue while
//! it runs, how it ended, and a host's job event as people read it. The
//! queue's core reads and writes these; nothing here does I/O.

use std::path::PathBuf;
use std::time::Duration;

use libp2p::PeerId;

use crate::consumer::job_pool::JobSettings;
use crate::model::ids::JobId;
use crate::model::trust::Offence;
use crate::net::protocol::{
    GuestUsage, ImageRef, JobEventKind, JobRequest, JobSubmit, LayeredImageRef,
};

/// The image an attempt's job runs in, as its host is told (issue 31): by
/// its config and its layers, each an input (a docker-archive or an OCI
/// layout), or as the whole archive (a plain root-filesystem tar, which is
/// its own one layer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobImage {
    Whole(ImageRef),
    Layers(LayeredImageRef),
}

impl JobImage {
    /// Bytes a host that lacks the image and all its layers reads.
    pub fn bytes(&self) -> u64 {
        match self {
            JobImage::Whole(image) => image.archive.size,
            JobImage::Layers(image) => image
                .layers
                .iter()
                .fold(image.config.size, |t, l| t.saturating_add(l.size)),
        }
    }

    /// The request that hands `job` to its host in this image.
    pub fn submit(self, job: JobSubmit) -> JobRequest {
        let job = Box::new(job);
        match self {
            JobImage::Whole(image) => JobRequest::SubmitInImage { job, image },
            JobImage::Layers(image) => JobRequest::SubmitInLayers { job, image },
        }
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptEnd {
    /// The job ran to its end and its results landed, whole and checked,
    /// in the attempt's own directory (the plan's `result_dir`); `missing` names the declared outputs it did not write
    /// (the task's fault, not the host's: another host would do the same).
    Landed {
        exit_status: i32,
        /// From the hand-over to the results landed, as the consumer saw it.
        wall_secs: f64,
        /// What the guest used, as its host measured it, when it said.
        usage: Option<GuestUsage>,
        missing: Vec<String>,
    },
    /// The host refused the job before running it. `lasting` when it would
    /// refuse this task again (not allowed, too big, malformed), as opposed
    /// to for now (busy, in a failure state, unreachable).
    Refused { reason: String, lasting: bool },
    /// The job did not end well on this host (host gone, killed at the
    /// wall-time limit, a corrupt or missing output); another host may do
    /// better. Counts against the task's `max_retries`.
    HostFailed(String),
    /// The host's owner took the machine back: the guest was killed in S3,
    /// S4 or S5 (issue 28, scope 4), or the host's node restarted and lost
    /// the job (its own history records the gap as S5; issue 30). Not the
    /// task's fault, nor a broken word of the host's: it is queued again
    /// (that host avoided for it, as after any failure) without counting
    /// against its `max_retries`, and the host's record counts a failure,
    /// not an offence.
    OwnerKilled(String),
    /// The host broke its word (an output that does not match its hash, a
    /// job it forgot or never ended): handled as [`AttemptEnd::HostFailed`],
    /// and counted against the host in its record in every verify mode.
    Misbehaved { offence: Offence, reason: String },
    /// The job itself is at fault (over its declared memory): another host
    /// would do the same.
    JobFailed(String),
    /// The attempt was cancelled (`batch cancel` or the node stopping).
    Cancelled,
}

/// What an attempt needs besides the pool.
#[derive(Debug, Clone)]
pub struct AttemptPlan {
    pub host: PeerId,
    pub job_id: JobId,
    pub outputs: Vec<String>,
    /// Where this attempt lands its results, its own: a staging directory
    /// named by its job id (`…/results/.landing/<job id>`) that the queue
    /// moves into `…/results/<task>` if this attempt wins, or a verified
    /// task's copy directory (`…/copies/<task>/<host>`).
    pub result_dir: PathBuf,
    /// The job's wall-time limit on the host.
    pub limit: Duration,
    pub settings: JobSettings,
    /// Where the task's latest checkpoint is kept, when it checkpoints: each
    /// snapshot its host reports is fetched there.
    pub checkpoint_dest: Option<PathBuf>,
    /// `Some(task)` when this landing is the task's result as it comes (no
    /// verification): `land` writes its `provenance.json` (this host, its
    /// digest) before the result appears. A verified copy's provenance is
    /// written when a quorum accepts it (`replicas`).
    pub provenance_task: Option<u32>,
}

/// What an attempt tells its queue while it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptNews {
    /// The host has taken the job.
    Accepted,
    /// The host reported an event of the job (inputs ready, started,
    /// reniced, suspended...).
    HostEvent(JobEventKind),
    /// A checkpoint the host reported was fetched and verified into the
    /// plan's `checkpoint_dest`, in `fetch_secs`.
    Checkpoint {
        size: u64,
        hash: [u8; 32],
        fetch_secs: f64,
    },
    /// The host sent job events past the attempt's budget; `dropped` of
    /// them so far (told once per attempt, when it first happens).
    Flooded { dropped: u64 },
}

/// A host's job event as people read it (`batch wait`, `submit`).
pub fn event_text(kind: &JobEventKind) -> String {
    match kind {
        JobEventKind::Started => "started".to_string(),
        JobEventKind::Reniced => "reniced to 19 (the owner is busy)".to_string(),
        JobEventKind::Suspended => "suspended (owner load spike)".to_string(),
        JobEventKind::Resumed => "resumed".to_string(),
        JobEventKind::Killed { cause, .. } => match cause {
            Some(state) => format!(
                "killed by the host ({})",
                crate::model::state::State::from(*state).label()
            ),
            None => "killed by the host (wall-time limit)".to_string(),
        },
        JobEventKind::Finished { exit_status, .. } => {
            format!("finished with status {exit_status}")
        }
        JobEventKind::Checkpointed { size, .. } => {
            format!("checkpoint taken on the host ({size} bytes)")
        }
        JobEventKind::CheckpointRefused { reason } => format!("checkpoint refused: {reason}"),
        JobEventKind::KilledOverMemory => {
            "killed by the host: over its declared memory".to_string()
        }
        JobEventKind::InputsReady {
            fetched_bytes,
            cached_bytes,
        } => format!(
            "inputs ready: {fetched_bytes} bytes fetched, {cached_bytes} bytes from the host's cache"
        ),
        JobEventKind::NotStarted { reason } => format!("not started: {reason}"),
        JobEventKind::Cancelled { .. } => "cancelled by its consumer".to_string(),
    }
}
