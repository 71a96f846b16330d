//! `dataplane`: the poll-mode data plane's command-line program.
//!
//! Errors end the program with one line on stderr (`dataplane: error: ...`) and exit code 2
//! for usage and configuration errors, 1 for failures at run time.

mod cmd;

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
    match cmd::dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dataplane: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
