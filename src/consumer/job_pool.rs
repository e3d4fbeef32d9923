//! The network as the batch queue needs it: [`JobPool`] (offer inputs,
//! survey the pool, send job requests) and its real implementation
//! [`PoolLink`] over the node's [`NetHandle`] and catalog. Behind the trait,
//! placement, retries and landing are tested without sockets.
//!
//! Inputs travel by hash: [`JobPool::offer`] hashes a task's input files and
//! offers them in the node's catalog; the submission names them by hash, size
//! and path, and the chosen host reads what it lacks over `/gleaner/data/1`
//! (only that host may: [`crate::data::Offer::allow`]).

use std::future::Future;
use std::time::Duration;

use libp2p::swarm::ConnectionId;
use libp2p::PeerId;

use crate::consumer::survey::{survey, SurveyQuery, SurveyedHost};
use crate::data::{Catalog, InputSpec, Offer};
use crate::net::protocol::{JobRequest, JobResponse, ReliabilityQuery, ReliabilityResponse};
use crate::net::{NetError, NetHandle};

/// The network as a job needs it.
pub trait JobPool: Send + Sync {
    /// Hashes a task's input files and offers them to the hosts the task
    /// will be sent to; the one way inputs are shipped, for `submit` and
    /// batches alike. Errors name the input.
    fn offer(&self, inputs: &[InputSpec]) -> impl Future<Output = Result<Offer, String>> + Send;
    /// Surveys the pool for a window, asking none of `skip`.
    fn survey(
        &self,
        query: SurveyQuery,
        skip: Vec<PeerId>,
    ) -> impl Future<Output = Result<Vec<SurveyedHost>, NetError>> + Send;
    /// Asks one host its reliability for one window (a window that starts
    /// later, for a task the queue may hold: `queue::later`).
    fn reliability(
        &self,
        host: PeerId,
        query: ReliabilityQuery,
    ) -> impl Future<Output = Result<ReliabilityResponse, NetError>> + Send;
    /// Sends a job request to a host.
    fn request(
        &self,
        host: PeerId,
        request: JobRequest,
    ) -> impl Future<Output = Result<JobResponse, NetError>> + Send;
    /// The connections held to a host now ([`NetHandle::connections`]);
    /// empty when none (or the network is gone).
    fn connections(&self, host: PeerId) -> impl Future<Output = Vec<ConnectionId>> + Send;
}

/// The node's network and its catalog of offered files: the real [`JobPool`].
#[derive(Debug, Clone)]
pub struct PoolLink {
    /// The network.
    pub net: NetHandle,
    /// The files this node serves to hosts.
    pub catalog: Catalog,
}

impl JobPool for PoolLink {
    fn offer(&self, inputs: &[InputSpec]) -> impl Future<Output = Result<Offer, String>> + Send {
        self.catalog.offer(inputs)
    }
    fn survey(
        &self,
        query: SurveyQuery,
        skip: Vec<PeerId>,
    ) -> impl Future<Output = Result<Vec<SurveyedHost>, NetError>> + Send {
        let net = self.net.clone();
        async move { survey(&net, query, &skip).await }
    }
    fn reliability(
        &self,
        host: PeerId,
        query: ReliabilityQuery,
    ) -> impl Future<Output = Result<ReliabilityResponse, NetError>> + Send {
        let net = self.net.clone();
        async move { net.query_reliability(host, query).await }
    }
    fn request(
        &self,
        host: PeerId,
        request: JobRequest,
    ) -> impl Future<Output = Result<JobResponse, NetError>> + Send {
        self.net.job_request(host, request)
    }
    fn connections(&self, host: PeerId) -> impl Future<Output = Vec<ConnectionId>> + Send {
        let net = self.net.clone();
        async move { net.connections(host).await.unwrap_or_default() }
    }
}

/// Knobs of one submission.
#[derive(Debug, Clone, Copy)]
pub struct JobSettings {
    /// Resubmissions after the first host failed.
    pub max_retries: u32,
    /// How often a running job's host is probed.
    pub probe_every: Duration,
    /// Failed probes in a row after which the host counts as gone.
    pub probes_to_fail: u32,
    /// Largest output brought back, bytes (each of stdout, stderr, files).
    pub max_output_bytes: u64,
    /// Time after the wall limit before a silent host counts as gone.
    pub grace: Duration,
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            max_retries: 3,
            probe_every: Duration::from_secs(1),
            probes_to_fail: 2,
            max_output_bytes: 64 << 20,
            grace: Duration::from_secs(30),
        }
    }
}

/// How long a host may take to prepare inputs of `bytes` before the
/// attempt counts as failed: a minute plus 1 MiB/s, far below any link the
/// data protocol is used on (the host bounds each chunk's wait itself).
pub fn input_allowance(bytes: u64) -> Duration {
    Duration::from_secs(60 + bytes / (1 << 20))
}
