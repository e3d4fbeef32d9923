//! The node's configuration file: a TOML document whose every key has a
//! documented default, so an empty (or absent) file is a working config.
//!
//! This module owns the keys, their defaults, their meanings (printed by
//! `gleaner config --defaults`) and their validation. Unknown keys are
//! rejected with the key named, because a misspelt key silently falling back
//! to its default is worse than an error. It must not know where the file
//! lives (that is `node::paths`) nor start anything.

use crate::model::ids::PoolName;
use crate::model::owner::{OnBattery, Schedule};
use crate::model::period::PeriodPolicy;
use crate::model::predict::DEFAULT_DAYS;
use crate::model::series::DEFAULT_MAX_GAP_SECS;
use crate::model::state::Thresholds;
use crate::monitor::MonitorConfig;
use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// `[batch]`: how the batches this node submits are run (its consumer's
/// queue).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchSection {
    /// Extra copies of the running tasks most at risk in a batch's tail
    /// (issue 28).
    pub tail_copies: bool,
    /// A task no free host is likely to finish waits for a host's later
    /// window (issue 28).
    pub later_windows: bool,
}

impl Default for BatchSection {
    fn default() -> Self {
        BatchSection {
            tail_copies: crate::consumer::batch::queue::TAIL_COPIES_DEFAULT,
            later_windows: crate::consumer::batch::queue::LATER_WINDOWS_DEFAULT,
        }
    }
}

/// `[owner]`: when the owner lends the machine.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OwnerSection {
    /// The schedule's text, checked by `validate` (see [`Config::schedule`]).
    pub hours: String,
    pub on_battery: OnBattery,
}

/// `[policy]`: the five-state model's thresholds (seed 001, section 3.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    pub th1: f64,
    pub th2: f64,
    pub sustain_secs: u32,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        let t = Thresholds::default();
        PolicyConfig {
            th1: t.th1,
            th2: t.th2,
            sustain_secs: t.sustain_secs,
        }
    }
}

/// `[monitor]`: how often the host is sampled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MonitorSection {
    #[serde(rename = "min_period_secs", with = "secs")]
    pub min_period: Duration,
    #[serde(rename = "max_period_secs", with = "secs")]
    pub max_period: Duration,
    pub stable_periods: u32,
    pub extra_sample_chance: f64,
    #[serde(rename = "max_gap_secs", with = "secs")]
    pub max_gap: Duration,
}

impl Default for MonitorSection {
    fn default() -> Self {
        let p = PeriodPolicy::default();
        MonitorSection {
            min_period: p.min,
            max_period: p.max,
            stable_periods: p.stable_periods,
            extra_sample_chance: p.extra_sample_chance,
            max_gap: Duration::from_secs(DEFAULT_MAX_GAP_SECS),
        }
    }
}

/// `[history]`: what is kept and what predictions learn from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    pub days: usize,
    pub retention_days: u32,
    #[serde(rename = "compact_every_secs", with = "secs")]
    pub compact_every: Duration,
    /// `None` (empty in the file): the machine's host name.
    #[serde(with = "empty_is_none")]
    pub host: Option<String>,
    /// `None` (empty in the file): the system's zone.
    #[serde(with = "empty_is_none")]
    pub tz: Option<String>,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            days: DEFAULT_DAYS,
            retention_days: crate::history::store::DEFAULT_RETENTION_DAYS,
            compact_every: Duration::from_secs(3600),
            host: None,
            tz: None,
        }
    }
}

/// `[guest]`: limits on the one guest job the node runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GuestSection {
    pub max_mem_mib: u64,
    pub user: String,
    pub allow_network: bool,
    pub max_runtime_secs: u64,
    pub max_output_mib: u64,
    pub enabled: bool,
    /// Size cap of the cache of peers' inputs, MiB (0 keeps nothing between jobs).
    pub cache_mib: u64,
    /// Largest single input a peer's job may bring, MiB.
    pub max_input_mib: u64,
    /// Largest total of one job's inputs, MiB.
    pub max_job_input_mib: u64,
    /// Largest checkpoint of a self-checkpointing job the host snapshots, MiB.
    pub max_checkpoint_mib: u64,
    pub disk_mib: u64,
    pub job_cgroups: bool,
    /// Share of one core a guest may use, percent; 100 leaves it unthrottled.
    pub cpu_limit_percent: u64,
    /// Whether a job may bring an image to run in (issue 31).
    pub images: ImagesRule,
    /// Cap of the image cache, MiB of file contents (issue 31).
    pub image_cache_mib: u64,
    /// What a set-id file in an image meets (issue 31).
    pub image_setuid: ImageSetuid,
}

