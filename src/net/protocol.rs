//! The wire types of a Gleaner pool: every value that crosses the network, its
//! protocol ids, gossipsub topics, DHT keys and size limits.
//!
//! Only the types in this module derive `Serialize`/`Deserialize` for the
//! network; the rest of `net/` converts to and from them. This module knows
//! nothing about libp2p behaviours, tokio or the node: it is plain data, so
//! PROTOCOL.md can describe it field by field and another implementation can
//! speak it. Changing a field here changes the wire format: bump the protocol
//! id (`/1` → `/2`) when you do.

use serde::{Deserialize, Serialize};

use crate::model::ids::PoolName;
use crate::model::state::State;

/// Protocol id of the reliability query (request/response). Version 2: the
/// answer carries a TR curve over window lengths, the predicted
/// availability over the window and the host's relative speed P. Version
/// 3: the answer carries the host's failure spells over its past week.
/// Version 4: and their lengths, bounded ([`WireSpellLengths`]).
pub const RELIABILITY_PROTOCOL: &str = "/gleaner/reliability/4";
/// Protocol id of job submission, job events and output fetches (request/response).
/// Version 2: inputs are referenced by hash and fetched over [`DATA_PROTOCOL`].
/// Version 3: a submission may carry a checkpoint order; hosts report
/// checkpoints (`Checkpointed`, `CheckpointRefused`) and the guest's CPU and
/// wall time at its end; `OutputName::Checkpoint` fetches the latest one.
/// Later, under the same id (as `Query` and `Cancel` were):
/// `JobRequest::SubmitInImage` and `RejectReason::NoImages` (issue 31); a
/// host built before them cannot decode the request and drops the stream,
/// so a job with an image never runs without it. Then
/// `JobRequest::SubmitInLayers` (an image by its config and layers, each an
/// input), which a host built before it drops the same way.
pub const JOB_PROTOCOL: &str = "/gleaner/job/3";
/// Protocol id of content-addressed data streams: a host reads a job's input
/// from the consumer that offered it (one libp2p stream per file).
pub const DATA_PROTOCOL: &str = "/gleaner/data/1";
/// Protocol id of our Kademlia DHT, so Gleaner pools never mix with the public IPFS DHT.
pub const KAD_PROTOCOL: &str = "/gleaner/kad/1";
/// Protocol version string sent in identify. Version 2: hosts publish
/// [`HostSummary`]s on [`summary_topic`] instead of announcing every 30 s on
/// [`announce_topic`] (which version 2 nodes still hear from version 1 ones).
pub const IDENTIFY_PROTOCOL_VERSION: &str = "/gleaner/2";

/// Largest reliability request frame body, in bytes. A query is three integers.
pub const RELIABILITY_REQUEST_CAP: u32 = 1024;
/// Largest reliability response frame body, in bytes.
pub const RELIABILITY_RESPONSE_CAP: u32 = 16 * 1024;
/// Most points of a reliability answer's TR curve; a consumer drops the rest.
pub const CURVE_POINTS_MAX: usize = 16;
/// Largest job request frame body: a submission carries its command line and
/// references to its inputs (256 of them at most), never their bytes.
pub const JOB_REQUEST_CAP: u32 = 1024 * 1024;
/// Largest job response frame body: one output chunk plus framing.
pub const JOB_RESPONSE_CAP: u32 = 2 * 1024 * 1024;
/// Largest output chunk a host returns for one fetch; bigger outputs take several fetches.
pub const OUTPUT_CHUNK_MAX: u32 = 1024 * 1024;
/// Largest data request frame body: a hash, a size and a chunk index.
pub const DATA_REQUEST_CAP: u32 = 1024;
/// Bytes of one data chunk: the unit of verification and of re-fetching. A
/// power of two of BLAKE3's 1 KiB chunks, so every chunk is a whole subtree
/// of the file's BLAKE3 tree.
pub const DATA_CHUNK_BYTES: u32 = 1024 * 1024;
/// Largest file the data protocol moves: bounds the chunk list in a header
/// (65 536 hashes of 32 bytes).
pub const DATA_FILE_MAX: u64 = 64 * 1024 * 1024 * 1024;
/// Chunks of one file a host refuses (each asked again in a new stream,
/// from that chunk to the end) before it gives up on the file at the next.
pub const DATA_MAX_REFUSED: u32 = 8;
/// Largest data response header frame body: the chunk hashes of the largest file.
pub const DATA_HEADER_CAP: u32 = 4 * 1024 * 1024;
/// Largest announcement a member publishes on gossipsub.
pub const ANNOUNCE_MAX_BYTES: usize = 4 * 1024;
/// Gossipsub topic on which members of `pool` announce themselves.
pub fn announce_topic(pool: &PoolName) -> String {
    format!("gleaner/{pool}/announce/1")
}

