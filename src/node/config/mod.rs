//! The node's configuration file: a TOML document whose every key has a
//! documented default, so an empty (or absent) file is a working config.
//!
//! This module owns the keys, their defaults, their meanings (printed by
//! `gleaner config --defaults`) and their validation. Unknown keys are
//! rejected with the key named, because a misspelt key silently falling back
//! to its default is worse than an error. It must not know where the file
//! lives (that is `node::paths`) nor start anything.
//!
//! Here: the whole [`Config`], reading and parsing it, why it cannot be
//! used ([`ConfigError`]) and what the node derives from it. `sections`
//! holds each `[section]` with its defaults, `validate` the ranges and the
//! checks, `defaults` each key's meaning and the commented defaults file,
//! `forms` how typed values are spelled in the file.

mod defaults;
mod forms;
mod sections;
mod validate;

pub use defaults::{defaults_toml, write_default_file, KEY_DOCS};
pub use sections::{
    BatchSection, GuestSection, HistoryConfig, ImageSetuid, ImagesRule, MonitorSection, NetSection,
    OwnerSection, PolicyConfig, UiSection, DEFAULT_UI_LISTEN,
};
pub use validate::RANGES;

use crate::model::owner::Schedule;
use crate::model::period::PeriodPolicy;
use crate::model::predict::PredictRequest;
use crate::model::state::Thresholds;
use crate::monitor::MonitorConfig;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Largest config file read; the full commented defaults are about 5 KiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The whole configuration. Every section and key may be left out.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub policy: PolicyConfig,
    pub monitor: MonitorSection,
    pub history: HistoryConfig,
    pub guest: GuestSection,
    pub owner: OwnerSection,
    pub net: NetSection,
    pub ui: UiSection,
    pub batch: BatchSection,
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config file: {0}")]
    Read(crate::fsutil::FileReadError),
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config: [policy] {0}")]
    Policy(#[from] crate::model::state::ThresholdError),
    #[error("config: [monitor] {0}")]
    Monitor(#[from] crate::model::period::PeriodPolicyError),
    #[error("config: [{section}] {key}: {why}")]
    Invalid {
        section: &'static str,
        key: &'static str,
        why: String,
    },
    #[error("cannot write the config file {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Config {
    /// Parses a config document; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim().replace('\n', " "),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Reads `path` (a regular file of at most [`MAX_CONFIG_BYTES`]); a
    /// missing file is the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        match crate::fsutil::read_to_string_bounded(path, MAX_CONFIG_BYTES) {
            Ok(text) => Config::parse(&text, path),
            Err(crate::fsutil::FileReadError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(Config::default())
            }
            Err(e) => Err(ConfigError::Read(e)),
        }
    }

    /// The owner's schedule (`[owner] hours`); always when it does not parse,
    /// which `validate` has refused already.
    pub fn schedule(&self) -> Schedule {
        Schedule::parse(&self.owner.hours).unwrap_or_default()
    }

    /// The owner's time zone (`[history] tz`, else the system's).
    pub fn time_zone(&self) -> jiff::tz::TimeZone {
        self.history
            .tz
            .as_deref()
            .and_then(|name| jiff::tz::TimeZone::get(name).ok())
            .unwrap_or_else(jiff::tz::TimeZone::system)
    }

    /// The request the node answers a question with: the window of
    /// `window_secs` starting at `at`, for a job of `job_mem_mib`, read
    /// with this config's thresholds and history days.
    pub fn predict_request(&self, at: i64, window_secs: u64, job_mem_mib: u64) -> PredictRequest {
        let mut request = PredictRequest::new(at, window_secs, self.thresholds(job_mem_mib));
        request.days = self.history.days;
        request
    }

    /// The model's thresholds, with the working set of the job at hand.
    pub fn thresholds(&self, job_mem_mib: u64) -> Thresholds {
        Thresholds {
            th1: self.policy.th1,
            th2: self.policy.th2,
            sustain_secs: self.policy.sustain_secs,
            job_mem_mib,
        }
    }

    /// The monitor's adaptive period.
    pub fn period_policy(&self) -> PeriodPolicy {
        PeriodPolicy {
            min: self.monitor.min_period,
            max: self.monitor.max_period,
            stable_periods: self.monitor.stable_periods,
            extra_sample_chance: self.monitor.extra_sample_chance,
        }
    }

    /// What the monitor needs. Its thresholds carry no working set: S4 for a
    /// guest is judged by the node, which knows the guest's declared memory.
    pub fn monitor_config(&self) -> MonitorConfig {
        MonitorConfig {
            thresholds: self.thresholds(0),
            period: self.period_policy(),
            max_gap: self.monitor.max_gap,
        }
    }
}

#[cfg(test)]
mod tests;
