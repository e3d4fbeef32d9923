//! Verified results: a task of a batch with `--replicas K --quorum Q` (or
//! `--verify adaptive`) runs as several copies on distinct hosts, each
//! landing in a directory of its own (`<batch>/copies/<task>/<host>`, never
//! the results directory); the consumer compares them and accepts a result
//! when Q copies agree (docs/trust.md).
//!
//! Two copies agree when their digests are equal (BLAKE3 over the exit
//! status, stdout and the declared outputs; stderr is left out: it holds
//! timings and warnings that differ between honest hosts), or, with
//! `--validator CMD`, when `CMD DIR_A DIR_B` exits 0 within
//! [`VALIDATOR_LIMIT`]. Everything here touches files or runs processes:
//! the queue calls it on the blocking pool, never on the actor's loop.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Longest a `--validator` run may take; past it the two results count as
/// different (and the validator is killed).
pub const VALIDATOR_LIMIT: Duration = Duration::from_secs(30);
/// Most copies of one task `--replicas K` may grow to when copies disagree,
/// whatever K: `max(K + 2, 2Q - 1)`, at most this.
pub use crate::model::trust::MAX_COPIES;

/// How a batch's results are checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    /// One copy per task, taken as it comes (the default, docs/trust.md).
    #[default]
    None,
    /// Every task on `replicas` hosts, accepted when `quorum` agree.
    Replicate,
    /// Two copies until a host is trusted, then single copies with spot
    /// checks (`gleaner_model::trust::AdaptiveRule`).
    Adaptive,
}

impl std::str::FromStr for VerifyMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(VerifyMode::None),
            "replicate" => Ok(VerifyMode::Replicate),
            "adaptive" => Ok(VerifyMode::Adaptive),
            other => Err(format!(
                "unknown verification mode {other:?} (none, replicate, adaptive)"
            )),
        }
    }
}

impl std::fmt::Display for VerifyMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VerifyMode::None => "none",
            VerifyMode::Replicate => "replicate",
            VerifyMode::Adaptive => "adaptive",
        })
    }
}

/// A batch's verification, as submitted and stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifySpec {
    pub mode: VerifyMode,
    /// K: copies started together (replicate).
    pub replicas: u32,
    /// Q: agreeing copies that accept a result.
    pub quorum: u32,
    /// `--validator CMD`, run as `sh -c 'CMD "$1" "$2"'` with two result
    /// directories.
    pub validator: Option<String>,
}

impl VerifySpec {
    /// Checks and completes a spec: K ≥ Q ≥ 1, and Q defaults to a majority
    /// of K. `replicas` above 1 without a mode means `replicate`.
    pub fn checked(mut self) -> Result<VerifySpec, String> {
        if self.mode == VerifyMode::None && self.replicas > 1 {
            self.mode = VerifyMode::Replicate;
        }
        match self.mode {
            VerifyMode::None => {
                if self.quorum > 1 || self.validator.is_some() {
                    return Err(
                        "--quorum and --validator need --replicas K (K ≥ 2) or --verify adaptive"
                            .into(),
                    );
                }
                self.replicas = 1;
                self.quorum = 1;
            }
            VerifyMode::Replicate => {
                if self.replicas < 2 {
                    return Err("--verify replicate needs --replicas K with K ≥ 2".into());
                }
                if self.replicas > MAX_COPIES {
                    return Err(format!(
                        "--replicas {}: at most {MAX_COPIES}",
                        self.replicas
                    ));
                }
                if self.quorum == 0 {
                    self.quorum = self.replicas / 2 + 1;
                }
                if self.quorum > self.replicas {
                    return Err(format!(
                        "--quorum {} is more than --replicas {}",
                        self.quorum, self.replicas
                    ));
                }
            }
            VerifyMode::Adaptive => {
                // Checked twice (by the CLI, then the node): 2 and 2 is
                // what a first check leaves.
                if self.replicas > 2 || self.quorum > 2 {
                    return Err("--verify adaptive chooses the copies itself: leave out --replicas and --quorum".into());
                }
                self.replicas = 2;
                self.quorum = 2;
            }
        }
        if let Some(v) = &self.validator {
            if v.trim().is_empty() || v.len() > 4096 {
                return Err("--validator: an empty or overlong command".into());
            }
        }
        Ok(self)
    }

    pub fn verifies(&self) -> bool {
        self.mode != VerifyMode::None
    }

    /// Most copies a task may run before it fails with "no quorum".
    pub fn max_copies(&self) -> u32 {
        crate::model::trust::max_copies(self.replicas, self.quorum)
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<VerifySpec, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("verify spec: {e}"))
    }
}

/// Where one copy of a task lands: `<batch dir>/copies/<task>/<host>`.
pub fn copy_dir(batch_dir: &Path, task: u32, host: &str) -> PathBuf {
    batch_dir.join("copies").join(task.to_string()).join(host)
}

