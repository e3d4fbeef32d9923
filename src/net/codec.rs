//! The one frame codec of Gleaner's request/response protocols: a `u32` big-endian
//! length, then that many bytes of bincode 2 (standard config: little-endian, varint
//! integers) holding one value of `net::protocol`.
//!
//! The length is checked against the protocol's cap before anything is allocated, the
//! body must decode to exactly one value with no trailing bytes, and every failure is an
//! `io::Error` of kind `InvalidData` (libp2p then resets that stream only). This module
//! knows the frame layout and bincode; it does not know which protocol carries what.
//!
//! The data protocol (`/gleaner/data/1`) uses the same frames for its request and
//! its response header ([`write_frame`], [`read_frame`]); the file bytes that follow
//! a header are raw, verified by the reader chunk by chunk.

use std::io;
use std::marker::PhantomData;

use futures::prelude::*;
use libp2p::request_response;
use libp2p::StreamProtocol;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::net::protocol::{
    DigestRequest, DigestResponse, JobRequest, JobResponse, ReliabilityQuery, ReliabilityResponse,
    DATA_HEADER_CAP, DATA_REQUEST_CAP, DIGEST_REQUEST_CAP, DIGEST_RESPONSE_CAP, JOB_REQUEST_CAP,
    JOB_RESPONSE_CAP, RELIABILITY_REQUEST_CAP, RELIABILITY_RESPONSE_CAP,
};

/// Bytes of the length prefix.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// Upper bound bincode may claim while decoding one body. No body is longer than the
/// largest frame cap, so no decoded value can need more.
const DECODE_LIMIT: usize = max_cap(&[
    JOB_REQUEST_CAP,
    JOB_RESPONSE_CAP,
    DATA_HEADER_CAP,
    RELIABILITY_RESPONSE_CAP,
    DIGEST_RESPONSE_CAP,
]) as usize;

const fn max_cap(caps: &[u32]) -> u32 {
    let mut i = 0;
    let mut max = 0;
    while i < caps.len() {
        if caps[i] > max {
            max = caps[i];
        }
        i += 1;
    }
    max
}

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<DECODE_LIMIT>()
}

/// Why a frame could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The length prefix announces more bytes than this protocol allows.
    #[error("frame of {len} bytes exceeds the cap of {cap} bytes")]
    TooLong {
        /// Announced or encoded length.
        len: u64,
        /// The protocol's cap.
        cap: u32,
    },
    /// The body is not one valid bincode value of the expected type.
    #[error("frame body does not decode: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    /// The body decoded but bytes were left over.
    #[error("frame body has {0} trailing bytes")]
    Trailing(usize),
    /// The value could not be encoded.
    #[error("value does not encode: {0}")]
    Encode(#[from] bincode::error::EncodeError),
}

impl From<CodecError> for io::Error {
    fn from(e: CodecError) -> Self {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

/// Encodes `value` as one frame (prefix + body), refusing bodies longer than `cap`.
pub fn encode_frame<T: Serialize>(value: &T, cap: u32) -> Result<Vec<u8>, CodecError> {
    let body = bincode::serde::encode_to_vec(value, bincode_config())?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|len| *len <= cap)
        .ok_or(CodecError::TooLong {
            len: body.len() as u64,
            cap,
        })?;
    let mut frame = Vec::with_capacity(LENGTH_PREFIX_BYTES + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Encodes `value` as a bare body (no prefix), e.g. for a gossipsub message.
pub fn encode_body<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    Ok(bincode::serde::encode_to_vec(value, bincode_config())?)
}

/// Checks a length prefix against `cap`; returns the body length to read.
pub fn check_length(prefix: [u8; LENGTH_PREFIX_BYTES], cap: u32) -> Result<usize, CodecError> {
    let len = u32::from_be_bytes(prefix);
    if len > cap {
        return Err(CodecError::TooLong {
            len: u64::from(len),
            cap,
        });
    }
    Ok(len as usize)
}

/// Decodes one frame body; the whole slice must be one value.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, CodecError> {
    let (value, used) = bincode::serde::decode_from_slice(body, bincode_config())?;
    if used != body.len() {
        return Err(CodecError::Trailing(body.len() - used));
    }
    Ok(value)
}

/// Reads one frame from `io`: the prefix, the cap check, then exactly the body.
pub async fn read_frame<T, R>(io: &mut R, cap: u32) -> io::Result<T>
where
    T: DeserializeOwned,
    R: AsyncRead + Unpin + Send,
{
    let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
    io.read_exact(&mut prefix).await?;
    let len = check_length(prefix, cap)?;
    let mut body = vec![0u8; len];
    io.read_exact(&mut body).await?;
    Ok(decode_body(&body)?)
}

/// Writes `value` as one frame (refusing bodies over `cap`) and flushes it: the
/// data protocol's request and response header.
pub async fn write_frame<T, W>(io: &mut W, value: &T, cap: u32) -> io::Result<()>
where
    T: Serialize,
    W: AsyncWrite + Unpin + Send,
{
    let frame = encode_frame(value, cap);
    write_bytes(io, frame).await
}

/// Caps of `/gleaner/data/1`: the request, and the header before the file's bytes.
pub const DATA_CAPS: FrameCaps = FrameCaps {
    request: DATA_REQUEST_CAP,
    response: DATA_HEADER_CAP,
};

/// Writes one encoded frame to `io` and flushes it.
async fn write_bytes<W>(io: &mut W, frame: Result<Vec<u8>, CodecError>) -> io::Result<()>
where
    W: AsyncWrite + Unpin + Send,
{
    io.write_all(&frame?).await?;
    io.flush().await
}

/// The caps of one protocol, one per direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameCaps {
    /// Largest request body.
    pub request: u32,
    /// Largest response body.
    pub response: u32,
}

