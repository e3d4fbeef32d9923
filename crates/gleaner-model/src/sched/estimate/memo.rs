//! The expected turnarounds of (task, host) the proactive rule asks for,
//! kept between an estimate's runs, with each row's hosts ranked by them,
//! and the rule's view of a run's queue through them.

use super::super::place::{Blocks, Ranked, Turnarounds};
use super::facts::{fits, HostFacts, AGES};
use std::collections::VecDeque;

/// Most (task, host) expected turnarounds kept between runs.
const MEMO_LIMIT: usize = 4_000_000;

/// Expected turnarounds of (task, host), computed when first asked and
/// shared by the runs; rows are made only for the tasks the rule weighs
/// (those near the batch's tail), up to [`MEMO_LIMIT`] cells. A row the
/// rule looks for the best free host in is also ranked once: its hosts by
/// turnaround, so that the search walks the ranking to the first free
/// host instead of asking every free one (most of the estimate's time at
/// 1,000 hosts, where each failure makes the rule look again).
///
/// A row holds a block of cells per way the rule may weigh a host in a
/// run ([`super::facts::block`]: by its curve at submission or, once back
/// from a failure, by its curve for a host just back, each read as of one
/// of [`AGES`]; the blocks for a host just back only when some host has
/// such a curve): cell b·n + g is host g in block b. A run says which
/// block holds for each host now, and the ranking takes every cell, the
/// rule passing over those that do not hold ([`Ranked`]).
///
/// A task resumed from a checkpoint (or one with no room left for a row)
/// has its row in one of [`SPARE_ROWS`] spare rows, keyed by the task and
/// the work it has left: that work is particular to a run, but the rule
/// asks about the same few tasks at the queue's head after every failure
/// while they wait, and with checkpoints at this scale most of the tail's
/// tasks are resumed ones.
pub(super) struct Memo<'a> {
    hosts: &'a [HostFacts],
    /// Blocks per row (see above).
    blocks: usize,
    /// Cells per row: a block of one per host.
    width: usize,
    pub(super) runtimes: Vec<f64>,
    row_of: Vec<u32>,
    cells: Vec<f64>,
    /// Per row: whether it is ranked yet (`Unranked`), and whether it can be.
    ranking: Vec<Ranking>,
    /// Per ranked row, its hosts by turnaround (as `cells`, one per host).
    ranked: Vec<u32>,
    /// The spare rows, a task's at `task % SPARE_ROWS`.
    spare: Vec<SpareRow>,
}

/// Spare memo rows (see [`Memo`]): a few more than the tasks the rule
/// weighs at once ([`super::super::place::LOOKAHEAD`] and one further down).
const SPARE_ROWS: usize = 64;

/// A memo row for (task, work left) outside the main rows.
struct SpareRow {
    /// The task (`u32::MAX`: none yet) and the work left it is for.
    task: u32,
    left: f64,
    cells: Vec<f64>,
    /// Rankings asked for since the row was taken over.
    asks: u32,
    ranking: Ranking,
    ranked: Vec<u32>,
}

/// Rankings a spare row is asked for before it is ranked: a resumed task
/// often leaves the queue's head after a few looks (it is placed, or hit
/// again with new work left), and ranking a row (a sort of every host)
/// costs as much as a few dozen scans of the free hosts.
pub(super) const SPARE_ASKS_BEFORE_RANKING: u32 = 16;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ranking {
    Unranked,
    Ranked,
    /// Some host's turnaround lies below the rule's lower bound (rounding
    /// on a curve that never fails, say): the rule's scan stops early
    /// there, so only the scan gives its answer.
    Unrankable,
}

/// Where a (task, work left)'s memo row is.
#[derive(Clone, Copy)]
enum Loc {
    Main(usize),
    Spare(usize),
}

