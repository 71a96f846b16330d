//! The data plane's commands in DPDK's telemetry (`/dataplane/...`, beside DPDK's own
//! `/ethdev/...`, `/eal/...`), and a client of the telemetry socket.
//!
//! The commands run on DPDK's telemetry thread. They never touch the poll loops' tables or
//! DPDK objects: they ask the loops for fresh snapshots ([`crate::telemetry`]), wait a
//! little, and copy the latest into DPDK's reply. `/dataplane/<section>` returns a section;
//! `/dataplane/<section>,<key>` one entry of it (one QP, one connection, one port), for
//! sections larger than a reply holds (16 KiB).
//!
//! The client speaks the socket's protocol (`SOCK_SEQPACKET`; a JSON greeting with
//! `max_output_len`, then one JSON reply per command), which `dpdk-telemetry.py` uses too.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::raw::{c_char, c_int, c_void};
use std::panic::catch_unwind;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

use crate::telemetry::{self, Dict, Entry, Scalar, Section, SECTIONS};

/// Prefix of the data plane's commands.
pub const PREFIX: &str = "/dataplane/";

/// How long a command waits for the poll loops' fresh snapshots.
const FRESH_WAIT: Duration = Duration::from_millis(200);

/// DPDK cuts strings at this many octets, the NUL included (`RTE_TEL_MAX_STRING_LEN`).
const MAX_STRING: usize = dpdk_sys::RTE_TEL_MAX_STRING_LEN as usize;

/// Entries per dictionary DPDK takes (`RTE_TEL_MAX_DICT_ENTRIES`).
const MAX_ENTRIES: usize = dpdk_sys::RTE_TEL_MAX_DICT_ENTRIES as usize;

static REGISTER: Once = Once::new();

/// Registers `/dataplane/info` and a command per section of [`SECTIONS`] (once per
/// process; harmless without a telemetry socket).
pub fn register_commands() {
    REGISTER.call_once(|| {
        telemetry::mark_start();
        let info = (
            "info",
            "The data plane process: version, pid, uptime, poll loops and their snapshot ages",
        );
        for (name, help) in std::iter::once(&info).chain(SECTIONS) {
            let (Ok(cmd), Ok(help)) =
                (CString::new(format!("{PREFIX}{name}")), CString::new(*help))
            else {
                continue;
            };
            // SAFETY: both strings are NUL-terminated; DPDK copies the command name and
            // keeps the help pointer, so both are leaked for the rest of the process;
            // `command` matches telemetry_cb.
            let ret = unsafe {
                dpdk_sys::rte_telemetry_register_cmd(cmd.into_raw(), Some(command), help.into_raw())
            };
            if ret < 0 {
                log::warn!("telemetry: cannot register {PREFIX}{name} ({ret})");
            }
        }
    });
}

/// The telemetry callback of every `/dataplane/` command.
unsafe extern "C" fn command(
    cmd: *const c_char,
    params: *const c_char,
    d: *mut dpdk_sys::rte_tel_data,
) -> c_int {
    let text = |p: *const c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: DPDK passes NUL-terminated strings valid during the call.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    let (cmd, params) = (text(cmd), text(params));
    let reply = catch_unwind(|| answer(&cmd, params.trim()));
    match reply {
        Ok(Some(section)) => {
            // SAFETY: `d` is the reply DPDK handed to this callback.
            unsafe { fill(d, &section) };
            0
        }
        Ok(None) => -libc::EINVAL,
        Err(_) => {
            log::error!("telemetry command {cmd} panicked");
            -libc::EINVAL
        }
    }
}

/// The reply to `cmd` with `params`: the section, or one entry of it; `None` for an
/// unknown key.
fn answer(cmd: &str, params: &str) -> Option<Section> {
    let name = cmd.strip_prefix(PREFIX)?;
    let snaps = telemetry::fresh(FRESH_WAIT);
    if name == "info" {
        return Some(info(&snaps));
    }
    let section = telemetry::merged(&snaps, name);
    if params.is_empty() {
        return Some(section);
    }
    let d = section.get_dict(params)?;
    Some(Section(
        d.0.iter()
            .map(|(k, v)| (k.clone(), Entry::Scalar(v.clone())))
            .collect(),
    ))
}

