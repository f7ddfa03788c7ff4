//! External tools the tests run: C compilers, valgrind, binutils,
//! shellcheck, rsvg-convert. A test that needs a tool that is not installed
//! FAILS, naming the Debian package that provides it (a skipped test that
//! passes would claim a check that never ran); `make test` installs them all
//! first (`.ci/test-deps.sh`, the same list).

use std::process::Command;

/// Whether `tool` can be run (it is on PATH and starts).
pub fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
}

/// Fails the calling test unless `tool` is installed; `package` is the
/// Debian/Ubuntu package that provides it.
pub fn require_tool(tool: &str, package: &str) {
    assert!(
        have(tool),
        "`{tool}` is needed by this test and is not on PATH: install it with \
         `apt-get install {package}` (`make test` installs every tool the tests use, as root)"
    );
}

/// The C compiler the harness tests build with (gcc, else cc); fails the
/// calling test when there is none.
pub fn require_c_compiler() -> &'static str {
    ["gcc", "cc"]
        .into_iter()
        .find(|c| have(c))
        .unwrap_or_else(|| {
            panic!(
                "a C compiler (gcc or cc) is needed by this test and neither is on PATH: install \
             one with `apt-get install gcc` (`make test` installs every tool the tests use, as root)"
            )
        })
}
