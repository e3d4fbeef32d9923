//! The batch queue driver's side of trust: the store's `verify` tree (each
//! verifying batch's settings, and the hosts excluded from a batch for an
//! invalid result, keys encoded by `codec`) and `reputation` tree, read
//! into the core's [`Trust`] at start and written through as the core's
//! actions say. It decides nothing: the rules are `quorum` and `trust`.

use std::collections::{HashMap, HashSet};

use libp2p::PeerId;

use super::trust::Trust;
use crate::consumer::batch::codec::{self, batch_key};
use crate::consumer::batch::store::BatchStore;
use crate::consumer::batch::verify::VerifySpec;
use crate::consumer::reputation::Reputation;
use crate::model::ids::BatchId;
use crate::model::trust::Outcome;

/// The trust trees of the batch store. While the store is not open (a node
/// that never submitted a batch) they are opened at their first write.
pub(super) struct TrustStore {
    store: BatchStore,
    tree: Option<sled::Tree>,
    reputation: Reputation,
}

impl TrustStore {
    /// Opens the trees and reads what they kept into the core's state. A
    /// record that does not decode is logged and skipped.
    pub(super) fn open(store: &BatchStore) -> (TrustStore, Trust) {
        if !store.is_open() {
            // Nothing was ever written: nothing to read, nothing to open.
            let trust = Trust::new(HashMap::new(), HashMap::new(), HashMap::new());
            let this = TrustStore {
                store: store.clone(),
                tree: None,
                reputation: Reputation::load(None),
            };
            return (this, trust);
        }
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
        let trust = Trust::new(specs, tainted, reputation.all().clone());
        let this = TrustStore {
            store: store.clone(),
            tree,
            reputation,
        };
        (this, trust)
    }

    /// The `verify` tree, opened (with the store) at the first write.
    fn verify_tree(&mut self) -> Option<&sled::Tree> {
        if self.tree.is_none() {
            self.tree = self
                .store
                .tree("verify")
                .map_err(|e| tracing::error!(error = %e, "cannot open the verify tree"))
                .ok();
        }
        self.tree.as_ref()
    }

    /// Gives the reputation its tree at the first write, if it has none.
    fn attach_reputation(&mut self) {
        if !self.reputation.has_tree() {
            match self.store.tree("reputation") {
                Ok(tree) => self.reputation.attach(tree),
                Err(e) => tracing::error!(error = %e, "cannot open the reputation tree"),
            }
        }
    }

    /// Keeps a new batch's verification settings (nothing for a batch that
    /// does not verify).
    pub(super) fn set_spec(&mut self, batch: BatchId, spec: &VerifySpec) -> Result<(), String> {
        if !spec.verifies() {
            return Ok(());
        }
        if let Some(tree) = self.verify_tree() {
            tree.insert(batch_key(batch), spec.encode())
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Forgets a removed batch's settings and exclusions.
    pub(super) fn forget(&self, batch: BatchId) {
        // Never opened: nothing of any batch was kept.
        if let Some(tree) = &self.tree {
            // The settings and every tainted host share the batch's prefix.
            for key in tree.scan_prefix(batch_key(batch)).keys().flatten() {
                let _ = tree.remove(key);
            }
        }
    }

    /// `peer` returned an invalid result for `batch`: written through, so
    /// the exclusion survives a restart.
    pub(super) fn taint(&mut self, batch: BatchId, peer: PeerId) {
        if let Some(tree) = self.verify_tree() {
            if let Err(e) = tree.insert(codec::tainted_key(batch, &peer), &[][..]) {
                tracing::error!(%batch, %peer, error = %e, "cannot record a host's exclusion from a batch");
            }
        }
    }

    /// Counts one checked result of `peer`, written through.
    pub(super) fn record(&mut self, peer: PeerId, valid: bool) {
        self.attach_reputation();
        self.reputation.record(peer, valid);
    }

    /// Counts how one attempt of `peer` ended, written through.
    pub(super) fn conduct(&mut self, peer: PeerId, outcome: Outcome) {
        self.attach_reputation();
        self.reputation.apply(peer, outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let (mut trust_store, _) = TrustStore::open(&store);
            trust_store.set_spec(batch, &spec).unwrap();
            trust_store.set_spec(other, &spec).unwrap();
            trust_store.taint(batch, liar);
            store.flush().unwrap();
        }
        let hosts = || vec![(liar, ()), (honest, ())];
        let store = BatchStore::open(dir.path()).unwrap();
        let (trust_store, mut trust) = TrustStore::open(&store);
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
        trust_store.forget(batch);
        drop(trust_store);
        store.flush().unwrap();
        drop(store);
        let store = BatchStore::open(dir.path()).unwrap();
        let (_, trust) = TrustStore::open(&store);
        assert!(trust.spec(batch).is_none());
        assert!(
            !trust.tainted.contains_key(&batch),
            "forgotten with its batch"
        );
        assert_eq!(trust.spec(other), Some(&spec));
    }
}
