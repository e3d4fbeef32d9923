//! The pool host's answers to what peers ask at their will that costs it
//! more than a look-up: a reliability query (a forecast, off both loops)
//! and a fetch of an output (a read, and the output's hash on the first
//! chunk). Each charges the CPU it took, on the thread that did the work,
//! to the peer that asked (`NetHandle::charge_cpu`, issue 30, scope 3): a
//! peer whose requests cost past its share of a core has the next ones
//! refused by the network, and is cut off if it goes on.

use super::outputs::{output_path, read_chunk, read_chunk_or_empty};
use super::publish::{wire_answer, PowerMilli};
use super::remote_jobs::RemoteJob;
use super::PoolHost;
use crate::cpu_time::thread_cpu;
use crate::model::state::State;
use crate::net::protocol::{
    FailureByCause, JobResponse, OutputName, ReliabilityAnswer, ReliabilityQuery,
    ReliabilityResponse, WireState,
};
use crate::net::Responder;
use libp2p::PeerId;
use std::path::PathBuf;

impl PoolHost {
    /// Answers a peer's reliability query from this host's own history; the
    /// forecast is computed off both loops, and the CPU it took is charged
    /// to the peer.
    pub(super) fn answer_reliability(
        &mut self,
        peer: PeerId,
        q: ReliabilityQuery,
        reply: Responder<ReliabilityResponse>,
    ) {
        let snapshot = self.snapshot.borrow().clone();
        let power = PowerMilli {
            effective: self.power_milli(&snapshot),
            speed: self.speed_milli(),
        };
        let slot_free = snapshot.slot_free;
        if snapshot.paused {
            let _ = reply.send(ReliabilityResponse::Answer(ReliabilityAnswer {
                tr: 0.0,
                failure: FailureByCause {
                    s3: 0.0,
                    s4: 0.0,
                    s5: 1.0,
                },
                initial_state: WireState::S5,
                days_used: 0,
                method: String::new(),
                relative_power_milli: power.effective,
                slot_free,
                curve: Vec::new(),
                availability_milli: Some(0),
                speed_milli: power.speed,
                spells: None,
                spell_lengths: None,
            }));
            return;
        }
        let fallback_state = WireState::from(snapshot.state.unwrap_or(State::S1));
        let reader = self.parts.host.reader().clone();
        let net = self.parts.net.clone();
        self.parts.tracker.spawn(async move {
            let (answer, cpu) = reader
                .reliability_costed(q.window_start_unix, q.length_secs, q.memory_mib)
                .await;
            net.charge_cpu(&peer, cpu);
            let answer = match answer {
                Ok(a) => {
                    ReliabilityResponse::Answer(wire_answer(&a, fallback_state, power, slot_free))
                }
                Err(e) => ReliabilityResponse::Unavailable {
                    reason: e.to_string(),
                },
            };
            let _ = reply.send(answer);
        });
    }

    /// Serves a piece of a remote job's output to the consumer that submitted it.
    pub(super) fn serve_fetch(
        &mut self,
        peer: PeerId,
        job_id: &str,
        name: OutputName,
        offset: u64,
        len: u32,
        reply: Responder<JobResponse>,
    ) {
        // An output is read once its job has ended (its capture written
        // out): else a late end of an earlier job of the id would read the
        // newest's stdout so far (issue 30, finding 6). Liveness reads
        // (zero-length) and checkpoints pass.
        let readable = |job: &&RemoteJob| {
            job.ended.is_some() || len == 0 || matches!(name, OutputName::Checkpoint)
        };
        let path: Option<PathBuf> = self
            .remote
            .by_consumer(peer, job_id)
            .filter(readable)
            .and_then(|job| output_path(job, &name));
        let Some(path) = path else {
            let _ = reply.send(JobResponse::NotFound);
            return;
        };
        let captured = matches!(name, OutputName::Stdout | OutputName::Stderr);
        let memo = self.output_hashes.clone();
        let net = self.parts.net.clone();
        self.parts.tracker.spawn_blocking(move || {
            let from = thread_cpu();
            let read = if captured {
                read_chunk_or_empty(&path, offset, len)
            } else {
                read_chunk(&path, offset, len)
            };
            // The first real read carries the hash of the whole output, so
            // the consumer can check what it assembles.
            let hash = if offset == 0 && len > 0 {
                memo.hash(&path).ok()
            } else {
                None
            };
            let answer = match read {
                Ok(_) if offset == 0 && len > 0 && hash.is_none() => JobResponse::NotFound,
                Ok((data, total_len)) => JobResponse::Chunk {
                    data,
                    total_len,
                    hash,
                },
                Err(_) => JobResponse::NotFound,
            };
            net.charge_cpu(&peer, thread_cpu().saturating_sub(from));
            let _ = reply.send(answer);
        });
    }
}