fn info(snaps: &[(u32, Duration, std::sync::Arc<telemetry::Snapshot>)]) -> Section {
    let mut s = Section::default();
    s.scalar("name", "dataplane");
    s.scalar("version", env!("CARGO_PKG_VERSION"));
    s.scalar("pid", std::process::id());
    s.scalar("uptime_ms", telemetry::uptime().as_millis() as u64);
    s.scalar("poll_loops", snaps.len());
    for (id, age, snap) in snaps {
        let mut d = Dict::new().with("loop", *id);
        if let Some(lcore) = snap.lcore {
            d.put("lcore", lcore);
        }
        d.put("thread", snap.thread.as_str());
        d.put("snapshot_age_ms", age.as_millis() as u64);
        s.dict(&format!("loop{id}"), d);
    }
    s
}

/// A name DPDK accepts as a dictionary key: letters, digits, `_` and `/`.
fn key(k: &str) -> CString {
    let k: String = k
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '/' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_STRING - 1)
        .collect();
    CString::new(k).unwrap_or_default()
}

/// A string value DPDK 22.11 can put in JSON as is (it escapes nothing): no quotes,
/// backslashes or control characters, at most 127 octets.
fn string(v: &str) -> CString {
    let mut out = String::new();
    for c in v.chars() {
        let c = match c {
            '"' => '\'',
            '\\' => '/',
            c if c.is_control() => ' ',
            c => c,
        };
        if out.len() + c.len_utf8() >= MAX_STRING {
            break;
        }
        out.push(c);
    }
    CString::new(out).unwrap_or_default()
}

/// Adds `k: v` to the dictionary `d`.
///
/// # Safety
/// `d` is a valid `rte_tel_data` started as a dictionary.
unsafe fn put(d: *mut dpdk_sys::rte_tel_data, k: &str, v: &Scalar) {
    let k = key(k);
    // SAFETY: `d` is a started dictionary (caller); the strings are NUL-terminated and
    // copied by DPDK.
    unsafe {
        match v {
            Scalar::U64(n) => dpdk_sys::rte_tel_data_add_dict_u64(d, k.as_ptr(), *n),
            Scalar::Str(s) => {
                dpdk_sys::rte_tel_data_add_dict_string(d, k.as_ptr(), string(s).as_ptr())
            }
        };
    }
}

/// Writes `section` into DPDK's reply `d` (entries beyond DPDK's limit are left out and
/// counted in `more`).
///
/// # Safety
/// `d` is the `rte_tel_data` DPDK handed to the command callback.
unsafe fn fill(d: *mut dpdk_sys::rte_tel_data, section: &Section) {
    // SAFETY: `d` is valid (caller).
    unsafe { dpdk_sys::rte_tel_data_start_dict(d) };
    let room = MAX_ENTRIES - 1;
    for (k, e) in section.0.iter().take(room) {
        match e {
            // SAFETY: `d` was started as a dictionary above.
            Entry::Scalar(v) => unsafe { put(d, k, v) },
            Entry::Dict(inner) => {
                // SAFETY: a fresh container, started as a dictionary and filled, then
                // handed to DPDK, which frees it with the reply (keep = 0).
                unsafe {
                    let c = dpdk_sys::rte_tel_data_alloc();
                    if c.is_null() {
                        continue;
                    }
                    dpdk_sys::rte_tel_data_start_dict(c);
                    for (ik, iv) in inner.0.iter().take(MAX_ENTRIES) {
                        put(c, ik, iv);
                    }
                    if dpdk_sys::rte_tel_data_add_dict_container(d, key(k).as_ptr(), c, 0) < 0 {
                        dpdk_sys::rte_tel_data_free(c);
                    }
                }
            }
        }
    }
    if section.0.len() > room {
        // SAFETY: as above.
        unsafe { put(d, "more", &Scalar::U64((section.0.len() - room) as u64)) };
    }
}

/// DPDK's runtime directory of `file_prefix`, as EAL and `dpdk-telemetry.py` compute it:
/// `$RUNTIME_DIRECTORY`, else `/var/run` for root and `$XDG_RUNTIME_DIR` (or `/tmp`)
/// otherwise, then `dpdk/<file_prefix>`.
pub fn runtime_dir(file_prefix: &str) -> PathBuf {
    let base = std::env::var_os("RUNTIME_DIRECTORY")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // SAFETY: getuid has no preconditions.
            if unsafe { libc::getuid() } == 0 {
                PathBuf::from("/var/run")
            } else {
                std::env::var_os("XDG_RUNTIME_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from("/tmp"))
            }
        });
    base.join("dpdk").join(file_prefix)
}

