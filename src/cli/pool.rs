//! The pool's commands: `gleaner hosts` (who in the pool will stay
//! available for a window, through the local node) and `gleaner swarm-key`
//! (make the pre-shared key of a private pool). Running work is
//! `gleaner submit` (`cli::submit`) and `gleaner batch` (`cli::batch`).

use clap::{Args, Subcommand};

use crate::cli::args::parse_duration;
use crate::cli::control::{block_on, client};
use crate::cli::output::{print_json, print_text};
use crate::cli::Global;
use crate::control::api::{HostReport, HostsQuery, HostsReport, PoolSample, PREFIX};

#[derive(Debug, Args)]
pub struct HostsArgs {
    /// The job's window length (90m, 3h) from now.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "1h")]
    pub window: u64,
    /// The job's working set, MiB.
    #[arg(long, value_name = "MIB", default_value_t = 0)]
    pub mem: u64,
    /// Query each host this many times and report round-trip p50/p99.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rounds: u32,
    /// Ask every host directly instead of listing what their summaries say
    /// (slower: one query per host; implied by --rounds above 1).
    #[arg(long)]
    pub probe: bool,
    /// In a large pool, list every host instead of a sample: the node hears
    /// every member's summary for 5 minutes, and with --probe walks the
    /// pool's whole DHT trie (about N/4 queries) and asks each host. Its
    /// cost grows with the pool.
    #[arg(long)]
    pub all: bool,
    /// After the table, each host's reliability curve as this node scored
    /// it: per bin of claimed TR, its tasks, their mean claim and the share
    /// that finished (`--json` always carries it, as `reliability`).
    #[arg(long)]
    pub claims: bool,
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
}

#[derive(Debug, Args)]
pub struct SwarmKeyArgs {
    #[command(subcommand)]
    pub command: SwarmKeyCommand,
}

#[derive(Debug, Subcommand)]
pub enum SwarmKeyCommand {
    /// Print a new random pre-shared key (save it as swarm.key, mode 600, and
    /// give it to every member of the private pool).
    New,
}

/// `gleaner hosts`.
pub fn hosts(args: &HostsArgs, global: &Global) -> anyhow::Result<()> {
    let (_, client) = client(global)?;
    let query = HostsQuery {
        at: None,
        window_secs: args.window,
        mem_mib: args.mem,
        rounds: args.rounds,
        probe: args.probe,
        all: args.all,
    };
    let report: HostsReport = block_on(client.post_json(&format!("{PREFIX}/hosts"), &query))??;
    if global.json {
        return print_json(&report);
    }
    let mut text = hosts_table(&report);
    if args.claims {
        text.push_str(&claims_detail(&report));
    }
    print_text(&text)
}

fn hosts_table(r: &HostsReport) -> String {
    let window = crate::human::duration(r.window_secs);
    let alone = r
        .contact
        .as_ref()
        .and_then(|c| c.alone_text(crate::cli::control::clock_time));
    if r.hosts.is_empty() {
        return match alone {
            Some(why) => format!("pool {}: no host found: {why}\n", r.pool),
            None => format!(
                "pool {}: no other member found yet (mDNS, bootstrap peers and the DHT are searched; try again in a few seconds)\n",
                r.pool
            ),
        };
    }
    let mut out = format!(
        "pool {}, window {window} from now, {} host(s), best first:\n",
        r.pool,
        r.hosts.len(),
    );
    if let Some(c) = &r.summary_cache {
        out.push_str(&format!("{}\n", c.text(crate::human::duration)));
    }
    if let Some(s) = &r.sample {
        out.push_str(&sample_text(s));
    }
    out.push_str(&crate::cli::output::table(
        &[
            "peer",
            "TR",
            "state",
            "power",
            "slot",
            "days",
            "rtt ms",
            "age",
            "week: fails, up/away",
            "valid/invalid/streak",
            "record",
            "images",
            "claims: n, Brier",
            "note",
        ],
        r.hosts.iter().map(host_row),
        true,
    ));
    out
}

/// What a large pool's listing is, and what listing every host would cost.
fn sample_text(s: &PoolSample) -> String {
    let of = match s.pool_estimate {
        Some(n) => format!(
            " of {} {n} (estimated from this node's place in the pool's DHT)",
            if s.at_least { "at least" } else { "about" }
        ),
        None => String::new(),
    };
    format!(
        "a large pool: a sample, {} host(s){of}. `gleaner hosts --all` lists every host: it hears every member's summary for 5 minutes, and with --probe walks the whole DHT (about one query per 4 members) and asks each host.\n",
        s.listed
    )
}

