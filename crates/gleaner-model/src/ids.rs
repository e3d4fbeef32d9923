//! Typed names: a job's id and a pool's name, each checked once, where it is
//! made.
//!
//! Both end up in places where a stray character does harm: a job id names the
//! guest's work directory and its cgroup, a pool name goes into a gossipsub
//! topic and a DHT key. So both are 1 to 64 bytes of `[A-Za-z0-9._-]`, and a
//! job id does not start with a dot (no `.` or `..` directory, no hidden one).
//! Serde goes through the same check, so a config file or an API body cannot
//! carry a name the rest of the node would refuse.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Longest job id or pool name, bytes.
pub const NAME_MAX: usize = 64;

/// Why a text is not a valid name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {text:?} is not valid: use 1-{NAME_MAX} letters, digits, '.', '_' or '-'{extra}")]
pub struct InvalidName {
    what: &'static str,
    text: String,
    extra: &'static str,
}

fn check(what: &'static str, text: &str, leading_dot_ok: bool) -> Result<(), InvalidName> {
    let ok = !text.is_empty()
        && text.len() <= NAME_MAX
        && (leading_dot_ok || !text.starts_with('.'))
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(InvalidName {
            what,
            // Bounded so an error about a hostile megabyte stays short.
            text: text.chars().take(NAME_MAX + 8).collect(),
            extra: if leading_dot_ok {
                ""
            } else {
                ", not starting with '.'"
            },
        })
    }
}

/// A job's id: chosen by the consumer, unique per consumer; it names the
/// guest's work directory and cgroup on the host.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobId(String);

impl JobId {
    /// Checks `text` and wraps it.
    pub fn new(text: impl Into<String>) -> Result<Self, InvalidName> {
        let text = text.into();
        check("job id", &text, false)?;
        Ok(Self(text))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A pool's name: peers of one pool share its announcement topic and DHT key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PoolName(String);

impl PoolName {
    /// Checks `text` and wraps it.
    pub fn new(text: impl Into<String>) -> Result<Self, InvalidName> {
        let text = text.into();
        check("pool name", &text, true)?;
        Ok(Self(text))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for PoolName {
    /// `home`: the pool a node joins when nothing names another.
    fn default() -> Self {
        Self("home".to_string())
    }
}

/// A batch's id on the consumer's node: the millisecond it was made, kept
/// increasing by the queue, so ids sort by age and never repeat on one node.
/// Written `b` and the number (`b1732400000123`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BatchId(u64);

impl BatchId {
    pub fn new(number: u64) -> Self {
        Self(number)
    }

    pub fn number(self) -> u64 {
        self.0
    }

    /// The id of task `task`'s attempt `attempt` (from 0) on a host: unique
    /// per consumer, and a valid [`JobId`] for every batch, task and attempt
    /// (at most 1 + 20 + 2 + 10 + 2 + 10 bytes).
    pub fn job_id(self, task: u32, attempt: u32) -> JobId {
        JobId(format!("{self}-t{task}-a{attempt}"))
    }
}

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b{}", self.0)
    }
}

/// Why a text is not a batch id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("batch id {0:?} is not valid: a 'b' and digits, as `gleaner batch list` shows")]
pub struct InvalidBatchId(String);

impl FromStr for BatchId {
    type Err = InvalidBatchId;
    fn from_str(s: &str) -> Result<Self, InvalidBatchId> {
        s.strip_prefix('b')
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse().ok())
            .map(Self)
            .ok_or_else(|| InvalidBatchId(s.chars().take(40).collect()))
    }
}

impl TryFrom<String> for BatchId {
    type Error = InvalidBatchId;
    fn try_from(s: String) -> Result<Self, InvalidBatchId> {
        s.parse()
    }
}

impl From<BatchId> for String {
    fn from(id: BatchId) -> String {
        id.to_string()
    }
}

macro_rules! text_traits {
    ($($name:ident),*) => {$(
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl FromStr for $name {
            type Err = InvalidName;
            fn from_str(s: &str) -> Result<Self, InvalidName> {
                Self::new(s)
            }
        }
        impl TryFrom<String> for $name {
            type Error = InvalidName;
            fn try_from(s: String) -> Result<Self, InvalidName> {
                Self::new(s)
            }
        }
        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }
        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    )*};
}
text_traits!(JobId, PoolName);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_are_checked() {
        assert!(JobId::new("job-1700000000-ab12.3_x").is_ok());
        assert!(JobId::new("x".repeat(NAME_MAX)).is_ok());
        for bad in ["", ".", "..", ".hidden", "a/b", "a b", "é", "a\0b"] {
            assert!(JobId::new(bad).is_err(), "{bad:?}");
        }
        assert!(JobId::new("x".repeat(NAME_MAX + 1)).is_err());
    }

    #[test]
    fn pool_names_are_checked() {
        assert!(PoolName::new("lab-3.cs_dept").is_ok());
        assert!(PoolName::new(PoolName::default().as_str()).is_ok());
        for bad in ["", "a/b", "a b"] {
            assert!(PoolName::new(bad).is_err(), "{bad:?}");
        }
        assert!(PoolName::new("x".repeat(NAME_MAX + 1)).is_err());
    }

    #[test]
    fn batch_ids_round_trip_and_make_valid_job_ids() {
        let id = BatchId::new(u64::MAX);
        assert_eq!(id.to_string().parse::<BatchId>(), Ok(id));
        let job = id.job_id(u32::MAX, u32::MAX);
        assert!(JobId::new(job.as_str()).is_ok(), "{job}");
        for bad in ["", "b", "1", "bx", "b-1", "b99999999999999999999999"] {
            assert!(bad.parse::<BatchId>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn errors_name_the_input_and_stay_short() {
        let e = JobId::new("a".repeat(10_000)).unwrap_err().to_string();
        assert!(e.starts_with("job id \"aaa"), "{e}");
        assert!(e.len() < 200, "{e}");
    }
}
