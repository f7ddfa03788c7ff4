//! Where the NCCL plugin that came with this `dyncc` is: the directory
//! holding `libnccl-tuner-dyncc.so` and `libnccl-profiler-dyncc.so`, the
//! names NCCL loads for `NCCL_TUNER_PLUGIN=dyncc` and
//! `NCCL_PROFILER_PLUGIN=dyncc`, found relative to the command itself so
//! that a job script can say `LD_LIBRARY_PATH=$(dyncc plugin-path)`.
//!
//! Each way of installing puts the two side by side (README, "Install the
//! plugin and point NCCL at it"):
//! - `pip install`: `<env>/bin/dyncc` and `<env>/lib/` (wheel data;
//!   packaging/dyncc_build.py), the profiler's name a code-free stub that
//!   loads the tuner's file (a wheel cannot hold a link);
//! - `make install PREFIX=P`: `P/bin/dyncc` and `P/lib/`, the profiler's
//!   name a symlink;
//! - `make plugin`: `target/release/` holds both names (a symlink) beside
//!   `target/release/dyncc` of `cargo build --release`.
//!
//! The profiler's name must load the tuner's object, not a copy of it: a
//! copy is a second object whose profiler never sees the tuner's answers
//! (traces could no longer say who chose), so a copy is refused here.

use std::fmt;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// The tuner's file name (`NCCL_TUNER_PLUGIN=dyncc`).
pub const TUNER: &str = "libnccl-tuner-dyncc.so";
/// The profiler's name (`NCCL_PROFILER_PLUGIN=dyncc`).
pub const PROFILER: &str = "libnccl-profiler-dyncc.so";

/// How the profiler's name reaches the tuner's object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProfilerName {
    /// The same file (a symlink or a hard link): `make plugin`, `make install`.
    Link,
    /// A stub whose one dependency is the tuner's file beside it: pip's wheel.
    Stub,
}

/// A directory holding both names, one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginDir {
    /// Absolute, symlinks resolved.
    pub dir: PathBuf,
    pub profiler: ProfilerName,
}

/// Why no directory was found; each says what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotFound {
    /// No tuner library in any place looked in.
    NoLibrary {
        exe: PathBuf,
        looked_in: Vec<PathBuf>,
    },
    /// The tuner is there, the profiler's name is not.
    NoProfilerName { dir: PathBuf },
    /// The profiler's name is another file: a second object.
    ProfilerIsACopy { dir: PathBuf },
}

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotFound::NoLibrary { exe, looked_in } => {
                let places: Vec<String> =
                    looked_in.iter().map(|p| p.display().to_string()).collect();
                write!(
                    f,
                    "no {TUNER} beside this dyncc ({}); looked in {}. Install the command and \
                     the plugin together with `pip install DYNCC_CLONE`, or in a clone build \
                     both with `cargo build --release && make plugin` (target/release/) and, \
                     to install them elsewhere, `make install PREFIX=DIR` (DIR/bin, DIR/lib)",
                    exe.display(),
                    places.join(", ")
                )
            }
            NotFound::NoProfilerName { dir } => write!(
                f,
                "{} holds {TUNER} but not {PROFILER}, the name NCCL_PROFILER_PLUGIN=dyncc \
                 loads; make it a link to the tuner's file (`make plugin` and `make install` \
                 do): ln -s {TUNER} {}",
                dir.display(),
                dir.join(PROFILER).display()
            ),
            NotFound::ProfilerIsACopy { dir } => write!(
                f,
                "{} is a separate file, not {TUNER}: NCCL would load two objects and traces \
                 could not say who chose; replace it with a link: ln -sf {TUNER} {}",
                dir.join(PROFILER).display(),
                dir.join(PROFILER).display()
            ),
        }
    }
}

impl std::error::Error for NotFound {}

/// The places looked in, in order, for the command at `exe` (symlinks
/// resolved): `bin/../lib` (pip, `make install`), then `exe`'s own
/// directory (`make plugin`'s target/release).
pub fn candidates(exe: &Path) -> Vec<PathBuf> {
    let Some(bin) = exe.parent() else {
        return Vec::new();
    };
    let mut v = Vec::new();
    if let Some(prefix) = bin.parent() {
        v.push(prefix.join("lib"));
    }
    v.push(bin.to_path_buf());
    v
}

/// The directory of the plugin that came with the command at `exe`: the
/// first candidate holding both names as one object. A candidate with the
/// tuner but a missing or copied profiler name is reported (the first such)
/// when no candidate is complete.
pub fn find(exe: &Path) -> Result<PluginDir, NotFound> {
    let looked_in = candidates(exe);
    let mut problem = None;
    for dir in &looked_in {
        let tuner = dir.join(TUNER);
        let Ok(t) = std::fs::metadata(&tuner) else {
            continue;
        };
        if !t.is_file() {
            continue;
        }
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        match profiler_name(&dir, &t) {
            Ok(profiler) => return Ok(PluginDir { dir, profiler }),
            Err(e) => {
                problem.get_or_insert(e);
            }
        }
    }
    Err(problem.unwrap_or(NotFound::NoLibrary {
        exe: exe.to_path_buf(),
        looked_in,
    }))
}

/// The largest file taken for a stub: a linked stub is ~2 KB; the plugin
/// itself is ~800 KB stripped.
const STUB_MAX_BYTES: u64 = 64 << 10;

