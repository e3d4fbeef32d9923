//! `leaf_digest`: the leaf store's bounds and answer, a digest's checks, and
//! the sampler driven against a model trie of members placed as
//! `pool_shards::Placement` places them (the shallowest key on a member's
//! path with fewer than `full` providers).

use std::collections::{HashMap, HashSet};

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::*;
use crate::net::codec::{encode_body, encode_frame};
use crate::net::protocol::{
    Announcement, HostSummary, SummaryWithImages, WireSpellLengths, WireState,
};

/// A peer whose path goes through `leaf`.
fn peer_under(leaf: Shard) -> PeerId {
    loop {
        let p = PeerId::random();
        if leaf.holds(&p) {
            return p;
        }
    }
}

/// `leaf`'s first child, a key one level down.
fn child(leaf: Shard) -> Shard {
    leaf.children().expect("not the deepest")[0]
}

/// A format 2 summary of `peer`, padded with `pad` spell lengths (a byte
/// each): 3,500 makes one of nearly the largest size.
fn summary_of(peer: PeerId, pad: usize) -> Vec<u8> {
    let summary = HostSummary {
        format: SUMMARY_FORMAT,
        member: Announcement {
            peer_id: peer.to_bytes(),
            addresses: vec![],
            logical_cpus: 4,
            memory_mib: 8_192,
            benchmark_score: 1_000,
            relative_power_milli: 800,
            state: WireState::S1,
            slot_free: true,
            version: "0.1.0".into(),
        },
        computed_at_unix: 1_700_000_000,
        speed_milli: 900,
        availability_milli: Some(700),
        days_used: 7,
        ladders: vec![],
        spells: None,
        spell_lengths: (pad > 0).then(|| WireSpellLengths {
            up_secs: vec![1; pad],
            up_seen: pad as u32,
            up_cut_secs: vec![],
            outage_secs: vec![],
            outages_seen: 0,
        }),
    };
    let bytes = encode_body(&SummaryWithImages {
        summary,
        images: vec![],
    })
    .unwrap();
    assert!(bytes.len() <= SUMMARY_MAX_BYTES);
    bytes
}

const TTL: Duration = Duration::from_secs(1_505);

#[test]
fn a_leaf_store_keeps_members_of_its_leaf_only_and_at_most_the_bound() {
    let now = Instant::now();
    let leaf = child(Shard::ROOT);
    let mut store = LeafStore::default();
    let mate = peer_under(leaf);
    assert!(
        !store.heard(mate, summary_of(mate, 0), now),
        "no leaf yet: nothing kept"
    );
    store.moved(leaf);
    let stranger = peer_under(Shard::ROOT.children().unwrap()[1]);
    assert!(!store.heard(stranger, summary_of(stranger, 0), now));
    assert!(!store.heard(mate, vec![0; SUMMARY_MAX_BYTES + 1], now));
    let mates: Vec<PeerId> = (0..DIGEST_ENTRIES_MAX + 5)
        .map(|_| peer_under(leaf))
        .collect();
    for (i, m) in mates.iter().enumerate() {
        assert!(store.heard(*m, summary_of(*m, 0), now + Duration::from_secs(i as u64)));
    }
    assert_eq!(store.len(), DIGEST_ENTRIES_MAX);
    let answer = store
        .answer(PeerId::random(), None, now + Duration::from_secs(100), TTL)
        .unwrap();
    let (_, named, _) = check_digest(&mates[0], &answer, 1_700_000_000).unwrap();
    let named: HashSet<PeerId> = named.iter().map(|m| m.peer).collect();
    assert!(
        !named.contains(&mates[0]) && named.contains(&mates[DIGEST_ENTRIES_MAX + 4]),
        "the least recently heard went first"
    );
    // Moving away keeps only those under the new leaf.
    let deeper = Shard::of(&mates[10], 3);
    store.moved(deeper);
    assert!(store.len() < DIGEST_ENTRIES_MAX);
    assert!(!store.is_empty(), "mates[10] is under its own path");
}

