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
/// has its row in one of up to [`SPARE_ROWS`] spare rows, keyed by the task
/// and the work it has left: that work is particular to a run, but the rule
/// asks about the same few tasks at the queue's head after every failure
/// while they wait, and with checkpoints at this scale most of the tail's
/// tasks are resumed ones. The spare rows hold at most [`SPARE_CELL_LIMIT`]
/// cells in all (fewer rows on a wide pool): a row is as wide as the main
/// ones, and 64 of them would grow with the pool unbounded.
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
    /// The spare rows (made at the first one asked for), a task's at
    /// `task % spare_rows`.
    spare: Vec<SpareRow>,
    /// How many spare rows there are: [`SPARE_ROWS`], fewer when that
    /// many would hold more than the limit (see [`Memo::new`]).
    spare_rows: usize,
}

/// Spare memo rows (see [`Memo`]): a few more than the tasks the rule
/// weighs at once ([`super::super::place::LOOKAHEAD`] and one further down).
const SPARE_ROWS: usize = 64;

/// Most cells the spare rows hold in all (each cell a turnaround and, once
/// ranked, an entry of the row's ranking: 12 bytes, so about 12 MB). A
/// quarter of the main rows' [`MEMO_LIMIT`], rounded up so that a pool of
/// 1,000 hosts with a past (16,000 cells a row) keeps all [`SPARE_ROWS`];
/// at 10,000 hosts it keeps 6 rows (about 120 MB with 64). Fewer rows only
/// means a resumed task's row is taken over (and recomputed) more often:
/// the memo is a cache, and the answers are the same.
pub(super) const SPARE_CELL_LIMIT: usize = 1 << 20;

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
    /// A memo whose spare rows hold at most `spare_cells` cells in all
    /// ([`SPARE_CELL_LIMIT`] but in tests; yet one row however wide): as
    /// many rows as fit, up to [`SPARE_ROWS`]. The answers are the same
    /// for any limit.
    pub(super) fn new(hosts: &'a [HostFacts], runtimes: &[f64], spare_cells: usize) -> Memo<'a> {
        let blocks = if hosts.iter().any(|h| h.back.is_some()) {
            2 * AGES.len()
        } else {
            AGES.len()
        };
        let width = blocks * hosts.len();
        Memo {
            hosts,
            blocks,
            width,
            runtimes: runtimes.to_vec(),
            row_of: vec![u32::MAX; runtimes.len()],
            cells: Vec::new(),
            ranking: Vec::new(),
            ranked: Vec::new(),
            spare: Vec::new(),
            spare_rows: (spare_cells / width.max(1)).clamp(1, SPARE_ROWS),
        }
    }

    /// Bytes the spare rows hold now: their turnarounds and their
    /// rankings' entries.
    #[cfg(test)]
    pub(super) fn spare_bytes(&self) -> usize {
        self.spare
            .iter()
            .map(|r| r.cells.len() * 8 + r.ranked.len() * 4)
            .sum()
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
            self.spare = (0..self.spare_rows)
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
        let slot = task % self.spare_rows;
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

#[cfg(test)]
mod tests {
    //! The spare rows' bound: their memory on a wide pool, and the same
    //! estimate whatever the bound.

    use super::super::plan::EstimatePlan;
    use super::super::{EstimateHost, EstimateInput, HostView};
    use super::*;
    use crate::sched::curve::TrCurve;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn host(power: f64, mttf: f64, checkpoint_secs: f64) -> EstimateHost {
        EstimateHost {
            view: HostView {
                power,
                availability: 1.0,
                curve: TrCurve::exponential(mttf),
            },
            busy_secs: 0.0,
            recovery_secs: 600.0,
            down_secs: 0.0,
            past: None,
            checkpoint_secs,
            checkpoint_cost_secs: 0.0,
            spells: None,
            days: None,
        }
    }

    /// 10,000 hosts (80,000 cells a row): 64 spare rows would hold 41 MB
    /// of turnarounds, more with their rankings, and grow with the pool;
    /// they hold at most the limit's 12 bytes a cell.
    #[test]
    fn the_spare_rows_stay_within_their_limit_on_a_wide_pool() {
        let hosts: Vec<EstimateHost> = (0..10_000)
            .map(|g| host(0.5 + (g % 7) as f64 / 14.0, 86_400.0, 0.0))
            .collect();
        let facts: Vec<HostFacts> = hosts.iter().map(HostFacts::new).collect();
        let runtimes = vec![3_600.0; SPARE_ROWS];
        let mut memo = Memo::new(&facts, &runtimes, SPARE_CELL_LIMIT);
        let place: Vec<u32> = (0..facts.len() as u32).collect();
        let block_of = |_: usize| 0;
        // Every task resumed (half its work left), so each has a spare
        // row; the first few asked often enough to be ranked.
        for task in 0..SPARE_ROWS {
            assert!(memo.get(task, 1_800.0, task, 0).is_finite());
            if task < 4 {
                for _ in 0..SPARE_ASKS_BEFORE_RANKING {
                    let _ = memo.ranked(task, 1_800.0, &place, &block_of);
                }
            }
        }
        let ranked = memo.spare.iter().filter(|r| !r.ranked.is_empty()).count();
        assert!(ranked > 0, "no spare row was ranked");
        assert!(
            memo.spare_bytes() <= 12 * SPARE_CELL_LIMIT,
            "{} bytes in {} spare rows",
            memo.spare_bytes(),
            memo.spare.len()
        );
    }

    /// The memo is a cache: with one spare row (every resumed task's row
    /// taken over by the next, and hardly ever ranked) or a few, an
    /// estimate is the same, to the bit, as with the default limit, on a
    /// pool whose tail waits on resumed tasks (checkpoints every 10 min,
    /// failures every 1-6 h).
    #[test]
    fn the_estimate_is_the_same_whatever_the_spare_rows_limit() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let hosts: Vec<EstimateHost> = (0..24)
            .map(|_| {
                host(
                    rng.random_range(0.3..1.0),
                    rng.random_range(3_600.0..21_600.0),
                    600.0,
                )
            })
            .collect();
        let waiting: Vec<f64> = (0..40)
            .map(|_| rng.random_range(3_600.0..10_800.0))
            .collect();
        let input = EstimateInput {
            hosts: &hosts,
            running: &[],
            waiting: &waiting,
            longest_first: true,
            runs: 40,
            runtime_sigma_log: Some(0.3),
            held: &[],
        };
        let plan = EstimatePlan::new(&input, &mut ChaCha8Rng::seed_from_u64(1)).unwrap();
        let runs = plan.run_count();
        let (default, makespans) = plan.finish(vec![plan.runs(0..runs)]);
        assert!(default.mean_failures > 1.0, "{default:?}");
        let bits = |m: &[f64]| m.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
        let width = AGES.len() * hosts.len();
        for cells in [1, 3 * width] {
            let (e, m) = plan.finish(vec![plan.runs_with_spare_cells(0..runs, cells)]);
            assert_eq!(e, default, "{cells} cells");
            assert_eq!(bits(&m), bits(&makespans), "{cells} cells");
        }
    }
}
