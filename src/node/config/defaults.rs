//! What `gleaner config --defaults` prints and the file a first run
//! writes: each key's meaning ([`KEY_DOCS`]) above its default and range,
//! as a TOML document that parses back to the defaults.

use super::{Config, ConfigError, RANGES};
use std::path::Path;

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
    ("net", "source_ration", "Once peers from one address block (a public IPv4 /24 or IPv6 /48, any other address as it is) have gone past their budgets a few times, or it brought more peer ids this node never met than source_new_peers allows, ration that block's new connections (8, then one a second) and give its new peers smaller budgets for 10 minutes (docs/trust.md). Turn off only when every peer reaches this node through one address that is not its own (a TCP proxy or port forwarder in front of the node): there one flooder would ration everyone."),
    ("net", "source_new_peers", "Peer ids this node has not met in the last hour that one address block may bring at once (then one a second) before each further one counts as a flood against the block, as a peer past its budget does (source_ration): an honest node keeps its identity, while a stranger that takes a fresh one for every connection brings a new one each time. Raise it if more nodes than this reach this node through one address (a LAN behind one NAT address, many nodes on one machine); 0 turns the count off."),
    ("net", "peer_cpu_percent", "The share of one core, in percent, that what each peer sends at its will (reliability queries, job requests and events, data streams, summaries) may cost this node, after a burst of 2 s of CPU: each request is charged a fixed cost and the CPU its answer took (a forecast, a read), and each data stream it opens and each summary it publishes a fixed cost, all to one account. Past it what the peer sends is refused, and a peer that goes on is disconnected for 10 minutes and a flood is counted in its record (docs/trust.md). 0 turns the limit off."),
    ("batch", "tail_copies", "Tail copies for this node's batches (issue 28): once the free hosts outnumber a batch's waiting tasks, each running task most at risk of finishing late (by its host's predicted TR and its expected finish) gets one extra copy on a free host (a task its hosts' owners killed five times or more, up to three; a verified task, one replica more); the first result wins and the other copies are cancelled. On by default: on the desktop pools docs/scheduling.md measures they shorten the batches where owners differ and the tail is long and lengthen none, for 1-4.5 % more CPU on the pool (0.5 % on the VMs, about 14 % on the shared lab samples); false turns them off."),
    ("batch", "later_windows", "Later windows for this node's batches (issue 28): a task that no free host is likely to finish now (TR below 0.3 for its length) waits for the later window of a host whose forecast says it will (the hosts are asked their TR for windows starting 1 to 24 h on; see later_unit_secs), and starts there when the window opens, or earlier where a host free by then is about as good; `batch status` shows 'waiting for host X's window at HH:MM (P 0.83)'. A hold is for a window at most 2 h on; it ends when its host leaves, when its host is not free as the window comes, when the window would end after the batch's deadline, or once the task has been held 2 h in all (then it is placed as usual). On by default: the same rule in `gleaner simulate --policy windows` ends office-like pools 8 % and mixed ones 4 % sooner than starting every task at once (`proactive`), no other desktop pool measured later beyond noise, and no desktop pool's worst run past 1.74× the best possible (docs/scheduling.md, \"Holds within two hours\"). false starts every task at once wherever it is best now."),
    ("batch", "later_unit_secs", "The unit of the later starts hosts are asked about for later_windows: 1, 2, 3, 4, 6, 8, 10, 12, 16, 20 and 24 of it from now. An hour (3600), the grain of owners' habits and of the forecasts; smaller only for tests and demo pools whose owners' loads are scripted in minutes (the rest of the rule, e.g. a failed attempt costing two hours, stays in real time). A host answers a window that starts within 10 minutes of its last reading from its present state, so with a one-minute unit the first starts say what the host is doing now and the later ones what it usually does."),
    ("ui", "listen", "Address (loopback IP:PORT) of the web dashboard; the node prints its URL with the access token at start. A busy port falls back to a free one. Empty turns the dashboard off."),
];

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
