//! The trust state of the batch queue's core: each verifying batch's
//! settings, the hosts excluded from a batch for an invalid result, the
//! hosts' reputation, and each task's copies as far as they are judged. The
//! flow that fills it is `quorum`; the store's side (the `verify` and
//! `reputation` trees) is the driver's `trust_store`. Pure: no sled, no
//! files. See [`crate::consumer::batch::verify`] and docs/trust.md.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;

use libp2p::PeerId;

use crate::consumer::batch::verify::{LandedCopy, VerifySpec};
use crate::consumer::survey::SurveyedHost;
use crate::model::ids::BatchId;
use crate::model::trust::{AdaptiveRule, HostTrack, Outcome, Standing};

/// A landed copy waiting for its digest.
#[derive(Debug, Clone, PartialEq)]
pub struct Landing {
    pub host: String,
    pub dir: PathBuf,
    pub exit_status: i32,
    pub missing: Vec<String>,
    pub wall_secs: f64,
}

/// A copy for the driver to judge: its digest, and which earlier copies it
/// agrees with (by digest or by the batch's validator).
#[derive(Debug, Clone)]
pub struct Judge {
    pub batch: BatchId,
    pub task: u32,
    pub landing: Landing,
    /// The task's copies judged so far, in order.
    pub earlier: Vec<LandedCopy>,
    /// The batch's declared outputs, digested with stdout.
    pub outputs: Vec<String>,
    pub validator: Option<String>,
}

/// One task's copies as far as they are judged.
#[derive(Debug, Default)]
pub(super) struct Judging {
    /// Copies wanted in all (landed, being judged and running).
    pub(super) wanted: u32,
    /// Agreeing copies that accept a result.
    pub(super) quorum: u32,
    /// Judged copies, each with the group of agreeing copies it is in.
    pub(super) landed: Vec<(LandedCopy, usize)>,
    pub(super) pending: VecDeque<Landing>,
    /// A judgment is running off the loop, of this host's copy.
    pub(super) busy: bool,
    pub(super) judged_host: Option<String>,
    /// A quorum was found: later ends are ignored.
    pub(super) decided: bool,
    /// Copies that ended without a result (host failed, refused).
    pub(super) failures: u32,
}

/// The trust state of the queue.
#[derive(Debug, Default)]
pub struct Trust {
    pub(super) specs: HashMap<BatchId, VerifySpec>,
    /// Every host's checked results (written through by the driver).
    pub(super) reputation: HashMap<PeerId, HostTrack>,
    pub(super) judging: HashMap<(BatchId, u32), Judging>,
    /// Hosts that returned an invalid result for a batch: none of its
    /// tasks go there again.
    pub(super) tainted: HashMap<BatchId, HashSet<PeerId>>,
    pub(super) rule: AdaptiveRule,
}

/// What a judgment reports back to the core.
#[derive(Debug)]
pub enum Verdict {
    Judged {
        copy: Result<LandedCopy, String>,
        agrees_with: Vec<usize>,
    },
    Promoted(Result<(), String>),
}

impl Trust {
    /// The trust state the store kept: each batch's settings, the hosts
    /// excluded from each batch, every host's reputation.
    pub fn new(
        specs: HashMap<BatchId, VerifySpec>,
        tainted: HashMap<BatchId, HashSet<PeerId>>,
        reputation: HashMap<PeerId, HostTrack>,
    ) -> Trust {
        Trust {
            specs,
            tainted,
            reputation,
            ..Default::default()
        }
    }

    pub(super) fn spec(&self, batch: BatchId) -> Option<&VerifySpec> {
        self.specs.get(&batch).filter(|s| s.verifies())
    }

    /// A new batch's settings (the driver has stored them).
    pub(super) fn set_spec(&mut self, batch: BatchId, spec: VerifySpec) {
        if spec.verifies() {
            self.specs.insert(batch, spec);
        }
    }

