//! The consumer's memory of which hosts can be trusted: per host peer id,
//! the results other hosts confirmed (valid), those they contradicted or
//! whose hash did not match (invalid), the current run of valid ones, and
//! how its attempts ended (landed, failed, forgotten, and the failures its
//! TR claims led us to expect, and those claims' Brier and log scores).
//! Kept in a sled tree of the batch store, so
//! it survives restarts; read by placement (by its
//! [`crate::model::trust::Standing`]: demoted behind clean hosts, then
//! excluded), by `--verify adaptive` (`gleaner_model::trust`) and by
//! `gleaner hosts`.

use std::collections::HashMap;

use libp2p::PeerId;

use crate::model::trust::{ClaimBin, HostTrack, Outcome, CLAIM_BINS};

/// Record layout, version 5: version byte, then valid (u64), invalid
/// (u64), streak (u32), landed, failed, failed_with_claim, forgotten,
/// expected_failures_micro, variance_micro, floods, claims, brier_micro,
/// log_loss_micro (u64 each), then the reliability curve, per bin of
/// claimed TR (lowest first) its claims, landed and claimed_micro (u64
/// each), little-endian: a fixed size per host, however many attempts it
/// scored. Version 1 was the first three fields alone, version 2 those to
/// `variance_micro`, version 3 those to `floods`, version 4 those to
/// `log_loss_micro`; each is read with the missing fields 0 (a version 4
/// record keeps its scores with an empty curve).
const VERSION: u8 = 5;
const LEN: usize = V4_LEN + CLAIM_BINS * 3 * 8;
const V1_LEN: usize = 1 + 8 + 8 + 4;
const V2_LEN: usize = V1_LEN + 6 * 8;
const V3_LEN: usize = V1_LEN + 7 * 8;
const V4_LEN: usize = V1_LEN + 10 * 8;

pub fn encode(t: &HostTrack) -> [u8; LEN] {
    let mut out = [0u8; LEN];
    out[0] = VERSION;
    out[1..9].copy_from_slice(&t.valid.to_le_bytes());
    out[9..17].copy_from_slice(&t.invalid.to_le_bytes());
    out[17..21].copy_from_slice(&t.streak.to_le_bytes());
    let rest = [
        t.landed,
        t.failed,
        t.failed_with_claim,
        t.forgotten,
        t.expected_failures_micro,
        t.variance_micro,
        t.floods,
        t.claims,
        t.brier_micro,
        t.log_loss_micro,
    ];
    for (i, v) in rest.iter().enumerate() {
        out[V1_LEN + 8 * i..V1_LEN + 8 * (i + 1)].copy_from_slice(&v.to_le_bytes());
    }
    let curve = t
        .curve
        .iter()
        .flat_map(|b| [b.claims, b.landed, b.claimed_micro]);
    for (i, v) in curve.enumerate() {
        out[V4_LEN + 8 * i..V4_LEN + 8 * (i + 1)].copy_from_slice(&v.to_le_bytes());
    }
    out
}