/// BLAKE3 over a landed result: its exit status, stdout and each declared
/// output in order, each framed by its name and length (a missing output is
/// framed as missing, so "missing" and "empty" differ).
pub fn digest(dir: &Path, outputs: &[String]) -> std::io::Result<[u8; 32]> {
    let mut h = blake3::Hasher::new();
    let status = std::fs::read_to_string(dir.join("exit_status"))?;
    h.update(b"exit_status\0");
    h.update(status.trim().as_bytes());
    h.update(b"\0");
    for name in std::iter::once("stdout").chain(outputs.iter().map(String::as_str)) {
        h.update(name.as_bytes());
        h.update(b"\0");
        match std::fs::File::open(dir.join(name)) {
            Ok(mut f) => {
                let len = f.metadata()?.len();
                h.update(&len.to_le_bytes());
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = f.read(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    h.update(&buf[..n]);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                h.update(b"missing");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(*h.finalize().as_bytes())
}

/// Runs `--validator CMD` on two result directories: true when it exits 0
/// within [`VALIDATOR_LIMIT`]. Its output is discarded.
pub fn validator_agrees(cmd: &str, a: &Path, b: &Path) -> Result<bool, String> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("{cmd} \"$1\" \"$2\""))
        .arg("gleaner-validator")
        .arg(a)
        .arg(b)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("--validator {cmd}: {e}"))?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status.success()),
            Ok(None) if started.elapsed() >= VALIDATOR_LIMIT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "--validator {cmd}: no answer within {}s",
                    VALIDATOR_LIMIT.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("--validator {cmd}: {e}")),
        }
    }
}

/// One landed copy as the judge sees it.
#[derive(Debug, Clone)]
pub struct LandedCopy {
    pub host: String,
    pub dir: PathBuf,
    pub digest: [u8; 32],
    pub exit_status: i32,
    pub missing: Vec<String>,
    pub wall_secs: f64,
}

/// Which earlier copies a new one agrees with: equal digests, or the
/// validator's word (tried against one member of each group of agreeing
/// copies). Returns the indices into `earlier` it agrees with.
pub fn agreeing(new: &LandedCopy, earlier: &[LandedCopy], validator: Option<&str>) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, e) in earlier.iter().enumerate() {
        let same = e.digest == new.digest
            || validator.is_some_and(|cmd| match validator_agrees(cmd, &e.dir, &new.dir) {
                Ok(same) => same,
                Err(why) => {
                    tracing::warn!(%why, "validator failed; the results count as different");
                    false
                }
            });
        if same {
            out.push(i);
        }
    }
    out
}

/// The provenance of a landed result (`<task>/provenance.json`), written
/// for every landed result whatever the verification: the same schema for
/// all (docs/trust.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Provenance {
    pub task: u32,
    /// How the result was checked: `none`, `replicate` or `adaptive`.
    pub verification: VerifyMode,
    /// Agreeing copies that accepted it (1 when it was taken as it came).
    pub quorum: u32,
    /// The host whose copy is the result.
    pub host: String,
    /// Hosts whose copies agreed with it (itself included); empty when the
    /// result was compared with no other copy (`none`, or an adaptive copy
    /// that was not spot-checked): nobody agreed, nobody was asked.
    pub agreed: Vec<String>,
    /// Hosts whose copies differed.
    pub disagreed: Vec<String>,
    /// Every judged copy: its host, digest (hex) and exit status.
    pub copies: Vec<ProvenanceCopy>,
}

impl Provenance {
    /// A result taken as it came, from one host.
    pub fn single(
        task: u32,
        verification: VerifyMode,
        host: String,
        digest: &[u8; 32],
        exit_status: i32,
    ) -> Provenance {
        Provenance {
            task,
            verification,
            quorum: 1,
            host: host.clone(),
            agreed: Vec::new(),
            disagreed: Vec::new(),
            copies: vec![ProvenanceCopy {
                host,
                digest: hex(digest),
                exit_status,
            }],
        }
    }

