//! What a configuration that parses must still satisfy: the documented
//! range of every integer key ([`RANGES`]), addresses, the schedule, the
//! time zone, the dashboard's address and the guest's user, each refusal
//! naming its key. It changes no value.

use super::{Config, ConfigError, NetSection, UiSection};
use crate::model::owner::Schedule;
use libp2p::multiaddr::Protocol;

impl UiSection {
    /// The dashboard's address, `None` when it is off; refuses anything but
    /// a loopback `IP:PORT`.
    pub fn listen_addr(&self) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        let Some(text) = &self.listen else {
            return Ok(None);
        };
        let invalid = |why: String| ConfigError::Invalid {
            section: "ui",
            key: "listen",
            why,
        };
        let addr: std::net::SocketAddr = text
            .trim()
            .parse()
            .map_err(|e| invalid(format!("{text:?} is not an IP:PORT address: {e}")))?;
        if !addr.ip().is_loopback() {
            return Err(invalid(format!(
                "{text:?} is not a loopback address: the dashboard is plain HTTP behind a token, so it listens on 127.0.0.1 or ::1 only (reach it from elsewhere through an SSH tunnel)"
            )));
        }
        Ok(Some(addr))
    }
}

/// The documented range of every integer key, inclusive. `validate` checks
/// these and `config --defaults` prints them, so a value that would overflow
/// a deadline (`compact_every_secs = 9223372036854775807`) is refused at
/// start with its key named, never reaches `Instant + Duration`.
pub const RANGES: &[(&str, &str, u64, u64)] = &[
    ("policy", "sustain_secs", 0, 86_400),
    ("monitor", "min_period_secs", 1, 3_600),
    ("monitor", "max_period_secs", 1, 86_400),
    ("monitor", "stable_periods", 1, 1_000),
    ("monitor", "max_gap_secs", 1, 7 * 86_400),
    ("history", "days", 1, 365),
    ("history", "retention_days", 1, 36_500),
    ("history", "compact_every_secs", 1, 7 * 86_400),
    ("guest", "max_mem_mib", 1, 1 << 24),
    ("guest", "max_runtime_secs", 1, 366 * 86_400),
    ("guest", "max_output_mib", 0, 4_096),
    ("guest", "cache_mib", 0, 1 << 20),
    ("guest", "max_input_mib", 1, 65_536),
    ("guest", "max_job_input_mib", 1, 1 << 20),
    ("guest", "max_checkpoint_mib", 1, 65_536),
    ("guest", "disk_mib", 0, 65_536),
    ("guest", "cpu_limit_percent", 1, 100),
    ("guest", "image_cache_mib", 1, 1 << 20),
    ("net", "request_timeout_secs", 1, 600),
    ("net", "announce_secs", 1, 3_600),
    ("net", "max_retries", 0, 100),
    ("net", "peer_cpu_percent", 0, 100),
    ("net", "source_new_peers", 0, 1 << 20),
    (
        "batch",
        "later_unit_secs",
        crate::consumer::batch::queue::LATER_UNIT_MIN_SECS,
        crate::consumer::batch::queue::LATER_UNIT_SECS,
    ),
];

impl Config {
    /// Every integer key's value, as named in the file (for [`RANGES`]).
    fn integer_values(&self) -> [(&'static str, &'static str, u64); 24] {
        let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
        [
            (
                "policy",
                "sustain_secs",
                u64::from(self.policy.sustain_secs),
            ),
            (
                "monitor",
                "min_period_secs",
                self.monitor.min_period.as_secs(),
            ),
            (
                "monitor",
                "max_period_secs",
                self.monitor.max_period.as_secs(),
            ),
            (
                "monitor",
                "stable_periods",
                u64::from(self.monitor.stable_periods),
            ),
            ("monitor", "max_gap_secs", self.monitor.max_gap.as_secs()),
            ("history", "days", n(self.history.days)),
            (
                "history",
                "retention_days",
                u64::from(self.history.retention_days),
            ),
            (
                "history",
                "compact_every_secs",
                self.history.compact_every.as_secs(),
            ),
            ("guest", "max_mem_mib", self.guest.max_mem_mib),
            ("guest", "max_runtime_secs", self.guest.max_runtime_secs),
            ("guest", "max_output_mib", self.guest.max_output_mib),
            ("guest", "cache_mib", self.guest.cache_mib),
            ("guest", "max_input_mib", self.guest.max_input_mib),
            ("guest", "max_job_input_mib", self.guest.max_job_input_mib),
            ("guest", "max_checkpoint_mib", self.guest.max_checkpoint_mib),
            ("guest", "disk_mib", self.guest.disk_mib),
            ("guest", "cpu_limit_percent", self.guest.cpu_limit_percent),
            ("guest", "image_cache_mib", self.guest.image_cache_mib),
            (
                "net",
                "request_timeout_secs",
                self.net.request_timeout.as_secs(),
            ),
            ("net", "announce_secs", self.net.announce_interval.as_secs()),
            ("net", "max_retries", u64::from(self.net.max_retries)),
            (
                "net",
                "peer_cpu_percent",
                u64::from(self.net.peer_cpu_percent),
            ),
            (
                "net",
                "source_new_peers",
                u64::from(self.net.source_new_peers),
            ),
            ("batch", "later_unit_secs", self.batch.later_unit_secs),
        ]
    }

    /// Checks values that parse but make no sense, naming the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (section, key, value) in self.integer_values() {
            if let Some((_, _, lo, hi)) = RANGES
                .iter()
                .find(|(s, k, _, _)| *s == section && *k == key)
            {
                if !(*lo..=*hi).contains(&value) {
                    return Err(ConfigError::Invalid {
                        section,
                        key,
                        why: format!("{value} is outside the allowed range {lo}..={hi}"),
                    });
                }
            }
        }
        self.thresholds(0).validate()?;
        self.period_policy().validate()?;
        if self.monitor.max_gap < self.monitor.max_period {
            return Err(ConfigError::Invalid {
                section: "monitor",
                key: "max_gap_secs",
                why: format!(
                    "{} is shorter than max_period_secs ({}): every pause between samples would count as the node being off",
                    self.monitor.max_gap.as_secs(), self.monitor.max_period.as_secs()
                ),
            });
        }
        if let Some(tz) = &self.history.tz {
            jiff::tz::TimeZone::get(tz).map_err(|e| ConfigError::Invalid {
                section: "history",
                key: "tz",
                why: format!("{tz:?} is not an IANA time zone: {e}"),
            })?;
        }
        self.net.validate()?;
        Schedule::parse(&self.owner.hours).map_err(|e| ConfigError::Invalid {
            section: "owner",
            key: "hours",
            why: format!("{:?}: {e}", self.owner.hours),
        })?;
        self.ui.listen_addr()?;
        if self.guest.user.trim().is_empty() || self.guest.user == "root" {
            return Err(ConfigError::Invalid {
                section: "guest",
                key: "user",
                why: format!("{:?} is not a user a guest may run as", self.guest.user),
            });
        }
        Ok(())
    }
}

impl NetSection {
    /// Checks every address, peer id and bound, naming the key that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &'static str, why: String| ConfigError::Invalid {
            section: "net",
            key,
            why,
        };
        // Addresses and peer ids are typed: they were checked when parsed.
        for addr in &self.bootstrap {
            if !matches!(addr.iter().last(), Some(Protocol::P2p(_))) {
                return Err(invalid(
                    "bootstrap",
                    format!("{:?} does not end in /p2p/<peer id>", addr.to_string()),
                ));
            }
        }
        Ok(())
    }
}