pub fn decode(bytes: &[u8]) -> Result<HostTrack, String> {
    let fits = matches!(
        (bytes.first(), bytes.len()),
        (Some(1), V1_LEN)
            | (Some(2), V2_LEN)
            | (Some(3), V3_LEN)
            | (Some(4), V4_LEN)
            | (Some(5), LEN)
    );
    if !fits {
        return Err(format!(
            "reputation record: {} bytes, version {:?} (want {V1_LEN} for 1, {V2_LEN} for 2, {V3_LEN} for 3, {V4_LEN} for 4 or {LEN} for {VERSION})",
            bytes.len(),
            bytes.first()
        ));
    }
    let u64_at = |i: usize| {
        bytes
            .get(i..i + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    let rest = |k: usize| u64_at(V1_LEN + 8 * k);
    let bin = |i: usize| {
        let at = |k: usize| u64_at(V4_LEN + 8 * (3 * i + k));
        ClaimBin {
            claims: at(0),
            landed: at(1),
            claimed_micro: at(2),
        }
    };
    Ok(HostTrack {
        valid: u64_at(1),
        invalid: u64_at(9),
        streak: u32::from_le_bytes(bytes[17..21].try_into().unwrap_or_default()),
        landed: rest(0),
        failed: rest(1),
        failed_with_claim: rest(2),
        forgotten: rest(3),
        expected_failures_micro: rest(4),
        variance_micro: rest(5),
        floods: rest(6),
        claims: rest(7),
        brier_micro: rest(8),
        log_loss_micro: rest(9),
        curve: std::array::from_fn(bin),
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

    /// Whether records are written through to a tree.
    pub fn has_tree(&self) -> bool {
        self.tree.is_some()
    }

    /// Writes through to `tree` from now on (a reputation loaded before its
    /// store was opened); what it already holds is written too.
    pub fn attach(&mut self, tree: sled::Tree) {
        self.tree = Some(tree);
        let peers: Vec<PeerId> = self.hosts.keys().copied().collect();
        for peer in peers {
            self.write(peer);
        }
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
        self.write(peer);
    }

    /// Counts how one attempt on `peer` ended.
    pub fn apply(&mut self, peer: PeerId, outcome: Outcome) {
        let t = self.hosts.entry(peer).or_default();
        let before = t.standing();
        t.apply(outcome);
        let after = t.standing();
        if after != before {
            tracing::warn!(%peer, ?outcome, standing = after.label(), offences = t.offences(), "host standing changed");
        } else {
            tracing::debug!(%peer, ?outcome, "host record");
        }
        self.write(peer);
    }

    fn write(&self, peer: PeerId) {
        let (Some(tree), Some(t)) = (&self.tree, self.hosts.get(&peer)) else {
            return;
        };
        if let Err(e) = tree.insert(peer.to_bytes(), &encode(t)[..]) {
            tracing::error!(%peer, error = %e, "cannot record a host's reputation");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::trust::{Offence, Standing};

    #[test]
    fn records_round_trip_and_survive_a_reopen() {
        let t = HostTrack {
            valid: 7,
            invalid: 2,
            streak: 3,
            landed: 4,
            failed: 5,
            failed_with_claim: 1,
            forgotten: 6,
            expected_failures_micro: 1_500_000,
            variance_micro: 8,
            floods: 9,
            claims: 10,
            brier_micro: 11,
            log_loss_micro: 12,
            curve: std::array::from_fn(|i| ClaimBin {
                claims: 20 + i as u64,
                landed: 10 + i as u64,
                claimed_micro: 1_000 * i as u64,
            }),
        };
        assert_eq!(decode(&encode(&t)).unwrap(), t);
        assert!(
            decode(&encode(&t)[..V4_LEN]).is_err(),
            "a v5 tag on v4 bytes"
        );
        assert!(decode(&encode(&t)[..5]).is_err());
        // A version 1 record (valid, invalid, streak) is read with the
        // rest 0.
        let mut v1 = vec![1u8];
        v1.extend(7u64.to_le_bytes());
        v1.extend(2u64.to_le_bytes());
        v1.extend(3u32.to_le_bytes());
        let old = decode(&v1).unwrap();
        assert_eq!(
            (old.valid, old.invalid, old.streak, old.landed),
            (7, 2, 3, 0)
        );
        assert!(
            decode(&encode(&t)[..V1_LEN]).is_err(),
            "a v5 tag on v1 bytes"
        );
        // A version 2 record (no floods) is read with floods 0.
        let mut v2 = encode(&t)[..V2_LEN].to_vec();
        v2[0] = 2;
        let old = decode(&v2).unwrap();
        assert_eq!((old.forgotten, old.floods), (6, 0));
        assert!(
            decode(&encode(&t)[..V2_LEN]).is_err(),
            "a v5 tag on v2 bytes"
        );
        // A version 3 record (no scores) is read with them 0.
        let mut v3 = encode(&t)[..V3_LEN].to_vec();
        v3[0] = 3;
        let old = decode(&v3).unwrap();
        assert_eq!((old.floods, old.claims, old.brier_micro), (9, 0, 0));
        assert!(
            decode(&encode(&t)[..V3_LEN]).is_err(),
            "a v5 tag on v3 bytes"
        );
        let dir = tempfile::tempdir().unwrap();
        let peer = PeerId::random();
        let old_peer = PeerId::random();
        {
            let db = crate::sled_open::open_dir(dir.path()).unwrap();
            let mut r = Reputation::load(Some(db.open_tree("reputation").unwrap()));
            r.record(peer, true);
            r.record(peer, false);
            r.apply(peer, Outcome::Offence(Offence::Forgot));
            r.apply(peer, Outcome::Offence(Offence::WrongOutput));
            r.apply(
                peer,
                Outcome::Failed {
                    claimed_tr: Some(0.9),
                },
            );
            // A record a node before the curve wrote (version 4).
            let tree = db.open_tree("reputation").unwrap();
            tree.insert(old_peer.to_bytes(), v4_record()).unwrap();
            db.flush().unwrap();
        }
        let db = crate::sled_open::open_dir(dir.path()).unwrap();
        let r = Reputation::load(Some(db.open_tree("reputation").unwrap()));
        let got = r.get(&peer);
        assert_eq!((got.valid, got.invalid, got.streak), (1, 2, 0));
        assert_eq!((got.forgotten, got.standing()), (1, Standing::Excluded));
        // The claim's score survives the reopen: (0 − 0.9)² and −ln 0.1.
        assert_eq!(got.claims, 1);
        assert!((got.brier().unwrap() - 0.81).abs() < 1e-6);
        assert!((got.log_score().unwrap() + 0.1f64.ln()).abs() < 1e-6);
        // And its curve: one claim of 0.9 in the top bin, which failed.
        let top = got.curve[CLAIM_BINS - 1];
        assert_eq!((top.claims, top.landed, top.claimed_micro), (1, 0, 900_000));
        // The version 4 record is read, its scores intact, its curve empty,
        // and counts on from there.
        let mut old = r.get(&old_peer);
        assert_eq!(
            (old.landed, old.failed, old.failed_with_claim, old.claims),
            (30, 10, 9, 40)
        );
        assert_eq!(
            (old.brier_micro, old.log_loss_micro),
            (9_000_000, 25_000_000)
        );
        assert!((old.brier().unwrap() - 0.225).abs() < 1e-9);
        assert_eq!(old.curve, [ClaimBin::default(); CLAIM_BINS]);
        old.apply(Outcome::Landed {
            claimed_tr: Some(0.95),
        });
        assert_eq!((old.claims, old.curve[CLAIM_BINS - 1].landed), (41, 1));
    }

    /// A version 4 record laid out by hand as main wrote it before the
    /// curve (101 bytes): valid 5, invalid 1, streak 2, landed 30, failed
    /// 10, failed_with_claim 9, forgotten 0, expected_failures 2.0,
    /// variance 1.9, floods 0, claims 40, Σ Brier 9.0, Σ log loss 25.0.
    fn v4_record() -> Vec<u8> {
        let mut b = vec![4u8];
        b.extend(5u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(2u32.to_le_bytes());
        for v in [
            30u64, 10, 9, 0, 2_000_000, 1_900_000, 0, 40, 9_000_000, 25_000_000,
        ] {
            b.extend(v.to_le_bytes());
        }
        assert_eq!(b.len(), 101);
        b
    }
}