/// `[guest] images`: whether jobs may bring an image (docs/images.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImagesRule {
    /// Jobs may bring an image; it is unpacked into `<data dir>/images`.
    #[default]
    Allow,
    /// Jobs with an image are refused, and nothing is unpacked.
    Deny,
}

impl GuestSection {
    /// The bounds the node's image cache keeps: the reader's own per-image
    /// limits, with the owner's cap and set-id rule.
    pub fn image_limits(&self) -> crate::image::ImageLimits {
        crate::image::ImageLimits {
            max_cache_bytes: self.image_cache_mib.saturating_mul(1 << 20),
            set_id: match self.image_setuid {
                ImageSetuid::Refuse => crate::image::SetIdBits::Refuse,
                ImageSetuid::Strip => crate::image::SetIdBits::Strip,
            },
            ..crate::image::ImageLimits::default()
        }
    }
}

/// `[guest] image_setuid`: what a setuid or setgid file in an image meets
/// (docs/images.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageSetuid {
    /// The image is refused, naming the file.
    #[default]
    Refuse,
    /// The file is unpacked without the bits (Debian's `su` and `passwd`).
    Strip,
}

impl Default for GuestSection {
    fn default() -> Self {
        GuestSection {
            max_mem_mib: 2048,
            user: "nobody".to_string(),
            allow_network: false,
            max_runtime_secs: 24 * 3600,
            max_output_mib: 64,
            enabled: true,
            cache_mib: 4096,
            max_input_mib: 4096,
            max_job_input_mib: 8192,
            max_checkpoint_mib: 256,
            disk_mib: crate::guest::DEFAULT_DISK_MIB,
            job_cgroups: true,
            cpu_limit_percent: 100,
            images: ImagesRule::Allow,
            image_cache_mib: crate::image::DEFAULT_CACHE_MIB,
            image_setuid: ImageSetuid::Refuse,
        }
    }
}

/// `[net]`: the pool this node joins. The defaults make a LAN pool: listen on
/// every interface, find neighbours by mDNS, dial nothing else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetSection {
    pub enabled: bool,
    pub pool: PoolName,
    #[serde(with = "display_list")]
    pub listen: Vec<Multiaddr>,
    #[serde(with = "display_list")]
    pub bootstrap: Vec<Multiaddr>,
    pub mdns: bool,
    pub kad_server: bool,
    pub autonat: bool,
    pub relay: bool,
    /// `None` (empty in the file): an open pool.
    #[serde(with = "empty_is_none")]
    pub swarm_key_file: Option<PathBuf>,
    #[serde(with = "display_list")]
    pub allowlist: Vec<PeerId>,
    #[serde(rename = "request_timeout_secs", with = "secs")]
    pub request_timeout: Duration,
    #[serde(rename = "announce_secs", with = "secs")]
    pub announce_interval: Duration,
    pub max_retries: u32,
    /// Remember the members met (in the data dir's `peers/`) and redial them
    /// at start and when connections are few.
    pub peer_book: bool,
}

impl Default for NetSection {
    fn default() -> Self {
        NetSection {
            enabled: true,
            pool: PoolName::default(),
            listen: vec![
                Multiaddr::empty()
                    .with(Protocol::Ip4(std::net::Ipv4Addr::UNSPECIFIED))
                    .with(Protocol::Tcp(0)),
                Multiaddr::empty()
                    .with(Protocol::Ip4(std::net::Ipv4Addr::UNSPECIFIED))
                    .with(Protocol::Udp(0))
                    .with(Protocol::QuicV1),
            ],
            bootstrap: Vec::new(),
            mdns: true,
            kad_server: true,
            autonat: false,
            relay: false,
            swarm_key_file: None,
            allowlist: Vec::new(),
            request_timeout: Duration::from_secs(10),
            announce_interval: Duration::from_secs(300),
            max_retries: 3,
            peer_book: true,
        }
    }
}

