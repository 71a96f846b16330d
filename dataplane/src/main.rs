//! `dataplane`: the poll-mode data plane's command-line program.
//!
//! Errors end the program with one line on stderr (`dataplane: error: ...`) and exit code 2
//! for usage and configuration errors, 1 for failures at run time. A command that a
//! SIGINT, SIGTERM or SIGHUP stopped before it was done exits with 128 + the signal's number
//! after stopping cleanly; a second signal exits at once.

mod cmd;
mod huge_heap;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp_micros()
        .init();
    let cli = match cmd::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("dataplane: error: {}", cmd::usage_error_line(&e));
            return ExitCode::from(2);
        }
    };
    // Before any thread starts: the signal mask is inherited. Not for `exec`, whose program
    // owns its signals (a blocked mask would survive the exec), nor its tunables.
    if !matches!(cli.command, cmd::Command::Exec(_)) {
        huge_heap::reexec();
        if let Err(e) = cmd::signals::install() {
            eprintln!("dataplane: error: {e}");
            return ExitCode::from(1);
        }
    }
    match (cmd::dispatch(cli.command), cmd::signals::signal()) {
        (Ok(()), _) => ExitCode::SUCCESS,
        // Stopped by a signal, cleanly: the shell's status of that signal.
        (Err(_), Some(signo)) => {
            eprintln!(
                "dataplane: stopped by {}",
                cmd::signals::signal_name().unwrap_or_default()
            );
            ExitCode::from((128 + signo) as u8)
        }
        (Err(e), None) => {
            eprintln!("dataplane: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