/// Gossipsub topic on which members of `pool` publish their summary, in
/// format 2 ([`SummaryWithImages`]: it says which images the host holds).
pub fn summary_topic(pool: &PoolName) -> String {
    format!("gleaner/{pool}/summary/2")
}

/// Gossipsub topic of format 1 summaries ([`HostSummary`] alone), where
/// nodes built before format 2 publish and listen: this code listens there
/// too, and publishes a format 1 copy there only while its member table
/// holds a member heard in format 1 (a receiver of either format rejects
/// the other, as bincode refuses trailing bytes).
pub fn summary_topic_1(pool: &PoolName) -> String {
    format!("gleaner/{pool}/summary/1")
}

/// The layout of a [`SummaryWithImages`]: what the leaf topics and digests
/// carry, and the copy this code also writes on [`summary_topic`] while it
/// hears a node that reads nothing newer.
pub const SUMMARY_FORMAT: u8 = 2;
/// The layout of a summary this code writes on [`summary_topic`]
/// ([`SummaryWithBasis`]: it says what its ladders stand on); a receiver
/// reads this and [`SUMMARY_FORMAT`] there, and refuses another.
pub const SUMMARY_FORMAT_3: u8 = 3;
/// A reliability answer's `method` when the host has no day of record: the
/// pool's typical curve, or the built-in population's.
pub const PRIOR_METHODS: [&str; 2] = ["pool-prior", "built-in-prior"];
/// [`SummaryWithBasis::basis`]: the ladders come from the host's own record.
pub const BASIS_RECORD: u8 = 0;
/// [`SummaryWithBasis::basis`]: the host has no day of record; its ladders
/// are the built-in population's prior.
pub const BASIS_BUILT_IN_PRIOR: u8 = 1;
/// [`SummaryWithBasis::basis`]: the host has no day of record; its ladders
/// are the pool's typical curve, heard from members with records.
pub const BASIS_POOL_PRIOR: u8 = 2;
/// The layout of a summary on [`summary_topic_1`]: a [`HostSummary`] alone.
pub const SUMMARY_FORMAT_1: u8 = 1;
/// Most image ids a format 2 summary carries (the most recently used
/// first); a receiver refuses a summary with more.
pub const IMAGES_HELD_MAX: usize = 16;
/// Largest summary a member publishes (the gossipsub message cap is the
/// announcement's): a publisher leaves out the spell lengths, then the
/// spells, rather than go past it.
pub const SUMMARY_MAX_BYTES: usize = ANNOUNCE_MAX_BYTES;
/// The window lengths of a summary's TR ladder, seconds (15 min to 32 h,
/// doubling): a consumer reads a task's TR off the ladder between rungs.
pub const LADDER_SECS: [u32; 8] = [900, 1_800, 3_600, 7_200, 14_400, 28_800, 57_600, 115_200];
/// The memory levels a summary's ladders are computed at, MiB (the job's
/// memory sets the S4 threshold): a consumer uses the lowest level at or
/// above its task's memory.
pub const MEMORY_LEVELS_MIB: [u32; 3] = [256, 2_048, 8_192];

