//! `gleaner images list|prune`: the node's image cache (issue 31). Like
//! `history`, a client of the running node, which knows the images its
//! guests run in; with no node running it opens the data dir's cache
//! itself, under the data-dir lock so that no node starts on it meanwhile.
//!
//! This module owns the printing of the answers; the cache decides what
//! goes (`image::ImageCache::prune`).

use crate::cli::control::{block_on, client, local_time};
use crate::cli::output::{print_json, print_text, table};
use crate::cli::{Global, JsonFlag};
use crate::control::api::{ImagesReport, PruneReport, PruneRequest, PREFIX};
use crate::image::ImageCache;
use crate::node::paths::{DataDirLock, Paths};
use anyhow::Context;
use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct ImagesArgs {
    #[command(flatten)]
    pub out: JsonFlag,
    #[command(subcommand)]
    pub command: ImagesCommand,
}

#[derive(Debug, Subcommand)]
pub enum ImagesCommand {
    /// List the cached images: digest, size, last use, whether a guest runs in one.
    List,
    /// Remove the cached images no guest runs in, least recently used first.
    Prune {
        /// Keep the most recently used images up to this many MiB [default: keep none].
        #[arg(long, value_name = "MIB")]
        keep_mib: Option<u64>,
    },
}

pub fn run(args: &ImagesArgs, global: &Global) -> anyhow::Result<()> {
    let (paths, client) = client(global)?;
    match &args.command {
        ImagesCommand::List => {
            let answer = block_on(client.get_json::<ImagesReport>(&format!("{PREFIX}/images")))?;
            let report = match answer {
                Ok(r) => r,
                Err(e) if e.is_not_running() => {
                    with_offline_cache(global, &paths, |c| Ok(ImagesReport::of(c)?))?
                }
                Err(e) => return Err(e.into()),
            };
            if global.json {
                return print_json(&report);
            }
            print_text(&list_text(&report))
        }
        ImagesCommand::Prune { keep_mib } => {
            let request = PruneRequest {
                keep_mib: *keep_mib,
            };
            let answer = block_on(
                client.post_json::<_, PruneReport>(&format!("{PREFIX}/images/prune"), &request),
            )?;
            let report = match answer {
                Ok(r) => r,
                Err(e) if e.is_not_running() => {
                    with_offline_cache(global, &paths, |c| Ok(PruneReport::prune(c, &request)?))?
                }
                Err(e) => return Err(e.into()),
            };
            if global.json {
                return print_json(&report);
            }
            print_text(&format!(
                "removed {} ({}); {}",
                images_n(report.removed.len()),
                mib(report.freed_bytes),
                summary(&report.left)
            ))
        }
    }
}

/// Opens the stopped node's image cache, holding its lock meanwhile.
fn with_offline_cache<T>(
    global: &Global,
    paths: &Paths,
    f: impl FnOnce(&ImageCache) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    if !paths.data_dir.exists() {
        anyhow::bail!(
            "no node is running and there is no data dir at {} yet; start one with `gleaner node`",
            paths.data_dir.display()
        );
    }
    let _lock = DataDirLock::acquire(paths).context(
        "no node answers on the control socket, yet the data dir is locked (is a node starting or stopping?)",
    )?;
    let config = global.resolve(None)?.config;
    let cache = ImageCache::open(&paths.images_dir(), config.guest.image_limits())?;
    f(&cache)
}

fn mib(bytes: u64) -> String {
    // Display only: a float is exact enough for a size shown to 0.1 MiB.
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

/// "1 image", "2 images".
fn images_n(n: usize) -> String {
    format!("{n} image{}", if n == 1 { "" } else { "s" })
}

fn summary(r: &ImagesReport) -> String {
    format!(
        "{}, {} of the {} cap, in {}\n",
        images_n(r.images.len()),
        mib(r.used_bytes),
        mib(r.cap_bytes),
        r.dir.display()
    )
}

fn list_text(r: &ImagesReport) -> String {
    let rows = r.images.iter().map(|i| {
        vec![
            i.digest.clone(),
            mib(i.bytes),
            local_time(i.last_used),
            if i.in_use { "yes" } else { "no" }.to_string(),
        ]
    });
    let mut text = if r.images.is_empty() {
        String::new()
    } else {
        table(&["digest", "size", "last used", "in use"], rows, false)
    };
    text.push_str(&summary(r));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::api::ImageEntry;

    #[test]
    fn the_list_names_each_image_its_size_last_use_and_whether_it_is_in_use() {
        let entry = |hex: &str, bytes, in_use| ImageEntry {
            digest: format!("sha256:{}", hex.repeat(32)),
            bytes,
            files: 3,
            layers: 1,
            format: "docker-archive".into(),
            last_used: 1_700_000_000,
            in_use,
        };
        let report = ImagesReport {
            dir: "/d/images".into(),
            cap_bytes: 100 << 20,
            used_bytes: 30 << 20,
            images: vec![entry("ab", 10 << 20, true), entry("cd", 20 << 20, false)],
        };
        let text = list_text(&report);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[1].contains(&"ab".repeat(32)) && lines[1].contains("10.0 MiB"));
        assert!(lines[1].trim_end().ends_with("yes"), "{text}");
        assert!(lines[2].trim_end().ends_with("no"), "{text}");
        assert!(
            lines[3].contains("2 images, 30.0 MiB of the 100.0 MiB cap"),
            "{text}"
        );
    }
}
