//! The heap on transparent huge pages.
//!
//! The connections' state (TCBs, iWARP connections, their queues) lives on the heap, where
//! glibc's malloc takes 4 KiB pages. With many connections each visit to a cold connection
//! then pays TLB misses too, and in a VM a TLB miss is a nested page walk. glibc's tunable
//! `glibc.malloc.hugetlb=1` makes malloc advise its heap for transparent huge pages
//! (`madvise(MADV_HUGEPAGE)`, which the kernel's default `madvise` mode honours). Tunables
//! are read as the program starts, so the program runs itself again with the tunable set,
//! once, before it does anything else (same PID, same arguments). A tunable the user set
//! (`glibc.malloc.hugetlb=0` to opt out) is kept; under valgrind (which would not follow the
//! exec) nothing is done.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The glibc tunable that puts malloc's heap on transparent huge pages.
const HUGETLB: &[u8] = b"glibc.malloc.hugetlb";

/// The `GLIBC_TUNABLES` value to run with: `current` with `glibc.malloc.hugetlb=1` added,
/// or `None` when `current` sets that tunable already (to any value).
fn with_hugetlb(current: Option<&OsStr>) -> Option<OsString> {
    let current = current.map(OsStr::as_bytes).unwrap_or_default();
    let named = current
        .split(|&b| b == b':')
        .any(|kv| kv.split(|&b| b == b'=').next() == Some(HUGETLB));
    if named {
        return None;
    }
    let mut value = current.to_vec();
    if !value.is_empty() {
        value.push(b':');
    }
    value.extend_from_slice(HUGETLB);
    value.extend_from_slice(b"=1");
    Some(OsString::from_vec(value))
}

/// Whether valgrind runs this program (its preloaded core is in `LD_PRELOAD`).
fn under_valgrind(preload: Option<&OsStr>) -> bool {
    preload.is_some_and(|p| p.as_bytes().windows(9).any(|w| w == b"vgpreload"))
}

/// Runs this program again with the heap on transparent huge pages, unless it already
/// does, the user chose otherwise, or valgrind runs it; returns only if it did not (or the
/// exec failed, logged: the program then goes on as it is).
pub fn reexec() {
    if under_valgrind(std::env::var_os("LD_PRELOAD").as_deref()) {
        return;
    }
    let Some(tunables) = with_hugetlb(std::env::var_os("GLIBC_TUNABLES").as_deref()) else {
        return;
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_default();
    let err = Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(args)
        .env("GLIBC_TUNABLES", tunables)
        .exec();
    log::warn!("the heap stays on small pages: running again with GLIBC_TUNABLES failed: {err}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tunables(current: Option<&str>) -> Option<String> {
        with_hugetlb(current.map(OsStr::new)).map(|v| v.into_string().unwrap())
    }

    #[test]
    fn hugetlb_is_added_to_the_tunables() {
        assert_eq!(tunables(None).as_deref(), Some("glibc.malloc.hugetlb=1"));
        assert_eq!(
            tunables(Some("")).as_deref(),
            Some("glibc.malloc.hugetlb=1")
        );
        assert_eq!(
            tunables(Some("glibc.malloc.arena_max=2")).as_deref(),
            Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1")
        );
        // Another tunable whose name starts alike is not this one.
        assert_eq!(
            tunables(Some("glibc.malloc.hugetlbx=0")).as_deref(),
            Some("glibc.malloc.hugetlbx=0:glibc.malloc.hugetlb=1")
        );
    }

    #[test]
    fn a_hugetlb_tunable_already_set_is_kept_and_nothing_runs_again() {
        // Set by this program's first run: no second exec.
        assert_eq!(tunables(Some("glibc.malloc.hugetlb=1")), None);
        // The user's opt-out stays.
        assert_eq!(tunables(Some("glibc.malloc.hugetlb=0")), None);
        assert_eq!(
            tunables(Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0")),
            None
        );
    }

    #[test]
    fn valgrind_is_told_by_its_preload() {
        let vg = "/usr/libexec/valgrind/vgpreload_core-amd64-linux.so";
        assert!(under_valgrind(Some(OsStr::new(vg))));
        assert!(!under_valgrind(Some(OsStr::new("/usr/lib/libfoo.so"))));
        assert!(!under_valgrind(None));
    }
}