#[test]
fn the_members_heard_lately_on_the_leaf_are_those_heard_within_the_window() {
    let now = Instant::now();
    let leaf = child(Shard::ROOT);
    let mut store = LeafStore::default();
    store.moved(leaf);
    let (quiet, lately) = (peer_under(leaf), peer_under(leaf));
    assert!(store.heard(quiet, summary_of(quiet, 0), now));
    let later = now + Duration::from_secs(500);
    assert!(store.heard(lately, summary_of(lately, 0), later));
    let window = Duration::from_secs(600);
    let mut both = store.heard_within(later, window);
    both.sort();
    let mut want = vec![quiet, lately];
    want.sort();
    assert_eq!(both, want);
    assert_eq!(
        store.heard_within(now + Duration::from_secs(700), window),
        vec![lately],
        "a member not heard for longer than the window (moved down, or gone) drops out"
    );
}

#[test]
fn a_digest_puts_our_summary_first_then_the_newest_and_fits_its_cap() {
    let now = Instant::now();
    let me = peer_under(Shard::ROOT);
    let leaf = Shard::of(&me, 2);
    let mut store = LeafStore::default();
    store.moved(leaf);
    // Summaries of nearly the largest size: not all fit in one answer.
    let mates: Vec<PeerId> = (0..DIGEST_ENTRIES_MAX).map(|_| peer_under(leaf)).collect();
    for (i, m) in mates.iter().enumerate() {
        let at = now + Duration::from_secs(i as u64);
        assert!(store.heard(*m, summary_of(*m, 3_500), at));
    }
    let stale = peer_under(leaf);
    // Heard long before the others: past the TTL at the answer's time.
    let later = now + TTL + Duration::from_secs(10);
    let own = summary_of(me, 0);
    let answer = store
        .answer(me, Some(&own), later, TTL + Duration::from_secs(30))
        .unwrap();
    assert!(
        encode_frame(&answer, DIGEST_RESPONSE_CAP).is_ok(),
        "the answer fits its frame"
    );
    assert_eq!(answer.entries[0].summary, own);
    assert_eq!(answer.entries[0].heard_secs_ago, 0);
    let ages: Vec<u32> = answer.entries[1..]
        .iter()
        .map(|e| e.heard_secs_ago)
        .collect();
    assert!(
        ages.windows(2).all(|w| w[0] <= w[1]),
        "newest first: {ages:?}"
    );
    assert!(
        answer.entries.len() < DIGEST_ENTRIES_MAX,
        "large summaries: fewer fit"
    );
    // Small ones all fit; one past the TTL is left out.
    let mut store = LeafStore::default();
    store.moved(leaf);
    assert!(store.heard(stale, summary_of(stale, 0), now));
    for m in &mates[..10] {
        assert!(store.heard(*m, summary_of(*m, 0), later));
    }
    let answer = store.answer(me, Some(&own), later, TTL).unwrap();
    assert_eq!(answer.entries.len(), 11, "ours and the ten fresh ones");
    let (at, named, refused) = check_digest(&me, &answer, 1_700_000_000).unwrap();
    assert_eq!((at, refused), (leaf, 0));
    assert_eq!(named[0].peer, me);
    assert!(!named.iter().any(|m| m.peer == stale));
}