/// The dashboard's default address: loopback only, a fixed port so the
/// owner's bookmark keeps working (a busy port falls back to a free one, and
/// the node prints the URL it got).
pub const DEFAULT_UI_LISTEN: &str = "127.0.0.1:8385";

/// `[ui]`: the web dashboard (`crate::ui`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UiSection {
    /// `None` (empty in the file): no dashboard. Checked by `validate` to be
    /// a loopback `IP:PORT`, because the page is plain HTTP and its token
    /// would cross the network in the clear.
    #[serde(with = "empty_is_none")]
    pub listen: Option<String>,
}

impl Default for UiSection {
    fn default() -> Self {
        UiSection {
            listen: Some(DEFAULT_UI_LISTEN.to_string()),
        }
    }
}

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

/// What each key means, in file order. `config --defaults` prints these
/// above the keys; a test checks that every key has exactly one.
pub const KEY_DOCS: &[(&str, &str, &str)] = &[
    ("policy", "th1", "Host CPU load (percent of all cores, guest excluded) below which the host is lightly loaded (S1) and a guest runs at nice 0; from th1 to th2 it is busy (S2) and a guest runs at nice 19."),
    ("policy", "th2", "Host CPU load above which the guest is suspended (SIGSTOP), and killed (S3) once the load stays above it for sustain_secs."),
    ("policy", "sustain_secs", "How long the load must stay above th2 before the guest is killed (S3); shorter excursions only suspend it."),
    ("monitor", "min_period_secs", "Shortest sampling period: used at start and after every state change; bounds how late a change is noticed."),
    ("monitor", "max_period_secs", "Longest sampling period, reached by doubling while nothing changes; also the step of the stored history."),
    ("monitor", "stable_periods", "Samples in a row without a state change before the period doubles."),
    ("monitor", "extra_sample_chance", "Chance (0..1) of one random extra sample between two regular ones, to catch changes a long period would hide."),
    ("monitor", "max_gap_secs", "A silence in the history longer than this means the node was off (S5, revocation)."),
    ("history", "days", "Past days of the same kind (weekdays or weekend days) that predictions learn from."),
    ("history", "retention_days", "Samples, transitions and job events older than this many days are deleted."),
    ("history", "compact_every_secs", "How often old history is deleted."),
    ("history", "host", "Host name written into exported traces; empty means the machine's host name."),
    ("history", "tz", "IANA time zone of the owner (decides what a weekday is); empty means the system zone."),
    ("guest", "max_mem_mib", "Largest working set (MiB) a guest may declare; free memory below the declared set kills the guest (S4)."),
    ("guest", "user", "The user a guest runs as when the node runs as root; never root itself."),
    ("guest", "allow_network", "Let guests use the network. Off, a guest gets its own empty network namespace (or Landlock TCP rules) where the kernel allows."),
    ("guest", "max_runtime_secs", "Longest wall-clock time a guest may run, suspension included."),
    ("guest", "max_output_mib", "Cap on each of a guest's stdout and stderr; output past it is dropped."),
    ("guest", "cache_mib", "Size cap (MiB) of the cache of peers' job inputs, kept by content hash so an input shared by many jobs crosses once; least recently used files go first; emptied at start. 0 keeps nothing between jobs."),
    ("guest", "max_input_mib", "Largest single input file (MiB) a peer's job may bring; a bigger one is refused with its name."),
    ("guest", "max_job_input_mib", "Largest total of one peer's job inputs (MiB)."),
    ("guest", "max_checkpoint_mib", "Largest checkpoint file (MiB) of a self-checkpointing job (`--checkpoint`) the host copies and sends back; a bigger one is refused with its name and the job goes on."),
    ("guest", "images", "\"allow\": a job may bring an image (a docker or OCI archive, or a root-filesystem tar) to run in, unpacked once into <data dir>/images after its every entry is checked; \"deny\": jobs with an image are refused."),
    ("guest", "image_cache_mib", "Size cap (MiB, file contents as counted while unpacking) of the image cache in <data dir>/images: to make room for a new image the least recently used images go first, never one a running guest is in; one image larger than this alone is refused. `gleaner images` lists and prunes it."),
    ("guest", "image_setuid", "\"refuse\": an image holding a setuid or setgid file is refused, naming the file; \"strip\": the file is unpacked without those bits (Debian-based images carry setuid su and passwd; a guest gains nothing from them anyway, as it runs with no_new_privs in a user namespace)."),
    ("guest", "enabled", "Host guest jobs from the pool. Off (`gleaner node --no-guest`), the node is consumer-only: it still submits jobs and answers queries, and refuses jobs."),
    ("guest", "disk_mib", "Disk quota of a job's work dir, inputs included (MiB; 0 = none): while the job runs the work dir is a tmpfs of this size (root nodes only), whose pages also count in the job's memory; at the end its contents are copied to disk."),
    ("guest", "job_cgroups", "Give each job a cgroup (process, memory and idle-CPU limits, kill of the whole group) where the kernel allows. Off, a job is held by its PID namespace alone."),
    ("guest", "cpu_limit_percent", "Share of one CPU core a guest may use (percent; 100 = no limit). Enforced by the job's cgroup (cpu.cfs_quota_us on cgroup v1, cpu.max on v2) where there is one, otherwise by stopping and continuing the guest (SIGSTOP/SIGCONT) in a 100 ms duty cycle; `gleaner status` says which."),
    ("owner", "hours", "When the owner lends the machine, in the owner's time zone ([history] tz), e.g. \"Mon-Fri 18:00-08:30; Sat,Sun\": entries separated by ';', days or day ranges, then optional HH:MM-HH:MM ranges (an end before the start crosses midnight). Outside them the node withholds itself (S5, cause schedule) and refuses guests. Empty means always."),
    ("owner", "on_battery", "\"run\" keeps hosting on battery power; \"pause\" withholds the machine (S5, cause battery) while no mains supply is online (read from /sys/class/power_supply)."),
    ("net", "enabled", "Join a pool over libp2p. Off (`--no-net`), the node only measures, remembers and runs local jobs."),
    ("net", "pool", "Pool name (letters, digits, '.', '_', '-'; at most 64): the gossipsub topic and DHT key members share."),
    ("net", "listen", "Multiaddrs to listen on; port 0 picks a free port. QUIC is skipped in private pools (the swarm key wraps TCP only)."),
    ("net", "bootstrap", "Peers to dial at start, as multiaddrs ending in /p2p/<peer id>: the way into a pool without mDNS."),
    ("net", "mdns", "Find pool members on the local network by mDNS (right for homes; ignores loopback)."),
    ("net", "kad_server", "Answer DHT queries from the start. Needed in LAN and private pools, where no external address is ever confirmed."),
    ("net", "autonat", "Probe our addresses with AutoNAT v2 and use relays and hole punching when behind NAT (public pools)."),
    ("net", "relay", "Serve as a relay, AutoNAT server and bootstrap peer of a public pool (`gleaner node --relay`)."),
    ("net", "swarm_key_file", "Pre-shared key file of a private pool (see netconf/README.md to make one); empty means an open pool."),
    ("net", "allowlist", "Peer ids allowed to submit jobs here; empty allows every pool member."),
    ("net", "request_timeout_secs", "How long a query or job request to a peer may take before it counts as failed."),
    ("net", "announce_secs", "Heartbeat of this node's summary on the pool's gossipsub topic: it republishes every 0.75 to 1.25 of this (randomised) and on a change of state, slot or power (at most one per min(10 s, half of this)); a member not heard for 5 heartbeats is dropped."),
    ("net", "max_retries", "How many times `gleaner submit` resubmits a job elsewhere after its host killed it, left or revoked it."),
    ("net", "peer_book", "Remember the pool members this node meets (peer id, addresses that worked, last seen; at most 10,000, in the data dir's peers/) and redial the most recently seen at start and whenever it has fewer than 4 connections, so it finds its pool again when its bootstrap peers are gone."),
    ("batch", "tail_copies", "Tail copies for this node's batches (issue 28): once the free hosts outnumber a batch's waiting tasks, each running task most at risk of finishing late (by its host's predicted TR and its expected finish) gets one extra copy on a free host; the first result wins and the other copy is cancelled. Off by default: docs/scheduling.md measures that they help two of six desktop pools and change nothing on the rest, for extra CPU on the pool."),
    ("batch", "later_windows", "Later windows for this node's batches (issue 28): a task that no free host is likely to finish now (TR below 0.3 for its length) waits for the later window of a host whose forecast says it will (the hosts are asked their TR for windows starting 1 to 24 h on), and starts there when the window opens, or earlier where a host free by then is about as good; `batch status` shows 'waiting for host X's window at HH:MM (P 0.83)'. A hold ends when its host leaves, when its host is not free as the window comes, or when the window would end after the batch's deadline. Off by default: the same rule in `gleaner simulate --policy windows` cuts kills but lengthens the mean makespan on most desktop pools measured (docs/desktop-pools.md)."),
    ("ui", "listen", "Address (loopback IP:PORT) of the web dashboard; the node prints its URL with the access token at start. A busy port falls back to a free one. Empty turns the dashboard off."),
];

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
];

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

    /// Every integer key's value, as named in the file (for [`RANGES`]).
    fn integer_values(&self) -> [(&'static str, &'static str, u64); 21] {
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

/// Durations in the file are whole seconds (keys ending in `_secs`).
mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

/// Optional values that the file spells as an empty string (`host = ""`):
/// empty means `None`, so files written by earlier versions still parse.
mod empty_is_none {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::path::PathBuf;

    /// What may be absent: a text or a path.
    pub trait Text: Sized {
        fn as_text(&self) -> String;
        fn from_text(text: String) -> Self;
    }
    impl Text for String {
        fn as_text(&self) -> String {
            self.clone()
        }
        fn from_text(text: String) -> Self {
            text
        }
    }
    impl Text for PathBuf {
        fn as_text(&self) -> String {
            self.display().to_string()
        }
        fn from_text(text: String) -> Self {
            PathBuf::from(text)
        }
    }

    pub fn serialize<T: Text, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.as_ref().map(Text::as_text).unwrap_or_default())
    }

    pub fn deserialize<'de, T: Text, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
        let text = String::deserialize(d)?;
        Ok((!text.trim().is_empty()).then(|| T::from_text(text)))
    }
}

