//! The appends of the node's own history: a sample with the heartbeat in
//! one transaction, a state transition, and an event of the guest job log
//! (numbered by sled so two in one second keep their order).
//!
//! It must not know how rows are read back or removed; a sample written
//! while the machine is withheld only moves the heartbeat (the rule of
//! [`super::downtime`]).

use super::layout::KEY_HEARTBEAT;
use super::{sled_err, tx_err, HistoryStore, JobEvent, StoreError, TxNew};
use crate::history::codec::{self, JobEventRecord};
use crate::model::series::Sample;
use crate::model::state::State;
use sled::Transactional;
use std::sync::atomic::Ordering;

impl HistoryStore {
    /// Appends a sample and moves the heartbeat to its time, atomically.
    ///
    /// While paused only the heartbeat moves: the down row written by
    /// [`pause`](Self::pause) holds until the first sample after `resume`.
    /// The CPU load is stored at 0.01 % resolution.
    pub fn record_sample(&self, sample: &Sample) -> Result<(), StoreError> {
        let value = codec::encode_sample(sample).map_err(|source| StoreError::BadSample {
            time: sample.time,
            source,
        })?;
        let heartbeat = codec::encode_i64(sample.time);
        if self.paused || self.withheld.is_some() {
            self.bulk
                .meta_tree
                .insert(KEY_HEARTBEAT, &heartbeat[..])
                .map_err(sled_err("writing the heartbeat"))?;
        } else {
            let key = codec::time_key(sample.time);
            let added = (&self.bulk.samples, &self.bulk.meta_tree)
                .transaction(|(samples, meta)| -> TxNew {
                    let old = samples.insert(&key[..], &value[..])?;
                    meta.insert(KEY_HEARTBEAT, &heartbeat[..])?;
                    Ok(old.is_none())
                })
                .map_err(tx_err("recording a sample"))?;
            self.count_new_sample(added);
        }
        self.flush_record()
    }

    /// Records that the host entered `state` at `time`.
    pub fn record_transition(&self, time: i64, state: State) -> Result<(), StoreError> {
        self.transitions
            .insert(codec::time_key(time), &codec::encode_state(state)[..])
            .map_err(sled_err("recording a transition"))?;
        self.flush_record()
    }

    /// Appends an event to the guest job log.
    pub fn record_job_event(&self, event: &JobEvent) -> Result<(), StoreError> {
        let record = JobEventRecord {
            job: event.job.clone(),
            kind: event.kind.clone(),
            detail: event.detail.clone(),
        };
        let value = codec::encode_job_event(&record).map_err(StoreError::BadJobEvent)?;
        // sled's ids are unique across restarts, so two events in the same
        // second never share a key and keep their order.
        let seq = self
            .bulk
            .db
            .generate_id()
            .map_err(sled_err("numbering a job event"))?;
        self.jobs
            .insert(codec::job_key(event.time, seq), value)
            .map_err(sled_err("recording a job event"))?;
        self.flush_record()
    }

    pub(super) fn count_new_sample(&self, added: bool) {
        if added {
            self.bulk.shared.samples_len.fetch_add(1, Ordering::Relaxed);
        }
    }
}
