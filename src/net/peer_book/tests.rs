//! The book's bound and order, its changes, the redialer's choices and
//! back-off, the codec against garbage and the store across a reopen.

use super::codec::{
    decode_key, decode_value, encode_key, encode_value, VALUE_MAX, VERSION, VERSION_1,
};
use super::*;
use crate::model::ids::PoolName;
use crate::net::protocol::SUMMARY_MAX_BYTES;

fn addr(port: u16) -> Multiaddr {
    format!("/ip4/127.0.0.1/tcp/{port}").parse().unwrap()
}

fn heard(at: i64, bytes: &[u8]) -> HeardSummary {
    HeardSummary {
        heard_unix: at,
        bytes: bytes.into(),
    }
}

fn peers(n: usize) -> Vec<PeerId> {
    (0..n).map(|_| PeerId::random()).collect()
}

#[test]
fn the_book_is_bounded_and_the_least_recently_seen_go_first() {
    let p = peers(5);
    let mut book = PeerBook::new(3);
    // Seen at 10, 20, 30: full.
    for (i, peer) in p.iter().take(3).enumerate() {
        book.seen(*peer, &[addr(1000 + i as u16)], None, 10 * (i as i64 + 1));
    }
    assert_eq!(book.len(), 3);
    // The first is seen again (now the newest); a fourth evicts the second.
    book.seen(p[0], &[], None, 40);
    book.seen(p[3], &[addr(1003)], None, 50);
    assert_eq!(book.len(), 3);
    assert!(!book.contains(&p[1]), "the least recently seen went");
    let order: Vec<PeerId> = book.most_recent().map(|(peer, _)| *peer).collect();
    assert_eq!(order, vec![p[3], p[0], p[2]]);
    // A peer seen with an old time (a clock step back) still enters; the
    // oldest other entry makes room.
    book.seen(p[4], &[addr(1004)], None, 1);
    assert!(book.contains(&p[4]));
    assert!(!book.contains(&p[2]));
    let changes = book.take_changes();
    assert_eq!(changes.removals, {
        let mut r = vec![p[1], p[2]];
        r.sort();
        r
    });
    assert!(changes.upserts.iter().all(|(peer, _)| book.contains(peer)));
}

#[test]
fn ten_thousand_entries_hold_and_the_next_one_evicts_the_oldest() {
    let mut book = PeerBook::new(BOOK_MAX);
    let p = peers(BOOK_MAX + 1);
    for (i, peer) in p.iter().enumerate() {
        book.seen(*peer, &[addr(1)], None, i as i64);
    }
    assert_eq!(book.len(), BOOK_MAX);
    assert!(!book.contains(&p[0]) && book.contains(&p[1]) && book.contains(&p[BOOK_MAX]));
}

#[test]
fn a_worked_address_goes_first_and_addresses_are_bounded() {
    let p = PeerId::random();
    let mut book = PeerBook::new(10);
    let told: Vec<Multiaddr> = (0..12).map(addr).collect();
    book.seen(p, &told, None, 5);
    assert_eq!(
        book.get(&p).unwrap().addresses,
        told[..ADDRESSES_MAX].to_vec()
    );
    book.seen(p, &[], Some(&addr(3)), 6);
    let kept = &book.get(&p).unwrap().addresses;
    assert_eq!(kept[0], addr(3));
    assert_eq!(kept.len(), ADDRESSES_MAX);
    assert_eq!(kept.iter().filter(|a| **a == addr(3)).count(), 1);
}

#[test]
fn announcements_within_the_grain_are_not_written_again() {
    let p = PeerId::random();
    let mut book = PeerBook::new(10);
    book.seen(p, &[addr(1)], None, 100);
    assert_eq!(book.take_changes().upserts.len(), 1);
    // Every 30 s the member announces the same thing: nothing to write...
    book.seen(p, &[addr(1)], None, 130);
    assert!(!book.has_changes());
    // ...until last_seen moved by the grain, or an address is new.
    book.seen(p, &[addr(1)], None, 100 + SEEN_GRAIN_SECS);
    assert!(book.has_changes());
    book.take_changes();
    book.seen(p, &[addr(2)], None, 100 + SEEN_GRAIN_SECS);
    let changes = book.take_changes();
    assert_eq!(changes.upserts[0].1.addresses, vec![addr(1), addr(2)]);
}