/// Lists of typed values (multiaddrs, peer ids) written as strings.
mod display_list {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::fmt::Display;
    use std::str::FromStr;

    pub fn serialize<T: Display, S: Serializer>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(ToString::to_string))
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<Vec<T>, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        Vec::<String>::deserialize(d)?
            .into_iter()
            .map(|text| {
                text.parse::<T>()
                    .map_err(|e| D::Error::custom(format!("{text:?}: {e}")))
            })
            .collect()
    }
}

/// Every key with its default and meaning, as a TOML document that parses
/// back to the defaults. With `commented`, the keys are commented out too
/// (the file a first run writes: defaults can then change with upgrades).
pub fn defaults_toml(commented: bool) -> String {
    let table = match toml::Table::try_from(Config::default()) {
        Ok(t) => t,
        Err(e) => return format!("# cannot render the defaults: {e}\n"),
    };
    let mut out = String::from(
        "# Gleaner node configuration. Every key is optional; shown are the defaults.\n\
         # Precedence: command-line flags > environment > this file > defaults.\n",
    );
    let key_prefix = if commented { "# " } else { "" };
    for (section, keys) in &table {
        out.push_str(&format!("\n{key_prefix}[{section}]\n"));
        let Some(keys) = keys.as_table() else {
            continue;
        };
        for (key, value) in keys {
            for (_, _, meaning) in KEY_DOCS.iter().filter(|(s, k, _)| s == section && k == key) {
                out.push_str(&format!("#   {meaning}\n"));
            }
            for (_, _, lo, hi) in RANGES
                .iter()
                .filter(|(s, k, _, _)| s == section && k == key)
            {
                out.push_str(&format!("#   Range: {lo}..={hi}.\n"));
            }
            out.push_str(&format!("{key_prefix}{key} = {value}\n"));
        }
    }
    out
}

