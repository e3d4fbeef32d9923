//! The batch queue's records as plain values: a batch as the user asked
//! for it, each task and where it stands, a task's copies and checkpoint.
//! `store` keeps them in sled and `codec` turns them into bytes; the
//! queue's core reasons about them. This module knows nothing of sled,
//! bytes or tasks running: it is data only.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::consumer::batch::policy::PolicyName;
use crate::model::ids::{BatchId, JobId};

/// A batch as stored: what the user asked, once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchRecord {
    pub id: BatchId,
    pub name: Option<String>,
    pub created_unix: i64,
    /// The command as the user wrote it (before expansion), for display.
    pub command: Vec<String>,
    pub mem_mib: u64,
    pub runtime_secs: u64,
    pub limit_secs: u64,
    /// Output files every task brings back.
    pub outputs: Vec<String>,
    /// Where results are copied as tasks land, besides the node's own copy.
    pub output_dir: Option<PathBuf>,
    pub max_running: Option<u32>,
    pub task_count: u32,
    /// `batch cancel` was asked: nothing more is started.
    pub cancelled: bool,
    /// How hosts are chosen for this batch's tasks.
    pub policy: PolicyName,
    /// `--deadline`: when the user wants the last task done, Unix seconds.
    pub deadline_unix: Option<i64>,
    /// `--checkpoint`: the file the tasks save their state to.
    pub checkpoint: Option<CheckpointSpec>,
    /// `--image`: the image every task runs in (issue 31).
    pub image: Option<BatchImage>,
}

/// The image a batch's tasks run in: the archive on this machine, offered
/// to each task's host like an input, and the id it was checked to be when
/// the batch was made (a host refuses an archive that unpacks to another).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchImage {
    /// The archive (absolute).
    pub local: PathBuf,
    /// The image's id, the SHA-256 of its config.
    pub id: [u8; 32],
}

/// A batch's checkpoint declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointSpec {
    /// Relative path of the checkpoint file in the task's work directory.
    pub path: String,
    /// Seconds one checkpoint costs the task, as declared (the prior of
    /// Young/Daly's C until a cost is measured).
    pub cost_secs: u64,
}

/// A task's latest checkpoint, verified and kept by the consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRef {
    /// BLAKE3 of the file.
    pub hash: [u8; 32],
    pub size: u64,
    /// When the host took it, Unix seconds.
    pub saved_unix: i64,
}

/// A further copy of a task running beside its main attempt (a deadline's
/// second copy): the first copy to land wins and the others are killed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCopy {
    /// The copy's host, base58.
    pub host: String,
    pub job_id: JobId,
    pub started_unix: i64,
}

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TaskState {
    /// Waiting for a host.
    Queued,
    /// Handed to a host (which may not have started it yet).
    Running,
    /// Ran to its end with exit status 0; results landed.
    Done,
    /// Ran to its end with another status (results landed), or could not be
    /// run (no host, retries used up: `reason` says).
    Failed,
    /// Cancelled before it ended.
    Cancelled,
}

impl TaskState {
    pub fn label(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Running => "running",
            TaskState::Done => "done",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
        }
    }

    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskState::Done | TaskState::Failed | TaskState::Cancelled
        )
    }
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Local file, remote relative path.
    pub inputs: Vec<(PathBuf, String)>,
    pub state: TaskState,
    /// Attempts handed to hosts so far.
    pub attempts: u32,
    /// The host of the current (or last) attempt, base58.
    pub host: Option<String>,
    /// The current (or last) attempt's job id on that host.
    pub job_id: Option<JobId>,
    /// Hosts that failed this task: not tried for it again.
    pub avoid: Vec<String>,
    pub exit_status: Option<i32>,
    pub started_unix: Option<i64>,
    pub ended_unix: Option<i64>,
    /// Why it failed or was cancelled, for humans.
    pub reason: Option<String>,
    /// The attempt's wall seconds on the host, for ETAs.
    pub wall_secs: Option<f64>,
    /// The landed attempt's guest CPU seconds, as its host measured them.
    pub cpu_secs: Option<f64>,
    /// Effective power Γ of the host of the current (or last) attempt when
    /// it was placed, so a landed run time can be normalised.
    pub host_gamma: Option<f64>,
    /// The latest checkpoint the consumer holds (`--checkpoint` batches).
    pub checkpoint: Option<CheckpointRef>,
    /// Further copies running beside the main attempt.
    pub copies: Vec<TaskCopy>,
    /// Attempts killed because their host's owner took it back (S3, S4,
    /// S5): not the task's fault, so not counted against its retries. Each
    /// one's host is in `avoid` too.
    pub owner_kills: u32,
}

impl TaskRecord {
    /// Hosts the task failed on for reasons of its own or its host's
    /// (gone, wall-time limit, bad output), not its owner taking it back:
    /// what `max_retries` bounds.
    pub fn host_failures(&self) -> u32 {
        (self.avoid.len() as u32).saturating_sub(self.owner_kills)
    }

    pub fn queued(
        argv: Vec<String>,
        env: Vec<(String, String)>,
        inputs: Vec<(PathBuf, String)>,
    ) -> Self {
        TaskRecord {
            argv,
            env,
            inputs,
            state: TaskState::Queued,
            attempts: 0,
            host: None,
            job_id: None,
            avoid: Vec::new(),
            exit_status: None,
            started_unix: None,
            ended_unix: None,
            reason: None,
            wall_secs: None,
            cpu_secs: None,
            host_gamma: None,
            checkpoint: None,
            copies: Vec::new(),
            owner_kills: 0,
        }
    }
}
