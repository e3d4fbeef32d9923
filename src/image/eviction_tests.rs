//! The image cache within its cap, on images built here: the least
//! recently used go first, an image a guest runs in never goes, an image
//! larger than the whole cache is refused while unpacking without evicting
//! anything, and a prune keeps what it is asked to.

use super::tests::{config, docker_archive, layer, E};
use super::*;
use jiff::Timestamp;
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;

/// An image of one file of `mib` MiB filled with `fill` (so each fill is
/// its own image), written into `dir`.
fn image(dir: &Path, fill: u8, mib: u64) -> PathBuf {
    let bytes = vec![fill; usize::try_from(mib * MIB).unwrap()];
    let layers = vec![layer(&[E::File("data", &bytes, 0o644)])];
    let cfg = config(&layers, &[], &[]);
    let path = dir.join(format!("image-{fill}.tar"));
    std::fs::write(&path, docker_archive(&layers, &cfg)).unwrap();
    path
}

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap()
}

fn capped(dir: &Path, cap: u64) -> ImageCache {
    let limits = ImageLimits {
        max_cache_bytes: cap,
        ..ImageLimits::default()
    };
    ImageCache::open(&dir.join("cache"), limits).unwrap()
}

/// The ids in the cache, most recently used first.
fn held(cache: &ImageCache) -> Vec<ImageId> {
    cache.list().unwrap().into_iter().map(|i| i.id).collect()
}

/// Only `.tmp` (empty) and whole images are in the cache.
fn nothing_half_done(cache: &ImageCache) {
    assert_eq!(
        std::fs::read_dir(cache.dir().join(".tmp")).unwrap().count(),
        0
    );
}

#[test]
fn the_least_recently_used_image_is_evicted_to_make_room() {
    let dir = tempfile::tempdir().unwrap();
    let cache = capped(dir.path(), 5 * MIB / 2);
    // Each task has ended: no lease is kept.
    let a = cache
        .unpack_at(&image(dir.path(), 1, 1), at(1_000))
        .unwrap()
        .id;
    let b = cache
        .unpack_at(&image(dir.path(), 2, 1), at(2_000))
        .unwrap()
        .id;
    // A task starts in `a` again: now `b` is the least recently used.
    let again = cache
        .unpack_at(&image(dir.path(), 1, 1), at(3_000))
        .unwrap();
    assert!(again.cached);
    drop(again);
    assert_eq!(held(&cache), vec![a.clone(), b.clone()]);
    let listed = cache.list().unwrap();
    assert_eq!(listed[0].bytes, MIB, "sizes are counted while unpacking");
    assert_eq!(listed[0].last_used_ms, 3_000);
    assert_eq!(listed[1].last_used_ms, 2_000);
    assert!(listed.iter().all(|i| !i.in_use), "no lease is alive");

    let c = cache
        .unpack_at(&image(dir.path(), 3, 1), at(4_000))
        .unwrap();
    assert!(!c.cached);
    assert_eq!(
        held(&cache),
        vec![c.id.clone(), a.clone()],
        "b went, a stayed"
    );
    assert!(!cache.dir().join(format!("sha256-{}", b.hex())).exists());
    nothing_half_done(&cache);

    // The last use survives a restart of the node (a new cache on the dir).
    drop(c);
    let reopened = capped(dir.path(), 5 * MIB / 2);
    let order: Vec<i64> = reopened
        .list()
        .unwrap()
        .iter()
        .map(|i| i.last_used_ms)
        .collect();
    assert_eq!(order, vec![4_000, 3_000]);
}