/// Protocol id of leaf digests (request/response): a consumer of a large
/// pool asks one member of a leaf of the pool's DHT trie for the summaries
/// it holds of that leaf's members (heard on [`leaf_topic`]), instead of
/// hearing every member on [`summary_topic`].
pub const DIGEST_PROTOCOL: &str = "/gleaner/digest/1";
/// Largest digest request body: a leaf's depth and bits.
pub const DIGEST_REQUEST_CAP: u32 = 64;
/// Largest digest answer body: an answerer puts in summaries while they
/// fit (its own first), so a leaf's worth of typical summaries (~0.5 KB
/// each) always fits and a hostile answer costs at most this.
pub const DIGEST_RESPONSE_CAP: u32 = 32 * 1024;
/// Most summaries in one digest: a DHT key keeps at most 20 providers.
pub const DIGEST_ENTRIES_MAX: usize = 20;

/// Gossipsub topic of one leaf of the pool's DHT trie (`label` is the
/// leaf's bits as 0 and 1, `root` for the root): in a large pool a member
/// publishes its summary there too and listens there only, so what it
/// hears is bounded by a leaf (at most ~16 members), not by the pool.
pub fn leaf_topic(pool: &PoolName, label: &str) -> String {
    format!("gleaner/{pool}/leaf/{label}")
}

/// A digest request: the summaries the answerer holds of this leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestRequest {
    /// The leaf's depth in the trie (0 for the root).
    pub depth: u8,
    /// Its bits, high bits first, the rest zero.
    pub bits: u32,
}

/// A digest answer: the leaf the answerer is on now (it may have moved
/// since it was listed) and what it heard there, its own summary first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestResponse {
    /// The answerer's leaf.
    pub depth: u8,
    pub bits: u32,
    /// At most [`DIGEST_ENTRIES_MAX`].
    pub entries: Vec<DigestEntry>,
}

/// One summary in a digest, as heard on the leaf's topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestEntry {
    /// Seconds since the answerer heard it.
    pub heard_secs_ago: u32,
    /// The summary's bytes as published (format 2, [`SummaryWithImages`]):
    /// a receiver checks it as one heard on the topic, and takes it as the
    /// answerer's word (it carries no signature of its member's own).
    pub summary: Vec<u8>,
}

/// Kademlia key that every member of `pool` provides, so a consumer finds hosts without
/// waiting for gossip.
pub fn pool_dht_key(pool: &PoolName) -> Vec<u8> {
    format!("/gleaner/pool/{pool}").into_bytes()
}

/// The five host states on the wire (the model's `State`, kept separate so a model
/// change cannot silently change the wire format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WireState {
    /// Light host load.
    S1,
    /// Heavy host load: the guest runs reniced.
    S2,
    /// CPU contention: a guest would be killed.
    S3,
    /// Memory shortage: a guest would be killed.
    S4,
    /// Revocation: the node is off or paused by its owner.
    S5,
}

impl From<State> for WireState {
    fn from(s: State) -> Self {
        match s {
            State::S1 => WireState::S1,
            State::S2 => WireState::S2,
            State::S3 => WireState::S3,
            State::S4 => WireState::S4,
            State::S5 => WireState::S5,
        }
    }
}

impl From<WireState> for State {
    fn from(s: WireState) -> Self {
        match s {
            WireState::S1 => State::S1,
            WireState::S2 => State::S2,
            WireState::S3 => State::S3,
            WireState::S4 => State::S4,
            WireState::S5 => State::S5,
        }
    }
}

/// What a pool member publishes on its announce topic every 30 s and on every state change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Announcement {
    /// The member's peer id as bytes; must equal the gossipsub message source, or the
    /// message is rejected (a peer cannot announce for another).
    pub peer_id: Vec<u8>,
    /// Multiaddrs (as bytes) the member can be dialled on.
    pub addresses: Vec<Vec<u8>>,
    /// Logical CPUs of the host.
    pub logical_cpus: u32,
    /// Total memory of the host, MiB.
    pub memory_mib: u64,
    /// Raw score of the built-in CPU benchmark (higher is faster); a consumer divides by
    /// the best score it knows to get the relative power P of seed 004.
    pub benchmark_score: u64,
    /// Effective computing power Γ = P·A in thousandths (0..=1000), as the member sees it
    /// against the best benchmark score it has heard in the pool.
    pub relative_power_milli: u32,
    /// The host's current state.
    pub state: WireState,
    /// True when the guest slot is free.
    pub slot_free: bool,
    /// Gleaner version of the member (`CARGO_PKG_VERSION`).
    pub version: String,
}

