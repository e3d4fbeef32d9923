//! Binary records of the node's history store: every key and value that
//! `history::store` puts into sled is encoded and decoded here, and nowhere else.
//!
//! The bytes on disk are treated as outside input: a database can be damaged
//! by a bad disk, a foreign tool or a future version. Every decoder checks the
//! length before it looks at content and returns a [`CodecError`] instead of
//! panicking. This module knows the byte layouts only; it must not know about
//! sled, trees, clocks or what a gap means.
//!
//! Layouts (all integers big-endian):
//! - time key: `i64` Unix seconds with the sign bit flipped, 8 bytes, so that
//!   sled's byte order is time order, negative times included;
//! - sample value, 11 bytes: `cpu` as `u16` hundredths of a percent,
//!   `free_mib` as `u64`, flags `u8` (bit 0 = up, other bits must be zero);
//! - state value, 1 byte: 1..=5 for S1..S5;
//! - job-log key, 16 bytes: time key then a `u64` sequence number;
//! - job-log value: a JSON object (see [`encode_job_event`] for why JSON);
//! - day block (the samples of one finished UTC day, keyed by the day's
//!   time key): a version byte (1), then rows of [`DAY_ROW_LEN`] bytes in
//!   time order: the row's offset into the day as `u32` (below 86,400),
//!   then its sample value. Rows are fixed-width, so a damaged row costs
//!   that row only.

use crate::model::owner::S5Cause;
use crate::model::series::Sample;
use crate::model::state::State;
use serde::{Deserialize, Serialize};

/// Length of a time key.
pub const TIME_KEY_LEN: usize = 8;
/// Length of an encoded sample value.
pub const SAMPLE_LEN: usize = 11;
/// Length of a job-log key.
pub const JOB_KEY_LEN: usize = 16;
/// Length of one row of a day block: offset into the day, then the sample value.
pub const DAY_ROW_LEN: usize = 4 + SAMPLE_LEN;
/// Seconds in a day block's day.
pub const SECS_PER_DAY: i64 = 86_400;
/// The layout version byte that opens a day block.
const DAY_BLOCK_VERSION: u8 = 1;
/// Largest job-log value we agree to decode; real ones are a few hundred bytes.
pub const MAX_JOB_EVENT_BYTES: usize = 64 * 1024;
/// Largest cpu value a sample may hold, in hundredths of a percent.
const MAX_CPU_HUNDREDTHS: u16 = 10_000;
const UP_FLAG: u8 = 1;

/// Why a stored record cannot be decoded (or a value cannot be encoded).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CodecError {
    #[error("{what} is {found} bytes long, expected {expected}")]
    Length {
        what: &'static str,
        expected: usize,
        found: usize,
    },
    #[error("{what} is {found} bytes long, more than the {max}-byte limit")]
    TooLong {
        what: &'static str,
        max: usize,
        found: usize,
    },
    #[error("sample cpu {0} hundredths of a percent is above 100 %")]
    CpuOutOfRange(u16),
    #[error("sample flags {0:#04x} have unknown bits set")]
    UnknownFlags(u8),
    #[error("state byte {0} is not one of 1..=5")]
    BadState(u8),
    #[error("byte {0} is not a cause of S5 (or follows a state that has none)")]
    BadCause(u8),
    #[error("cpu load {0} is not a percentage between 0 and 100")]
    BadCpu(f64),
    #[error("{what} is not valid: {detail}")]
    Invalid { what: &'static str, detail: String },
}

fn exact<const N: usize>(what: &'static str, bytes: &[u8]) -> Result<[u8; N], CodecError> {
    bytes.try_into().map_err(|_| CodecError::Length {
        what,
        expected: N,
        found: bytes.len(),
    })
}

/// The key of a record at Unix time `time`: byte order equals time order.
pub fn time_key(time: i64) -> [u8; TIME_KEY_LEN] {
    // Flipping the sign bit maps i64 order onto unsigned byte order.
    ((time as u64) ^ (1 << 63)).to_be_bytes()
}

/// The Unix time a time key stands for.
pub fn decode_time_key(bytes: &[u8]) -> Result<i64, CodecError> {
    let raw = u64::from_be_bytes(exact::<TIME_KEY_LEN>("time key", bytes)?);
    Ok((raw ^ (1 << 63)) as i64)
}