#[test]
fn an_image_in_use_is_never_evicted_and_no_room_beside_it_refuses_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let cache = capped(dir.path(), 5 * MIB / 2);
    // `a` is the oldest but a guest runs in it (its lease is alive).
    let a = cache
        .unpack_at(&image(dir.path(), 1, 1), at(1_000))
        .unwrap();
    let b = cache
        .unpack_at(&image(dir.path(), 2, 1), at(2_000))
        .unwrap()
        .id;
    assert!(cache
        .list()
        .unwrap()
        .iter()
        .any(|i| i.id == a.id && i.in_use));
    let c = cache
        .unpack_at(&image(dir.path(), 3, 1), at(3_000))
        .unwrap();
    assert_eq!(
        held(&cache),
        vec![c.id.clone(), a.id.clone()],
        "b went instead"
    );
    assert!(!held(&cache).contains(&b));

    // Both left are in use: a third does not fit beside them and is
    // refused, naming the images in the way; nothing is evicted.
    let e = cache
        .unpack_at(&image(dir.path(), 4, 1), at(4_000))
        .unwrap_err();
    assert!(matches!(e, ImageError::CacheFull { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("image_cache_mib"), "{text}");
    assert!(text.contains(&a.id.to_string()), "{text}");
    assert_eq!(held(&cache), vec![c.id.clone(), a.id.clone()]);
    nothing_half_done(&cache);
    // A prune leaves them too.
    assert!(cache.prune(0).unwrap().is_empty());

    // Once the guest in `a` has ended, it is the one to go.
    drop(a);
    let d = cache
        .unpack_at(&image(dir.path(), 4, 1), at(5_000))
        .unwrap();
    assert_eq!(held(&cache), vec![d.id.clone(), c.id.clone()]);
}

#[test]
fn an_image_larger_than_the_whole_cache_is_refused_while_unpacking() {
    let dir = tempfile::tempdir().unwrap();
    let cache = capped(dir.path(), 3 * MIB / 2);
    let small = cache
        .unpack_at(&image(dir.path(), 1, 1), at(1_000))
        .unwrap()
        .id;
    let e = cache
        .unpack_at(&image(dir.path(), 2, 2), at(2_000))
        .unwrap_err()
        .to_string();
    for word in [
        "layer 1",
        "\"data\"",
        "larger than the whole image cache",
        "image_cache_mib",
    ] {
        assert!(e.contains(word), "{e:?} lacks {word:?}");
    }
    // Refused before any room was made: the small image is still there.
    assert_eq!(held(&cache), vec![small]);
    nothing_half_done(&cache);
}

#[test]
fn a_prune_removes_the_least_recently_used_beyond_what_it_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let cache = capped(dir.path(), 10 * MIB);
    let ids: Vec<ImageId> = (1..=3)
        .map(|n| {
            cache
                .unpack_at(&image(dir.path(), n, 1), at(i64::from(n) * 1_000))
                .unwrap()
                .id
        })
        .collect();
    let removed = cache.prune(2 * MIB).unwrap();
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].id, ids[0]);
    assert_eq!(held(&cache), vec![ids[2].clone(), ids[1].clone()]);
    let removed: Vec<ImageId> = cache.prune(0).unwrap().into_iter().map(|i| i.id).collect();
    assert_eq!(removed, vec![ids[1].clone(), ids[2].clone()]);
    assert!(held(&cache).is_empty());
    nothing_half_done(&cache);
}

#[test]
fn the_count_of_changes_moves_when_an_image_comes_or_goes_and_not_on_a_use() {
    let dir = tempfile::tempdir().unwrap();
    let cache = capped(dir.path(), 5 * MIB / 2);
    assert_eq!(cache.changes(), 0);
    let a = cache
        .unpack_at(&image(dir.path(), 1, 1), at(1_000))
        .unwrap();
    assert_eq!(cache.changes(), 1, "gained one");
    drop(a);
    // A task starting in an image held already changes nothing held.
    drop(
        cache
            .unpack_at(&image(dir.path(), 1, 1), at(2_000))
            .unwrap(),
    );
    assert_eq!(cache.changes(), 1);
    drop(
        cache
            .unpack_at(&image(dir.path(), 2, 1), at(3_000))
            .unwrap(),
    );
    assert_eq!(cache.changes(), 2);
    // A third image evicts the least recently used: one gained, one lost.
    drop(
        cache
            .unpack_at(&image(dir.path(), 3, 1), at(4_000))
            .unwrap(),
    );
    assert_eq!(cache.changes(), 4);
    // A refused image changes nothing.
    assert!(cache
        .unpack_at(&image(dir.path(), 4, 3), at(5_000))
        .is_err());
    assert_eq!(cache.changes(), 4);
    let removed = cache.prune(0).unwrap().len();
    assert_eq!((removed, cache.changes()), (2, 6), "pruned two");
}
