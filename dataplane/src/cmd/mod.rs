//! The subcommands. Each lives in its own module with an `Args` struct (clap derive) and a
//! `run(args) -> Result<(), CmdError>`; adding one takes a variant in [`Command`] and a line
//! in [`dispatch`].

mod common;
mod cores;
mod exec;
mod fwd;
mod inspect;
mod perf;
mod pktgen;
mod rdma_args;
mod rping;
mod run;
pub mod signals;
mod soak;
#[cfg(feature = "dpdk")]
mod stats;
mod tcp;

use clap::{Parser, Subcommand};

pub use common::{usage_error_line, CmdError};

/// Userspace iWARP data plane on DPDK.
#[derive(Debug, Parser)]
#[command(name = "dataplane", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Bring up the configured ports, answer ARP and ping, print statistics.
    Run(run::Args),
    /// Forward frames between two ports (or one port to itself), like testpmd.
    Fwd(fwd::Args),
    /// Generate and/or count UDP/IPv4 frames.
    Pktgen(pktgen::Args),
    /// Decode the iWARP traffic (MPA, DDP, RDMAP) of a pcap/pcapng capture.
    Inspect(inspect::Args),
    /// Plain TCP over the data plane's own TCP engine: echo, sink, source, client.
    Tcp(tcp::Args),
    /// rdma-core's rping over the data plane's iWARP (server -s, client -c).
    Rping(rping::Args),
    /// perftest-style RDMA benchmarks: write, read, send, atomic; bandwidth or latency.
    Perf(perf::Args),
    /// Verified RDMA Write + Read + Send mix on many QPs (robustness soak).
    Soak(soak::Args),
    /// Run an unmodified rdma-core program (rping, perftest, ...) on the data plane.
    Exec(exec::Args),
    /// Measure how long a cache line takes between two CPUs (which lcores share a cache).
    Cores(cores::Args),
    /// Show a running data plane's ports, loops, TCP connections, QPs and event queues
    /// (through its DPDK telemetry socket).
    #[cfg(feature = "dpdk")]
    Stats(stats::Args),
}

/// Runs the chosen subcommand.
pub fn dispatch(cmd: Command) -> Result<(), CmdError> {
    match cmd {
        Command::Run(a) => run::run(a),
        Command::Fwd(a) => fwd::run(a),
        Command::Pktgen(a) => pktgen::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Tcp(a) => tcp::run(a),
        Command::Rping(a) => rping::run(a),
        Command::Perf(a) => perf::run(a),
        Command::Soak(a) => soak::run(a),
        Command::Exec(a) => exec::run(a),
        Command::Cores(a) => cores::run(a),
        #[cfg(feature = "dpdk")]
        Command::Stats(a) => stats::run(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
