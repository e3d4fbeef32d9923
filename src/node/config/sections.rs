//! Each `[section]` of the configuration file as a struct, with its keys'
//! defaults (what an empty file means) and the small enums some keys take.
//! The keys' meanings are in `defaults`, their checks in `validate`.

use super::forms::{display_list, empty_is_none, secs};
use crate::model::ids::PoolName;
use crate::model::owner::OnBattery;
use crate::model::period::PeriodPolicy;
use crate::model::predict::DEFAULT_DAYS;
use crate::model::series::DEFAULT_MAX_GAP_SECS;
use crate::model::state::Thresholds;
use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

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
    /// The unit of the later starts hosts are asked about, seconds: an
    /// hour, or down to a minute for tests and demos whose owners' loads
    /// are scripted in minutes.
    pub later_unit_secs: u64,
}

impl Default for BatchSection {
    fn default() -> Self {
        BatchSection {
            tail_copies: crate::consumer::batch::queue::TAIL_COPIES_DEFAULT,
            later_windows: crate::consumer::batch::queue::LATER_WINDOWS_DEFAULT,
            later_unit_secs: crate::consumer::batch::queue::LATER_UNIT_SECS,
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
    /// Ration new connections from an address block whose peers flood
    /// (`NetConfig::source_ration`).
    pub source_ration: bool,
    /// Peer ids never met one address block may bring at once before each
    /// further one is a strike against it (`NetConfig::source_new_peers`);
    /// 0: not counted.
    pub source_new_peers: u32,
    /// The share of a core each peer's requests, data streams and
    /// summaries together may cost this node, after a burst (`NetConfig::peer_cpu_percent`); 0: no limit.
    pub peer_cpu_percent: u32,
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
            source_ration: true,
            source_new_peers: crate::net::SOURCE_NEW_PEERS,
            peer_cpu_percent: crate::net::PEER_CPU_PERCENT,
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
