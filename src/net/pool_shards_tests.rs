//! `pool_shards` against a model DHT: one provider set per key, capped at 20
//! and first come first kept, as rust-libp2p's `MemoryStore` keeps them.

use std::collections::{HashMap, HashSet};

use libp2p::identity::Keypair;
use libp2p::PeerId;

use super::*;

/// What a `MemoryStore` keeps per key.
const STORE_CAP: usize = 20;

#[derive(Default)]
struct ModelDht {
    keys: HashMap<Shard, Vec<PeerId>>,
}

impl ModelDht {
    fn providers(&self, shard: Shard) -> HashSet<PeerId> {
        self.keys
            .get(&shard)
            .map(|v| v.iter().copied().collect())
            .unwrap_or_default()
    }

    fn provide(&mut self, peer: PeerId, shard: Shard) {
        let v = self.keys.entry(shard).or_default();
        if !v.contains(&peer) && v.len() < STORE_CAP {
            v.push(peer);
        }
    }

    fn leave(&mut self, peer: PeerId, shard: Shard) {
        if let Some(v) = self.keys.get_mut(&shard) {
            v.retain(|p| *p != peer);
        }
    }

    /// Runs `step` until the member provides; returns how many probes it took.
    fn settle(&mut self, placement: &mut Placement, peer: PeerId, mut step: PlaceStep) -> usize {
        let mut probes = 0;
        loop {
            match step {
                PlaceStep::Probe(shard) => {
                    probes += 1;
                    assert!(probes < 100, "a check that never ends");
                    step = placement
                        .probed(shard, &self.providers(shard))
                        .expect("the answer we wait for");
                }
                PlaceStep::Provide { at, leave } => {
                    if let Some(old) = leave {
                        self.leave(peer, old);
                    }
                    self.provide(peer, at);
                    return probes;
                }
                PlaceStep::Stay(_) => return probes,
            }
        }
    }

    fn walk(&self, full: usize) -> (HashSet<PeerId>, usize) {
        let mut walk = Walk::new(full);
        let mut queue = walk.start();
        while let Some(shard) = queue.pop() {
            let next = walk.answered(shard, &self.providers(shard));
            queue.extend(next);
        }
        assert!(walk.done());
        let asked = walk.asked();
        (walk.into_found().into_iter().collect(), asked)
    }
}

fn peers(n: usize) -> Vec<PeerId> {
    (0..n)
        .map(|_| Keypair::generate_ed25519().public().to_peer_id())
        .collect()
}

#[test]
fn a_small_pool_is_one_key_and_one_query() {
    let mut dht = ModelDht::default();
    let members = peers(5);
    for m in &members {
        let mut p = Placement::new(*m, SHARD_FULL);
        let step = p.check();
        dht.settle(&mut p, *m, step);
        assert_eq!(p.at(), Some(Shard::ROOT));
    }
    let (found, asked) = dht.walk(SHARD_FULL);
    assert_eq!(found, members.iter().copied().collect());
    assert_eq!(asked, 1);
}

#[test]
fn every_member_of_a_large_pool_is_found_and_no_key_overflows() {
    for n in [21, 100, 1000, 5000] {
        let mut dht = ModelDht::default();
        let members = peers(n);
        for m in &members {
            let mut p = Placement::new(*m, SHARD_FULL);
            let step = p.check();
            dht.settle(&mut p, *m, step);
        }
        let (found, asked) = dht.walk(SHARD_FULL);
        assert_eq!(found.len(), n, "pool of {n}: found {}", found.len());
        assert!(dht.keys.values().all(|v| v.len() <= SHARD_FULL));
        // About N / 4 keys: N / 8 full-ish leaves and their parents.
        assert!(asked <= n / 2 + 3, "pool of {n}: {asked} keys asked");
    }
}

