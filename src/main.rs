//! The `gleaner` binary: parses the command line, sets up logging, and hands
//! over to the library's CLI. Errors print as one readable chain.

use clap::Parser;
use gleaner::cli::{run, Cli};
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr. `GLEANER_LOG` wins over `RUST_LOG`; `-v`/`-q` set the default.
fn init_logging(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "info",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    let filter = std::env::var("GLEANER_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .ok()
        .and_then(|spec| EnvFilter::try_new(spec).ok())
        .unwrap_or_else(|| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