/// CPU load in percent as the stored hundredths; refuses NaN and values outside 0..=100.
pub fn cpu_hundredths(cpu: f64) -> Result<u16, CodecError> {
    if !(cpu.is_finite() && (0.0..=100.0).contains(&cpu)) {
        return Err(CodecError::BadCpu(cpu));
    }
    // In range, so the rounded value fits 0..=10_000.
    Ok((cpu * 100.0).round() as u16)
}

/// The stored hundredths as percent. Division is correctly rounded, so the
/// result prints as the short decimal it stands for (e.g. 7 → "0.07").
pub fn cpu_percent(hundredths: u16) -> f64 {
    f64::from(hundredths) / 100.0
}

/// A sample as stored, with its CPU load quantized to 0.01 %.
pub fn quantize(sample: Sample) -> Result<Sample, CodecError> {
    Ok(Sample {
        cpu: cpu_percent(cpu_hundredths(sample.cpu)?),
        ..sample
    })
}

/// Encodes a sample's values (its time goes into the key).
pub fn encode_sample(sample: &Sample) -> Result<[u8; SAMPLE_LEN], CodecError> {
    let mut out = [0u8; SAMPLE_LEN];
    out[0..2].copy_from_slice(&cpu_hundredths(sample.cpu)?.to_be_bytes());
    out[2..10].copy_from_slice(&sample.free_mib.to_be_bytes());
    out[10] = if sample.up { UP_FLAG } else { 0 };
    Ok(out)
}

/// Decodes a sample row from its key and value.
pub fn decode_sample(key: &[u8], value: &[u8]) -> Result<Sample, CodecError> {
    decode_sample_value(decode_time_key(key)?, value)
}

/// Decodes a sample value recorded at `time`.
fn decode_sample_value(time: i64, value: &[u8]) -> Result<Sample, CodecError> {
    let v = exact::<SAMPLE_LEN>("sample value", value)?;
    let hundredths = u16::from_be_bytes([v[0], v[1]]);
    if hundredths > MAX_CPU_HUNDREDTHS {
        return Err(CodecError::CpuOutOfRange(hundredths));
    }
    let mut free = [0u8; 8];
    free.copy_from_slice(&v[2..10]);
    let flags = v[10];
    if flags & !UP_FLAG != 0 {
        return Err(CodecError::UnknownFlags(flags));
    }
    Ok(Sample {
        time,
        cpu: cpu_percent(hundredths),
        free_mib: u64::from_be_bytes(free),
        up: flags & UP_FLAG != 0,
    })
}

/// The start of the UTC day holding `time`: the key of its day block.
pub fn day_start(time: i64) -> i64 {
    time.div_euclid(SECS_PER_DAY).saturating_mul(SECS_PER_DAY)
}

/// Encodes the samples of the day starting at `day` (see [`day_start`]) as
/// one block; they must lie in that day, in strictly increasing time order.
pub fn encode_day_block(day: i64, rows: &[Sample]) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(1 + rows.len() * DAY_ROW_LEN);
    out.push(DAY_BLOCK_VERSION);
    let mut previous: Option<i64> = None;
    for sample in rows {
        let offset = sample
            .time
            .checked_sub(day)
            .filter(|o| (0..SECS_PER_DAY).contains(o))
            .ok_or_else(|| CodecError::Invalid {
                what: "day block",
                detail: format!(
                    "sample at {} is not in the day starting at {day}",
                    sample.time
                ),
            })?;
        if previous.is_some_and(|p| p >= sample.time) {
            return Err(CodecError::Invalid {
                what: "day block",
                detail: format!("sample at {} is out of time order", sample.time),
            });
        }
        previous = Some(sample.time);
        // In 0..86_400, so it fits.
        out.extend_from_slice(&(offset as u32).to_be_bytes());
        out.extend_from_slice(&encode_sample(sample)?);
    }
    Ok(out)
}

/// The rows of a day block as stored (a partial row at the end counts as
/// one): the store's row count, read without decoding a row.
pub fn day_block_len(bytes: &[u8]) -> Result<usize, CodecError> {
    day_block_body(bytes).map(|body| body.len().div_ceil(DAY_ROW_LEN))
}