/// What a pool member publishes on its summary topic: what it announced
/// before (who, where, how big, state, slot) and what a consumer needs to
/// rank it without asking (TR at a ladder of window lengths and a few
/// memory levels, its week's spells), with when that was computed. Sent on
/// a change of state, slot or power step (at most one per minimum gap) and
/// on a randomised heartbeat of minutes; a host with nothing new is quiet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostSummary {
    /// [`SUMMARY_FORMAT_1`] alone on [`summary_topic_1`]; [`SUMMARY_FORMAT`]
    /// as the first part of a [`SummaryWithImages`]; [`SUMMARY_FORMAT_3`] as
    /// the first part of a [`SummaryWithBasis`]. A receiver rejects any
    /// other.
    pub format: u8,
    /// The member, as an announcement describes it (same checks).
    pub member: Announcement,
    /// When the host computed the reliability part, Unix seconds on the
    /// host; its ladders' windows start then.
    pub computed_at_unix: i64,
    /// Relative speed P in thousandths (Γ without the owner's load).
    pub speed_milli: u32,
    /// Predicted CPU share for a guest over the next hour, thousandths.
    pub availability_milli: Option<u32>,
    /// History days behind the ladders.
    pub days_used: u32,
    /// TR ladders, one per memory level, levels increasing, at most
    /// [`MEMORY_LEVELS_MIB`]`.len()`; empty when the host cannot predict.
    pub ladders: Vec<WireLadder>,
    /// The host's failure spells over its past week at the lowest memory
    /// level (as in a reliability answer).
    pub spells: Option<WireSpells>,
    /// Their lengths (as in a reliability answer); `None` when `spells` is.
    pub spell_lengths: Option<WireSpellLengths>,
}

/// A summary of format 2 ([`SUMMARY_FORMAT`]), on [`summary_topic`]: a
/// [`HostSummary`] whose `format` is 2, followed by the images the host
/// holds, so a consumer prefers a holder for a task in one of them. In
/// bincode a nested struct is its fields in order, so this is format 1's
/// bytes (with another first byte) and one list more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryWithImages {
    /// Fields 1-9, as format 1 has them (`format` 2, or 3 inside a
    /// [`SummaryWithBasis`]).
    pub summary: HostSummary,
    /// Ids of the images the host's image cache holds whole (the SHA-256
    /// of each image's config, as [`ImageRef::id`]), the most recently used
    /// first, at most [`IMAGES_HELD_MAX`]. A claim only: a consumer prefers
    /// a holder, and the host still reads and checks an archive it lacks.
    pub images: Vec<[u8; 32]>,
}

/// A summary of format 3 ([`SUMMARY_FORMAT_3`]), on [`summary_topic`]: a
/// [`SummaryWithImages`] whose `format` is 3, followed by what its ladders
/// stand on, so a consumer (and a member building the pool's prior) can
/// tell a pool prior from the built-in one. Format 2's bytes with another
/// first byte and one byte more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryWithBasis {
    /// Fields 1-10, as format 2 has them (`format` 3).
    pub summary: SummaryWithImages,
    /// What the ladders stand on: [`BASIS_RECORD`], [`BASIS_BUILT_IN_PRIOR`]
    /// or [`BASIS_POOL_PRIOR`]; a receiver reads another value as a basis
    /// it does not know (a newer host's), not as an error.
    pub basis: u8,
}

/// TR at [`LADDER_SECS`] for one memory level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireLadder {
    /// The job memory the ladder was computed for, MiB.
    pub memory_mib: u32,
    /// TR in thousandths (0..=1000) for the windows of [`LADDER_SECS`],
    /// in order, from `computed_at_unix`; shorter when the host's history
    /// cannot cover the longer windows.
    pub tr_milli: Vec<u16>,
}

/// `/gleaner/reliability/4` request: what is the reliability of a job that would run in
/// this window with this much memory?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReliabilityQuery {
    /// Window start, Unix seconds.
    pub window_start_unix: i64,
    /// Window length, seconds.
    pub length_secs: u64,
    /// Memory the job declares, MiB (sets the S4 threshold).
    pub memory_mib: u64,
}

