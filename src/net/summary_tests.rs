//! Tests of `net::summary`: a hostile summary is bounded or refused, the
//! member table stays bounded, and the spells checks (moved here from
//! `consumer::survey` with the checks) still refuse what cannot be true.

use super::*;
use crate::model::state::State;
use crate::net::handle::LocalStatus;
use crate::net::handle::Member;
use crate::net::members::MemberCache;
use crate::net::protocol::{
    Announcement, SummaryWithBasis, SummaryWithImages, WireLadder, WireState, BASIS_BUILT_IN_PRIOR,
    BASIS_POOL_PRIOR, BASIS_RECORD,
};
use libp2p::PeerId;
use std::time::Instant;

fn lengths(up_secs: Vec<u32>, up_seen: u32) -> WireSpellLengths {
    WireSpellLengths {
        up_secs,
        up_seen,
        up_cut_secs: vec![5_000],
        outage_secs: vec![600, 300],
        outages_seen: 2,
    }
}

fn summary(ladders: Vec<WireLadder>) -> HostSummary {
    HostSummary {
        format: SUMMARY_FORMAT_1,
        member: Announcement {
            peer_id: PeerId::random().to_bytes(),
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
        ladders,
        spells: Some(WireSpells {
            usable_secs: 10_000,
            failing_secs: 900,
            episodes: 3,
        }),
        spell_lengths: Some(lengths(vec![3_000, 2_000], 2)),
    }
}

fn ladder(memory_mib: u32, tr_milli: Vec<u16>) -> WireLadder {
    WireLadder {
        memory_mib,
        tr_milli,
    }
}

#[test]
fn a_summary_reads_back_as_curves_per_memory_level() {
    let s = summary(vec![
        ladder(256, vec![990, 950, 900]),
        ladder(2_048, vec![900, 800]),
    ]);
    let got = check_summary(&s, 1_700_000_100).unwrap();
    assert_eq!(got.computed_at_unix, 1_700_000_000);
    assert_eq!((got.speed, got.availability), (0.9, Some(0.7)));
    let small = got.curve_for(100).unwrap();
    assert_eq!(
        small.points(),
        &[(900.0, 0.99), (1_800.0, 0.95), (3_600.0, 0.9)]
    );
    assert_eq!(got.curve_for(256), Some(small));
    assert_eq!(got.curve_for(257).unwrap().points().len(), 2);
    // A job bigger than every level: the host did not say.
    assert_eq!(got.curve_for(4_096), None);
    assert_eq!(got.spells.unwrap().episodes, 3);
    assert_eq!(got.spell_lengths.unwrap().up, vec![2_000.0, 3_000.0]);
}

#[test]
fn a_hostile_summary_is_clamped_or_refused_never_trusted() {
    let heard = 1_700_000_000;
    // Claims beyond certainty are clamped, a rising ladder made monotone,
    // a computed-at in the future taken as the time it was heard.
    let mut s = summary(vec![ladder(256, vec![u16::MAX, 500, 900])]);
    s.speed_milli = u32::MAX;
    s.availability_milli = Some(u32::MAX);
    s.computed_at_unix = i64::MAX;
    s.spells = Some(WireSpells {
        usable_secs: u32::MAX,
        failing_secs: 1,
        episodes: 1,
    });
    let got = check_summary(&s, heard).unwrap();
    assert_eq!(got.computed_at_unix, heard);
    assert_eq!((got.speed, got.availability), (1.0, Some(1.0)));
    let tr: Vec<f64> = got.ladders[0].1.points().iter().map(|p| p.1).collect();
    assert_eq!(tr, vec![1.0, 0.5, 0.5]);
    // Spells that cannot be true go, and their lengths with them.
    assert_eq!((got.spells, got.spell_lengths), (None, None));
    // Lists beyond their bounds, a wrong format: refused.
    let refused = |s: HostSummary| check_summary(&s, heard).is_err();
    assert!(refused(summary(vec![ladder(1, vec![]); 4])));
    assert!(refused(summary(vec![ladder(1, vec![1; 9])])));
    assert!(refused(summary(vec![ladder(9, vec![]), ladder(9, vec![])])));
    let mut wrong = summary(vec![]);
    wrong.format = 2;
    assert!(refused(wrong));
}

/// A format 2 summary holding `images`.
fn with_images(images: Vec<[u8; 32]>) -> SummaryWithImages {
    let mut s = summary(vec![ladder(256, vec![990, 950])]);
    s.format = SUMMARY_FORMAT;
    SummaryWithImages { summary: s, images }
}

#[test]
fn both_formats_decode_by_their_first_byte_and_only_format_2_says_which_images() {
    use crate::net::codec::encode_body;
    let heard = 1_700_000_100;
    let ids: Vec<[u8; 32]> = (1..=3u8).map(|i| [i; 32]).collect();
    let s2 = with_images(ids.clone());
    let got = decode_summary(&encode_body(&s2).unwrap(), heard).unwrap();
    assert_eq!(got.format, SUMMARY_FORMAT);
    assert_eq!(got.member, s2.summary.member);
    assert_eq!(got.summary.images.as_deref(), Some(&ids[..]));
    assert_eq!(got.summary.curve_for(256).unwrap().points().len(), 2);
    // Format 2's bytes are format 1's with another first byte, then the list.
    let mut s1 = s2.summary.clone();
    s1.format = SUMMARY_FORMAT_1;
    let (b1, b2) = (encode_body(&s1).unwrap(), encode_body(&s2).unwrap());
    assert_eq!(&b2[1..b1.len()], &b1[1..]);
    // Format 1 says nothing of images: `None`, not "none held".
    let got = decode_summary(&b1, heard).unwrap();
    assert_eq!((got.format, got.summary.images), (SUMMARY_FORMAT_1, None));
    // A format 2 that holds none says so.
    let none = decode_summary(&encode_body(&with_images(vec![])).unwrap(), heard).unwrap();
    assert_eq!(none.summary.images, Some(vec![]));
    // Another format, bytes left over, or format 1 cut short: refused.
    let mut other = b2.clone();
    other[0] = 4;
    assert_eq!(decode_summary(&other, heard), Err(SummaryError::Format(4)));
    assert_eq!(decode_summary(&[], heard), Err(SummaryError::Format(0)));
    let mut trailing = b1.clone();
    trailing.push(0);
    assert!(matches!(
        decode_summary(&trailing, heard),
        Err(SummaryError::Decode(_))
    ));
    // An older node reads format 2's bytes as format 1 with trailing bytes:
    // it refuses them (so format 2 has a topic of its own).
    assert!(crate::net::codec::decode_body::<HostSummary>(&b2).is_err());
    // Duplicate ids are kept once.
    let dup = with_images(vec![[7; 32], [7; 32], [8; 32]]);
    let got = decode_summary(&encode_body(&dup).unwrap(), heard).unwrap();
    assert_eq!(got.summary.images, Some(vec![[7; 32], [8; 32]]));
}

#[test]
fn a_summary_claiming_more_images_than_the_bound_is_refused_by_name() {
    use crate::net::codec::encode_body;
    use crate::net::protocol::{IMAGES_HELD_MAX, SUMMARY_MAX_BYTES};
    let heard = 1_700_000_100;
    let at_most: Vec<[u8; 32]> = (0..IMAGES_HELD_MAX).map(|i| [i as u8; 32]).collect();
    let ok = decode_summary(&encode_body(&with_images(at_most)).unwrap(), heard).unwrap();
    assert_eq!(ok.summary.images.unwrap().len(), IMAGES_HELD_MAX);
    let over: Vec<[u8; 32]> = (0..=IMAGES_HELD_MAX).map(|i| [i as u8; 32]).collect();
    let bytes = encode_body(&with_images(over)).unwrap();
    // Within a gossipsub message's bytes, so only the bound refuses it.
    assert!(bytes.len() <= SUMMARY_MAX_BYTES);
    let refused = decode_summary(&bytes, heard).unwrap_err();
    assert_eq!(
        refused,
        SummaryError::Images {
            count: IMAGES_HELD_MAX + 1
        }
    );
    assert_eq!(
        refused.to_string(),
        format!(
            "summary images: {} ids, at most {IMAGES_HELD_MAX}",
            IMAGES_HELD_MAX + 1
        )
    );
    // A list that claims more ids than the message holds stops at the
    // codec's limit, never allocating what it claims.
    let mut lying = encode_body(&with_images(vec![])).unwrap();
    let last = lying.len() - 1;
    lying[last] = 253; // a u64 count follows
    lying.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        decode_summary(&lying, heard),
        Err(SummaryError::Decode(_))
    ));
    // The wrong format inside a format 2 summary is refused too.
    let mut inner = with_images(vec![]);
    inner.summary.format = SUMMARY_FORMAT_1;
    assert_eq!(
        check_summary_with_images(&inner, heard),
        Err(SummaryError::Format(SUMMARY_FORMAT_1))
    );
}

