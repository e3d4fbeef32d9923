//! The consumer's memory of which hosts can be trusted: per host peer id,
//! the results other hosts confirmed (valid), those they contradicted
//! (invalid) and the current run of valid ones. Kept in a sled tree of the
//! batch store, so it survives restarts; read by placement (a host with an
//! invalid result ranks below every host without one), by `--verify
//! adaptive` (`gleaner_model::trust`) and by `gleaner hosts`.

use std::collections::HashMap;

use libp2p::PeerId;

use crate::model::trust::HostTrack;

/// Record layout: version byte, then valid (u64), invalid (u64), streak
/// (u32), little-endian.
const VERSION: u8 = 1;
const LEN: usize = 1 + 8 + 8 + 4;

pub fn encode(t: &HostTrack) -> [u8; LEN] {
    let mut out = [0u8; LEN];
    out[0] = VERSION;
    out[1..9].copy_from_slice(&t.valid.to_le_bytes());
    out[9..17].copy_from_slice(&t.invalid.to_le_bytes());
    out[17..21].copy_from_slice(&t.streak.to_le_bytes());
    out
}

pub fn decode(bytes: &[u8]) -> Result<HostTrack, String> {
    if bytes.len() != LEN || bytes[0] != VERSION {
        return Err(format!(
            "reputation record: {} bytes, version {:?} (want {LEN}, {VERSION})",
            bytes.len(),
            bytes.first()
        ));
    }
    let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap_or_default());
    Ok(HostTrack {
        valid: u64_at(1),
        invalid: u64_at(9),
        streak: u32::from_le_bytes(bytes[17..21].try_into().unwrap_or_default()),
    })
}

/// Every host's track, in memory and written through to sled.
pub struct Reputation {
    tree: Option<sled::Tree>,
    hosts: HashMap<PeerId, HostTrack>,
}

impl Reputation {
    /// Loads the tree; a record that does not decode is logged and skipped.
    pub fn load(tree: Option<sled::Tree>) -> Reputation {
        let mut hosts = HashMap::new();
        if let Some(tree) = &tree {
            for entry in tree.iter() {
                let Ok((key, value)) = entry else { continue };
                let Ok(peer) = PeerId::from_bytes(&key) else {
                    tracing::warn!("reputation: a key that is no peer id; skipped");
                    continue;
                };
                match decode(&value) {
                    Ok(t) => {
                        hosts.insert(peer, t);
                    }
                    Err(e) => tracing::warn!(%peer, error = %e, "reputation record skipped"),
                }
            }
        }
        Reputation { tree, hosts }
    }

    pub fn get(&self, peer: &PeerId) -> HostTrack {
        self.hosts.get(peer).copied().unwrap_or_default()
    }

    pub fn all(&self) -> &HashMap<PeerId, HostTrack> {
        &self.hosts
    }

    /// Counts one checked result of `peer`.
    pub fn record(&mut self, peer: PeerId, valid: bool) {
        let t = self.hosts.entry(peer).or_default();
        t.record(valid);
        tracing::info!(%peer, valid, streak = t.streak, invalid = t.invalid, "host reputation");
        if let Some(tree) = &self.tree {
            if let Err(e) = tree.insert(peer.to_bytes(), &encode(t)[..]) {
                tracing::error!(%peer, error = %e, "cannot record a host's reputation");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_survive_a_reopen() {
        let t = HostTrack {
            valid: 7,
            invalid: 2,
            streak: 3,
        };
        assert_eq!(decode(&encode(&t)).unwrap(), t);
        assert!(decode(&encode(&t)[..5]).is_err());
        let dir = tempfile::tempdir().unwrap();
        let peer = PeerId::random();
        {
            let db = crate::sled_open::open_dir(dir.path()).unwrap();
            let mut r = Reputation::load(Some(db.open_tree("reputation").unwrap()));
            r.record(peer, true);
            r.record(peer, false);
            db.flush().unwrap();
        }
        let db = crate::sled_open::open_dir(dir.path()).unwrap();
        let r = Reputation::load(Some(db.open_tree("reputation").unwrap()));
        let got = r.get(&peer);
        assert_eq!((got.valid, got.invalid, got.streak), (1, 1, 0));
    }
}