/// Failure probability within the window, by cause.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FailureByCause {
    /// Probability that the job ends in S3 (CPU contention).
    pub s3: f64,
    /// Probability that the job ends in S4 (memory shortage).
    pub s4: f64,
    /// Probability that the job ends in S5 (revocation).
    pub s5: f64,
}

/// The host's answer, computed from its own history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReliabilityAnswer {
    /// Temporal reliability TR: the probability of no failure in the window.
    pub tr: f64,
    /// Failure probability by cause.
    pub failure: FailureByCause,
    /// State the prediction starts from.
    pub initial_state: WireState,
    /// History days that went into the estimate.
    pub days_used: u32,
    /// Estimator name (e.g. `km`, `paper`); for a host with no day of
    /// record, which prior it answered with ([`PRIOR_METHODS`]).
    pub method: String,
    /// Effective computing power Γ = P·A in thousandths.
    pub relative_power_milli: u32,
    /// True when the guest slot is free now.
    pub slot_free: bool,
    /// TR for windows from the same start and of other lengths, so one
    /// query serves every runtime: `(length seconds, TR)`, lengths
    /// increasing, at most [`CURVE_POINTS_MAX`]. The asked length is among
    /// them. Empty when the host cannot predict.
    pub curve: Vec<(u64, f64)>,
    /// The CPU share a guest is predicted to get over the window, in
    /// thousandths (0..=1000): one minus the owner's load, zero while the
    /// host is off, averaged over the same history days the TR learned
    /// from. `None` without such history.
    pub availability_milli: Option<u32>,
    /// Relative speed P in thousandths: the host's benchmark score against
    /// the best it has heard in the pool (Γ = P·A without the owner's load).
    pub speed_milli: u32,
    /// The host's failure spells over its past week, for the job's memory:
    /// what a turnaround estimate needs after the first failure, which the
    /// curve does not describe. `None` when its record is too short.
    pub spells: Option<WireSpells>,
    /// The lengths of those spells, so that a turnaround estimate can
    /// resample them after a return instead of assuming an exponential
    /// (real up-spells are bursty). `None` when `spells` is.
    pub spell_lengths: Option<WireSpellLengths>,
}

/// The lengths of a host's spells over its past week, whole seconds, as a
/// reliability answer carries them (the model's `SpellLengths`): at most
/// 32 whole up-spells and 32 whole outages (evenly spaced quantiles when
/// more were seen), and the up-spells the week's edges cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireSpellLengths {
    /// Whole up-spells, ascending.
    pub up_secs: Vec<u32>,
    /// How many whole up-spells `up_secs` stands for.
    pub up_seen: u32,
    /// Up-spells cut by the week's edges (at most 2): at least this long.
    pub up_cut_secs: Vec<u32>,
    /// Whole outages, ascending.
    pub outage_secs: Vec<u32>,
    /// How many whole outages `outage_secs` stands for.
    pub outages_seen: u32,
}

/// A host's failure spells over a past span, as a reliability answer
/// carries them (the model's `PastSpells` in whole seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireSpells {
    /// Seconds the host could run a guest (S1 or S2).
    pub usable_secs: u32,
    /// Seconds it could not (S3, S4 or S5).
    pub failing_secs: u32,
    /// Failure episodes begun in the span.
    pub episodes: u32,
}

/// `/gleaner/reliability/4` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReliabilityResponse {
    /// The prediction.
    Answer(ReliabilityAnswer),
    /// The host cannot answer (too little history, bad window, paused); the reason is for humans.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// One input file of a submission, by content: the host takes it from its
/// cache or reads it from the consumer over [`DATA_PROTOCOL`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputRef {
    /// Relative path inside the job's work directory (no `..`, no leading `/`; the host checks).
    pub path: String,
    /// BLAKE3 hash of the whole file.
    pub hash: [u8; 32],
    /// Size of the file in bytes: the host checks it against its caps before
    /// fetching anything, and the hash tree depends on it.
    pub size: u64,
}