fn day_block_body(bytes: &[u8]) -> Result<&[u8], CodecError> {
    match bytes.split_first() {
        Some((&DAY_BLOCK_VERSION, body)) => Ok(body),
        Some((&v, _)) => Err(CodecError::Invalid {
            what: "day block",
            detail: format!("layout version {v} is not 1"),
        }),
        None => Err(CodecError::Length {
            what: "day block",
            expected: 1,
            found: 0,
        }),
    }
}

/// Decodes the block of the day starting at `day`, row by row: a damaged
/// row (or a partial one at the end) is an `Err` among the others. A block
/// whose header is damaged is an `Err` as a whole.
pub fn decode_day_block(
    day: i64,
    bytes: &[u8],
) -> Result<impl Iterator<Item = Result<Sample, CodecError>> + '_, CodecError> {
    let body = day_block_body(bytes)?;
    Ok(body
        .chunks(DAY_ROW_LEN)
        .map(move |row| decode_day_row(day, row)))
}

fn decode_day_row(day: i64, row: &[u8]) -> Result<Sample, CodecError> {
    let row = exact::<DAY_ROW_LEN>("day block row", row)?;
    let offset = i64::from(u32::from_be_bytes([row[0], row[1], row[2], row[3]]));
    if offset >= SECS_PER_DAY {
        return Err(CodecError::Invalid {
            what: "day block row",
            detail: format!("offset {offset} s is past the day's end"),
        });
    }
    decode_sample_value(day.saturating_add(offset), &row[4..])
}

/// The stored value of the row at `time` in the block of the day starting
/// at `day`, found by bisection (rows are in time order), or `None`.
pub fn find_in_day_block(day: i64, bytes: &[u8], time: i64) -> Option<&[u8]> {
    let body = day_block_body(bytes).ok()?;
    let wanted = u32::try_from(time.checked_sub(day)?).ok()?;
    let row = |i: usize| body.get(i * DAY_ROW_LEN..(i + 1) * DAY_ROW_LEN);
    let offset = |r: &[u8]| u32::from_be_bytes([r[0], r[1], r[2], r[3]]);
    let (mut lo, mut hi) = (0usize, body.len() / DAY_ROW_LEN);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let r = row(mid)?;
        match offset(r).cmp(&wanted) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Some(&r[4..]),
        }
    }
    None
}

/// Encodes a state as one byte.
pub fn encode_state(state: State) -> [u8; 1] {
    // index() is 0..5; 0 is kept free so that a zeroed byte is never a state.
    [state.index() as u8 + 1]
}

/// Decodes a state byte.
pub fn decode_state(bytes: &[u8]) -> Result<State, CodecError> {
    let [b] = exact::<1>("state value", bytes)?;
    b.checked_sub(1)
        .and_then(|i| State::ALL.get(usize::from(i)).copied())
        .ok_or(CodecError::BadState(b))
}

/// Encodes a transition: the state byte, then for an S5 with a known cause
/// a second byte (1 + its index in [`S5Cause::ALL`]). Records written before
/// causes were kept are one byte long and still decode (cause unknown).
pub fn encode_transition(state: State, cause: Option<S5Cause>) -> Vec<u8> {
    let mut v = encode_state(state).to_vec();
    if let (State::S5, Some(c)) = (state, cause) {
        let i = S5Cause::ALL.iter().position(|x| *x == c).unwrap_or(0);
        v.push(i as u8 + 1);
    }
    v
}

/// Decodes a transition record of one or two bytes (see [`encode_transition`]).
pub fn decode_transition(bytes: &[u8]) -> Result<(State, Option<S5Cause>), CodecError> {
    match bytes {
        [s] => Ok((decode_state(&[*s])?, None)),
        [s, c] => {
            let state = decode_state(&[*s])?;
            let cause = c
                .checked_sub(1)
                .and_then(|i| S5Cause::ALL.get(usize::from(i)).copied())
                .filter(|_| state == State::S5)
                .ok_or(CodecError::BadCause(*c))?;
            Ok((state, Some(cause)))
        }
        _ => Err(CodecError::Length {
            what: "transition value",
            expected: 2,
            found: bytes.len(),
        }),
    }
}