/// Caps of `/gleaner/reliability/1`.
pub const RELIABILITY_CAPS: FrameCaps = FrameCaps {
    request: RELIABILITY_REQUEST_CAP,
    response: RELIABILITY_RESPONSE_CAP,
};

/// Caps of `/gleaner/job/3`.
pub const JOB_CAPS: FrameCaps = FrameCaps {
    request: JOB_REQUEST_CAP,
    response: JOB_RESPONSE_CAP,
};

/// Caps of `/gleaner/digest/1`.
pub const DIGEST_CAPS: FrameCaps = FrameCaps {
    request: DIGEST_REQUEST_CAP,
    response: DIGEST_RESPONSE_CAP,
};

/// A libp2p request/response codec for one request type and one response type.
pub struct FrameCodec<Req, Resp> {
    caps: FrameCaps,
    _types: PhantomData<fn() -> (Req, Resp)>,
}

impl<Req, Resp> FrameCodec<Req, Resp> {
    /// A codec enforcing `caps`.
    pub fn new(caps: FrameCaps) -> Self {
        Self {
            caps,
            _types: PhantomData,
        }
    }
}

impl<Req, Resp> Clone for FrameCodec<Req, Resp> {
    fn clone(&self) -> Self {
        Self::new(self.caps)
    }
}

/// The codec of `/gleaner/reliability/1`.
pub type ReliabilityCodec = FrameCodec<ReliabilityQuery, ReliabilityResponse>;
/// The codec of `/gleaner/job/3`.
pub type JobCodec = FrameCodec<JobRequest, JobResponse>;
/// The codec of `/gleaner/digest/1`.
pub type DigestCodec = FrameCodec<DigestRequest, DigestResponse>;

