//! libibverbs' sysfs helpers: where sysfs is mounted, and reading one attribute file the way
//! libibverbs does (one `read`, the trailing newline replaced by the terminating NUL).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString, OsStr};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

use crate::abi::{IBV_SYSFS_NAME_MAX, IBV_SYSFS_PATH_MAX};
use crate::entry::{guard, set_errno};
use crate::symver::symver;

/// The sysfs root for the value of `SYSFS_PATH` (`None` when unset or not to be trusted):
/// its first `IBV_SYSFS_PATH_MAX` bytes without trailing slashes, or `/sys`.
fn sysfs_root(env: Option<&OsStr>) -> CString {
    let Some(env) = env else {
        return c"/sys".into();
    };
    let bytes = env.as_bytes();
    let mut root = &bytes[..bytes.len().min(IBV_SYSFS_PATH_MAX as usize)];
    while let [rest @ .., b'/'] = root {
        root = rest;
    }
    CString::new(root).unwrap_or_else(|_| c"/sys".into())
}

/// Reads the file at `path` into `buf`: a trailing newline becomes the terminating NUL, else
/// a NUL follows the contents if `buf` has room; contents that fill `buf` without a newline
/// would be truncated and fail with `EOVERFLOW`. Returns the length without the newline (0 for
/// an empty file, `buf` untouched), or the errno.
fn read_attribute(path: &Path, buf: &mut [u8]) -> Result<usize, c_int> {
    let os_error = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let mut file = std::fs::File::open(path).map_err(os_error)?;
    let len = file.read(buf).map_err(os_error)?;
    match buf[..len] {
        [] => Ok(0),
        [.., b'\n'] => {
            buf[len - 1] = 0;
            Ok(len - 1)
        }
        _ if len < buf.len() => {
            buf[len] = 0;
            Ok(len)
        }
        _ => Err(libc::EOVERFLOW),
    }
}

/// Reads `dir/file` into the C buffer `buf` of `size` bytes: the length read without the
/// trailing newline, or -1 with `errno` set.
///
/// # Safety
/// `buf` is NULL or valid for writes of `size` bytes.
unsafe fn read_into_c_buffer(dir: &[u8], file: &[u8], buf: *mut c_char, size: usize) -> c_int {
    let path = [dir, b"/", file].concat();
    let buf: &mut [u8] = match (buf.is_null(), size) {
        (_, 0) => &mut [],
        (true, _) => {
            set_errno(libc::EFAULT);
            return -1;
        }
        // SAFETY: the caller's buffer is valid for `size` bytes.
        (false, _) => unsafe { std::slice::from_raw_parts_mut(buf.cast(), size) },
    };
    match read_attribute(Path::new(OsStr::from_bytes(&path)), buf) {
        Ok(len) => c_int::try_from(len).unwrap_or(c_int::MAX),
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// The head of rdma-core 44's private `struct verbs_sysfs_dev` (libibverbs `driver.h`), up to
/// `ibdev_path`, the one field read here.
#[repr(C)]
struct SysfsDevHead {
    /// `struct list_node entry`.
    _entry: [*mut c_void; 2],
    /// `void *provider_data`.
    _provider_data: *mut c_void,
    /// `const struct verbs_match_ent *match`.
    _match_ent: *const c_void,
    /// `unsigned int flags`.
    _flags: c_uint,
    /// `char sysfs_name[IBV_SYSFS_NAME_MAX]`.
    _sysfs_name: [c_char; IBV_SYSFS_NAME_MAX as usize],
    /// `dev_t sysfs_cdev`.
    _sysfs_cdev: libc::dev_t,
    /// `char ibdev_name[IBV_SYSFS_NAME_MAX]`.
    _ibdev_name: [c_char; IBV_SYSFS_NAME_MAX as usize],
    /// `char ibdev_path[IBV_SYSFS_PATH_MAX]`: the device's directory in sysfs.
    ibdev_path: [c_char; IBV_SYSFS_PATH_MAX as usize],
}

/// A printf format without conversions, as the file name it prints (`%%` is `%`); `None` if
/// it converts an argument.
fn literal_format(format: &[u8]) -> Option<Vec<u8>> {
    let mut name = Vec::with_capacity(format.len());
    let mut bytes = format.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'%' if bytes.next() == Some(&b'%') => name.push(b'%'),
            b'%' => return None,
            _ => name.push(b),
        }
    }
    Some(name)
}

static SYSFS_ROOT: OnceLock<CString> = OnceLock::new();

/// Where sysfs is mounted: `SYSFS_PATH` (without trailing slashes) if set and the process is
/// not set-user-ID, else "/sys"; decided once per process, like libibverbs.
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    guard("ibv_get_sysfs_path", c"/sys".as_ptr(), || {
        SYSFS_ROOT
            .get_or_init(|| {
                // SAFETY: getuid and geteuid have no preconditions and cannot fail.
                let trusted = unsafe { libc::getuid() == libc::geteuid() };
                let env = std::env::var_os("SYSFS_PATH").filter(|_| trusted);
                sysfs_root(env.as_deref())
            })
            .as_ptr()
    })
}

