//! Which images leave the cache to make room: least recently used first,
//! never one a guest runs in. A pure decision over each image's size, last
//! use and lease; the cache reads those from its directory and performs it.
//! Knows ids, byte counts and times; not directories nor the clock.

use super::ImageId;

/// One cached image as eviction sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: ImageId,
    /// Bytes of file contents, counted while it was unpacked.
    pub bytes: u64,
    /// When a task last started in it, Unix milliseconds.
    pub last_used_ms: i64,
    /// A guest runs in it (a lease is alive): never evicted.
    pub in_use: bool,
}

/// What making room decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Room {
    /// The images to remove, least recently used first.
    pub evict: Vec<ImageId>,
    /// Bytes still over the cap after removing them: more than zero only
    /// when the images in use leave no room. An insertion then evicts
    /// nothing and is refused; a prune evicts what it can.
    pub over: u64,
}

/// The evictions that bring the cached images plus `incoming` bytes to at
/// most `cap`: the least recently used first (ties by id, so the order is
/// the same on every run), skipping images in use. When even evicting
/// every image not in use leaves too little room, `evict` names them all
/// and `over` says by how much the cap is still exceeded.
pub fn make_room(entries: &[Entry], incoming: u64, cap: u64) -> Room {
    let total = entries
        .iter()
        .fold(incoming, |sum, e| sum.saturating_add(e.bytes));
    let mut candidates: Vec<&Entry> = entries.iter().filter(|e| !e.in_use).collect();
    candidates.sort_by(|a, b| {
        a.last_used_ms
            .cmp(&b.last_used_ms)
            .then_with(|| a.id.cmp(&b.id))
    });
    let mut left = total;
    let mut evict = Vec::new();
    for e in candidates {
        if left <= cap {
            break;
        }
        left -= e.bytes.min(left);
        evict.push(e.id.clone());
    }
    Room {
        evict,
        over: left.saturating_sub(cap),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ImageId {
        ImageId::from_hex(&format!("{n:02x}").repeat(32)).unwrap()
    }

    fn entry(n: u8, bytes: u64, last_used_ms: i64, in_use: bool) -> Entry {
        Entry {
            id: id(n),
            bytes,
            last_used_ms,
            in_use,
        }
    }

    #[test]
    fn the_least_recently_used_go_first_and_only_as_many_as_needed() {
        let cached = [
            entry(1, 40, 3_000, false),
            entry(2, 40, 1_000, false),
            entry(3, 40, 2_000, false),
        ];
        // 120 cached + 30 incoming into 100: 50 must go, the two oldest.
        let room = make_room(&cached, 30, 100);
        assert_eq!(room.evict, vec![id(2), id(3)]);
        assert_eq!(room.over, 0);
        // Room enough: nothing goes.
        assert_eq!(make_room(&cached, 0, 120).evict, Vec::<ImageId>::new());
        // Pruning to nothing takes all, oldest first.
        assert_eq!(make_room(&cached, 0, 0).evict, vec![id(2), id(3), id(1)]);
    }

    #[test]
    fn an_image_in_use_is_never_evicted_even_when_it_is_the_oldest() {
        let cached = [
            entry(1, 40, 1_000, true),
            entry(2, 40, 2_000, false),
            entry(3, 40, 3_000, false),
        ];
        let room = make_room(&cached, 40, 100);
        assert_eq!(room.evict, vec![id(2), id(3)]);
        assert!(!room.evict.contains(&id(1)));
        assert_eq!(make_room(&cached, 0, 0).evict, vec![id(2), id(3)]);
    }

    #[test]
    fn no_room_beside_the_images_in_use_says_by_how_much() {
        let cached = [entry(1, 70, 1_000, true), entry(2, 20, 2_000, false)];
        let room = make_room(&cached, 50, 100);
        assert_eq!(room.evict, vec![id(2)], "all that may go");
        assert_eq!(room.over, 20);
        assert_eq!(make_room(&cached, 0, 100).over, 0);
    }

    #[test]
    fn equal_last_uses_are_broken_by_id() {
        let cached = [entry(9, 10, 5, false), entry(4, 10, 5, false)];
        assert_eq!(make_room(&cached, 0, 10).evict, vec![id(4)]);
    }
}
