//! Which NCCL is running, and whether the table was swept on it.
//!
//! NCCL's defaults (its cost model, thresholds, channel counts) move
//! between releases, so a table swept on NCCL 2.18 may no longer pick the
//! fast choice on 2.21. The compiler records the versions a sweep ran in
//! the table's `nccl_version` metadata (`2.19.3` or `2.18.1,2.19.3`); at
//! init the plugin asks the running NCCL for its version through
//! `ncclGetVersion`, found in the process without linking libnccl, and
//! compares major.minor.

use core::ffi::{c_char, c_int, c_void};
use core::fmt;

use crate::log::{Escaped, Logger};

/// An NCCL release, `MAJOR.MINOR.PATCH`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NcclVersion {
    /// Major (2).
    pub major: u32,
    /// Minor (e.g. 19).
    pub minor: u32,
    /// Patch (e.g. 3).
    pub patch: u32,
}

impl NcclVersion {
    /// Decodes `ncclGetVersion`'s integer: `MAJOR*10000 + MINOR*100 +
    /// PATCH` since 2.9, `MAJOR*1000 + MINOR*100 + PATCH` before.
    pub fn from_code(code: i32) -> Option<NcclVersion> {
        let code = u32::try_from(code).ok().filter(|&c| c > 0)?;
        Some(if code >= 10000 {
            NcclVersion {
                major: code / 10000,
                minor: code % 10000 / 100,
                patch: code % 100,
            }
        } else {
            NcclVersion {
                major: code / 1000,
                minor: code % 1000 / 100,
                patch: code % 100,
            }
        })
    }

    /// `ncclGetVersion`'s integer in today's spelling (`MAJOR*10000 +
    /// MINOR*100 + PATCH`, 2.23.4 = 22304; saturating), whichever spelling
    /// [`NcclVersion::from_code`] read.
    pub fn code(&self) -> u32 {
        self.major
            .saturating_mul(10000)
            .saturating_add(self.minor.saturating_mul(100))
            .saturating_add(self.patch)
    }