/// Encodes a big-endian `u32` metadata value.
pub fn encode_u32(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

/// Decodes a big-endian `u32` metadata value.
pub fn decode_u32(what: &'static str, bytes: &[u8]) -> Result<u32, CodecError> {
    Ok(u32::from_be_bytes(exact::<4>(what, bytes)?))
}

/// Encodes a big-endian `u64` metadata value.
pub fn encode_u64(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

/// Decodes a big-endian `u64` metadata value.
pub fn decode_u64(what: &'static str, bytes: &[u8]) -> Result<u64, CodecError> {
    Ok(u64::from_be_bytes(exact::<8>(what, bytes)?))
}

/// Encodes a big-endian `i64` metadata value (the heartbeat).
pub fn encode_i64(v: i64) -> [u8; 8] {
    v.to_be_bytes()
}

/// Decodes a big-endian `i64` metadata value.
pub fn decode_i64(what: &'static str, bytes: &[u8]) -> Result<i64, CodecError> {
    Ok(i64::from_be_bytes(exact::<8>(what, bytes)?))
}

/// Encodes a boolean metadata flag as one byte.
pub fn encode_flag(v: bool) -> [u8; 1] {
    [u8::from(v)]
}

/// Decodes a boolean flag; only 0 and 1 are valid.
pub fn decode_flag(what: &'static str, bytes: &[u8]) -> Result<bool, CodecError> {
    match exact::<1>(what, bytes)? {
        [0] => Ok(false),
        [1] => Ok(true),
        [b] => Err(CodecError::Invalid {
            what,
            detail: format!("flag byte {b} is neither 0 nor 1"),
        }),
    }
}

/// Longest text metadata value (host and time-zone names).
pub const MAX_TEXT_BYTES: usize = 1024;

/// Decodes a UTF-8 metadata value of bounded length.
pub fn decode_text(what: &'static str, bytes: &[u8]) -> Result<String, CodecError> {
    if bytes.len() > MAX_TEXT_BYTES {
        return Err(CodecError::TooLong {
            what,
            max: MAX_TEXT_BYTES,
            found: bytes.len(),
        });
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| CodecError::Invalid {
        what,
        detail: "not UTF-8".to_string(),
    })
}

/// The key of the job-log event number `seq` at `time`.
pub fn job_key(time: i64, seq: u64) -> [u8; JOB_KEY_LEN] {
    let mut out = [0u8; JOB_KEY_LEN];
    out[..TIME_KEY_LEN].copy_from_slice(&time_key(time));
    out[TIME_KEY_LEN..].copy_from_slice(&seq.to_be_bytes());
    out
}

/// The time and sequence number a job-log key stands for.
pub fn decode_job_key(bytes: &[u8]) -> Result<(i64, u64), CodecError> {
    let k = exact::<JOB_KEY_LEN>("job-log key", bytes)?;
    let time = decode_time_key(&k[..TIME_KEY_LEN])?;
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&k[TIME_KEY_LEN..]);
    Ok((time, u64::from_be_bytes(seq)))
}

/// The stored part of a job-log event (its time lives in the key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEventRecord {
    /// Which job the event is about.
    pub job: String,
    /// What happened, e.g. "started", "reniced", "killed", "exited".
    pub kind: String,
    /// Free text for people: exit codes, the state that caused a kill.
    #[serde(default)]
    pub detail: String,
}

/// Encodes a job-log event as JSON.
///
/// JSON rather than a packed layout because the job log is written a few
/// times per job, not every second, so size does not matter; JSON lets later
/// versions add fields with `#[serde(default)]` without a format bump, and a
/// person can read the log straight out of the database.
pub fn encode_job_event(event: &JobEventRecord) -> Result<Vec<u8>, CodecError> {
    let bytes = serde_json::to_vec(event).map_err(|e| CodecError::Invalid {
        what: "job-log event",
        detail: e.to_string(),
    })?;
    if bytes.len() > MAX_JOB_EVENT_BYTES {
        return Err(CodecError::TooLong {
            what: "job-log event",
            max: MAX_JOB_EVENT_BYTES,
            found: bytes.len(),
        });
    }
    Ok(bytes)
}