#[test]
fn a_members_place_estimates_the_pools_size_within_a_factor_of_two() {
    for n in [10, 100, 1_000, 10_000] {
        let mut dht = ModelDht::default();
        let members = peers(n);
        let mut placements = Vec::with_capacity(n);
        for m in &members {
            let mut p = Placement::new(*m, SHARD_FULL);
            let step = p.check();
            dht.settle(&mut p, *m, step);
            placements.push(p);
        }
        let (mut about, mut floors) = (Vec::new(), Vec::new());
        for (p, m) in placements.iter().zip(&members) {
            let at = p.at().unwrap();
            let mates = dht.providers(at).iter().filter(|x| *x != m).count();
            let size = pool_size_estimate(at, mates, SHARD_FULL);
            let ratio = size.members as f64 / n as f64;
            if size.at_least {
                floors.push(ratio);
            } else {
                about.push(ratio);
            }
        }
        about.sort_by(f64::total_cmp);
        floors.sort_by(f64::total_cmp);
        eprintln!(
            "N = {n}: {} estimates, {:.2} to {:.2} of N, median {:.2}; {} floors up to {:.2}",
            about.len(),
            about.first().unwrap_or(&0.0),
            about.last().unwrap_or(&0.0),
            about.get(about.len() / 2).unwrap_or(&0.0),
            floors.len(),
            floors.last().unwrap_or(&0.0),
        );
        if n > SHARD_FULL {
            let median = about[about.len() / 2];
            assert!((0.5..=2.0).contains(&median), "N = {n}: median {median}");
            assert!(
                about[0] >= 0.25 && about[about.len() - 1] <= 4.0,
                "N = {n}: {:.2}..{:.2}",
                about[0],
                about[about.len() - 1]
            );
        }
        // A floor is one: it never claims much more than the pool.
        assert!(floors.iter().all(|&r| r <= 2.0), "N = {n}: {floors:?}");
    }
}

#[test]
fn members_placed_at_once_overflow_then_settle_at_their_next_check() {
    // Everyone probes before anyone provides (a pool started at once): the
    // root takes the first 20 and ignores the rest, who find their place at
    // the next check.
    let n = 200;
    let mut dht = ModelDht::default();
    let members = peers(n);
    let mut placements: Vec<Placement> = members
        .iter()
        .map(|m| Placement::new(*m, SHARD_FULL))
        .collect();
    let firsts: Vec<PlaceStep> = placements.iter_mut().map(Placement::check).collect();
    let answers: Vec<PlaceStep> = placements
        .iter_mut()
        .zip(firsts)
        .map(|(p, step)| match step {
            PlaceStep::Probe(s) => p.probed(s, &dht.providers(s)).unwrap(),
            other => other,
        })
        .collect();
    for ((p, m), step) in placements.iter_mut().zip(&members).zip(answers) {
        dht.settle(p, *m, step);
    }
    let (found, _) = dht.walk(SHARD_FULL);
    assert_eq!(
        found.len(),
        STORE_CAP,
        "the root keeps the first {STORE_CAP}"
    );
    for (p, m) in placements.iter_mut().zip(&members) {
        let step = p.check();
        dht.settle(p, *m, step);
    }
    let (found, _) = dht.walk(SHARD_FULL);
    assert_eq!(found.len(), n);
}

#[test]
fn members_move_up_when_the_pool_shrinks() {
    let mut dht = ModelDht::default();
    let members = peers(300);
    let mut placements: Vec<Placement> = members
        .iter()
        .map(|m| Placement::new(*m, SHARD_FULL))
        .collect();
    for (p, m) in placements.iter_mut().zip(&members) {
        let step = p.check();
        dht.settle(p, *m, step);
    }
    // 290 leave (their records expire); the 10 left re-check a few times.
    let stay = 10;
    for (p, m) in placements.iter().zip(&members).skip(stay) {
        dht.leave(*m, p.at().unwrap());
    }
    for _ in 0..SHARD_DEPTH_MAX {
        for (p, m) in placements.iter_mut().zip(&members).take(stay) {
            let step = p.check();
            dht.settle(p, *m, step);
        }
    }
    let (found, asked) = dht.walk(SHARD_FULL);
    assert_eq!(found, members[..stay].iter().copied().collect());
    assert!(
        placements[..stay]
            .iter()
            .all(|p| p.at() == Some(Shard::ROOT)),
        "all back at the root"
    );
    // Ten at the root are at least half of SHARD_FULL: the walk looks one
    // level down too.
    assert_eq!(asked, 3);
}