/// A format 3 summary whose ladders stand on `basis` (the wire's byte).
fn with_basis(days_used: u32, basis: u8) -> SummaryWithBasis {
    let mut s = with_images(vec![[5; 32]]);
    s.summary.format = SUMMARY_FORMAT_3;
    s.summary.days_used = days_used;
    SummaryWithBasis { summary: s, basis }
}

#[test]
fn a_format_3_summary_says_which_prior_its_ladders_are_and_older_ones_cannot() {
    use crate::net::codec::encode_body;
    let heard = 1_700_000_100;
    for (days, byte, basis, label) in [
        (7, BASIS_RECORD, LadderBasis::Record, None),
        (
            0,
            BASIS_BUILT_IN_PRIOR,
            LadderBasis::BuiltInPrior,
            Some("built-in-prior"),
        ),
        (
            0,
            BASIS_POOL_PRIOR,
            LadderBasis::PoolPrior,
            Some("pool-prior"),
        ),
        // A newer host's basis this node does not know: read, not refused.
        (0, 200, LadderBasis::Unknown(200), None),
    ] {
        let s3 = with_basis(days, byte);
        let got = decode_summary(&encode_body(&s3).unwrap(), heard).unwrap();
        assert_eq!(got.format, SUMMARY_FORMAT_3);
        assert_eq!(got.member, s3.summary.summary.member);
        assert_eq!(
            (got.summary.days_used, got.summary.basis),
            (days, Some(basis))
        );
        assert_eq!(got.summary.format(), SUMMARY_FORMAT_3);
        // The `method` the host's answer names.
        assert_eq!(
            got.summary.basis.and_then(LadderBasis::answer_method),
            label
        );
        assert_eq!(basis.to_wire(), byte);
        assert_eq!(got.summary.images, Some(vec![[5; 32]]));
    }
    assert_eq!(
        [LadderBasis::PoolPrior, LadderBasis::BuiltInPrior].map(LadderBasis::answer_method),
        PRIOR_METHODS.map(Some)
    );
    // Format 3's bytes are format 2's with another first byte and the basis.
    let s3 = with_basis(0, BASIS_POOL_PRIOR);
    let mut s2 = s3.summary.clone();
    s2.summary.format = SUMMARY_FORMAT;
    let (b2, b3) = (encode_body(&s2).unwrap(), encode_body(&s3).unwrap());
    assert_eq!((&b3[1..b2.len()], b3.len()), (&b2[1..], b2.len() + 1));
    // Formats 1 and 2 cannot say: `None`, whatever their days.
    let old = decode_summary(&b2, heard).unwrap();
    assert_eq!(
        (old.summary.basis, old.summary.format()),
        (None, SUMMARY_FORMAT)
    );
    let mut s1 = s2.summary.clone();
    s1.format = SUMMARY_FORMAT_1;
    let oldest = decode_summary(&encode_body(&s1).unwrap(), heard).unwrap();
    assert_eq!(
        (oldest.summary.basis, oldest.summary.format()),
        (None, SUMMARY_FORMAT_1)
    );
    // Format 3 cut short, with bytes left over, or with another format
    // inside: refused.
    assert!(matches!(
        decode_summary(&b3[..b3.len() - 1], heard),
        Err(SummaryError::Decode(_))
    ));
    let mut trailing = b3.clone();
    trailing.push(0);
    assert!(matches!(
        decode_summary(&trailing, heard),
        Err(SummaryError::Decode(_))
    ));
    let mut inner = with_basis(0, BASIS_POOL_PRIOR);
    inner.summary.summary.format = SUMMARY_FORMAT;
    assert_eq!(
        check_summary_with_basis(&inner, heard),
        Err(SummaryError::Format(SUMMARY_FORMAT))
    );
    // Its images are bounded as format 2's are.
    let mut many = with_basis(7, BASIS_RECORD);
    many.summary.images = (0..=16u8).map(|i| [i; 32]).collect();
    assert_eq!(
        decode_summary(&encode_body(&many).unwrap(), heard),
        Err(SummaryError::Images { count: 17 })
    );
    // A node built before format 3 reads its bytes as format 2 with a byte
    // left over and refuses them: hence the format 2 copy while one is heard.
    assert!(crate::net::codec::decode_body::<SummaryWithImages>(&b3).is_err());
}