impl<Req, Resp> request_response::Codec for FrameCodec<Req, Resp>
where
    Req: Serialize + DeserializeOwned + Send + 'static,
    Resp: Serialize + DeserializeOwned + Send + 'static,
{
    type Protocol = StreamProtocol;
    type Request = Req;
    type Response = Resp;

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Req>
    where
        T: AsyncRead + Unpin + Send,
    {
        read_frame(io, self.caps.request).await
    }

    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Resp>
    where
        T: AsyncRead + Unpin + Send,
    {
        read_frame(io, self.caps.response).await
    }

    async fn write_request<T>(&mut self, _: &StreamProtocol, io: &mut T, req: Req) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        // Encode before the first await so the future does not hold `&Req`.
        let frame = encode_frame(&req, self.caps.request);
        write_bytes(io, frame).await
    }

    async fn write_response<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        res: Resp,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        let frame = encode_frame(&res, self.caps.response);
        write_bytes(io, frame).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::protocol::*;
    use proptest::prelude::*;

    fn answer(tr: f64, days: u32, method: String) -> ReliabilityResponse {
        ReliabilityResponse::Answer(ReliabilityAnswer {
            tr,
            failure: FailureByCause {
                s3: 1.0 - tr,
                s4: 0.0,
                s5: 0.0,
            },
            initial_state: WireState::S2,
            days_used: days,
            method,
            relative_power_milli: 730,
            slot_free: true,
            curve: vec![(60, 0.99), (3600, 0.9)],
            availability_milli: Some(800),
            speed_milli: 900,
            spells: Some(WireSpells {
                usable_secs: 500_000,
                failing_secs: 100_000,
                episodes: 12,
            }),
            spell_lengths: Some(WireSpellLengths {
                up_secs: vec![600, 40_000],
                up_seen: 11,
                up_cut_secs: vec![9_000],
                outage_secs: vec![60, 120, 3_600],
                outages_seen: 12,
            }),
        })
    }

    fn read_sync<T: DeserializeOwned>(bytes: &[u8], cap: u32) -> io::Result<T> {
        futures::executor::block_on(read_frame(&mut futures::io::Cursor::new(bytes), cap))
    }

    #[test]
    fn a_frame_longer_than_the_cap_is_refused_when_written() {
        let big = JobRequest::Submit(JobSubmit {
            job_id: "j".into(),
            argv: vec!["x".repeat(2000)],
            env: vec![],
            inputs: vec![],
            outputs: vec![],
            memory_mib: 1,
            expected_runtime_secs: 1,
            wall_time_limit_secs: 1,
            checkpoint: None,
        });
        assert!(matches!(
            encode_frame(&big, 1000),
            Err(CodecError::TooLong { cap: 1000, .. })
        ));
        assert!(encode_frame(&big, 4000).is_ok());
    }

    #[test]
    fn trailing_bytes_are_rejected() {
        let mut frame = encode_frame(
            &ReliabilityQuery {
                window_start_unix: 1,
                length_secs: 2,
                memory_mib: 3,
            },
            1024,
        )
        .unwrap();
        frame.push(0);
        let len = (frame.len() - LENGTH_PREFIX_BYTES) as u32;
        frame[..4].copy_from_slice(&len.to_be_bytes());
        let err = read_sync::<ReliabilityQuery>(&frame, 1024).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("trailing"), "{err}");
    }

    /// Pins the byte layout PROTOCOL.md documents: u32 BE prefix, varint and zigzag
    /// integers, enum variant indexes.
    #[test]
    fn the_documented_layout_holds() {
        let q = ReliabilityQuery {
            window_start_unix: -1,
            length_secs: 300,
            memory_mib: 7,
        };
        assert_eq!(
            encode_frame(&q, RELIABILITY_REQUEST_CAP).unwrap(),
            [0, 0, 0, 5, 1, 251, 0x2c, 0x01, 7]
        );
        let r = JobResponse::Rejected(RejectReason::HostState(WireState::S4));
        assert_eq!(encode_body(&r).unwrap(), [1, 3, 3]);
        let e = JobRequest::Event {
            job_id: "j".into(),
            seq: 0,
            time_unix: 2,
            kind: JobEventKind::Killed {
                cause: None,
                usage: None,
            },
        };
        assert_eq!(encode_body(&e).unwrap(), [1, 1, b'j', 0, 4, 4, 0, 0]);
        // A hash is 32 bytes with no length prefix (a fixed array is a tuple).
        let input = InputRef {
            path: "a".into(),
            hash: [0xEE; 32],
            size: 300,
        };
        let mut want = vec![1, b'a'];
        want.extend([0xEE; 32]);
        want.extend([251, 0x2c, 0x01]);
        assert_eq!(encode_body(&input).unwrap(), want);
    }

    /// A data header names every chunk; the largest file's header fits the cap.
    #[test]
    fn the_largest_data_header_fits_its_cap() {
        let chunks = (DATA_FILE_MAX / u64::from(DATA_CHUNK_BYTES)) as usize;
        let header = DataResponse::Sending {
            chunk_hashes: vec![[0xAB; 32]; chunks],
        };
        let frame = encode_frame(&header, DATA_HEADER_CAP).unwrap();
        let back: DataResponse = read_sync(&frame, DATA_HEADER_CAP).unwrap();
        assert_eq!(back, header);
        let req = DataRequest {
            hash: [1; 32],
            size: DATA_FILE_MAX,
            first_chunk: 3,
        };
        let frame = encode_frame(&req, DATA_REQUEST_CAP).unwrap();
        assert!(frame.len() < 64, "{}", frame.len());
        assert_eq!(
            read_sync::<DataRequest>(&frame, DATA_REQUEST_CAP).unwrap(),
            req
        );
    }

    #[test]
    fn a_short_body_is_an_error() {
        let frame = [0, 0, 0, 10, 1, 2];
        assert!(read_sync::<ReliabilityQuery>(&frame, 1024).is_err());
    }

    proptest! {
        #[test]
        fn reliability_frames_round_trip(
            start in any::<i64>(), len in any::<u64>(), mem in any::<u64>(),
            tr in 0.0f64..=1.0, days in any::<u32>(), method in "[a-z]{0,12}",
        ) {
            let q = ReliabilityQuery { window_start_unix: start, length_secs: len, memory_mib: mem };
            let frame = encode_frame(&q, RELIABILITY_REQUEST_CAP).unwrap();
            prop_assert_eq!(read_sync::<ReliabilityQuery>(&frame, RELIABILITY_REQUEST_CAP).unwrap(), q);
            let a = answer(tr, days, method);
            let frame = encode_frame(&a, RELIABILITY_RESPONSE_CAP).unwrap();
            prop_assert_eq!(read_sync::<ReliabilityResponse>(&frame, RELIABILITY_RESPONSE_CAP).unwrap(), a);
        }

        #[test]
        fn job_frames_round_trip(
            argv in proptest::collection::vec(".{0,20}", 0..8),
            data in proptest::collection::vec(any::<u8>(), 0..4096),
            seq in any::<u32>(), status in any::<i32>(),
        ) {
            let submit = JobRequest::Submit(JobSubmit {
                job_id: "job-1".into(), argv, env: vec![("K".into(), "V".into())],
                inputs: vec![InputRef { path: "in.dat".into(), hash: [7; 32], size: data.len() as u64 }],
                outputs: vec!["out.dat".into()], memory_mib: 512,
                expected_runtime_secs: 60, wall_time_limit_secs: 600,
                checkpoint: Some(CheckpointOrder { path: "state".into(), interval_secs: 60, grace_secs: 3 }),
            });
            let event = JobRequest::Event {
                job_id: "job-1".into(), seq, time_unix: -5,
                kind: JobEventKind::Finished {
                    exit_status: status,
                    usage: None,
                },
            };
            for req in [submit, event] {
                let frame = encode_frame(&req, JOB_REQUEST_CAP).unwrap();
                prop_assert_eq!(read_sync::<JobRequest>(&frame, JOB_REQUEST_CAP).unwrap(), req);
            }
            let chunk = JobResponse::Chunk { data, total_len: 1 << 40, hash: Some([9; 32]) };
            let frame = encode_frame(&chunk, JOB_RESPONSE_CAP).unwrap();
            prop_assert_eq!(read_sync::<JobResponse>(&frame, JOB_RESPONSE_CAP).unwrap(), chunk);
        }

        /// Random bytes after a valid length prefix never panic; they decode or fail cleanly.
        #[test]
        fn random_bodies_fail_cleanly(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut frame = (body.len() as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(&body);
            let _ = read_sync::<JobRequest>(&frame, JOB_REQUEST_CAP);
            let _ = read_sync::<ReliabilityResponse>(&frame, RELIABILITY_RESPONSE_CAP);
            let _ = read_sync::<JobResponse>(&frame, JOB_RESPONSE_CAP);
        }

        /// Any prefix above the cap is refused before the body is read or allocated: the
        /// stream holds only the prefix, so reading a body would fail with UnexpectedEof
        /// instead of TooLong.
        #[test]
        fn oversized_prefixes_are_refused_before_reading(len in (RELIABILITY_REQUEST_CAP + 1)..=u32::MAX) {
            let err = read_sync::<ReliabilityQuery>(&len.to_be_bytes(), RELIABILITY_REQUEST_CAP).unwrap_err();
            prop_assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            prop_assert!(err.to_string().contains("exceeds the cap"));
        }

        /// A body that claims a huge inner vector (varint length up to u64::MAX) fails on
        /// the decode limit or the short slice without allocating the claimed size.
        #[test]
        fn huge_inner_lengths_fail_without_allocating(claim in (1u64 << 20)..u64::MAX) {
            // Variant 0 (Submit), job_id = "" , then argv with a huge varint length.
            let mut body = vec![0u8, 0u8, 0xFD];
            body.extend_from_slice(&claim.to_le_bytes());
            let mut frame = (body.len() as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(&body);
            prop_assert!(read_sync::<JobRequest>(&frame, JOB_REQUEST_CAP).is_err());
        }
    }
}