#[test]
fn a_hostile_digest_is_refused_whole_or_entry_by_entry() {
    let me = peer_under(Shard::ROOT);
    let leaf = Shard::of(&me, 2);
    let mate = peer_under(leaf);
    let outsider = loop {
        let p = PeerId::random();
        if !leaf.holds(&p) {
            break p;
        }
    };
    let entry = |summary: Vec<u8>| DigestEntry {
        heard_secs_ago: 3,
        summary,
    };
    let answer = |entries: Vec<DigestEntry>| DigestResponse {
        depth: leaf.depth(),
        bits: leaf.bits(),
        entries,
    };
    // Bits past the depth, a depth past the trie: no leaf.
    let bad_leaf = DigestResponse {
        depth: 1,
        bits: 0x4000_0000,
        entries: vec![],
    };
    assert!(matches!(
        check_digest(&me, &bad_leaf, 0),
        Err(DigestError::Leaf { .. })
    ));
    let too_deep = DigestResponse {
        depth: 40,
        bits: 0,
        entries: vec![],
    };
    assert!(check_digest(&me, &too_deep, 0).is_err());
    // An answerer speaks for its own leaf only.
    assert_eq!(
        check_digest(&outsider, &answer(vec![]), 0),
        Err(DigestError::NotOnLeaf)
    );
    let many = (0..=DIGEST_ENTRIES_MAX)
        .map(|_| entry(summary_of(mate, 0)))
        .collect();
    assert_eq!(
        check_digest(&me, &answer(many), 0),
        Err(DigestError::TooMany(DIGEST_ENTRIES_MAX + 1))
    );
    let mut format_1 = summary_of(mate, 0);
    format_1[0] = 1;
    let (_, named, refused) = check_digest(
        &me,
        &answer(vec![
            entry(summary_of(mate, 0)),
            entry(summary_of(mate, 0)),
            entry(summary_of(outsider, 0)),
            entry(vec![2, 0xff, 0xff]),
            entry(format_1),
            entry(vec![2; SUMMARY_MAX_BYTES + 1]),
        ]),
        1_700_000_000,
    )
    .unwrap();
    assert_eq!(named.len(), 1, "the mate, once");
    assert_eq!(named[0].peer, mate);
    assert_eq!(refused, 5);
}

/// Members placed one after another as `Placement` places them: the
/// shallowest key on each member's path with fewer than `full` providers.
fn model_trie(n: usize, full: usize) -> HashMap<Shard, HashSet<PeerId>> {
    let mut keys: HashMap<Shard, HashSet<PeerId>> = HashMap::new();
    for _ in 0..n {
        let p = PeerId::random();
        let deepest = Shard::of(&p, crate::net::pool_shards::SHARD_DEPTH_MAX);
        let mut path = vec![deepest];
        while path.last().unwrap().depth() > 0 {
            path.push(path.last().unwrap().parent());
        }
        let at = path
            .into_iter()
            .rev()
            .find(|s| keys.get(s).map_or(0, HashSet::len) < full)
            .unwrap_or(deepest);
        keys.entry(at).or_default().insert(p);
    }
    keys
}

/// Runs a sample of `hosts` on the model trie until nothing is out;
/// returns (probes, fetches, hosts named).
fn run_sample(
    keys: &HashMap<Shard, HashSet<PeerId>>,
    full: usize,
    hosts: usize,
    seed: u64,
) -> (usize, usize, usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let now = Instant::now();
    let mut s = Sampler::new(full, Duration::from_secs(300));
    let mut queue = s.want(hosts, now, &mut rng);
    let (mut probes, mut fetches) = (0, 0);
    while let Some(step) = queue.pop() {
        let next = match step {
            SampleStep::Probe(shard) => {
                probes += 1;
                let found = keys.get(&shard).cloned().unwrap_or_default();
                s.probed(shard, &found, now, &mut rng)
            }
            SampleStep::Fetch { leaf, from } => {
                fetches += 1;
                let named = &keys[&leaf];
                assert!(named.contains(&from), "asks a provider of the leaf");
                s.fetched(leaf, named.len(), now, &mut rng)
            }
            SampleStep::Forget => panic!("nothing lapses here"),
        };
        queue.extend(next);
    }
    assert!(s.settled());
    (probes, fetches, s.named())
}