#[test]
fn a_copy_in_an_older_format_does_not_make_a_newer_member_look_old() {
    use crate::net::codec::encode_body;
    let (t0, heard) = (Instant::now(), 1_700_000_100);
    let p = PeerId::random();
    let mut cache = MemberCache::new(10);
    let s3 = with_basis(0, BASIS_POOL_PRIOR);
    let mut s2 = s3.summary.clone();
    s2.summary.format = SUMMARY_FORMAT;
    let mut s1 = s2.summary.clone();
    s1.format = SUMMARY_FORMAT_1;
    let decoded =
        |bytes: Vec<u8>| std::sync::Arc::new(decode_summary(&bytes, heard).unwrap().summary);
    let (new, copy_2, copy_1) = (
        decoded(encode_body(&s3).unwrap()),
        decoded(encode_body(&s2).unwrap()),
        decoded(encode_body(&s1).unwrap()),
    );
    // The newest first, then its copies: it stays format 3.
    cache.insert(member(p, t0, Some(new.clone())));
    cache.insert(member(p, t0, Some(copy_2.clone())));
    cache.insert(member(p, t0, Some(copy_1.clone())));
    assert_eq!(cache.get(&p).unwrap().summary.as_ref(), Some(&new));
    assert!(!cache.any_of_format_2() && !cache.any_of_format_1());
    // A copy first, then the newest: format 3 replaces it.
    let q = PeerId::random();
    cache.insert(member(q, t0, Some(copy_2.clone())));
    assert!(cache.any_of_format_2());
    cache.insert(member(q, t0, Some(new.clone())));
    assert!(!cache.any_of_format_2());
    // A format 2 summary of a later computation is an older node's (or a
    // host that went back to an older version): it counts as format 2.
    let mut later = s2.clone();
    later.summary.computed_at_unix += 60;
    cache.insert(member(p, t0, Some(decoded(encode_body(&later).unwrap()))));
    assert!(cache.any_of_format_2());
}