impl<'a> Memo<'a> {
    pub(super) fn new(hosts: &'a [HostFacts], runtimes: &[f64]) -> Memo<'a> {
        let blocks = if hosts.iter().any(|h| h.back.is_some()) {
            2 * AGES.len()
        } else {
            AGES.len()
        };
        Memo {
            hosts,
            blocks,
            width: blocks * hosts.len(),
            runtimes: runtimes.to_vec(),
            row_of: vec![u32::MAX; runtimes.len()],
            cells: Vec::new(),
            ranking: Vec::new(),
            ranked: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// The row of `task` with `left` reference seconds of it to do: its
    /// main row when it has not begun (made if there is room), else its
    /// spare row, taken over (emptied) if it held another.
    fn locate(&mut self, task: usize, left: f64) -> Loc {
        let n = self.width;
        if left == self.runtimes[task] {
            let mut row = self.row_of[task];
            if row == u32::MAX && self.cells.len() + n <= MEMO_LIMIT {
                row = (self.cells.len() / n) as u32;
                self.row_of[task] = row;
                self.cells.resize(self.cells.len() + n, f64::NAN);
                self.ranking.push(Ranking::Unranked);
            }
            if row != u32::MAX {
                return Loc::Main(row as usize);
            }
        }
        if self.spare.is_empty() {
            self.spare = (0..SPARE_ROWS)
                .map(|_| SpareRow {
                    task: u32::MAX,
                    left: f64::NAN,
                    cells: vec![f64::NAN; n],
                    asks: 0,
                    ranking: Ranking::Unranked,
                    ranked: Vec::new(),
                })
                .collect();
        }
        let slot = task % SPARE_ROWS;
        let spare = &mut self.spare[slot];
        if spare.task != task as u32 || spare.left.to_bits() != left.to_bits() {
            spare.task = task as u32;
            spare.left = left;
            spare.cells.iter_mut().for_each(|c| *c = f64::NAN);
            spare.asks = 0;
            spare.ranking = Ranking::Unranked;
        }
        Loc::Spare(slot)
    }

    /// The expected turnaround of `task`, with `left` reference seconds
    /// of it to do, on `host` as the rule weighs it in `block` (see
    /// [`HostFacts::turnaround_in`]).
    pub(super) fn get(&mut self, task: usize, left: f64, host: usize, block: usize) -> f64 {
        let (n, width) = (self.hosts.len(), self.width);
        let block = block % self.blocks;
        let at = block * n + host;
        let cell = match self.locate(task, left) {
            Loc::Main(row) => &mut self.cells[row * width + at],
            Loc::Spare(slot) => &mut self.spare[slot].cells[at],
        };
        if cell.is_nan() {
            *cell = self.hosts[host].turnaround_in(left, block);
        }
        *cell
    }

    /// `task`'s hosts by expected turnaround with `left` reference seconds
    /// of it to do, least first (ties in the rule's order, infinite ones
    /// last), and its turnarounds by host: see
    /// [`super::super::place::Turnarounds::ranked`]; `place` is each host's place
    /// in the rule's order, the same in every run, and `block_of` the block
    /// that holds for each host now (see [`Memo`]). `None` when some host's
    /// turnaround falls below the rule's bound, or for a spare row not yet
    /// asked for often enough.
    pub(super) fn ranked<'s>(
        &'s mut self,
        task: usize,
        left: f64,
        place: &[u32],
        block_of: &'s dyn Fn(usize) -> usize,
    ) -> Option<Ranked<'s>> {
        let n = self.width;
        let loc = self.locate(task, left);
        let (cells, ranking, ranked) = match loc {
            Loc::Main(row) => {
                let span = row * n..(row + 1) * n;
                if self.ranked.len() < span.end && self.ranking[row] == Ranking::Unranked {
                    self.ranked.resize(span.end, 0);
                }
                let ranked = self.ranked.get_mut(span.clone()).unwrap_or_default();
                (&mut self.cells[span], &mut self.ranking[row], ranked)
            }
            Loc::Spare(slot) => {
                let spare = &mut self.spare[slot];
                spare.asks = spare.asks.saturating_add(1);
                if spare.asks < SPARE_ASKS_BEFORE_RANKING {
                    return None;
                }
                if spare.ranked.len() < n {
                    spare.ranked.resize(n, 0);
                }
                (
                    &mut spare.cells[..],
                    &mut spare.ranking,
                    &mut spare.ranked[..],
                )
            }
        };
        if *ranking == Ranking::Unranked {
            *ranking = rank(self.hosts, place, left, cells, ranked);
        }
        (*ranking == Ranking::Ranked).then_some(Ranked {
            order: &*ranked,
            cells: &*cells,
            blocks: Some(Blocks {
                hosts: self.hosts.len(),
                per_host: self.blocks,
                block_of,
            }),
        })
    }
}

/// Fills a memo row's missing `cells` for a task with `left` reference
/// seconds to do and ranks its entries into `ranked` (by turnaround, ties
/// by their host's `place`, infinite ones last), when every finite
/// turnaround is at least the rule's lower bound (left × SP, see
/// `Run::dispatch`). Every block's cells are ranked (see [`Memo`]).
fn rank(
    hosts: &[HostFacts],
    place: &[u32],
    left: f64,
    cells: &mut [f64],
    ranked: &mut [u32],
) -> Ranking {
    let n = hosts.len();
    let mut rankable = ranked.len() == cells.len();
    for (at, cell) in cells.iter_mut().enumerate() {
        let fact = &hosts[at % n];
        if cell.is_nan() {
            *cell = fact.turnaround_in(left, at / n);
        }
        rankable &= !cell.is_finite() || *cell >= left * fact.slowdown;
    }
    if !rankable {
        return Ranking::Unrankable;
    }
    let key = |h: u32| {
        let t = cells[h as usize];
        if t.is_finite() {
            t
        } else {
            f64::INFINITY
        }
    };
    ranked
        .iter_mut()
        .zip(0u32..)
        .for_each(|(slot, h)| *slot = h);
    ranked.sort_unstable_by(|&a, &b| {
        key(a)
            .total_cmp(&key(b))
            .then(place[a as usize % n].cmp(&place[b as usize % n]))
            .then(a.cmp(&b))
    });
    Ranking::Ranked
}

/// The rule's view of the queue's turnarounds, through the memo.
pub(super) struct QueueTurnarounds<'r, 'm> {
    pub(super) memo: &'r mut Memo<'m>,
    pub(super) queue: &'r VecDeque<usize>,
    /// The estimated work left per task (what the rule plans with).
    pub(super) runtimes: &'r [f64],
    /// Per host: its place in the rule's order (`Run::rank`), which breaks
    /// ties in a ranking.
    pub(super) place: &'r [u32],
    /// The hosts' facts: whether a task can run on one at all, from its
    /// slowdown and horizon, without a memo row or a curve's integral.
    pub(super) facts: &'r [HostFacts],
    /// Per host: the block the rule weighs it in now (`Run::block_of`).
    pub(super) block_of: &'r dyn Fn(usize) -> usize,
}

impl Turnarounds for QueueTurnarounds<'_, '_> {
    fn turnaround(&mut self, j: usize, g: usize) -> f64 {
        match self.queue.get(j) {
            Some(&task) => self
                .memo
                .get(task, self.runtimes[task], g, (self.block_of)(g)),
            None => f64::INFINITY,
        }
    }

    /// Whether position `j` can run on `g` at all, from the host's
    /// horizon in its block: in the bulk the rule asks it of every free
    /// host the head passes, at every event, and a memo row for each head
    /// would be made for nothing else.
    fn can_run(&mut self, j: usize, g: usize) -> bool {
        match (self.queue.get(j), self.facts.get(g)) {
            (Some(&task), Some(fact)) => fits(
                self.runtimes[task],
                fact.slowdown,
                fact.horizon_in((self.block_of)(g)),
            ),
            _ => false,
        }
    }

    fn ranked(&mut self, j: usize) -> Option<Ranked<'_>> {
        let &task = self.queue.get(j)?;
        self.memo
            .ranked(task, self.runtimes[task], self.place, self.block_of)
    }
}
