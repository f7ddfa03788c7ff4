//! The `dyncc` command line: parse, dispatch, print errors, exit.

use clap::{Parser, Subcommand};

/// dyncc compiles NCCL sweep measurements into a decision table that the
/// dyncc tuner plugin answers from in nanoseconds.
#[derive(Parser)]
#[command(
    name = "dyncc",
    version,
    about,
    long_about = None,
    after_help = "Exit status: 0 success; 1 a finding (diff: the decisions differ); \
                  2 an error (bad usage, a missing, unreadable or invalid input, a failed write)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Each command's help (about, long about, examples) is the doc comment of
// its Args struct, next to the code that runs it.
#[derive(Subcommand)]
enum Command {
    Inspect(dyncc::cmd::inspect::InspectArgs),
    Compile(dyncc::cmd::compile::CompileArgs),
    Eval(dyncc::cmd::eval::EvalArgs),
    Simulate(dyncc::cmd::simulate::SimulateArgs),
    Explain(dyncc::cmd::explain::ExplainArgs),
    Query(dyncc::cmd::query::QueryArgs),
    Diff(dyncc::cmd::diff::DiffArgs),
    Plot(dyncc::cmd::plot::PlotArgs),
    Export(dyncc::cmd::export::ExportArgs),
    Verify(dyncc::cmd::verify::VerifyArgs),
    Plan(dyncc::cmd::plan::PlanArgs),
    PluginPath(dyncc::cmd::plugin_path::PluginPathArgs),
}

fn main() {
    // Die quietly like other Unix tools when the reader of our output goes
    // away (`dyncc eval ... | head`), instead of panicking on EPIPE.
    // SAFETY: called first thing in main, before any other thread exists;
    // SIG_DFL is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(a) => dyncc::cmd::inspect::run(a),
        Command::Simulate(a) => dyncc::cmd::simulate::run(a),
        Command::Compile(a) => dyncc::cmd::compile::run(a),
        Command::Eval(a) => dyncc::cmd::eval::run(a),
        Command::Explain(a) => dyncc::cmd::explain::run(a),
        Command::Query(a) => dyncc::cmd::query::run(a),
        Command::Diff(a) => dyncc::cmd::diff::run(a),
        Command::Plot(a) => dyncc::cmd::plot::run(a),
        Command::Export(a) => dyncc::cmd::export::run(a),
        Command::Verify(a) => dyncc::cmd::verify::run(a),
        Command::Plan(a) => dyncc::cmd::plan::run(a),
        Command::PluginPath(a) => dyncc::cmd::plugin_path::run(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // 2, like clap's usage errors: 1 is reserved for findings
            // (`diff`: decisions differ), which scripts branch on.
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    }
}