fn member(peer: PeerId, last_seen: Instant, summary: Option<std::sync::Arc<Summary>>) -> Member {
    Member {
        peer,
        addresses: vec![],
        status: LocalStatus {
            logical_cpus: 1,
            memory_mib: 1,
            benchmark_score: 1,
            relative_power_milli: 1,
            state: State::S1,
            slot_free: true,
        },
        version: "x".into(),
        last_seen,
        summary,
    }
}

#[test]
fn the_member_table_is_bounded_and_drops_the_least_recently_heard() {
    let t0 = Instant::now();
    let mut cache = MemberCache::new(3);
    let peers: Vec<PeerId> = (0..5).map(|_| PeerId::random()).collect();
    for (i, p) in peers.iter().take(3).enumerate() {
        assert_eq!(
            cache.insert(member(*p, t0 + Duration::from_secs(i as u64), None)),
            None
        );
    }
    // The first is heard again: the second is now the oldest.
    cache.insert(member(peers[0], t0 + Duration::from_secs(10), None));
    assert_eq!(
        cache.insert(member(peers[3], t0 + Duration::from_secs(11), None)),
        Some(peers[1])
    );
    assert_eq!(cache.len(), 3);
    assert!(cache.get(&peers[1]).is_none());
    // Expiry by TTL.
    let gone = cache.expire(t0 + Duration::from_secs(15), Duration::from_secs(10));
    assert_eq!(gone, vec![peers[2]]);
    assert_eq!(cache.len(), 2);
}