fn host_row(h: &HostReport) -> Vec<String> {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let slot = match h.slot_free {
        Some(true) => "free",
        Some(false) => "busy",
        None => "-",
    };
    let rtt = match (h.rtt_p50_ms, h.rtt_p99_ms, h.responses) {
        (Some(p50), Some(p99), n) if n > 1 => format!("{p50:.2}/{p99:.2}"),
        _ => opt(h.rtt_ms.map(|v| format!("{v:.2}"))),
    };
    vec![
        h.peer.clone(),
        opt(h.tr.map(|t| format!("{t:.3}"))),
        opt(h.initial_state.clone().or_else(|| h.state.clone())),
        opt(h.power.map(|p| format!("{p:.2}"))),
        slot.to_string(),
        // A host with no day of record answers with a prior and says
        // which, in its answer and its summary (an older one's cannot).
        opt(h.days_used.map(|d| match (d, h.method.as_deref()) {
            (0, Some("pool-prior")) => "0 (pool prior)".to_string(),
            (0, Some("built-in-prior")) => "0 (built-in prior)".to_string(),
            (0, _) => "0 (prior)".to_string(),
            (d, _) => d.to_string(),
        })),
        rtt,
        opt(h
            .heard_secs_ago
            .map(|a| compact_duration(a.round().max(0.0) as u64))),
        week_row(h),
        if h.valid + h.invalid == 0 {
            "-".to_string()
        } else {
            format!("{}/{}/{}", h.valid, h.invalid, h.streak)
        },
        record_row(h),
        // How many images it holds (their ids are in --json).
        match h.images.len() {
            0 => "-".to_string(),
            n => n.to_string(),
        },
        claims_row(h),
        h.error.clone().unwrap_or_default(),
    ]
}

/// A host's record of attempts: landed, failed and forgotten, then its
/// standing when it is not clean ("4 ok, 1 failed, 2 forgot: demoted").
fn record_row(h: &HostReport) -> String {
    if h.landed + h.failed + h.forgotten == 0 && h.offences == 0 {
        return "-".to_string();
    }
    let mut text = format!(
        "{} ok, {} failed, {} forgot",
        h.landed, h.failed, h.forgotten
    );
    if h.offences > 0 {
        text.push_str(&format!(": {}", h.standing));
    }
    text
}

/// A host's scored TR claims: how many and their Brier score, and the
/// discount placement applies when there is one ("12, 0.180 ×0.62").
fn claims_row(h: &HostReport) -> String {
    let Some(brier) = h.brier.filter(|_| h.claims > 0) else {
        return "-".to_string();
    };
    let mut text = format!("{}, {brier:.3}", h.claims);
    if h.claim_discount < 0.995 {
        text.push_str(&format!(" ×{:.2}", h.claim_discount));
    }
    text
}

/// `hosts --claims`: each scored host's claims column, then its reliability
/// curve, a row per bin of claimed TR that holds a claim ("  claimed
/// 0.8–1.0: 17 tasks, mean claim 0.95, finished 0.53").
fn claims_detail(r: &HostsReport) -> String {
    let mut out = String::from("claimed TR against what finished, per host:\n");
    let scored: Vec<&HostReport> = r
        .hosts
        .iter()
        .filter(|h| !h.reliability.is_empty())
        .collect();
    if scored.is_empty() {
        out.push_str("  no host has a scored claim yet\n");
    }
    for h in scored {
        out.push_str(&format!(
            "{} (claims: n, Brier {}):\n",
            h.peer,
            claims_row(h)
        ));
        for b in &h.reliability {
            out.push_str(&format!(
                "  claimed {:.1}–{:.1}: {} task{}, mean claim {:.2}, finished {:.2}\n",
                b.from,
                b.to,
                b.claims,
                if b.claims == 1 { "" } else { "s" },
                b.mean_claim,
                b.finished
            ));
        }
    }
    out
}

/// A host's past week: its failures, and the mean time up between them
/// and away after one ("3, 2d/40m"); "0" for a week without a failure.
fn week_row(h: &HostReport) -> String {
    let human = |secs: f64| compact_duration(secs.round().max(0.0) as u64);
    match (h.failures_past_week, h.mean_uptime_secs, h.mean_outage_secs) {
        (Some(n), Some(up), Some(away)) if n > 0 => format!("{n}, {}/{}", human(up), human(away)),
        (Some(n), ..) => n.to_string(),
        _ => "-".into(),
    }
}