    /// Parses `MAJOR.MINOR.PATCH` (or `MAJOR.MINOR`), as the compiler
    /// writes it.
    pub fn parse(s: &str) -> Option<NcclVersion> {
        let mut it = s.trim().split('.');
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        let patch = match it.next() {
            Some(p) => p.parse().ok()?,
            None => 0,
        };
        if it.next().is_some() {
            return None;
        }
        Some(NcclVersion {
            major,
            minor,
            patch,
        })
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

type GetVersion = unsafe extern "C" fn(version: *mut c_int) -> c_int;

/// Looks `ncclGetVersion` up without linking or loading libnccl: first in
/// the global namespace (`dlsym(RTLD_DEFAULT)`: an application linked to
/// libnccl), then in the object that holds NCCL's logger function (NCCL
/// passes its own `ncclDebugLog` to `init`; that finds an NCCL loaded with
/// `RTLD_LOCAL` or linked statically into a framework library, opened
/// again with `RTLD_NOLOAD`, which never loads anything new).
fn find_get_version(log: Logger) -> Option<GetVersion> {
    let name = c"ncclGetVersion";
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only
    // searches loaded objects.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if !sym.is_null() {
        // SAFETY: ncclGetVersion has had this signature in every NCCL
        // release: `ncclResult_t ncclGetVersion(int* version)`.
        return Some(unsafe { core::mem::transmute::<*mut c_void, GetVersion>(sym) });
    }
    let logger = log.0? as *const c_void;
    // SAFETY: an all-zero Dl_info is a valid value for dladdr to fill.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables for this address.
    if unsafe { libc::dladdr(logger, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    let fname: *const c_char = info.dli_fname;
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader;
    // RTLD_NOLOAD only returns a handle to an object already loaded.
    let handle = unsafe { libc::dlopen(fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: a live handle and a NUL-terminated name.
    let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
    // The object stays loaded (it holds NCCL's logger, in use right now):
    // this only drops the reference RTLD_NOLOAD took.
    // SAFETY: `handle` came from dlopen above and is closed once.
    unsafe { libc::dlclose(handle) };
    // SAFETY: as above, NCCL's ncclGetVersion signature.
    (!sym.is_null()).then(|| unsafe { core::mem::transmute::<*mut c_void, GetVersion>(sym) })
}

/// The running NCCL's version, `None` when `ncclGetVersion` cannot be found
/// or fails.
pub fn running(log: Logger) -> Option<NcclVersion> {
    let get = find_get_version(log)?;
    let mut code: c_int = 0;
    // SAFETY: ncclGetVersion writes one int through the pointer.
    let rc = unsafe { get(&mut code) };
    if rc != 0 {
        return None;
    }
    NcclVersion::from_code(code)
}

/// The running version against the table's `nccl_version` list.
#[derive(Clone, Copy, Debug)]
pub struct VersionCheck<'a> {
    running: Option<NcclVersion>,
    swept: Option<&'a str>,
}

impl<'a> VersionCheck<'a> {
    /// `swept` is the table's `nccl_version` metadata, if any.
    pub fn new(running: Option<NcclVersion>, swept: Option<&'a str>) -> VersionCheck<'a> {
        VersionCheck {
            running,
            swept: swept.filter(|s| !s.trim().is_empty()),
        }
    }

    /// True when both versions are known and the running major.minor is
    /// none of the sweep's. Unknown on either side is not a mismatch (the
    /// INFO line says "unknown").
    pub fn is_mismatch(&self) -> bool {
        let (Some(run), Some(swept)) = (self.running, self.swept) else {
            return false;
        };
        let mut any = false;
        for v in swept.split(',').filter_map(NcclVersion::parse) {
            any = true;
            if (v.major, v.minor) == (run.major, run.minor) {
                return false;
            }
        }
        any
    }

    /// The running version for the log (`unknown` if not found).
    pub fn running_shown(&self) -> impl fmt::Display {
        struct Shown(Option<NcclVersion>);
        impl fmt::Display for Shown {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.0 {
                    Some(v) => v.fmt(f),
                    None => f.write_str("unknown"),
                }
            }
        }
        Shown(self.running)
    }

    /// The sweep's versions for the log (`unknown` if the table has none).
    pub fn swept_shown(&self) -> Escaped<'a> {
        Escaped(self.swept.unwrap_or("unknown"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes_and_lists() {
        let v = |a, b, c| NcclVersion {
            major: a,
            minor: b,
            patch: c,
        };
        assert_eq!(NcclVersion::from_code(21903), Some(v(2, 19, 3)));
        assert_eq!(NcclVersion::from_code(23007), Some(v(2, 30, 7)));
        assert_eq!(NcclVersion::from_code(2804), Some(v(2, 8, 4)));
        assert_eq!(NcclVersion::from_code(0), None);
        assert_eq!(NcclVersion::from_code(-1), None);
        // The code a Comm carries, in today's spelling whichever was read.
        assert_eq!(v(2, 19, 3).code(), 21903);
        assert_eq!(NcclVersion::from_code(2804).map(|v| v.code()), Some(20804));
        assert_eq!(NcclVersion::parse(" 2.19.3"), Some(v(2, 19, 3)));
        assert_eq!(NcclVersion::parse("2.19"), Some(v(2, 19, 0)));
        assert_eq!(NcclVersion::parse("2.19.3.1"), None);
        assert_eq!(NcclVersion::parse("two"), None);
        let run = Some(v(2, 19, 7));
        assert!(!VersionCheck::new(run, Some("2.19.3")).is_mismatch());
        assert!(!VersionCheck::new(run, Some("2.18.1, 2.19.3")).is_mismatch());
        assert!(VersionCheck::new(run, Some("2.18.1,2.21.5")).is_mismatch());
        assert!(!VersionCheck::new(run, None).is_mismatch());
        assert!(!VersionCheck::new(run, Some("")).is_mismatch());
        assert!(!VersionCheck::new(run, Some("garbage")).is_mismatch());
        assert!(!VersionCheck::new(None, Some("2.18.1")).is_mismatch());
    }
}
