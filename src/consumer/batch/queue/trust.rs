//! The trust state of the batch queue: each verifying batch's settings, the
//! hosts excluded from a batch for an invalid result (kept in the store's
//! `verify` tree, so a restart keeps them), the hosts' reputation, and each
//! task's copies as far as they are judged. The flow that fills it is
//! `quorum`. See [`crate::consumer::batch::verify`] and docs/trust.md.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;

use libp2p::PeerId;

use crate::consumer::batch::codec::{self, batch_key};
use crate::consumer::batch::verify::{LandedCopy, VerifySpec};
use crate::consumer::reputation::Reputation;
use crate::model::ids::BatchId;
use crate::model::trust::AdaptiveRule;

/// A landed copy waiting for its digest.
#[derive(Debug, Clone)]
pub(super) struct Landing {
    pub(super) host: String,
    pub(super) dir: PathBuf,
    pub(super) exit_status: i32,
    pub(super) missing: Vec<String>,
    pub(super) wall_secs: f64,
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
    /// A judgment is running on the blocking pool, of this host's copy.
    pub(super) busy: bool,
    pub(super) judged_host: Option<String>,
    /// A quorum was found: later ends are ignored.
    pub(super) decided: bool,
    /// Copies that ended without a result (host failed, refused).
    pub(super) failures: u32,
}

/// The trust state of the queue.
#[derive(Default)]
pub(super) struct Trust {
    pub(super) specs: HashMap<BatchId, VerifySpec>,
    pub(super) tree: Option<sled::Tree>,
    pub(super) reputation: Option<Reputation>,
    pub(super) judging: HashMap<(BatchId, u32), Judging>,
    /// Hosts that returned an invalid result for a batch: none of its
    /// tasks go there again.
    pub(super) tainted: HashMap<BatchId, HashSet<PeerId>>,
    pub(super) rule: AdaptiveRule,
}

/// What a judgment reports back to the actor.
#[derive(Debug)]
pub enum Verdict {
    Judged {
        copy: Result<LandedCopy, String>,
        agrees_with: Vec<usize>,
    },
    Promoted(Result<(), String>),
}

impl Trust {
    pub(super) fn open(store: &crate::consumer::batch::store::BatchStore) -> Trust {
        let tree = store
            .tree("verify")
            .map_err(|e| tracing::error!(error = %e, "cannot open the verify tree"))
            .ok();
        let mut specs = HashMap::new();
        let mut tainted: HashMap<BatchId, HashSet<PeerId>> = HashMap::new();
        if let Some(tree) = &tree {
            for (key, value) in tree.iter().flatten() {
                match codec::decode_verify_key(&key) {
                    Ok(Some((batch, peer))) => {
                        tainted.entry(batch).or_default().insert(peer);
                    }
                    Ok(None) => {
                        let Ok(key) = codec::decode_batch_key(&key) else {
                            continue;
                        };
                        match VerifySpec::decode(&value) {
                            Ok(spec) => {
                                specs.insert(key, spec);
                            }
                            Err(e) => tracing::warn!(error = %e, "verify record skipped"),
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "verify record skipped"),
                }
            }
        }
        let reputation = Reputation::load(
            store
                .tree("reputation")
                .map_err(|e| tracing::error!(error = %e, "cannot open the reputation tree"))
                .ok(),
        );
        Trust {
            specs,
            tainted,
            tree,
            reputation: Some(reputation),
            ..Default::default()
        }
    }

    pub(super) fn spec(&self, batch: BatchId) -> Option<&VerifySpec> {
        self.specs.get(&batch).filter(|s| s.verifies())
    }

    pub(super) fn set_spec(&mut self, batch: BatchId, spec: VerifySpec) -> Result<(), String> {
        if !spec.verifies() {
            return Ok(());
        }
        if let Some(tree) = &self.tree {
            tree.insert(batch_key(batch), spec.encode())
                .map_err(|e| e.to_string())?;
        }
        self.specs.insert(batch, spec);
        Ok(())
    }

    pub(super) fn forget(&mut self, batch: BatchId) {
        if let Some(tree) = &self.tree {
            // The settings and every tainted host share the batch's prefix.
            for key in tree.scan_prefix(batch_key(batch)).keys().flatten() {
                let _ = tree.remove(key);
            }
        }
        self.specs.remove(&batch);
        self.judging.retain(|(b, _), _| *b != batch);
        self.tainted.remove(&batch);
    }

    /// `peer` returned an invalid result for `batch`: it gets none of the
    /// batch's tasks again, after a restart too (written through to the
    /// `verify` tree).
    pub(super) fn taint(&mut self, batch: BatchId, peer: PeerId) {
        if let Some(tree) = &self.tree {
            if let Err(e) = tree.insert(codec::tainted_key(batch, &peer), &[][..]) {
                tracing::error!(%batch, %peer, error = %e, "cannot record a host's exclusion from a batch");
            }
        }
        self.tainted.entry(batch).or_default().insert(peer);
    }

    pub(super) fn has_invalid(&self, peer: &PeerId) -> bool {
        self.reputation
            .as_ref()
            .is_some_and(|r| r.get(peer).invalid > 0)
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

    /// Hosts in the policy's order with every host that ever returned an
    /// invalid result moved behind those that did not (order kept within
    /// each part), and hosts tainted for this batch left out.
    pub(super) fn order<T>(&self, batch: BatchId, hosts: Vec<(PeerId, T)>) -> Vec<(PeerId, T)> {
        let tainted = self.tainted.get(&batch);
        let (mut clean, bad): (Vec<_>, Vec<_>) = hosts
            .into_iter()
            .filter(|(p, _)| !tainted.is_some_and(|t| t.contains(p)))
            .partition(|(p, _)| !self.has_invalid(p));
        clean.extend(bad);
        clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::batch::store::BatchStore;

    #[test]
    fn a_host_excluded_from_a_batch_stays_excluded_after_a_reopen_until_the_batch_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let (batch, other) = (BatchId::new(41), BatchId::new(42));
        let (liar, honest) = (PeerId::random(), PeerId::random());
        let spec = VerifySpec {
            replicas: 2,
            quorum: 2,
            ..Default::default()
        }
        .checked()
        .unwrap();
        {
            let store = BatchStore::open(dir.path()).unwrap();
            let mut trust = Trust::open(&store);
            trust.set_spec(batch, spec.clone()).unwrap();
            trust.set_spec(other, spec.clone()).unwrap();
            trust.taint(batch, liar);
            store.flush().unwrap();
        }
        let hosts = || vec![(liar, ()), (honest, ())];
        let store = BatchStore::open(dir.path()).unwrap();
        let mut trust = Trust::open(&store);
        assert_eq!(trust.spec(batch), Some(&spec), "the settings came back");
        let order: Vec<PeerId> = trust
            .order(batch, hosts())
            .into_iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(
            order,
            vec![honest],
            "the liar is still left out of its batch"
        );
        let order: Vec<PeerId> = trust
            .order(other, hosts())
            .into_iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(order, vec![liar, honest], "other batches are not affected");
        trust.forget(batch);
        drop(trust);
        store.flush().unwrap();
        drop(store);
        let store = BatchStore::open(dir.path()).unwrap();
        let trust = Trust::open(&store);
        assert!(trust.spec(batch).is_none());
        assert!(
            !trust.tainted.contains_key(&batch),
            "forgotten with its batch"
        );
        assert_eq!(trust.spec(other), Some(&spec));
    }
}
