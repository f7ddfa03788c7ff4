//! The command line as one clap tree: what `main` parses and dispatches, and
//! what the shell completions, the man pages and the book's command
//! reference (docs/src/reference/cli.md) are generated from, so none of them
//! can drift from `--help`.

use std::io::Write;
use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

use crate::cmd;

/// dyncc compiles NCCL sweep measurements into a decision table that the
/// dyncc tuner plugin answers from in nanoseconds.
#[derive(Parser)]
#[command(
    name = "dyncc",
    version,
    about,
    long_about = None,
    after_help = "Exit status: 0 success; 1 a finding (diff: the decisions differ); \
                  2 an error (bad usage, a missing, unreadable or invalid input, a failed write). \
                  With --json, an error is also a JSON object on stdout."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Each command's help (about, long about, examples) is the doc comment of
// its Args struct, next to the code that runs it.
#[derive(Subcommand)]
pub enum Command {
    Inspect(cmd::inspect::InspectArgs),
    Compile(cmd::compile::CompileArgs),
    Eval(cmd::eval::EvalArgs),
    Simulate(cmd::simulate::SimulateArgs),
    Explain(cmd::explain::ExplainArgs),
    Query(cmd::query::QueryArgs),
    Diff(cmd::diff::DiffArgs),
    Plot(cmd::plot::PlotArgs),
    Export(cmd::export::ExportArgs),
    Verify(cmd::verify::VerifyArgs),
    Plan(cmd::plan::PlanArgs),
    PluginPath(cmd::plugin_path::PluginPathArgs),
    Completions(CompletionsArgs),
    Man(ManArgs),
}

/// Print a shell completion script.
///
/// Examples:
///   dyncc completions bash > ~/.local/share/bash-completion/completions/dyncc
///   dyncc completions zsh > ~/.zfunc/_dyncc   # with fpath+=(~/.zfunc) in ~/.zshrc
///   dyncc completions fish > ~/.config/fish/completions/dyncc.fish
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: clap_complete::Shell,
}

/// Write the man pages: dyncc.1 and one dyncc-COMMAND.1 per command.
///
/// Examples:
///   dyncc man -o ~/.local/share/man/man1 && man dyncc-compile
///   dyncc man | man -l -
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ManArgs {
    /// Directory to write the pages into (created if missing); without it,
    /// dyncc.1 alone goes to stdout.
    #[arg(short, long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// Run the parsed command; its exit code, or the error `main` reports.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Simulate(a) => cmd::simulate::run(a),
        Command::Compile(a) => cmd::compile::run(a),
        Command::Eval(a) => cmd::eval::run(a),
        Command::Explain(a) => cmd::explain::run(a),
        Command::Query(a) => cmd::query::run(a),
        Command::Diff(a) => cmd::diff::run(a),
        Command::Plot(a) => cmd::plot::run(a),
        Command::Export(a) => cmd::export::run(a),
        Command::Verify(a) => cmd::verify::run(a),
        Command::Plan(a) => cmd::plan::run(a),
        Command::PluginPath(a) => cmd::plugin_path::run(a),
        Command::Completions(a) => {
            let mut c = Cli::command();
            clap_complete::generate(a.shell, &mut c, "dyncc", &mut std::io::stdout().lock());
            Ok(0)
        }
        Command::Man(a) => man(a),
    }
}

fn man(a: ManArgs) -> anyhow::Result<i32> {
    use anyhow::Context;
    let c = Cli::command();
    let Some(dir) = a.out_dir else {
        let mut out = Vec::new();
        clap_mangen::Man::new(c).render(&mut out)?;
        std::io::stdout().lock().write_all(&out)?;
        return Ok(0);
    };
    std::fs::create_dir_all(&dir).with_context(|| {
        format!(
            "{}: cannot create the man directory; give `-o` a directory you can write",
            dir.display()
        )
    })?;
    clap_mangen::generate_to(c, &dir).with_context(|| {
        format!(
            "{}: cannot write the man pages into it; give `-o` a directory you can write",
            dir.display()
        )
    })?;
    Ok(0)
}

/// The commands' reference as Markdown: every command's `--help`, rendered
/// at a fixed width so the page is the same on every machine.
pub fn reference_markdown() -> String {
    let mut top = Cli::command().term_width(100).max_term_width(100);
    top.build();
    let mut s = String::from(
        "# Commands\n\n\
         Generated from the command line's own definition (`dyncc COMMAND --help`); a test \
         fails when this page differs from it, and `DYNCC_BLESS=1 cargo test -p dyncc --lib \
         cli::tests::reference_is_current` rewrites it.\n\n",
    );
    let help = |c: &mut clap::Command| c.render_long_help().to_string();
    s.push_str("## dyncc\n\n```text\n");
    s.push_str(help(&mut top).trim_end());
    s.push_str("\n```\n");
    for sub in top.get_subcommands_mut() {
        if sub.get_name() == "help" {
            continue;
        }
        s.push_str(&format!("\n## dyncc {}\n\n```text\n", sub.get_name()));
        s.push_str(help(sub).trim_end());
        s.push_str("\n```\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    /// docs/src/reference/cli.md is what the clap tree renders; with
    /// DYNCC_BLESS=1 it is rewritten instead (review the diff).
    #[test]
    fn reference_is_current() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/reference/cli.md");
        let want = reference_markdown();
        if std::env::var_os("DYNCC_BLESS").is_some_and(|v| v == "1") {
            std::fs::write(&path, &want).unwrap();
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} is not what `dyncc --help` renders; after an intended change to the \
             arguments run `DYNCC_BLESS=1 cargo test -p dyncc --lib cli::tests::reference_is_current` \
             (or `make bless`) and commit the file",
            path.display()
        );
    }

    #[test]
    fn every_command_is_in_the_reference() {
        let md = reference_markdown();
        for sub in Cli::command().get_subcommands() {
            assert!(
                md.contains(&format!("## dyncc {}\n", sub.get_name())),
                "{} missing",
                sub.get_name()
            );
        }
        assert!(md.contains("--json"));
    }
}
