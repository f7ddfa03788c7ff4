//! The `dyncc` command line: parse, dispatch, print errors, exit. The
//! commands themselves are [`dyncc::cli`].

use clap::Parser;
use dyncc::cli::Cli;
use dyncc::output;

fn main() {
    // Die quietly like other Unix tools when the reader of our output goes
    // away (`dyncc eval ... | head`), instead of panicking on EPIPE.
    // SAFETY: called first thing in main, before any other thread exists;
    // SIG_DFL is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let json = output::wants_json(&args);
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are not failures; a usage error is
            // JSON too when JSON was asked for, at clap's exit code (2).
            if json && e.use_stderr() {
                print_json(&output::usage_json(&e, &args));
            }
            e.exit();
        }
    };
    match dyncc::cli::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // 2, like clap's usage errors: 1 is reserved for findings
            // (`diff`: decisions differ), which scripts branch on.
            if json {
                print_json(&output::error_json(&e, &args));
            }
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    }
}

fn print_json(e: &output::ErrorJson) {
    use std::io::Write;
    if let Ok(s) = serde_json::to_string_pretty(e) {
        // The reader may be gone; stderr still says what failed.
        let _ = writeln!(std::io::stdout().lock(), "{s}");
    }
}