    pub fn to_json(&self) -> Result<Vec<u8>, String> {
        serde_json::to_vec_pretty(self).map_err(|e| format!("provenance: {e}"))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProvenanceCopy {
    pub host: String,
    pub digest: String,
    pub exit_status: i32,
}

/// One copy of a verified task as `batch status` shows it while the task
/// is being decided (after, its `provenance.json` says it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyView {
    pub host: String,
    /// `running`, `judging` (landed, its digest being computed or compared)
    /// or `landed` (judged).
    pub state: &'static str,
    /// Judged copies with the same group agree (equal digests, or the
    /// validator's word); groups are numbered in the order they appeared.
    pub group: Option<u32>,
}

/// Name of the provenance file in a result directory.
pub const PROVENANCE_FILE: &str = "provenance.json";

/// Writes the provenance of a result taken as it came (`--verify none`)
/// into its directory: computes its digest there. Reads files: call it off
/// the actor's loop.
pub fn write_single_provenance(
    dir: &Path,
    outputs: &[String],
    task: u32,
    host: String,
    exit_status: i32,
) -> Result<(), String> {
    let digest = digest(dir, outputs).map_err(|e| format!("{}: {e}", dir.display()))?;
    let json = Provenance::single(task, VerifyMode::None, host, &digest, exit_status).to_json()?;
    std::fs::write(dir.join(PROVENANCE_FILE), json)
        .map_err(|e| format!("{}: {e}", dir.join(PROVENANCE_FILE).display()))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(dir: &Path, status: i32, stdout: &str, stderr: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("exit_status"), format!("{status}\n")).unwrap();
        std::fs::write(dir.join("stdout"), stdout).unwrap();
        std::fs::write(dir.join("stderr"), stderr).unwrap();
    }

    #[test]
    fn the_digest_ignores_stderr_and_sees_status_stdout_and_outputs() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b, c, d) = (
            tmp.path().join("a"),
            tmp.path().join("b"),
            tmp.path().join("c"),
            tmp.path().join("d"),
        );
        result(&a, 0, "42\n", "took 1s");
        result(&b, 0, "42\n", "took 2s");
        result(&c, 1, "42\n", "");
        result(&d, 0, "43\n", "");
        let outs = vec!["out.txt".to_string()];
        let da = digest(&a, &outs).unwrap();
        assert_eq!(da, digest(&b, &outs).unwrap());
        assert_ne!(da, digest(&c, &outs).unwrap());
        assert_ne!(da, digest(&d, &outs).unwrap());
        std::fs::write(b.join("out.txt"), "").unwrap();
        assert_ne!(da, digest(&b, &outs).unwrap(), "missing and empty differ");
    }

    #[test]
    fn a_validator_decides_equivalence_and_a_hung_one_is_bounded_elsewhere() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        result(&a, 0, "1.0000001\n", "");
        result(&b, 0, "1.0000002\n", "");
        let cut = "test \"$(cut -c1-6 \"$1/stdout\")\" = \"$(cut -c1-6 \"$2/stdout\")\" #";
        assert!(validator_agrees(cut, &a, &b).unwrap());
        assert!(!validator_agrees("false", &a, &b).unwrap());
        let la = LandedCopy {
            host: "a".into(),
            dir: a.clone(),
            digest: digest(&a, &[]).unwrap(),
            exit_status: 0,
            missing: vec![],
            wall_secs: 0.0,
        };
        let lb = LandedCopy {
            host: "b".into(),
            dir: b.clone(),
            digest: digest(&b, &[]).unwrap(),
            ..la.clone()
        };
        assert!(agreeing(&lb, std::slice::from_ref(&la), None).is_empty());
        assert_eq!(agreeing(&lb, &[la], Some(cut)), vec![0]);
    }

    #[test]
    fn an_unverified_result_gets_provenance_in_the_common_schema() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("r");
        result(&dir, 0, "42\n", "");
        write_single_provenance(&dir, &[], 7, "host-a".into(), 0).unwrap();
        let text = std::fs::read_to_string(dir.join(PROVENANCE_FILE)).unwrap();
        let p: Provenance = serde_json::from_str(&text).unwrap();
        assert_eq!(p.verification, VerifyMode::None);
        assert_eq!((p.task, p.quorum, p.host.as_str()), (7, 1, "host-a"));
        assert!(p.agreed.is_empty() && p.disagreed.is_empty());
        assert_eq!(p.copies.len(), 1);
        assert_eq!(p.copies[0].digest, hex(&digest(&dir, &[]).unwrap()));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["verification"], "none");
    }

    #[test]
    fn specs_are_checked_and_completed() {
        let s = VerifySpec {
            replicas: 3,
            ..Default::default()
        }
        .checked()
        .unwrap();
        assert_eq!(
            (s.mode, s.quorum, s.max_copies()),
            (VerifyMode::Replicate, 2, 5)
        );
        let s = VerifySpec {
            replicas: 2,
            quorum: 2,
            ..Default::default()
        }
        .checked()
        .unwrap();
        assert_eq!(s.max_copies(), 4);
        assert!(VerifySpec {
            replicas: 2,
            quorum: 3,
            ..Default::default()
        }
        .checked()
        .is_err());
        assert!(VerifySpec {
            quorum: 2,
            ..Default::default()
        }
        .checked()
        .is_err());
        let s = VerifySpec {
            mode: VerifyMode::Adaptive,
            ..Default::default()
        }
        .checked()
        .unwrap();
        assert_eq!((s.replicas, s.quorum), (2, 2));
        assert_eq!(VerifySpec::decode(&s.encode()).unwrap(), s);
    }
}
