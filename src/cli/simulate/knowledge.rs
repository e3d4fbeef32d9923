//! `gleaner simulate`'s knowledge options (issue 27, scope 5): whether the
//! simulated consumer places knowing every host (`full`) or, as the node's
//! consumer does, from the members' summaries and a few fresh answers per
//! round (`summaries`: every member heard, as in a small pool; `sample`:
//! the leaves sampled for the batch's width, as in a large pool), and how
//! those summaries are paced, cached, sampled and confirmed. This file only reads and checks the options; the model is
//! `model::sched::sim::knowledge`.

use anyhow::bail;
use clap::Args;

use crate::cli::args::parse_duration;
use crate::model::sched::probe::{ASKS_MAX, ASKS_PER_TASK, SAMPLE_MIN, SAMPLE_PER_TASK};
use crate::model::sched::sim::{Knowledge, SamplePlan, SummaryPlan, LEAF_HOSTS};
use crate::net::leaf_digest::SAMPLE_FOR;
use crate::net::members::MEMBERS_MAX;

/// Most hosts a round may ask (the node asks at most [`ASKS_MAX`]).
const ASKS_BOUND: u32 = 10_000;

#[derive(Debug, Args)]
pub struct KnowledgeArgs {
    /// What the consumer places from, comma-separated: full (every host's
    /// present state at every placement), summaries (every member's
    /// summary and a few fresh answers per round, as the node does in a
    /// small pool) and/or sample (as the node does in a large pool: the
    /// summaries of whole DHT leaves drawn at random until they name
    /// twice the batch's tasks queued or running, at least `--sample-min`,
    /// as each leaf's digest, fetched once per heartbeat, gave them); each
    /// policy runs once per kind.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "full",
          value_parser = ["full", "summaries", "sample"])]
    pub knowledge: Vec<String>,

    /// A host's summary heartbeat under `--knowledge summaries` (it also
    /// publishes on a change of state, slot or Γ step, at most once per
    /// min(10 s, half of this)).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "300s")]
    pub summary_heartbeat: u64,

    /// Members the consumer's summary cache holds, a seeded sample of the
    /// pool when fewer than the hosts [default: every host, at most the
    /// node's 10,000].
    #[arg(long, value_name = "N")]
    pub summary_sample: Option<usize>,

    /// Under `--knowledge sample`: hosts the sample names per task queued
    /// or running (the node's rule).
    #[arg(long, value_name = "K", default_value_t = SAMPLE_PER_TASK)]
    pub sample_per_task: usize,

    /// Under `--knowledge sample`: the fewest hosts the sample names (the
    /// node's floor for narrow batches).
    #[arg(long, value_name = "N", default_value_t = SAMPLE_MIN)]
    pub sample_min: usize,

    /// Under `--knowledge sample`: members per leaf of the DHT trie (one
    /// digest names them).
    #[arg(long, value_name = "N", default_value_t = LEAF_HOSTS)]
    pub sample_leaf: usize,

    /// Hosts asked directly per task that could be placed.
    #[arg(long, value_name = "K", default_value_t = ASKS_PER_TASK)]
    pub asks_per_task: u32,

    /// Most hosts one placement round asks.
    #[arg(long, value_name = "N", default_value_t = ASKS_MAX)]
    pub asks_max: u32,
}

impl KnowledgeArgs {
    /// The kinds of knowledge to run, checked, for a pool of `hosts`.
    pub fn kinds(&self, hosts: usize) -> anyhow::Result<Vec<Knowledge>> {
        if self.summary_heartbeat == 0 {
            bail!("--summary-heartbeat must be at least 1s");
        }
        within("asks-per-task", self.asks_per_task, ASKS_BOUND)?;
        within("asks-max", self.asks_max, ASKS_BOUND)?;
        let cache = match self.summary_sample {
            Some(0) => bail!("--summary-sample must be at least 1"),
            Some(n) => n.min(hosts),
            None => hosts.min(MEMBERS_MAX),
        };
        if self.sample_per_task == 0 {
            bail!("--sample-per-task must be at least 1");
        }
        within("sample-min", self.sample_min, MEMBERS_MAX)?;
        within("sample-leaf", self.sample_leaf, MEMBERS_MAX)?;
        let plan = SummaryPlan {
            cache,
            asks_per_task: self.asks_per_task,
            asks_max: self.asks_max,
            ..SummaryPlan::new(self.summary_heartbeat as f64)
        };
        // The node's sampler fetches a leaf again once per heartbeat and
        // forgets the sample `SAMPLE_FOR` after the last survey.
        let sample = SamplePlan {
            per_task: self.sample_per_task,
            least: self.sample_min,
            leaf_hosts: self.sample_leaf,
            ..SamplePlan::new(self.summary_heartbeat as f64, SAMPLE_FOR.as_secs_f64())
        };
        let mut kinds: Vec<Knowledge> = Vec::new();
        for name in &self.knowledge {
            let kind = match name.as_str() {
                "summaries" => Knowledge::Summaries(plan),
                "sample" => Knowledge::Summaries(SummaryPlan {
                    cache: hosts.min(MEMBERS_MAX),
                    sample: Some(sample),
                    ..plan
                }),
                _ => Knowledge::Full,
            };
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        if kinds.is_empty() {
            kinds.push(Knowledge::Full);
        }
        Ok(kinds)
    }
}

/// `--flag`'s `value` is between 1 and `most`, or an error naming it.
fn within<T>(flag: &str, value: T, most: T) -> anyhow::Result<()>
where
    T: PartialOrd + From<u8> + std::fmt::Display,
{
    if value < T::from(1) || value > most {
        bail!("--{flag} must be between 1 and {most}");
    }
    Ok(())
}