/// Reads the sysfs attribute `dir/file` into `buf` (`size` bytes): its length without the
/// trailing newline, which becomes the terminating NUL, or -1 with `errno` set.
///
/// # Safety
/// `dir` and `file` are NUL-terminated strings, `buf` is valid for writes of `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    if dir.is_null() || file.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    guard("ibv_read_sysfs_file", -1, || {
        // SAFETY: the caller passes NUL-terminated strings and a buffer of `size` bytes.
        unsafe {
            let (dir, file) = (CStr::from_ptr(dir), CStr::from_ptr(file));
            read_into_c_buffer(dir.to_bytes(), file.to_bytes(), buf, size)
        }
    })
}

/// Reads the attribute `fnfmt` of a libibverbs sysfs device (its `ibdev_path/fnfmt`) into
/// `buf`, like [`ibv_read_sysfs_file`]. The C function is variadic; Rust cannot read the
/// arguments, so a format that converts one (other than `%%`) fails with `EINVAL`.
///
/// # Safety
/// `sysfs_dev` is NULL or a libibverbs `struct verbs_sysfs_dev`, `fnfmt` a NUL-terminated
/// string, `buf` valid for writes of `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_ibdev_sysfs_file(
    buf: *mut c_char,
    size: usize,
    sysfs_dev: *const c_void,
    fnfmt: *const c_char,
) -> c_int {
    if sysfs_dev.is_null() || fnfmt.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    guard("ibv_read_ibdev_sysfs_file", -1, || {
        // SAFETY: `sysfs_dev` points to a `verbs_sysfs_dev`, whose head `SysfsDevHead` mirrors;
        // `fnfmt` is NUL-terminated.
        let (dev, format) = unsafe { (&*sysfs_dev.cast::<SysfsDevHead>(), CStr::from_ptr(fnfmt)) };
        let dir: Vec<u8> = dev
            .ibdev_path
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        let Some(file) = literal_format(format.to_bytes()) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        // SAFETY: the caller's buffer is valid for `size` bytes.
        unsafe { read_into_c_buffer(&dir, &file, buf, size) }
    })
}