/// Writes the commented defaults to `path` unless a file is already there.
/// Returns whether it wrote one.
pub fn write_default_file(path: &Path) -> Result<bool, ConfigError> {
    if path.exists() {
        return Ok(false);
    }
    let err = |source| ConfigError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    std::fs::write(path, defaults_toml(true)).map_err(err)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_allowed_by_default_denied_by_choice_and_nothing_else() {
        let path = Path::new("config.toml");
        assert_eq!(Config::default().guest.images, ImagesRule::Allow);
        let deny = Config::parse("[guest]\nimages = \"deny\"\n", path).unwrap();
        assert_eq!(deny.guest.images, ImagesRule::Deny);
        assert!(Config::parse("[guest]\nimages = \"maybe\"\n", path).is_err());
    }

    #[test]
    fn the_image_cache_cap_is_bounded_and_a_bad_one_names_its_key() {
        let path = Path::new("config.toml");
        let default = Config::default().guest.image_cache_mib;
        assert_eq!(default, crate::image::DEFAULT_CACHE_MIB);
        // At least the largest image the reader takes, so a default node
        // can run every image it would accept.
        assert!(default << 20 >= crate::image::ImageLimits::default().max_image_bytes);
        let small = Config::parse("[guest]\nimage_cache_mib = 512\n", path).unwrap();
        assert_eq!(small.guest.image_cache_mib, 512);
        for bad in ["0", "1099511627776"] {
            let e = Config::parse(&format!("[guest]\nimage_cache_mib = {bad}\n"), path)
                .unwrap_err()
                .to_string();
            assert!(e.contains("[guest] image_cache_mib"), "{e}");
        }
        let e = Config::parse("[guest]\nimage_cache_mib = \"big\"\n", path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("image_cache_mib"), "{e}");
    }

    #[test]
    fn setuid_files_in_images_are_refused_by_default_stripped_by_choice() {
        let path = Path::new("config.toml");
        assert_eq!(Config::default().guest.image_setuid, ImageSetuid::Refuse);
        let strip = Config::parse("[guest]\nimage_setuid = \"strip\"\n", path).unwrap();
        assert_eq!(strip.guest.image_setuid, ImageSetuid::Strip);
        let e = Config::parse("[guest]\nimage_setuid = \"keep\"\n", path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("image_setuid"), "{e}");
    }

    #[test]
    fn later_windows_are_off_by_default_and_turned_on_by_the_batch_section() {
        let path = Path::new("config.toml");
        assert_eq!(
            Config::default().batch.later_windows,
            crate::consumer::batch::queue::LATER_WINDOWS_DEFAULT
        );
        assert!(!Config::default().batch.later_windows);
        let on = Config::parse("[batch]\nlater_windows = true\n", path).unwrap();
        assert!(on.batch.later_windows);
        assert!(!on.batch.tail_copies);
    }

    #[test]
    fn tail_copies_are_off_by_default_and_turned_on_by_the_batch_section() {
        let path = Path::new("config.toml");
        assert_eq!(
            Config::default().batch.tail_copies,
            crate::consumer::batch::queue::TAIL_COPIES_DEFAULT
        );
        assert!(!Config::default().batch.tail_copies);
        let on = Config::parse("[batch]\ntail_copies = true\n", path).unwrap();
        assert!(on.batch.tail_copies);
        let e = Config::parse("[batch]\ntail_copies = 2\n", path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tail_copies"), "{e}");
        let e = Config::parse("[batch]\ncopies = true\n", path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("copies"), "{e}");
    }

    #[test]
    fn defaults_document_parses_back_to_the_defaults() {
        let text = defaults_toml(false);
        assert_eq!(
            Config::parse(&text, Path::new("d")).unwrap(),
            Config::default()
        );
        let commented = defaults_toml(true);
        assert_eq!(
            Config::parse(&commented, Path::new("d")).unwrap(),
            Config::default()
        );
    }

    #[test]
    fn every_key_has_exactly_one_meaning_and_every_meaning_a_key() {
        let table = toml::Table::try_from(Config::default()).unwrap();
        let mut keys = Vec::new();
        for (section, t) in &table {
            for key in t.as_table().unwrap().keys() {
                keys.push((section.clone(), key.clone()));
            }
        }
        for (s, k) in &keys {
            let n = KEY_DOCS
                .iter()
                .filter(|(ds, dk, _)| ds == s && dk == k)
                .count();
            assert_eq!(n, 1, "[{s}] {k} has {n} meanings");
        }
        assert_eq!(keys.len(), KEY_DOCS.len());
    }

    #[test]
    fn unknown_keys_are_rejected_by_name() {
        let e = Config::parse("[policy]\nth3 = 5\n", Path::new("c.toml")).unwrap_err();
        assert!(e.to_string().contains("th3"), "{e}");
        let e = Config::parse("[polcy]\nth1 = 5\n", Path::new("c.toml")).unwrap_err();
        assert!(e.to_string().contains("polcy"), "{e}");
    }

    #[test]
    fn a_partial_file_keeps_the_other_defaults_and_bad_values_are_refused() {
        let c = Config::parse("[policy]\nsustain_secs = 3\n", Path::new("c")).unwrap();
        assert_eq!(c.policy.sustain_secs, 3);
        assert_eq!(c.policy.th2, Config::default().policy.th2);
        assert!(Config::parse("[policy]\nth1 = 70\nth2 = 60\n", Path::new("c")).is_err());
        assert!(Config::parse("[monitor]\nmin_period_secs = 0\n", Path::new("c")).is_err());
        assert!(Config::parse("[guest]\nuser = \"root\"\n", Path::new("c")).is_err());
    }

    #[test]
    fn owner_keys_parse_and_a_bad_schedule_names_its_position() {
        let c = Config::parse(
            "[owner]\nhours = \"Mon-Fri 18:00-08:30; Sat,Sun\"\non_battery = \"pause\"\n[guest]\ncpu_limit_percent = 30\n",
            Path::new("c"),
        )
        .unwrap();
        assert_eq!(c.owner.on_battery, OnBattery::Pause);
        assert_eq!(c.guest.cpu_limit_percent, 30);
        assert!(!c.schedule().is_always());
        let e = Config::parse("[owner]\nhours = \"Mon-Fri 18:00-8:3\"\n", Path::new("c"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[owner] hours") && e.contains("at character 15"),
            "{e}"
        );
        assert!(Config::parse("[owner]\non_battery = \"sleep\"\n", Path::new("c")).is_err());
        assert!(Config::parse("[guest]\ncpu_limit_percent = 0\n", Path::new("c")).is_err());
        assert!(Config::parse("[guest]\ncpu_limit_percent = 101\n", Path::new("c")).is_err());
    }

    #[test]
    fn the_dashboard_listens_on_loopback_only_and_empty_turns_it_off() {
        let c = Config::parse("[ui]\nlisten = \"\"\n", Path::new("c")).unwrap();
        assert_eq!(c.ui.listen_addr().unwrap(), None);
        let c = Config::parse("[ui]\nlisten = \"[::1]:0\"\n", Path::new("c")).unwrap();
        assert!(c.ui.listen_addr().unwrap().unwrap().ip().is_loopback());
        for bad in ["0.0.0.0:8385", "192.0.2.1:80", "localhost:80", "127.0.0.1"] {
            let e = Config::parse(&format!("[ui]\nlisten = {bad:?}\n"), Path::new("c"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("[ui] listen"), "{bad}: {e}");
        }
    }
}