#[test]
fn a_newer_summary_rides_on_the_next_write_or_the_last_one() {
    let p = PeerId::random();
    let mut book = PeerBook::new(10);
    // A summary of a peer not in the book is not kept.
    book.heard_summary(p, heard(99, b"early"));
    assert!(!book.contains(&p) && !book.has_final_changes());
    book.seen(p, &[addr(1)], None, 100);
    book.heard_summary(p, heard(100, b"first"));
    let first = book.take_changes();
    assert_eq!(first.upserts[0].1.summary, Some(heard(100, b"first")));
    // Every heartbeat brings a summary: not a write by itself...
    book.seen(p, &[addr(1)], None, 110);
    book.heard_summary(p, heard(110, b"second"));
    assert!(!book.has_changes());
    assert!(book.take_changes().is_empty());
    // ...nor is an older one than the book holds taken.
    book.heard_summary(p, heard(105, b"late"));
    assert_eq!(book.get(&p).unwrap().summary, Some(heard(110, b"second")));
    // The last write (a clean stop) takes it.
    assert!(book.has_final_changes());
    let last = book.take_final_changes();
    assert_eq!(last.upserts.len(), 1);
    assert_eq!(last.upserts[0].1.summary, Some(heard(110, b"second")));
    assert!(!book.has_final_changes());
    // And a write for another reason (last seen moved by the grain since
    // that write) carries the newest one.
    book.heard_summary(p, heard(120, b"third"));
    book.seen(p, &[addr(1)], None, 110 + SEEN_GRAIN_SECS);
    let next = book.take_changes();
    assert_eq!(next.upserts[0].1.summary, Some(heard(120, b"third")));
    assert!(
        !book.has_final_changes(),
        "written once, not again at the end"
    );
}

#[test]
fn the_redialer_dials_the_most_recent_few_while_short_of_connections() {
    let p = peers(6);
    let mut book = PeerBook::new(10);
    for (i, peer) in p.iter().enumerate() {
        book.seen(*peer, &[addr(i as u16)], None, i as i64);
    }
    let now = Instant::now();
    let mut r = Redialer::default();
    let connected: HashSet<PeerId> = [p[5]].into();
    let first = r.plan(&book, &connected, now);
    let dialed: Vec<PeerId> = first.iter().map(|d| d.peer).collect();
    assert_eq!(
        dialed,
        vec![p[4], p[3], p[2]],
        "newest first, connected skipped"
    );
    assert_eq!(first[0].addresses, vec![addr(4)]);
    // Nothing more while those are in flight.
    assert!(r.plan(&book, &connected, now).is_empty());
    // One connects, one fails: the next newest is dialed, not the failed one.
    r.connected(&p[4]);
    r.failed(&p[3], now);
    let connected: HashSet<PeerId> = [p[5], p[4]].into();
    let next: Vec<PeerId> = r
        .plan(&book, &connected, now)
        .iter()
        .map(|d| d.peer)
        .collect();
    assert_eq!(next, vec![p[1], p[0]]);
    assert_eq!(r.trying(), 4, "p3 waits, p2, p1 and p0 are dialed");
    // Enough connections: nothing is dialed.
    let many: HashSet<PeerId> = p.iter().copied().take(WANTED_CONNECTIONS).collect();
    let mut idle = Redialer::default();
    assert!(idle.plan(&book, &many, now).is_empty());
}

