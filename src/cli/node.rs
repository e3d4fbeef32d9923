//! `gleaner node` (the daemon) and `gleaner config` (its configuration).
//!
//! This module resolves paths and the config with the documented
//! precedence (flags > environment > file > defaults) and prints what the
//! node reports when it is ready. The daemon itself is `crate::node`.

use crate::cli::output::{print_json, print_text};
use crate::cli::Global;
use crate::node::config::{defaults_toml, Config};
use crate::node::Ready;
use clap::Args;

#[derive(Debug, Args)]
pub struct NodeArgs {
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
    /// Print every key with its default and meaning (a valid config file).
    #[arg(long)]
    pub defaults: bool,
}

/// Runs the node until SIGINT/SIGTERM.
pub fn run(_args: &NodeArgs, global: &Global) -> anyhow::Result<()> {
    let paths = global.paths()?;
    let config = Config::load(&paths.config_file)?;
    let json = global.json;
    crate::node::run(&paths, &config, |ready| {
        // Tests and scripts wait for this; stdout is flushed by print_text.
        let _ = if json {
            print_json(ready)
        } else {
            print_text(&ready_text(ready))
        };
    })?;
    Ok(())
}

fn ready_text(r: &Ready) -> String {
    let created = if r.config_created { " (created)" } else { "" };
    let mut text = format!(
        "data dir:       {}\nconfig:         {}{created}\ncontrol socket: {}\nhost:           {} ({})\n",
        r.data_dir.display(),
        r.config_file.display(),
        r.socket.display(),
        r.host,
        r.tz,
    );
    if let Some(down) = r.down_secs {
        text.push_str(&format!(
            "was off for:    {} (recorded as S5)\n",
            crate::cli::predict::human_duration(u64::try_from(down).unwrap_or(0))
        ));
    }
    text.push_str(&format!("ready (pid {})\n", r.pid));
    text
}

/// `gleaner config`: the defaults, or the effective configuration.
pub fn config(args: &ConfigArgs, global: &Global) -> anyhow::Result<()> {
    if args.defaults {
        return print_text(&defaults_toml(false));
    }
    let paths = global.paths()?;
    let config = Config::load(&paths.config_file)?;
    if global.json {
        print_json(&config)
    } else {
        let text = toml::to_string(&config)?;
        print_text(&format!("# {}\n{text}", paths.config_file.display()))
    }
}
