//! The `shapfusion` command.

mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("shapfusion={}", cli.log)));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .init();
    // A decoder's panic on a corrupt file or message is refused with an error naming it; the
    // standard hook would print it first as if the process had crashed.
    shapfusion::expected_panic::quiet_hook();
    match cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Rendered once, here, with its causes.
            eprintln!("error: {}", e.report());
            ExitCode::from(exit_code(e.kind()))
        }
    }
}

/// The exit status for a kind of failure, after BSD's `sysexits.h`, so a scheduler can tell a
/// failure worth retrying (69: a worker or store unavailable; 75: a bound reached) from a job
/// that will fail again as it stands (64: a bad flag or query; 65: bad data; 66: not found;
/// 78: not supported by this build or model). 70 is a bug here, 74 a failed read or write;
/// clap's own usage errors exit with 2.
fn exit_code(kind: shapfusion::ErrorKind) -> u8 {
    use shapfusion::ErrorKind;
    match kind {
        ErrorKind::InvalidArgument => 64,
        ErrorKind::BadData => 65,
        ErrorKind::NotFound => 66,
        ErrorKind::Unsupported => 78,
        ErrorKind::Unavailable => 69,
        ErrorKind::Internal => 70,
        ErrorKind::Io => 74,
        ErrorKind::ResourceExhausted => 75,
    }
}
