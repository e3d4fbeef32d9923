//! One layer's bytes on their way to the tar reader: counted against a
//! limit and hashed (SHA-256) as they pass, once as stored (the blob's
//! digest) and once as a tar stream after decompression (the config's
//! `diff_id`). gzip is recognised by its magic bytes, whatever a manifest
//! says; zstd is refused by name. Knows bytes, not tar entries nor files.

use flate2::read::MultiGzDecoder;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::io::{self, BufRead, BufReader, Read};
use std::rc::Rc;

/// What a [`Tap`] saw: bytes and their hash.
#[derive(Debug)]
pub struct TapState {
    hasher: Sha256,
    pub bytes: u64,
    limit: u64,
    /// Set when the limit was passed (the read then fails).
    pub over: bool,
}

impl TapState {
    /// The hash of what passed, as lowercase hex.
    pub fn hex(&self) -> String {
        hex(&self.hasher.clone().finalize())
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A reader that hashes and counts what passes and fails once more than
/// `limit` bytes have (one byte past the limit is read, so a stream of
/// exactly `limit` bytes passes). The state is shared so it can be read
/// after the reader went into a decoder or a tar archive.
pub struct Tap<R> {
    inner: R,
    state: Rc<RefCell<TapState>>,
}

impl<R: Read> Tap<R> {
    pub fn new(inner: R, limit: u64) -> (Tap<R>, Rc<RefCell<TapState>>) {
        let state = Rc::new(RefCell::new(TapState {
            hasher: Sha256::new(),
            bytes: 0,
            limit,
            over: false,
        }));
        (
            Tap {
                inner,
                state: Rc::clone(&state),
            },
            state,
        )
    }
}

impl<R: Read> Read for Tap<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut st = self.state.borrow_mut();
        let room = st.limit.saturating_add(1).saturating_sub(st.bytes);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if want == 0 {
            st.over = true;
            return Err(over_limit());
        }
        let n = self.inner.read(&mut buf[..want])?;
        st.bytes = st.bytes.saturating_add(n as u64);
        if st.bytes > st.limit {
            st.over = true;
            return Err(over_limit());
        }
        st.hasher.update(&buf[..n]);
        Ok(n)
    }
}

fn over_limit() -> io::Error {
    io::Error::new(io::ErrorKind::FileTooLarge, "over its size limit")
}

/// How a layer blob is compressed, from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
}

/// Sniffs the compression of `reader` without consuming anything; zstd
/// and other compressions tar cannot read are refused by name.
pub fn sniff<R: Read>(reader: &mut BufReader<R>) -> Result<Compression, String> {
    let head = reader
        .fill_buf()
        .map_err(|e| format!("cannot read the layer: {e}"))?;
    match head {
        [0x1f, 0x8b, ..] => Ok(Compression::Gzip),
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Err("zstd-compressed layers are not supported".into()),
        [b'B', b'Z', b'h', ..] => Err("bzip2-compressed layers are not supported".into()),
        [0xfd, b'7', b'z', b'X', b'Z', ..] => Err("xz-compressed layers are not supported".into()),
        _ => Ok(Compression::None),
    }
}

/// The layer as a tar stream: `raw` (already tapped) decompressed if need
/// be, then tapped again for the uncompressed count and `diff_id`.
pub type TarStream<'a> = Tap<Box<dyn Read + 'a>>;

pub fn tar_stream<'a, R: Read + 'a>(
    raw: R,
    limit: u64,
) -> Result<(TarStream<'a>, Rc<RefCell<TapState>>), String> {
    let mut buffered = BufReader::new(raw);
    let inner: Box<dyn Read + 'a> = match sniff(&mut buffered)? {
        Compression::Gzip => Box::new(MultiGzDecoder::new(buffered)),
        Compression::None => Box::new(buffered),
    };
    Ok(Tap::new(inner, limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tap_passes_exactly_its_limit_and_fails_one_byte_past() {
        let (mut tap, st) = Tap::new(&[7u8; 10][..], 10);
        let mut out = Vec::new();
        tap.read_to_end(&mut out).unwrap();
        assert_eq!(st.borrow().bytes, 10);
        let (mut tap, st) = Tap::new(&[7u8; 11][..], 10);
        assert!(tap.read_to_end(&mut Vec::new()).is_err());
        assert!(st.borrow().over);
    }

    #[test]
    fn zstd_is_refused_by_name_and_gzip_is_recognised() {
        let mut z = BufReader::new(&[0x28u8, 0xb5, 0x2f, 0xfd, 0][..]);
        assert!(sniff(&mut z).unwrap_err().contains("zstd"));
        let mut g = BufReader::new(&[0x1fu8, 0x8b, 8][..]);
        assert_eq!(sniff(&mut g).unwrap(), Compression::Gzip);
    }
}