/// File name of the telemetry socket in a runtime directory.
pub const SOCKET_NAME: &str = "dpdk_telemetry.v2";

/// A connection to a DPDK process's telemetry socket.
#[derive(Debug)]
pub struct TelemetryClient {
    fd: OwnedFd,
    max_len: usize,
    greeting: serde_json::Value,
}

/// Why a telemetry query failed.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The socket could not be reached.
    #[error("telemetry socket {path}: {error}")]
    Connect {
        /// The socket.
        path: String,
        /// What failed.
        error: io::Error,
    },
    /// Sending or receiving failed.
    #[error("telemetry: {0}")]
    Io(#[from] io::Error),
    /// The reply was not JSON.
    #[error("telemetry: the reply to {cmd} is not JSON: {error}")]
    Json {
        /// The command.
        cmd: String,
        /// The parse error.
        error: serde_json::Error,
    },
}

impl TelemetryClient {
    /// Connects to the telemetry socket at `path` and reads its greeting. Replies are waited
    /// for `timeout` at most.
    pub fn connect(path: &Path, timeout: Duration) -> Result<TelemetryClient, TelemetryError> {
        let err = |error| TelemetryError::Connect {
            path: path.display().to_string(),
            error,
        };
        // SAFETY: plain system call; the descriptor is owned at once.
        let raw =
            unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(err(io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_un is plain data; all-zero is a valid value.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = path.as_os_str().as_encoded_bytes();
        if bytes.len() >= addr.sun_path.len() {
            return Err(err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "path too long",
            )));
        }
        for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
            *dst = *src as c_char;
        }
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: valid descriptor; `tv` and `addr` are valid for the sizes passed.
        let ret = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                std::ptr::addr_of!(tv).cast::<c_void>(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
            libc::connect(
                fd.as_raw_fd(),
                std::ptr::addr_of!(addr).cast::<libc::sockaddr>(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            )
        };
        if ret < 0 {
            return Err(err(io::Error::last_os_error()));
        }
        let mut c = TelemetryClient {
            fd,
            max_len: 16384,
            greeting: serde_json::Value::Null,
        };
        let greeting = c.receive("(greeting)")?;
        if let Some(n) = greeting.get("max_output_len").and_then(|v| v.as_u64()) {
            c.max_len = n as usize;
        }
        c.greeting = greeting;
        Ok(c)
    }

    /// The greeting (`version`, `pid`, `max_output_len`).
    pub fn greeting(&self) -> &serde_json::Value {
        &self.greeting
    }

    /// Sends `cmd` (with `,params` if any) and returns the reply's JSON, the
    /// `{"<cmd>": value}` object DPDK sends.
    pub fn query(&mut self, cmd: &str) -> Result<serde_json::Value, TelemetryError> {
        // SAFETY: valid descriptor; the buffer is valid for its length.
        let sent = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                cmd.as_ptr().cast::<c_void>(),
                cmd.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error().into());
        }
        self.receive(cmd)
    }

    fn receive(&mut self, cmd: &str) -> Result<serde_json::Value, TelemetryError> {
        let mut buf = vec![0u8; self.max_len.max(1024)];
        // SAFETY: valid descriptor; `buf` is valid for its length.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast::<c_void>(),
                buf.len(),
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error().into());
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "socket closed").into());
        }
        buf.truncate(n as usize);
        serde_json::from_slice(&buf).map_err(|error| TelemetryError::Json {
            cmd: cmd.to_string(),
            error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_strings_are_made_acceptable() {
        assert_eq!(key("tcp_10.0.0.1:80").to_str().unwrap(), "tcp_10_0_0_1_80");
        assert_eq!(key("l0/memif0").to_str().unwrap(), "l0/memif0");
        assert_eq!(string("a \"b\" c\\d\n").to_str().unwrap(), "a 'b' c/d ");
        assert_eq!(string(&"x".repeat(300)).as_bytes().len(), MAX_STRING - 1);
    }

    #[test]
    fn runtime_dir_follows_eal() {
        let d = runtime_dir("dp1");
        assert!(d.ends_with("dpdk/dp1"), "{}", d.display());
    }
}