    pub(super) fn forget(&mut self, batch: BatchId) {
        self.specs.remove(&batch);
        self.judging.retain(|(b, _), _| *b != batch);
        self.tainted.remove(&batch);
    }

    /// `peer` returned an invalid result for `batch`: it gets none of the
    /// batch's tasks again (the driver writes it through, so a restart
    /// keeps it).
    pub(super) fn taint(&mut self, batch: BatchId, peer: PeerId) {
        self.tainted.entry(batch).or_default().insert(peer);
    }

    pub(super) fn is_tainted(&self, batch: BatchId, peer: &PeerId) -> bool {
        self.tainted.get(&batch).is_some_and(|s| s.contains(peer))
    }

    /// Counts one checked result of `peer`.
    pub(super) fn record(&mut self, peer: PeerId, valid: bool) {
        self.reputation.entry(peer).or_default().record(valid);
    }

    /// Counts how one attempt of `peer` ended.
    pub(super) fn conduct(&mut self, peer: PeerId, outcome: Outcome) {
        self.reputation.entry(peer).or_default().apply(outcome);
    }

    pub(super) fn streak(&self, peer: &PeerId) -> u32 {
        self.reputation.get(peer).map_or(0, |t| t.streak)
    }

    fn standing(&self, peer: &PeerId) -> Standing {
        self.reputation
            .get(peer)
            .map_or(Standing::Clean, HostTrack::standing)
    }

    /// Hosts whose copy of a task of this batch disagrees with another
    /// copy and the dispute is not settled yet: one of them is wrong, so
    /// neither gets more of the batch until a further copy decides.
    pub(super) fn disputed(&self, batch: BatchId) -> HashSet<String> {
        let mut out = HashSet::new();
        for ((b, _), j) in &self.judging {
            if *b != batch || j.decided {
                continue;
            }
            let first = j.landed.first().map(|(_, g)| *g);
            if j.landed.iter().any(|(_, g)| Some(*g) != first) {
                out.extend(j.landed.iter().map(|(c, _)| c.host.clone()));
            }
        }
        out
    }

    /// `host` as placement weighs it: its claimed TR, and each point of its
    /// TR curve, times its record's claim discount
    /// ([`HostTrack::claim_discount`]: what it landed over what its claims
    /// promised, at most 1). A host without a record, or whose claims
    /// held, is returned as it is.
    pub(super) fn discounted(&self, host: &SurveyedHost) -> SurveyedHost {
        let factor = self.claim_factor(&host.peer);
        let mut out = host.clone();
        if factor < 1.0 {
            out.tr = host.tr.map(|tr| tr * factor);
            out.curve = host.curve.as_ref().map(|c| c.scaled(factor));
        }
        out
    }

    /// What `peer`'s record discounts its TR claims by (1 without one):
    /// [`HostTrack::claim_discount`].
    pub(super) fn claim_factor(&self, peer: &PeerId) -> f64 {
        self.reputation
            .get(peer)
            .map_or(1.0, HostTrack::claim_discount)
    }

    /// Whether `peer`'s record excludes it from every batch.
    pub(super) fn is_excluded(&self, peer: &PeerId) -> bool {
        self.standing(peer) == Standing::Excluded
    }

    /// Hosts in the policy's order with every host whose record holds an
    /// offence (an invalid result, a lost job, failures its TR claims
    /// contradict) moved behind those whose record holds none (order kept
    /// within each part), and hosts excluded by their record or tainted
    /// for this batch left out.
    pub(super) fn order<T>(&self, batch: BatchId, hosts: Vec<(PeerId, T)>) -> Vec<(PeerId, T)> {
        let (mut clean, bad): (Vec<_>, Vec<_>) = hosts
            .into_iter()
            .filter(|(p, _)| !self.is_tainted(batch, p) && !self.is_excluded(p))
            .partition(|(p, _)| self.standing(p) == Standing::Clean);
        clean.extend(bad);
        clean
    }
}