/// A duration in its largest whole unit, for a narrow column ("2d", "40m").
fn compact_duration(secs: u64) -> String {
    match secs {
        s if s >= 2 * 86_400 => format!("{}d", s / 86_400),
        s if s >= 3_600 => format!("{}h", s / 3_600),
        s if s >= 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// `gleaner swarm-key new`: a pnet key file (`/key/swarm/psk/1.0.0/`, base16).
pub fn swarm_key(args: &SwarmKeyArgs) -> anyhow::Result<()> {
    match args.command {
        SwarmKeyCommand::New => print_text(&new_swarm_key(rand::random())),
    }
}

fn new_swarm_key(bytes: [u8; 32]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("/key/swarm/psk/1.0.0/\n/base16/\n{hex}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hosts_week_reads_as_failures_then_up_and_away() {
        let mut h: HostReport = serde_json::from_value(
            serde_json::json!({"peer": "p", "found_by": [], "addresses": [],
                "answered": true, "tr": null, "fail_by_cause": {}, "initial_state": null,
                "days_used": null, "method": null, "power": null, "slot_free": null, "state": null,
                "logical_cpus": null, "memory_mib": null, "version": null, "error": null,
                "rtt_ms": null, "rtt_p50_ms": null, "rtt_p99_ms": null, "responses": 1}),
        )
        .unwrap();
        // An older node's report has no week.
        assert_eq!(week_row(&h), "-");
        h.failures_past_week = Some(3);
        h.mean_uptime_secs = Some(190_000.0);
        h.mean_outage_secs = Some(2_400.0);
        assert_eq!(week_row(&h), "3, 2d/40m");
        h.failures_past_week = Some(0);
        assert_eq!(week_row(&h), "0");
        assert_eq!(compact_duration(59), "59s");
        assert_eq!(compact_duration(7_200), "2h");
        assert_eq!(compact_duration(100_000), "27h");
    }

    #[test]
    fn a_host_with_no_record_shows_which_prior_it_said_it_answers_with() {
        let mut h: HostReport = serde_json::from_value(
            serde_json::json!({"peer": "p", "found_by": [], "addresses": [],
                "answered": false, "tr": 0.97, "fail_by_cause": {}, "initial_state": null,
                "days_used": 0, "method": null, "power": null, "slot_free": null, "state": null,
                "logical_cpus": null, "memory_mib": null, "version": null, "error": null,
                "rtt_ms": null, "rtt_p50_ms": null, "rtt_p99_ms": null, "responses": 0}),
        )
        .unwrap();
        // An older host's summary cannot say which.
        assert_eq!(host_row(&h)[5], "0 (prior)");
        for (method, shown) in [
            ("pool-prior", "0 (pool prior)"),
            ("built-in-prior", "0 (built-in prior)"),
        ] {
            h.method = Some(method.to_string());
            assert_eq!(host_row(&h)[5], shown);
        }
        h.days_used = Some(4);
        h.method = Some("logistic".into());
        assert_eq!(host_row(&h)[5], "4");
    }

    #[test]
    fn hosts_says_how_many_summaries_it_ranks_from_and_how_old() {
        let host: HostReport = serde_json::from_value(serde_json::json!({"peer": "p",
            "found_by": ["gossip"], "addresses": [], "answered": false, "tr": 0.9,
            "fail_by_cause": {}, "initial_state": null, "days_used": null, "method": null,
            "power": 0.5, "slot_free": true, "state": "S1", "logical_cpus": null,
            "memory_mib": null, "version": null, "error": null, "rtt_ms": null,
            "rtt_p50_ms": null, "rtt_p99_ms": null, "responses": 0}))
        .unwrap();
        let mut report = HostsReport {
            pool: "lab".into(),
            peer_id: "me".into(),
            window_start_unix: 0,
            window_secs: 3600,
            mem_mib: 0,
            hosts: vec![host],
            contact: None,
            summary_cache: Some(crate::net::SummaryCache {
                members: 1,
                summarised: 1,
                newest_secs: Some(4.0),
                median_secs: Some(4.0),
                oldest_secs: Some(4.0),
            }),
            sample: None,
        };
        let text = hosts_table(&report);
        assert!(
            text.contains("1 member known from summaries, heard 4s to 4s ago (median 4s)"),
            "{text}"
        );
        // An older report has no images; one that holds two shows 2.
        assert!(report.hosts[0].images.is_empty());
        assert_eq!(host_row(&report.hosts[0])[11], "-");
        report.hosts[0].images = vec!["sha256:aa".into(), "sha256:bb".into()];
        assert_eq!(host_row(&report.hosts[0])[11], "2");
        assert!(hosts_table(&report).contains("images"), "{text}");
        // And the JSON carries it; an older node's report without it reads.
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["summary_cache"]["summarised"], 1);
        report.summary_cache = None;
        let mut json = serde_json::to_value(&report).unwrap();
        json.as_object_mut().unwrap().remove("summary_cache");
        let back: HostsReport = serde_json::from_value(json).unwrap();
        assert_eq!(back.summary_cache, None);
        assert!(!hosts_table(&back).contains("known from summaries"));
    }

    /// The claims column and `--claims`' curve, read from a host whose
    /// record holds 40 claims of 0.95 that finished half the time and 10 of
    /// 0.3 that finished 3.
    #[test]
    fn the_claims_column_and_the_reliability_curve_read_from_the_record() {
        use crate::model::trust::{HostTrack, Outcome};
        let mut h: HostReport = serde_json::from_value(
            serde_json::json!({"peer": "p", "found_by": [], "addresses": [],
                "answered": true, "tr": 0.95, "fail_by_cause": {}, "initial_state": null,
                "days_used": 3, "method": null, "power": null, "slot_free": null, "state": null,
                "logical_cpus": null, "memory_mib": null, "version": null, "error": null,
                "rtt_ms": null, "rtt_p50_ms": null, "rtt_p99_ms": null, "responses": 1}),
        )
        .unwrap();
        // An older node's report: no claims, no curve.
        assert_eq!((claims_row(&h), h.reliability.len()), ("-".to_string(), 0));
        let mut track = HostTrack::default();
        for (claim, n, landed) in [(0.95, 40, 20), (0.3, 10, 3)] {
            for i in 0..n {
                let claimed_tr = Some(claim);
                track.apply(if i < landed {
                    Outcome::Landed { claimed_tr }
                } else {
                    Outcome::Failed { claimed_tr }
                });
            }
        }
        h.claims = track.claims;
        h.brier = track.brier();
        h.claim_discount = track.claim_discount();
        h.reliability = crate::control::api::ClaimBinReport::curve(&track);
        // Σ (y − TR)²: 20·0.0025 + 20·0.9025 + 3·0.49 + 7·0.09 = 20.2 over 50.
        let row = host_row(&h);
        assert_eq!(row[12], claims_row(&h));
        // Discount (23 + 5) / (41 + 5): 41 = 50 − Σ (1 − TR) promised.
        assert_eq!(row[12], "50, 0.404 ×0.61");
        let report = HostsReport {
            pool: "lab".into(),
            peer_id: "me".into(),
            window_start_unix: 0,
            window_secs: 3600,
            mem_mib: 0,
            hosts: vec![h],
            contact: None,
            summary_cache: None,
            sample: None,
        };
        assert!(hosts_table(&report).contains("claims: n, Brier"));
        let text = claims_detail(&report);
        assert!(
            text.contains("  claimed 0.8–1.0: 40 tasks, mean claim 0.95, finished 0.50\n"),
            "{text}"
        );
        assert!(
            text.contains("  claimed 0.2–0.4: 10 tasks, mean claim 0.30, finished 0.30\n"),
            "{text}"
        );
        assert!(!text.contains("claimed 0.0–0.2"), "{text}");
        // The JSON carries the curve; an older node's report without it reads.
        let mut json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["hosts"][0]["reliability"][1]["claims"], 40);
        assert_eq!(json["hosts"][0]["reliability"][1]["finished"], 0.5);
        json["hosts"][0]
            .as_object_mut()
            .unwrap()
            .remove("reliability");
        let back: HostsReport = serde_json::from_value(json).unwrap();
        assert!(claims_detail(&back).contains("no host has a scored claim yet"));
    }

    #[test]
    fn a_large_pools_listing_says_it_is_a_sample_and_what_all_costs() {
        let mut sample = PoolSample {
            listed: 70,
            pool_estimate: Some(9_800),
            at_least: false,
        };
        let text = sample_text(&sample);
        assert!(
            text.contains("a sample, 70 host(s) of about 9800"),
            "{text}"
        );
        assert!(text.contains("--all"), "{text}");
        sample.at_least = true;
        let floor = sample_text(&sample);
        assert!(floor.contains("70 host(s) of at least 9800"), "{floor}");
        sample.pool_estimate = None;
        let unplaced = sample_text(&sample);
        assert!(!unplaced.contains("host(s) of"), "{unplaced}");
    }

    #[test]
    fn a_new_swarm_key_parses_as_a_pnet_key() {
        let text = new_swarm_key([7; 32]);
        let key: libp2p::pnet::PreSharedKey = text.parse().unwrap();
        assert_ne!(key.fingerprint().to_string(), "");
    }
}