#[test]
fn a_samples_cost_follows_the_hosts_wanted_not_the_pool() {
    let full = 16;
    let small = model_trie(2_000, full);
    let large = model_trie(40_000, full);
    for hosts in [20, 200] {
        let (p_small, f_small, n_small) = run_sample(&small, full, hosts, 1);
        let (p_large, f_large, n_large) = run_sample(&large, full, hosts, 1);
        assert!(
            n_small >= hosts && n_large >= hosts,
            "{n_small} / {n_large} of {hosts}"
        );
        // About a probe and a fetch per 8-16 hosts named, at any N.
        for (p, f) in [(p_small, f_small), (p_large, f_large)] {
            assert!(p <= hosts / 4 + 4, "{p} probes for {hosts} hosts");
            assert!(f <= p, "one fetch per key found");
        }
        let ratio = p_large as f64 / p_small.max(1) as f64;
        assert!(
            (0.5..=2.0).contains(&ratio),
            "probes at N = 2,000: {p_small}, at 40,000: {p_large}"
        );
    }
    // Asking for more than the pool holds ends when the trie is walked.
    let tiny = model_trie(30, full);
    let (probes, _, named) = run_sample(&tiny, full, 1_000, 2);
    assert_eq!(named, 30);
    assert!(probes <= 8, "{probes} probes for a pool of 30");
}

#[test]
fn a_sample_is_refreshed_once_per_heartbeat_while_wanted_and_forgotten_after() {
    let full = 4;
    let keys = model_trie(40, full);
    let mut rng = StdRng::seed_from_u64(3);
    let t0 = Instant::now();
    // Shorter than the sample lasts after the last ask (as the node's
    // surveys come every few minutes at most while tasks wait).
    let beat = SAMPLE_FOR / 3;
    let mut s = Sampler::new(full, beat);
    let mut queue = s.want(12, t0, &mut rng);
    let mut leaves = HashSet::new();
    while let Some(step) = queue.pop() {
        queue.extend(match step {
            SampleStep::Probe(shard) => s.probed(
                shard,
                &keys.get(&shard).cloned().unwrap_or_default(),
                t0,
                &mut rng,
            ),
            SampleStep::Fetch { leaf, .. } => {
                leaves.insert(leaf);
                s.fetched(leaf, keys[&leaf].len(), t0, &mut rng)
            }
            SampleStep::Forget => panic!("not yet"),
        });
    }
    assert!(s.settled() && s.leaves_fetched() == leaves.len());
    assert!(s.tick(t0 + beat / 2, &mut rng).is_empty(), "not due yet");
    let refresh = s.tick(t0 + beat, &mut rng);
    let refetched: HashSet<Shard> = refresh
        .iter()
        .filter_map(|st| match st {
            SampleStep::Fetch { leaf, .. } => Some(*leaf),
            _ => None,
        })
        .collect();
    assert_eq!(refetched, leaves, "every leaf once a heartbeat");
    assert!(s.tick(t0 + beat, &mut rng).is_empty(), "fetches under way");
    // Wanted again before it lapses: kept; then it lapses.
    let _ = s.want(12, t0 + beat, &mut rng);
    assert!(s.active(t0 + beat + SAMPLE_FOR - Duration::from_secs(1)));
    assert_eq!(
        s.tick(t0 + beat + SAMPLE_FOR, &mut rng),
        vec![SampleStep::Forget]
    );
    assert!(!s.active(t0 + beat + SAMPLE_FOR));
    assert!(s.tick(t0 + beat + SAMPLE_FOR * 2, &mut rng).is_empty());
    assert_eq!(s.named(), 0);
}

#[test]
fn a_failed_fetch_asks_the_next_provider_then_waits_for_the_refresh() {
    let mut rng = StdRng::seed_from_u64(4);
    let t0 = Instant::now();
    let mut s = Sampler::new(16, Duration::from_secs(300));
    let steps = s.want(2, t0, &mut rng);
    assert_eq!(steps, vec![SampleStep::Probe(Shard::ROOT)]);
    let providers: HashSet<PeerId> = (0..2).map(|_| PeerId::random()).collect();
    let only_fetch = |steps: Vec<SampleStep>| match steps.as_slice() {
        [SampleStep::Fetch { from, .. }] => *from,
        other => panic!("one fetch: {other:?}"),
    };
    let first = only_fetch(s.probed(Shard::ROOT, &providers, t0, &mut rng));
    let second = only_fetch(s.failed(Shard::ROOT, t0, &mut rng));
    assert_ne!(first, second);
    assert!(
        s.failed(Shard::ROOT, t0, &mut rng).is_empty(),
        "every one failed"
    );
    assert!(s.settled());
    assert_eq!(
        s.tick(t0 + Duration::from_secs(300), &mut rng).len(),
        1,
        "asked again at the refresh"
    );
}