#[test]
fn the_cache_report_counts_the_summaries_and_their_ages_without_us() {
    use crate::net::members::SummaryCache;
    let t0 = Instant::now();
    let now = t0 + Duration::from_secs(600);
    let s = std::sync::Arc::new(
        check_summary(&summary(vec![ladder(256, vec![900])]), 1_700_000_000).unwrap(),
    );
    let me = PeerId::random();
    let heard = |secs_ago: u64, summary: Option<std::sync::Arc<Summary>>| {
        member(
            PeerId::random(),
            now - Duration::from_secs(secs_ago),
            summary,
        )
    };
    let mut members = vec![
        heard(5, Some(s.clone())),
        heard(300, Some(s.clone())),
        heard(60, Some(s.clone())),
        heard(2, None),
    ];
    members.push(member(me, now, Some(s.clone())));
    let c = SummaryCache::of(&members, me, now);
    assert_eq!((c.members, c.summarised), (4, 3));
    assert_eq!(c.newest_secs, Some(5.0));
    assert_eq!(c.median_secs, Some(60.0));
    assert_eq!(c.oldest_secs, Some(300.0));
    let text = c.text(|s| format!("{s}s"));
    assert_eq!(
        text,
        "3 members known from summaries, 1 from an announcement only, heard 5s to 300s ago (median 60s)"
    );
    // Nobody heard: no ages, and the text says so.
    let empty = SummaryCache::of(&[], me, now);
    assert_eq!(empty, SummaryCache::default());
    assert_eq!(
        empty.text(|s| format!("{s}s")),
        "0 members known from summaries"
    );
}

#[test]
fn an_old_nodes_announcement_keeps_the_summary_heard_before() {
    let t0 = Instant::now();
    let p = PeerId::random();
    let mut cache = MemberCache::new(10);
    let s = check_summary(&summary(vec![ladder(256, vec![900])]), 1_700_000_000).unwrap();
    let s = std::sync::Arc::new(s);
    cache.insert(member(p, t0, Some(s.clone())));
    cache.insert(member(p, t0 + Duration::from_secs(1), None));
    assert_eq!(cache.get(&p).unwrap().summary, Some(s));
}

#[test]
fn the_gap_and_the_ttl_follow_the_heartbeat() {
    assert_eq!(min_gap(Duration::from_secs(300)), MIN_GAP_MAX);
    assert_eq!(min_gap(Duration::from_secs(2)), Duration::from_secs(1));
    assert!(member_ttl(Duration::from_secs(300)) > Duration::from_secs(4 * 375));
    assert_eq!(member_ttl(Duration::MAX), Duration::MAX);
}

#[test]
fn spell_lengths_are_checked_against_the_spells() {
    // A week with 3 episodes and 10 000 s of up time.
    let spells = PastSpells {
        usable_secs: 10_000.0,
        failing_secs: 900.0,
        episodes: 3,
    };
    let ok = checked_spell_lengths(lengths(vec![3_000, 2_000], 2), &spells).unwrap();
    assert_eq!(ok.up, vec![2_000.0, 3_000.0]);
    assert_eq!(ok.outages, vec![300.0, 600.0]);
    assert_eq!(ok.up_cut, vec![5_000.0]);
    let refused = |w: WireSpellLengths| checked_spell_lengths(w, &spells);
    // More up time than the spells hold.
    assert_eq!(refused(lengths(vec![3_000, 4_000], 2)), None);
    // More lengths than seen, more seen than episodes.
    assert_eq!(refused(lengths(vec![1, 2, 3], 2)), None);
    assert_eq!(refused(lengths(vec![1, 2], 9)), None);
    // A zero, a length beyond the week, too many lengths or cut spells.
    assert_eq!(refused(lengths(vec![0, 2], 2)), None);
    assert_eq!(refused(lengths(vec![1, u32::MAX], 2)), None);
    let many = PastSpells {
        usable_secs: 1e6,
        failing_secs: 1e5,
        episodes: 1_000,
    };
    assert_eq!(
        checked_spell_lengths(lengths(vec![10; 33], 500), &many),
        None
    );
    let mut cut = lengths(vec![10], 1);
    cut.up_cut_secs = vec![1, 2, 3];
    assert_eq!(refused(cut), None);
    // Quantiles standing for many spells are taken as such.
    let q = checked_spell_lengths(lengths(vec![10; 32], 500), &many).unwrap();
    assert_eq!((q.up.len(), q.up_seen), (32, 500));
}
