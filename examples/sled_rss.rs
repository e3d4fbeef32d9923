//! How much memory sled takes for a bulk import, by write strategy:
//! `cargo run --release --example sled_rss -- STRATEGY ROWS` prints the
//! process's peak RSS (VmHWM) after writing ROWS 8-byte keys with 16-byte
//! values, the shape of the history store's sample rows.

use std::time::Instant;

fn hwm_mib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let strategy = args.get(1).map(String::as_str).unwrap_or("batch");
    let rows: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(500_000);
    let cache: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(16 << 20);
    let dir = tempfile::tempdir()?;
    let db = sled::Config::new()
        .path(dir.path())
        .cache_capacity(cache)
        .flush_every_ms(Some(500))
        .open()?;
    let tree = db.open_tree("samples")?;
    let started = Instant::now();
    let before = hwm_mib();
    let batch_rows: u64 = std::env::var("BATCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let mut batch = sled::Batch::default();
    for i in 0..rows {
        let key = (1_700_000_000i64 + 6 * i as i64).to_be_bytes();
        let value = [i as u8; 16];
        match strategy {
            "insert" => {
                tree.insert(key, &value[..])?;
            }
            "insert-flush" => {
                tree.insert(key, &value[..])?;
                if i % batch_rows == batch_rows - 1 {
                    db.flush()?;
                }
            }
            _ => {
                batch.insert(&key[..], &value[..]);
                if i % batch_rows == batch_rows - 1 {
                    tree.apply_batch(std::mem::take(&mut batch))?;
                    if strategy == "batch-flush" {
                        db.flush()?;
                    }
                }
            }
        }
    }
    tree.apply_batch(batch)?;
    db.flush()?;
    let written = hwm_mib();
    let mut n = 0u64;
    if std::env::var("SCAN").as_deref() == Ok("chunks") {
        // A fresh iterator every 1,000 rows, resuming after the last key.
        let mut from: Option<sled::IVec> = None;
        loop {
            let range = match &from {
                Some(k) => tree.range::<&[u8], _>((
                    std::ops::Bound::Excluded(&k[..]),
                    std::ops::Bound::Unbounded,
                )),
                None => tree.iter(),
            };
            let mut got = 0;
            for item in range.take(1000) {
                let (k, _) = item?;
                from = Some(k);
                got += 1;
            }
            n += got;
            if got == 0 {
                break;
            }
        }
    } else {
        for item in tree.iter() {
            item?;
            n += 1;
        }
    }
    println!("scanned {n} rows: VmHWM {written} -> {} MiB", hwm_mib());
    println!(
        "{strategy}: {rows} rows, cache {} MiB: {:.1} s, VmHWM {before} -> {} MiB",
        cache >> 20,
        started.elapsed().as_secs_f64(),
        hwm_mib()
    );
    Ok(())
}