/// The image a job runs in (issue 31): the archive, read by the host like an
/// input unless its image cache already holds the image, and the id the
/// archive must unpack to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    /// SHA-256 of the image's config (docker's image id; for a plain
    /// root-filesystem tar, of the whole file): the name the host's image
    /// cache keeps it under. An archive that unpacks to another id is refused.
    pub id: [u8; 32],
    /// The archive by content (`path` is its file name, for messages only:
    /// it is never placed in the work directory).
    pub archive: InputRef,
}

/// The image a job runs in, by its parts (issue 31): its config and its
/// layer blobs, each read by the host like an input (content-addressed,
/// checked per chunk, kept in its input cache) unless its image cache holds
/// the image already; so a layer that several images share crosses to a
/// host once while the host keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayeredImageRef {
    /// SHA-256 of the image's config, as [`ImageRef::id`]: the config read
    /// must hash to it, and it names every layer by its uncompressed
    /// digest (`rootfs.diff_ids`), which each layer is checked against.
    pub id: [u8; 32],
    /// The archive's file name on the consumer, for messages only.
    pub name: String,
    /// The config blob by content (`path` names it in messages).
    pub config: InputRef,
    /// The layer blobs by content, bottom first, as the archive stores
    /// them (gzip allowed); `path` names each in messages.
    pub layers: Vec<InputRef>,
}

/// `/gleaner/data/1` request, host → consumer: send this file from this chunk on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataRequest {
    /// BLAKE3 hash of the whole file.
    pub hash: [u8; 32],
    /// Its size in bytes (part of the name: the same hash with another size is
    /// another request, refused).
    pub size: u64,
    /// First chunk wanted (of [`DATA_CHUNK_BYTES`]); later than 0 when a host
    /// resumes after refusing a corrupted chunk.
    pub first_chunk: u64,
}

/// `/gleaner/data/1` response header; after `Sending` the stream carries the
/// file's raw bytes from `first_chunk * DATA_CHUNK_BYTES` to its end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DataResponse {
    /// The file follows. `chunk_hashes` has one entry per chunk of the whole
    /// file: the chaining value of that chunk's BLAKE3 subtree, or, for a file
    /// of one chunk, its BLAKE3 hash. They combine to the file's hash, so the
    /// host checks them before reading a byte and each chunk as it arrives.
    Sending {
        /// One 32-byte value per chunk.
        chunk_hashes: Vec<[u8; 32]>,
    },
    /// Not served; the reason is for humans (unknown hash, not offered to this
    /// peer, unreadable file).
    Refused {
        /// Why.
        reason: String,
    },
}

/// A job submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSubmit {
    /// Consumer-chosen job id, unique per consumer.
    pub job_id: String,
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Environment variables (the guest starts from an empty environment).
    pub env: Vec<(String, String)>,
    /// Input files the host places into the work directory before launch.
    pub inputs: Vec<InputRef>,
    /// Output files (relative paths) the consumer will fetch.
    pub outputs: Vec<String>,
    /// Memory the job declares, MiB.
    pub memory_mib: u64,
    /// Runtime the consumer expects, seconds.
    pub expected_runtime_secs: u64,
    /// Hard wall-time limit, seconds.
    pub wall_time_limit_secs: u64,
    /// The task saves its state to a file and resumes from it (`--checkpoint`);
    /// `None`: the host treats it as before (no variables, no grace).
    pub checkpoint: Option<CheckpointOrder>,
}

/// What a self-checkpointing task asks of its host (docs/checkpoint.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointOrder {
    /// The checkpoint file, a relative path in the work directory (the host
    /// checks it like an input path). A previous checkpoint, if any, comes
    /// as an input at this same path.
    pub path: String,
    /// How often the consumer asks the task to save, seconds (Young/Daly);
    /// the guest reads it from `GLEANER_CHECKPOINT_INTERVAL`.
    pub interval_secs: u64,
    /// Seconds between SIGTERM and SIGKILL the task asks for when the host
    /// kills it for S3 or S4; the host grants at most its own cap.
    pub grace_secs: u64,
}