symver! {
    "IBVERBS_1.0": ibv_get_sysfs_path, ibv_read_sysfs_file;
    "IBVERBS_PRIVATE_34": ibv_read_ibdev_sysfs_file;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A fresh directory for one test, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(test: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("librdma-sysfs-{}-{test}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("create scratch dir");
            Self(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    impl std::ops::Deref for Scratch {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    fn c(s: &[u8]) -> CString {
        CString::new(s).expect("no NUL")
    }

    /// `ibv_read_sysfs_file(dir, file)` into a buffer of `size` bytes: the return value,
    /// the errno if it failed, and the buffer.
    fn read(dir: &Path, file: &str, size: usize) -> (c_int, i32, Vec<u8>) {
        let mut buf = vec![0xaa_u8; size];
        let (dir, file) = (c(dir.as_os_str().as_bytes()), c(file.as_bytes()));
        // SAFETY: NUL-terminated strings and a buffer of `size` bytes.
        let ret = unsafe {
            ibv_read_sysfs_file(dir.as_ptr(), file.as_ptr(), buf.as_mut_ptr().cast(), size)
        };
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        (ret, errno, buf)
    }

    #[test]
    fn sysfs_root_is_sys_or_the_environment_without_trailing_slashes() {
        assert_eq!(sysfs_root(None).as_bytes(), b"/sys");
        assert_eq!(
            sysfs_root(Some(OsStr::new("/tmp/fake"))).as_bytes(),
            b"/tmp/fake"
        );
        assert_eq!(
            sysfs_root(Some(OsStr::new("/tmp/fake///"))).as_bytes(),
            b"/tmp/fake"
        );
        assert_eq!(sysfs_root(Some(OsStr::new("/"))).as_bytes(), b"");
        let long = "x".repeat(300);
        assert_eq!(sysfs_root(Some(OsStr::new(&long))).as_bytes().len(), 256);
    }

    #[test]
    fn sysfs_path_is_decided_once() {
        let first = ibv_get_sysfs_path();
        assert_eq!(first, ibv_get_sysfs_path());
        // SAFETY: a pointer into the process-lifetime `SYSFS_ROOT`.
        let path = unsafe { CStr::from_ptr(first) };
        let expected = sysfs_root(std::env::var_os("SYSFS_PATH").as_deref());
        assert_eq!(path, expected.as_c_str());
    }

    #[test]
    fn reads_a_file_and_strips_one_trailing_newline() {
        let dir = Scratch::new("newline");
        std::fs::write(dir.join("node_guid"), "0002:c903:0000:1234\n").unwrap();
        let (ret, _, buf) = read(&dir, "node_guid", 64);
        assert_eq!(ret, 19);
        assert_eq!(&buf[..20], b"0002:c903:0000:1234\0");

        std::fs::write(dir.join("two"), "a\n\n").unwrap();
        let (ret, _, buf) = read(&dir, "two", 8);
        assert_eq!(ret, 2);
        assert_eq!(&buf[..3], b"a\n\0");

        // A newline in the last byte of the buffer fits: it becomes the NUL.
        std::fs::write(dir.join("exact"), "abcd\n").unwrap();
        let (ret, _, buf) = read(&dir, "exact", 5);
        assert_eq!(ret, 4);
        assert_eq!(buf, b"abcd\0");
    }

    #[test]
    fn reads_a_file_without_newline_and_terminates_it() {
        let dir = Scratch::new("plain");
        std::fs::write(dir.join("state"), "4: ACTIVE").unwrap();
        let (ret, _, buf) = read(&dir, "state", 16);
        assert_eq!(ret, 9);
        assert_eq!(&buf[..10], b"4: ACTIVE\0");
        assert_eq!(buf[10], 0xaa, "nothing written past the NUL");
    }

    #[test]
    fn contents_that_fill_the_buffer_without_newline_fail() {
        let dir = Scratch::new("full");
        std::fs::write(dir.join("long"), "abcdefgh").unwrap();
        let (ret, errno, _) = read(&dir, "long", 8);
        assert_eq!(ret, -1);
        assert_eq!(errno, libc::EOVERFLOW);
        let (ret, _, buf) = read(&dir, "long", 4);
        assert_eq!((ret, &buf[..]), (-1, &b"abcd"[..]));
    }

    #[test]
    fn an_empty_file_reads_zero_bytes() {
        let dir = Scratch::new("empty");
        std::fs::write(dir.join("empty"), "").unwrap();
        let (ret, _, buf) = read(&dir, "empty", 4);
        assert_eq!(ret, 0);
        assert_eq!(buf, [0xaa; 4]);
        let (ret, _, _) = read(&dir, "empty", 0);
        assert_eq!(ret, 0);
    }

    #[test]
    fn a_missing_file_fails_with_its_errno() {
        let dir = Scratch::new("missing");
        let (ret, errno, buf) = read(&dir, "absent", 8);
        assert_eq!((ret, errno), (-1, libc::ENOENT));
        assert_eq!(buf, [0xaa; 8]);
        // SAFETY: NULL is rejected before any access.
        let ret = unsafe {
            ibv_read_sysfs_file(std::ptr::null(), c"x".as_ptr(), std::ptr::null_mut(), 0)
        };
        assert_eq!(ret, -1);
    }

    #[test]
    fn reads_an_attribute_of_a_sysfs_device() {
        let dir = Scratch::new("ibdev");
        std::fs::create_dir_all(dir.join("ports/1")).unwrap();
        std::fs::write(dir.join("node_type"), "4: RNIC\n").unwrap();
        std::fs::write(dir.join("100%"), "odd\n").unwrap();
        // SAFETY: an all-zero `verbs_sysfs_dev` head is valid (NULL pointers, empty strings).
        let mut dev: SysfsDevHead = unsafe { std::mem::zeroed() };
        for (d, &s) in dev.ibdev_path.iter_mut().zip(dir.as_os_str().as_bytes()) {
            *d = s as c_char;
        }
        let dev_ptr = (&dev as *const SysfsDevHead).cast::<c_void>();
        let mut buf = [0_u8; 32];
        let read = |fmt: &CStr, buf: &mut [u8; 32]| {
            // SAFETY: a device head, a NUL-terminated format and a buffer of 32 bytes.
            unsafe { ibv_read_ibdev_sysfs_file(buf.as_mut_ptr().cast(), 32, dev_ptr, fmt.as_ptr()) }
        };
        assert_eq!(read(c"node_type", &mut buf), 7);
        assert_eq!(&buf[..8], b"4: RNIC\0");
        assert_eq!(read(c"100%%", &mut buf), 3);
        assert_eq!(&buf[..4], b"odd\0");
        assert_eq!(read(c"ports/%d/state", &mut buf), -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINVAL)
        );
        // SAFETY: NULL device is rejected before any access.
        let ret = unsafe {
            ibv_read_ibdev_sysfs_file(buf.as_mut_ptr().cast(), 32, std::ptr::null(), c"x".as_ptr())
        };
        assert_eq!(ret, -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn sysfs_dev_head_matches_rdma_core_44() {
        assert_eq!(std::mem::offset_of!(SysfsDevHead, _sysfs_name), 36);
        assert_eq!(std::mem::offset_of!(SysfsDevHead, _sysfs_cdev), 104);
        assert_eq!(std::mem::offset_of!(SysfsDevHead, _ibdev_name), 112);
        assert_eq!(std::mem::offset_of!(SysfsDevHead, ibdev_path), 176);
    }
}