/// Decodes a job-log event, refusing oversized values before parsing.
pub fn decode_job_event(bytes: &[u8]) -> Result<JobEventRecord, CodecError> {
    if bytes.len() > MAX_JOB_EVENT_BYTES {
        return Err(CodecError::TooLong {
            what: "job-log event",
            max: MAX_JOB_EVENT_BYTES,
            found: bytes.len(),
        });
    }
    serde_json::from_slice(bytes).map_err(|e| CodecError::Invalid {
        what: "job-log event",
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn time_keys_sort_like_times() {
        let times = [i64::MIN, -86_400, -1, 0, 1, 1_125_532_800, i64::MAX];
        for pair in times.windows(2) {
            assert!(time_key(pair[0]) < time_key(pair[1]), "{pair:?}");
        }
        for t in times {
            assert_eq!(decode_time_key(&time_key(t)), Ok(t));
        }
    }

    #[test]
    fn samples_round_trip_at_hundredth_resolution() {
        let s = Sample {
            time: 1_125_532_800,
            cpu: 12.34567,
            free_mib: u64::MAX,
            up: true,
        };
        let back = decode_sample(&time_key(s.time), &encode_sample(&s).unwrap()).unwrap();
        assert_eq!(back.time, s.time);
        assert_eq!(back.cpu, 12.35);
        assert_eq!(back.free_mib, u64::MAX);
        assert!(back.up);
        assert_eq!(format!("{}", cpu_percent(7)), "0.07");
    }

    #[test]
    fn bad_cpu_is_refused_on_encode() {
        for cpu in [f64::NAN, -0.5, 100.01, f64::INFINITY] {
            let s = Sample {
                time: 0,
                cpu,
                free_mib: 0,
                up: true,
            };
            assert!(encode_sample(&s).is_err(), "{cpu}");
        }
    }

    #[test]
    fn corrupt_samples_are_errors() {
        let key = time_key(5);
        assert!(matches!(
            decode_sample(&key, &[1, 2, 3]),
            Err(CodecError::Length { .. })
        ));
        assert!(decode_sample(&[0; 3], &[0; SAMPLE_LEN]).is_err());
        let mut v = [0u8; SAMPLE_LEN];
        v[0..2].copy_from_slice(&10_001u16.to_be_bytes());
        assert_eq!(
            decode_sample(&key, &v),
            Err(CodecError::CpuOutOfRange(10_001))
        );
        let mut v = [0u8; SAMPLE_LEN];
        v[10] = 0x82;
        assert_eq!(decode_sample(&key, &v), Err(CodecError::UnknownFlags(0x82)));
    }

    #[test]
    fn states_round_trip_and_junk_is_refused() {
        for s in State::ALL {
            assert_eq!(decode_state(&encode_state(s)), Ok(s));
        }
        assert_eq!(decode_state(&[0]), Err(CodecError::BadState(0)));
        assert_eq!(decode_state(&[6]), Err(CodecError::BadState(6)));
        assert!(decode_state(&[]).is_err());
    }

    #[test]
    fn transitions_keep_the_cause_of_s5_and_old_records_still_read() {
        for cause in S5Cause::ALL {
            let v = encode_transition(State::S5, Some(cause));
            assert_eq!(decode_transition(&v), Ok((State::S5, Some(cause))));
        }
        // A cause is kept for S5 only; a one-byte record is the old layout.
        assert_eq!(
            encode_transition(State::S2, Some(S5Cause::Schedule)).len(),
            1
        );
        assert_eq!(
            decode_transition(&encode_state(State::S5)),
            Ok((State::S5, None))
        );
        assert_eq!(decode_transition(&[2, 3]), Err(CodecError::BadCause(3)));
        assert_eq!(decode_transition(&[5, 9]), Err(CodecError::BadCause(9)));
        assert!(decode_transition(&[5, 1, 1]).is_err());
    }

    #[test]
    fn job_events_round_trip_and_junk_is_refused() {
        let e = JobEventRecord {
            job: "j-1".into(),
            kind: "killed".into(),
            detail: "S3".into(),
        };
        assert_eq!(decode_job_event(&encode_job_event(&e).unwrap()), Ok(e));
        assert_eq!(decode_job_key(&job_key(-3, 9)), Ok((-3, 9)));
        assert!(decode_job_event(b"\xff\x00garbage").is_err());
        assert!(decode_job_event(&vec![b' '; MAX_JOB_EVENT_BYTES + 1]).is_err());
        assert!(decode_job_key(&[1; 15]).is_err());
    }

    fn day_row(time: i64, cpu: f64) -> Sample {
        Sample {
            time,
            cpu,
            free_mib: 5_000,
            up: true,
        }
    }

    #[test]
    fn a_day_block_round_trips_and_finds_its_rows() {
        let day = day_start(1_700_000_123);
        assert_eq!(day % SECS_PER_DAY, 0);
        assert_eq!(day_start(-1), -SECS_PER_DAY, "days before 1970 floor too");
        let rows: Vec<Sample> = (0..100).map(|i| day_row(day + 7 * i, 1.25)).collect();
        let block = encode_day_block(day, &rows).unwrap();
        assert_eq!(block.len(), 1 + 100 * DAY_ROW_LEN);
        assert_eq!(day_block_len(&block), Ok(100));
        let back: Vec<Sample> = decode_day_block(day, &block)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, rows);
        let value = encode_sample(&rows[42]).unwrap();
        assert_eq!(
            find_in_day_block(day, &block, day + 7 * 42),
            Some(&value[..])
        );
        assert_eq!(find_in_day_block(day, &block, day + 7 * 42 + 1), None);
        assert_eq!(find_in_day_block(day, &block, day - 1), None);
        assert_eq!(find_in_day_block(day, &block, day + SECS_PER_DAY), None);
    }

    #[test]
    fn a_day_block_refuses_rows_outside_its_day_or_out_of_order() {
        let day = day_start(1_700_000_123);
        assert!(encode_day_block(day, &[day_row(day - 1, 0.0)]).is_err());
        assert!(encode_day_block(day, &[day_row(day + SECS_PER_DAY, 0.0)]).is_err());
        let twice = [day_row(day + 5, 0.0), day_row(day + 5, 0.0)];
        assert!(encode_day_block(day, &twice).is_err());
    }

    #[test]
    fn a_damaged_row_of_a_day_block_costs_that_row_only() {
        let day = day_start(1_700_000_123);
        let rows: Vec<Sample> = (0..5).map(|i| day_row(day + i, 2.0)).collect();
        let mut block = encode_day_block(day, &rows).unwrap();
        // Row 1's cpu past 100 %, row 3's offset past the day, half a row more.
        block[1 + DAY_ROW_LEN + 4] = 0xff;
        block[1 + 3 * DAY_ROW_LEN..1 + 3 * DAY_ROW_LEN + 4]
            .copy_from_slice(&(SECS_PER_DAY as u32).to_be_bytes());
        block.extend_from_slice(&[0; 7]);
        assert_eq!(day_block_len(&block), Ok(6));
        let decoded: Vec<_> = decode_day_block(day, &block).unwrap().collect();
        let good: Vec<Sample> = decoded.iter().filter_map(|r| r.clone().ok()).collect();
        assert_eq!(good, vec![rows[0], rows[2], rows[4]]);
        assert_eq!(decoded.len(), 6);
        assert!(
            decode_day_block(day, &[2, 0, 0]).is_err(),
            "unknown version"
        );
        assert!(decode_day_block(day, &[]).is_err(), "empty");
    }

    proptest! {
        #[test]
        fn day_block_decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80),
                                          day in any::<i64>(), time in any::<i64>()) {
            let _ = day_block_len(&bytes);
            if let Ok(rows) = decode_day_block(day, &bytes) {
                let _ = rows.count();
            }
            let _ = find_in_day_block(day, &bytes, time);
        }

        #[test]
        fn decoders_never_panic(key in proptest::collection::vec(any::<u8>(), 0..20),
                                value in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = decode_sample(&key, &value);
            let _ = decode_state(&value);
            let _ = decode_job_key(&key);
            let _ = decode_job_event(&value);
            let _ = decode_text("t", &value);
            let _ = decode_flag("f", &value);
        }

        #[test]
        fn encoded_samples_decode_to_their_quantized_selves(
            time in any::<i64>(), cpu in 0.0f64..=100.0, free in any::<u64>(), up in any::<bool>()) {
            let s = Sample { time, cpu, free_mib: free, up };
            let back = decode_sample(&time_key(time), &encode_sample(&s).unwrap()).unwrap();
            prop_assert_eq!(back, quantize(s).unwrap());
            prop_assert!((back.cpu - cpu).abs() <= 0.005 + 1e-9);
        }
    }
}