#[test]
fn a_failing_peer_waits_twice_as_long_each_time() {
    let p = PeerId::random();
    let mut book = PeerBook::new(10);
    book.seen(p, &[addr(1)], None, 1);
    let none = HashSet::new();
    let mut r = Redialer::default();
    let mut now = Instant::now();
    assert_eq!(r.plan(&book, &none, now).len(), 1);
    let mut waits = Vec::new();
    for _ in 0..10 {
        r.failed(&p, now);
        let mut next = now;
        while r.plan(&book, &none, next).is_empty() {
            next += Duration::from_millis(500);
        }
        waits.push((next - now).as_secs());
        now = next;
    }
    assert_eq!(waits, vec![2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
    // A connection starts the wait over.
    r.connected(&p);
    assert_eq!(r.trying(), 0);
}

#[test]
fn entries_round_trip_through_the_codec() {
    let p = PeerId::random();
    let mut entry = BookEntry {
        addresses: vec![
            addr(4610),
            "/ip4/198.51.100.7/udp/4610/quic-v1".parse().unwrap(),
        ],
        last_seen: 1_764_000_000,
        summary: None,
    };
    assert_eq!(decode_key(&encode_key(&p)).unwrap(), p);
    assert_eq!(decode_value(&encode_value(&entry).unwrap()).unwrap(), entry);
    // With the longest summary the protocol allows.
    entry.summary = Some(heard(1_764_000_010, &[7u8; SUMMARY_MAX_BYTES]));
    let bytes = encode_value(&entry).unwrap();
    assert_eq!(bytes[0], VERSION);
    assert!(bytes.len() <= VALUE_MAX);
    assert_eq!(decode_value(&bytes).unwrap(), entry);
    // A longer one is left out rather than written unreadable.
    entry.summary = Some(heard(1, &[7u8; SUMMARY_MAX_BYTES + 1]));
    assert_eq!(
        decode_value(&encode_value(&entry).unwrap())
            .unwrap()
            .summary,
        None
    );
}

#[test]
fn a_book_written_before_summaries_still_reads() {
    // Version 1's layout, as the code before summaries wrote it: the time
    // and the addresses.
    let v1 = [
        vec![VERSION_1],
        bincode::serde::encode_to_vec(
            (1_764_000_000i64, vec![addr(4610).to_vec()]),
            bincode::config::standard(),
        )
        .unwrap(),
    ]
    .concat();
    assert_eq!(
        decode_value(&v1).unwrap(),
        BookEntry {
            addresses: vec![addr(4610)],
            last_seen: 1_764_000_000,
            summary: None,
        }
    );
    // A version 1 value with version 2's extra field is not version 1.
    let mut v2 = encode_value(&BookEntry {
        addresses: vec![addr(4610)],
        last_seen: 1_764_000_000,
        summary: Some(heard(5, b"s")),
    })
    .unwrap();
    v2[0] = VERSION_1;
    assert!(decode_value(&v2).is_err());
}

#[test]
fn the_codec_refuses_garbage_without_panicking() {
    let good = encode_value(&BookEntry {
        addresses: vec![addr(1)],
        last_seen: 7,
        summary: Some(heard(8, b"a summary's bytes")),
    })
    .unwrap();
    let mut cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![VERSION],
        vec![VERSION_1],
        vec![0, 0, 0],
        vec![VERSION + 1, 0, 0],
        vec![0xff; VALUE_MAX + 1],
        [good.clone(), vec![0]].concat(),
        good[..good.len() - 1].to_vec(),
    ];
    // Too many addresses, and an address that is not a multiaddr, in both
    // layouts; a summary past the protocol's bound.
    let none: Option<(i64, Vec<u8>)> = None;
    let many = vec![addr(1).to_vec(); ADDRESSES_MAX + 1];
    let junk = vec![vec![0xffu8, 0xff, 0xff]];
    cases.push(raw(VERSION_1, &(7i64, many.clone())));
    cases.push(raw(VERSION_1, &(7i64, junk.clone())));
    cases.push(raw(VERSION, &(7i64, many, none.clone())));
    cases.push(raw(VERSION, &(7i64, junk, none)));
    cases.push(raw(
        VERSION,
        &(
            7i64,
            vec![addr(1).to_vec()],
            Some((8i64, vec![0u8; SUMMARY_MAX_BYTES + 1])),
        ),
    ));
    // A length prefix claiming far more than there is.
    cases.push(vec![VERSION, 14, 0xfc, 0xff, 0xff, 0xff, 0x7f]);
    for case in &cases {
        assert!(decode_value(case).is_err(), "{case:?}");
    }
    // Every truncation and every single-byte change of a good value decodes
    // or fails; none panics.
    for cut in 0..good.len() {
        let _ = decode_value(&good[..cut]);
    }
    for i in 0..good.len() {
        for b in [0u8, 1, 0x7f, 0x80, 0xff] {
            let mut v = good.clone();
            v[i] = b;
            let _ = decode_value(&v);
        }
    }
    assert!(decode_key(&[]).is_err());
    assert!(decode_key(&[0xff; 81]).is_err());
    assert!(decode_key(b"not a peer id").is_err());
}

/// A stored value by hand: `version`, then `body` in bincode's standard
/// config.
fn raw<T: serde::Serialize>(version: u8, body: &T) -> Vec<u8> {
    let body = bincode::serde::encode_to_vec(body, bincode::config::standard()).unwrap();
    [vec![version], body].concat()
}

#[test]
fn the_store_keeps_the_book_across_a_reopen_and_drops_what_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let pool = PoolName::new("lab").unwrap();
    let p = peers(4);
    {
        let store = BookStore::open(dir.path(), &pool).unwrap();
        let mut book = store.load(BOOK_MAX, |_| true).unwrap().book;
        assert!(book.is_empty());
        for (i, peer) in p.iter().enumerate() {
            book.seen(*peer, &[addr(i as u16)], None, 100 + i as i64);
        }
        book.heard_summary(p[2], heard(102, b"its summary"));
        store.write(&book.take_changes()).unwrap();
        store.put_raw(b"garbage key", &[1, 2, 3]);
        store.put_raw(&encode_key(&PeerId::random()), &[VERSION, 0xff]);
    }
    let store = BookStore::open(dir.path(), &pool).unwrap();
    // Reloaded into a smaller book: the oldest leaves, the garbage too.
    let loaded = store.load(3, |a| *a != addr(3)).unwrap();
    assert_eq!(loaded.unreadable, 2);
    let order: Vec<PeerId> = loaded.book.most_recent().map(|(peer, _)| *peer).collect();
    assert_eq!(order, vec![p[3], p[2], p[1]]);
    assert!(
        loaded.book.get(&p[3]).unwrap().addresses.is_empty(),
        "an address outside the scope is not kept"
    );
    assert_eq!(loaded.book.get(&p[2]).unwrap().addresses, vec![addr(2)]);
    assert_eq!(
        loaded.book.get(&p[2]).unwrap().summary,
        Some(heard(102, b"its summary")),
        "a member's last summary is kept"
    );
    let again = store.load(BOOK_MAX, |_| true).unwrap();
    assert_eq!((again.book.len(), again.unreadable), (3, 0));
    // Another pool's book is another tree.
    drop(store);
    let other = BookStore::open(dir.path(), &PoolName::new("other").unwrap()).unwrap();
    assert!(other.load(BOOK_MAX, |_| true).unwrap().book.is_empty());
}
