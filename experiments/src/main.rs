//! `experiments NAME [--quick] --out DIR`: see docs/EXPERIMENTS.md.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use experiments::Opts;

#[derive(Parser)]
#[command(about = "Reproduce the TCPLS papers' experiments in network namespaces (root)")]
struct Cli {
    #[command(subcommand)]
    experiment: Experiment,
    /// Shortened run for CI and quick checks.
    #[arg(long, global = true)]
    quick: bool,
    /// Output directory for NAME.csv, NAME.png and NAME.json.
    #[arg(long, global = true, default_value = "experiments-out")]
    out: std::path::PathBuf,
}

#[derive(Subcommand)]
enum Experiment {
    /// TCPLS through real middleboxes (firewall, NAT, TCP proxy, TLS-terminating proxy).
    Middleboxes,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let opts = Opts { quick: cli.quick, out: cli.out };
    let result = match cli.experiment {
        Experiment::Middleboxes => experiments::middleboxes::run(&opts),
    };
    match result {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("experiments: {e}");
            ExitCode::FAILURE
        }
    }
}