/// How `dir`'s profiler name reaches the tuner (whose metadata is `tuner`).
fn profiler_name(dir: &Path, tuner: &std::fs::Metadata) -> Result<ProfilerName, NotFound> {
    let path = dir.join(PROFILER);
    let Ok(p) = std::fs::metadata(&path) else {
        return Err(NotFound::NoProfilerName {
            dir: dir.to_path_buf(),
        });
    };
    // The loader shares an object by (device, inode): a symlink or a hard
    // link to the tuner's file is the same object.
    if (p.dev(), p.ino()) == (tuner.dev(), tuner.ino()) {
        return Ok(ProfilerName::Link);
    }
    if p.is_file() && p.len() <= STUB_MAX_BYTES {
        if let Ok(bytes) = std::fs::read(&path) {
            if is_stub(&bytes) {
                return Ok(ProfilerName::Stub);
            }
        }
    }
    Err(NotFound::ProfilerIsACopy {
        dir: dir.to_path_buf(),
    })
}

/// An ELF file naming the tuner's file in its dynamic string table (the
/// stub's DT_NEEDED entry, NUL-delimited there), as
/// packaging/profiler-stub.sh writes it.
fn is_stub(bytes: &[u8]) -> bool {
    let needed = [b"\0", TUNER.as_bytes(), b"\0"].concat();
    bytes.starts_with(b"\x7fELF") && bytes.windows(needed.len()).any(|w| w == needed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `root/bin/dyncc` and `root/lib`, `root/bin` (the candidates).
    fn layout() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("bin");
        let lib = root.path().join("lib");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        let exe = bin.join("dyncc");
        std::fs::write(&exe, b"").unwrap();
        (root, exe, lib)
    }

    /// A stand-in for the plugin: larger than any stub.
    fn plugin_bytes() -> Vec<u8> {
        let mut b = b"\x7fELF".to_vec();
        b.resize(STUB_MAX_BYTES as usize + 1, 0);
        b
    }

    fn stub_bytes() -> Vec<u8> {
        [
            b"\x7fELF\x02\x01\x01\0".as_slice(),
            b"\0libnccl-tuner-dyncc.so\0",
        ]
        .concat()
    }

    #[test]
    fn pip_and_make_install_layout_is_found_in_lib_beside_bin() {
        let (_root, exe, lib) = layout();
        std::fs::write(lib.join(TUNER), plugin_bytes()).unwrap();
        std::os::unix::fs::symlink(TUNER, lib.join(PROFILER)).unwrap();
        let found = find(&exe).unwrap();
        assert_eq!(found.dir, lib.canonicalize().unwrap());
        assert_eq!(found.profiler, ProfilerName::Link);
        assert!(found.dir.is_absolute());
        std::fs::remove_file(lib.join(PROFILER)).unwrap();
        std::fs::write(lib.join(PROFILER), stub_bytes()).unwrap();
        assert_eq!(find(&exe).unwrap().profiler, ProfilerName::Stub);
    }

    #[test]
    fn make_plugin_layout_is_found_beside_the_command() {
        let (_root, exe, _lib) = layout();
        let bin = exe.parent().unwrap();
        std::fs::write(bin.join(TUNER), plugin_bytes()).unwrap();
        std::fs::hard_link(bin.join(TUNER), bin.join(PROFILER)).unwrap();
        let found = find(&exe).unwrap();
        assert_eq!(found.dir, bin.canonicalize().unwrap());
        assert_eq!(found.profiler, ProfilerName::Link);
    }

    #[test]
    fn a_copy_under_the_profiler_name_is_refused_naming_the_link_to_make() {
        let (_root, exe, lib) = layout();
        std::fs::write(lib.join(TUNER), plugin_bytes()).unwrap();
        std::fs::write(lib.join(PROFILER), plugin_bytes()).unwrap();
        let e = find(&exe).unwrap_err();
        assert!(matches!(e, NotFound::ProfilerIsACopy { .. }), "{e:?}");
        assert!(
            e.to_string().contains("ln -sf libnccl-tuner-dyncc.so"),
            "{e}"
        );
        // A small ELF that does not name the tuner is no stub either.
        std::fs::write(lib.join(PROFILER), b"\x7fELF\0libother.so\0").unwrap();
        assert!(matches!(find(&exe), Err(NotFound::ProfilerIsACopy { .. })));
    }

    #[test]
    fn a_missing_profiler_name_is_reported_unless_another_place_is_complete() {
        let (_root, exe, lib) = layout();
        std::fs::write(lib.join(TUNER), plugin_bytes()).unwrap();
        let e = find(&exe).unwrap_err();
        assert_eq!(
            e,
            NotFound::NoProfilerName {
                dir: lib.canonicalize().unwrap()
            }
        );
        assert!(
            e.to_string().contains("ln -s libnccl-tuner-dyncc.so"),
            "{e}"
        );
        let bin = exe.parent().unwrap();
        std::fs::write(bin.join(TUNER), plugin_bytes()).unwrap();
        std::os::unix::fs::symlink(TUNER, bin.join(PROFILER)).unwrap();
        assert_eq!(find(&exe).unwrap().dir, bin.canonicalize().unwrap());
    }

    #[test]
    fn no_library_names_every_place_looked_in_and_how_to_install() {
        let (_root, exe, lib) = layout();
        let e = find(&exe).unwrap_err();
        let NotFound::NoLibrary { looked_in, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(
            looked_in,
            &[lib.clone(), exe.parent().unwrap().to_path_buf()]
        );
        let msg = e.to_string();
        assert!(
            msg.contains("pip install") && msg.contains("make plugin"),
            "{msg}"
        );
        // A directory under the tuner's name is not the library.
        std::fs::create_dir(lib.join(TUNER)).unwrap();
        assert!(matches!(find(&exe), Err(NotFound::NoLibrary { .. })));
    }
}