/// The model's figure (docs/scale.md): probes and digests a sample costs
/// by batch width at 1,000, 10,000 and 100,000 members, on a model trie.
/// `cargo test --lib net::leaf_digest::tests::sample_cost_by_width_and_pool -- --ignored --nocapture`
#[test]
#[ignore = "prints the model's table; not a check"]
fn sample_cost_by_width_and_pool() {
    let full = crate::net::pool_shards::SHARD_FULL;
    // A summary as a host with a week of record sends it: three ladders of
    // eight rungs, its spells and 20 up and 20 outage lengths, no images.
    let typical = |peer: PeerId| {
        let summary = HostSummary {
            format: SUMMARY_FORMAT,
            member: Announcement {
                peer_id: peer.to_bytes(),
                addresses: vec![
                    "/ip4/203.0.113.7/tcp/4001"
                        .parse::<libp2p::Multiaddr>()
                        .unwrap()
                        .to_vec(),
                    "/ip4/203.0.113.7/udp/4001/quic-v1"
                        .parse::<libp2p::Multiaddr>()
                        .unwrap()
                        .to_vec(),
                ],
                logical_cpus: 8,
                memory_mib: 16_384,
                benchmark_score: 123_456,
                relative_power_milli: 640,
                state: WireState::S1,
                slot_free: true,
                version: "0.1.0".into(),
            },
            computed_at_unix: 1_700_000_000,
            speed_milli: 910,
            availability_milli: Some(700),
            days_used: 56,
            ladders: [256, 2_048, 8_192]
                .into_iter()
                .map(|m| crate::net::protocol::WireLadder {
                    memory_mib: m,
                    tr_milli: vec![990, 980, 960, 930, 880, 800, 650, 420],
                })
                .collect(),
            spells: Some(crate::net::protocol::WireSpells {
                usable_secs: 500_000,
                failing_secs: 100_000,
                episodes: 25,
            }),
            spell_lengths: Some(WireSpellLengths {
                up_secs: (0..20).map(|i| 3_000 + i * 1_500).collect(),
                up_seen: 24,
                up_cut_secs: vec![9_000],
                outage_secs: (0..20).map(|i| 300 + i * 400).collect(),
                outages_seen: 25,
            }),
        };
        encode_body(&SummaryWithImages {
            summary,
            images: vec![],
        })
        .unwrap()
    };
    let leaf = Shard::of(&PeerId::random(), 6);
    let mut store = LeafStore::default();
    store.moved(leaf);
    let now = Instant::now();
    let mates: Vec<PeerId> = (0..15).map(|_| peer_under(leaf)).collect();
    for m in &mates {
        assert!(store.heard(*m, typical(*m), now));
    }
    let me = peer_under(leaf);
    let own = typical(me);
    let digest = store.answer(me, Some(&own), now, TTL).unwrap();
    let frame = encode_frame(&digest, DIGEST_RESPONSE_CAP).unwrap();
    println!(
        "a typical summary: {} bytes; a digest of a full leaf (16 summaries): {} bytes framed",
        own.len(),
        frame.len()
    );
    println!(
        "| N | keys with members | width w | hosts asked (2w) | probes | digests | hosts named |"
    );
    println!("|---|---|---|---|---|---|---|");
    for n in [1_000, 10_000, 100_000] {
        let keys = model_trie(n, full);
        for w in [10, 100, 1_000] {
            let (probes, fetches, named) = run_sample(&keys, full, 2 * w, 7);
            println!(
                "| {n} | {} | {w} | {} | {probes} | {fetches} | {named} |",
                keys.len(),
                2 * w
            );
        }
    }
}