#[test]
fn keys_are_the_pool_key_at_the_root_and_bit_paths_below() {
    let pool = PoolName::new("home").unwrap();
    assert_eq!(Shard::ROOT.key(&pool), pool_dht_key(&pool));
    let [zero, one] = Shard::ROOT.children().unwrap();
    assert_eq!(zero.key(&pool), b"/gleaner/pool/home/shard/0".to_vec());
    assert_eq!(one.key(&pool), b"/gleaner/pool/home/shard/1".to_vec());
    let [_, one_one] = one.children().unwrap();
    assert_eq!(one_one.key(&pool), b"/gleaner/pool/home/shard/11".to_vec());
    assert_eq!(one_one.parent(), one);
    let m = peers(1)[0];
    let leaf = Shard::of(&m, SHARD_DEPTH_MAX);
    assert!(leaf.holds(&m) && leaf.children().is_none());
    assert_eq!(leaf.key(&pool).len(), pool_dht_key(&pool).len() + 7 + 16);
}

#[test]
fn a_key_crowded_by_members_that_placed_at_once_keeps_only_its_first_full_at_their_next_recheck() {
    let members = peers(60);
    let mut places: Vec<Placement> = members
        .iter()
        .map(|m| Placement::new(*m, SHARD_FULL))
        .collect();
    // Every member probes the root before any record is there: each
    // provides it.
    for p in &mut places {
        let PlaceStep::Probe(shard) = p.check() else {
            panic!("a check starts with a probe");
        };
        let step = p.probed(shard, &HashSet::new()).unwrap();
        assert!(matches!(step, PlaceStep::Provide { at, .. } if at == Shard::ROOT));
    }
    // The DHT's stores together list all 60 (uncapped, as a union of
    // several nodes' stores can).
    let mut keys: HashMap<Shard, HashSet<PeerId>> = HashMap::new();
    keys.insert(Shard::ROOT, members.iter().copied().collect());
    for (m, p) in members.iter().zip(&mut places) {
        let mut step = p.check();
        while let PlaceStep::Probe(shard) = step {
            let listed = keys.get(&shard).cloned().unwrap_or_default();
            step = p.probed(shard, &listed).unwrap();
        }
        if let PlaceStep::Provide { at, leave } = step {
            if let Some(old) = leave {
                keys.get_mut(&old).unwrap().remove(m);
            }
            keys.entry(at).or_default().insert(*m);
        }
    }
    let mut first: Vec<PeerId> = members.clone();
    first.sort();
    first.truncate(SHARD_FULL);
    assert_eq!(
        keys[&Shard::ROOT],
        first.iter().copied().collect(),
        "the root keeps its first {SHARD_FULL} by peer id"
    );
    assert!(
        keys.values().all(|v| v.len() <= SHARD_FULL),
        "no key stays crowded: {:?}",
        keys.iter()
            .map(|(k, v)| (k.label(), v.len()))
            .collect::<Vec<_>>()
    );
    let placed: usize = keys.values().map(HashSet::len).sum();
    assert_eq!(placed, members.len(), "every member provides one key");
}

#[test]
fn a_member_listed_where_it_provides_sends_its_record_every_second_recheck() {
    let mut dht = ModelDht::default();
    let me = peers(1)[0];
    let mut p = Placement::new(me, SHARD_FULL);
    let first = p.check();
    dht.settle(&mut p, me, first);
    assert_eq!(p.at(), Some(Shard::ROOT));
    let mut sent = Vec::new();
    for _ in 0..6 {
        let PlaceStep::Probe(shard) = p.check() else {
            panic!("a check starts with a probe");
        };
        let step = p.probed(shard, &dht.providers(shard)).unwrap();
        sent.push(matches!(step, PlaceStep::Provide { .. }));
        dht.settle(&mut p, me, step);
    }
    assert_eq!(sent, [false, true, false, true, false, true]);

    // A record the holders lost is sent at once, whatever the last check did.
    dht.leave(me, Shard::ROOT);
    let PlaceStep::Probe(shard) = p.check() else {
        panic!("a check starts with a probe");
    };
    let step = p.probed(shard, &dht.providers(shard)).unwrap();
    assert_eq!(
        step,
        PlaceStep::Provide {
            at: Shard::ROOT,
            leave: None
        }
    );
}