/// What a guest used, measured by its host at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestUsage {
    /// User plus system CPU time of the job's processes, milliseconds.
    pub cpu_millis: u64,
    /// Wall time from the guest's start to its end, milliseconds.
    pub wall_millis: u64,
}

/// Why a host refuses a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejectReason {
    /// The guest slot is taken.
    Busy,
    /// The consumer is not on the host's allowlist.
    NotAllowed,
    /// The job asks for more memory, time or input than the host offers.
    TooBig,
    /// The host is in S3, S4 or S5.
    HostState(WireState),
    /// Anything else (malformed job); the text is for humans.
    Invalid(String),
    /// One input is larger than this host takes (`[guest] max_input_mib`).
    InputTooBig {
        /// The input's path in the job.
        path: String,
        /// Its size, bytes.
        size: u64,
        /// The host's cap, bytes.
        cap: u64,
    },
    /// The inputs together are larger than this host takes for one job
    /// (`[guest] max_job_input_mib`).
    InputsTooBig {
        /// Their total size, bytes.
        total: u64,
        /// The host's cap, bytes.
        cap: u64,
    },
    /// The job brings an image and this host runs none (`[guest] images =
    /// "deny"`, or its image cache could not be opened). Only a consumer
    /// that sent `SubmitInImage` ever receives it.
    NoImages,
}

/// What happened to a running job, reported by the host to the consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobEventKind {
    /// The guest process started.
    Started,
    /// The guest was reniced (host entered S2).
    Reniced,
    /// The guest was suspended.
    Suspended,
    /// The guest was resumed.
    Resumed,
    /// The guest was killed; the cause is the state that forced it, or `None` for the wall-time limit.
    Killed {
        /// State that caused the kill.
        cause: Option<WireState>,
        /// What the guest used until it died (`None` when it could not be measured).
        usage: Option<GuestUsage>,
    },
    /// The guest exited by itself.
    Finished {
        /// Exit status (or `128 + signal`).
        exit_status: i32,
        /// What the guest used (`None` when it could not be measured).
        usage: Option<GuestUsage>,
    },
    /// The host took a snapshot of the job's checkpoint file: fetch it with
    /// `OutputName::Checkpoint` (the hash is the snapshot's). Sent at most
    /// once per the host's rate limit while the job runs, and once more
    /// after a kill, before `Killed`.
    Checkpointed {
        /// Size of the snapshot, bytes.
        size: u64,
        /// BLAKE3 hash of the snapshot.
        hash: [u8; 32],
    },
    /// The job's checkpoint file was not taken (bigger than the host's cap,
    /// not a regular file, unreadable); the job goes on.
    CheckpointRefused {
        /// Why, naming the file.
        reason: String,
    },
    /// The host killed the job because its processes together used more than
    /// the declared memory plus the host's margin. The job's own doing:
    /// another host would do the same with the same declaration.
    KilledOverMemory,
    /// Every input is in place, verified; the guest starts next.
    InputsReady {
        /// Bytes read from the consumer for this job.
        fetched_bytes: u64,
        /// Bytes taken from the host's cache instead.
        cached_bytes: u64,
    },
    /// The host accepted the job but could not start it (an input could not
    /// be fetched or verified, the host changed state meanwhile). Ends the attempt.
    NotStarted {
        /// Why, naming the input when one is at fault.
        reason: String,
    },
    /// The job was killed because its consumer asked (`Cancel`): neither a
    /// failure of the host nor of the job. Added in version 2 of
    /// PROTOCOL.md; only a consumer that sent `Cancel` ever receives it.
    Cancelled { usage: Option<GuestUsage> },
}

impl JobEventKind {
    /// True for the events that end a job (the last a host sends of it).
    pub fn ends_the_job(&self) -> bool {
        match self {
            JobEventKind::Finished { .. }
            | JobEventKind::Killed { .. }
            | JobEventKind::KilledOverMemory
            | JobEventKind::NotStarted { .. }
            | JobEventKind::Cancelled { .. } => true,
            JobEventKind::Started
            | JobEventKind::Reniced
            | JobEventKind::Suspended
            | JobEventKind::Resumed
            | JobEventKind::Checkpointed { .. }
            | JobEventKind::CheckpointRefused { .. }
            | JobEventKind::InputsReady { .. } => false,
        }
    }
}

/// Which output of a job to fetch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputName {
    /// Captured standard output.
    Stdout,
    /// Captured standard error.
    Stderr,
    /// A declared output file, by relative path.
    File(String),
    /// The latest checkpoint snapshot the host reported (`Checkpointed`).
    Checkpoint,
}

/// `/gleaner/job/3` request. Consumer → host: `Submit`, `Fetch`; host → consumer: `Event`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobRequest {
    /// Run this job.
    Submit(JobSubmit),
    /// A job event, sent by the host to the consumer that submitted the job.
    Event {
        /// The job.
        job_id: String,
        /// Sequence number per job, from 0, so the consumer sees gaps and duplicates.
        seq: u32,
        /// Unix seconds on the host.
        time_unix: i64,
        /// What happened.
        kind: JobEventKind,
    },
    /// Read part of a job output: `len` bytes from `offset` (at most `OUTPUT_CHUNK_MAX`).
    Fetch {
        /// The job.
        job_id: String,
        /// Which output.
        name: OutputName,
        /// Byte offset.
        offset: u64,
        /// Bytes wanted.
        len: u32,
    },
    /// How does this job stand? Answered with `JobState`, or `NotFound` when
    /// the host does not know it (never accepted, or long forgotten).
    Query {
        /// The job.
        job_id: String,
    },
    /// Kill this job (the consumer cancelled it). Answered with `Cancelled`
    /// or `NotFound`.
    Cancel {
        /// The job.
        job_id: String,
    },
    /// Run this job with `image` as its root (issue 31); answered as
    /// `Submit`, or `Rejected(NoImages)` by a host that runs no images. A
    /// separate variant, not a field of [`JobSubmit`], so that a host built
    /// before images cannot decode it (and drops the stream) instead of
    /// running the job on its own root.
    SubmitInImage {
        /// The job, as `Submit` carries it: `argv` and `env` are the
        /// command line and environment as run (the consumer put the
        /// image's `Entrypoint`, `Cmd` and `Env` in them). Boxed in memory
        /// only, to keep requests small; bincode writes it as `Submit` does.
        job: Box<JobSubmit>,
        /// Its image.
        image: ImageRef,
    },
    /// Run this job with the image `image` names by its parts as its root
    /// (issue 31): answered as `SubmitInImage`. A variant of its own, so a
    /// host built before it cannot decode it and drops the stream.
    SubmitInLayers {
        /// The job, as `SubmitInImage` carries it.
        job: Box<JobSubmit>,
        /// Its image: the config and the layers, each an input.
        image: LayeredImageRef,
    },
}

/// `/gleaner/job/3` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobResponse {
    /// The job was accepted and will start.
    Accepted,
    /// The job was refused.
    Rejected(RejectReason),
    /// The consumer received an event.
    EventAck,
    /// A piece of output.
    Chunk {
        /// Bytes from the requested offset.
        data: Vec<u8>,
        /// Total size of the output, so the consumer knows when it is done and can refuse
        /// outputs larger than its own cap.
        total_len: u64,
        /// BLAKE3 hash of the whole output, sent with the first non-empty read
        /// (offset 0, `len` > 0): the consumer checks what it received against
        /// it and treats a mismatch as a failed attempt.
        hash: Option<[u8; 32]>,
    },
    /// The fetch or event named something the peer does not know or will not give.
    NotFound,
    /// The answer to `Query`: how the job stands on the host.
    JobState(RemoteJobState),
    /// The job named by `Cancel` is being killed (or had already ended).
    Cancelled,
}

/// How a consumer's job stands on a host, for a consumer that lost its events
/// (it restarted, or events went missing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoteJobState {
    /// Accepted and not ended yet.
    Running,
    /// Ended: the event that ended it (`Finished`, `Killed`, `KilledOverMemory`).
    Ended(JobEventKind),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_the_wire_type() {
        for s in State::ALL {
            assert_eq!(State::from(WireState::from(s)), s);
        }
    }
}
