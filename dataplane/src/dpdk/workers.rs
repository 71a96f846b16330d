//! EAL lcores: which lcores EAL runs and on which CPU, and running closures on EAL's worker
//! lcores (`rte_eal_remote_launch`), whose threads EAL pinned to their lcore's CPUs.

use std::ffi::{c_void, CString};
use std::os::raw::{c_char, c_int};
use std::panic::{self, AssertUnwindSafe};

use super::eal::Eal;

/// What EAL runs an lcore as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LcoreRole {
    /// The main lcore: the thread that called `rte_eal_init`.
    Main,
    /// A worker lcore: an EAL thread waiting for work, pinned to the lcore's CPUs.
    Worker,
    /// Not an lcore of this EAL (not in `-l` / `--lcores`).
    Off,
}

/// Why closures could not run on EAL workers.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Workers are launched from the main lcore's thread only.
    #[error("EAL workers can be launched only from the main lcore's thread")]
    NotMainLcore,
    /// The lcore is not a worker lcore of this EAL.
    #[error("lcore {0} is not an EAL worker lcore")]
    NotWorker(u32),
    /// The worker is already running something (or was given two closures).
    #[error("EAL worker lcore {0} is busy")]
    Busy(u32),
    /// `rte_eal_remote_launch` failed.
    #[error("cannot launch on lcore {lcore}: rte_eal_remote_launch returned {code}")]
    Launch {
        /// The lcore.
        lcore: u32,
        /// Its return value.
        code: i32,
    },
    /// The closure panicked.
    #[error("the closure on lcore {0} panicked")]
    Panicked(u32),
}

/// A closure to run on an EAL worker lcore, under a thread name.
pub struct WorkerJob<'a, T> {
    /// The worker lcore.
    pub lcore: u32,
    /// The worker thread's name while the closure runs (at most 15 bytes are kept).
    pub name: String,
    /// The closure.
    pub job: Box<dyn FnOnce() -> T + Send + 'a>,
}

impl<T> std::fmt::Debug for WorkerJob<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerJob")
            .field("lcore", &self.lcore)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The function type `rte_eal_remote_launch` runs.
type LcoreFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// One launched closure: what the trampoline runs on the worker.
struct Task<'a> {
    name: CString,
    run: Box<dyn FnMut() + Send + 'a>,
}

impl Eal {
    /// The main lcore's id.
    pub fn main_lcore(&self) -> u32 {
        // SAFETY: EAL is up (`self` exists); a plain query.
        unsafe { dpdk_sys::rte_get_main_lcore() }
    }

    /// What this EAL runs lcore `id` as.
    pub fn lcore_role(&self, id: u32) -> LcoreRole {
        if id >= dpdk_sys::RTE_MAX_LCORE {
            return LcoreRole::Off;
        }
        // SAFETY: EAL is up and `id` is below RTE_MAX_LCORE; a plain query of its lcore
        // table (true for lcores with the EAL role, not for service or non-EAL ones).
        let enabled = unsafe { dpdk_sys::rte_lcore_is_enabled(id) } != 0;
        match (enabled, id == self.main_lcore()) {
            (false, _) => LcoreRole::Off,
            (true, true) => LcoreRole::Main,
            (true, false) => LcoreRole::Worker,
        }
    }

    /// The worker lcores of this EAL, in id order.
    pub fn worker_lcores(&self) -> Vec<u32> {
        (0..dpdk_sys::RTE_MAX_LCORE)
            .filter(|&id| self.lcore_role(id) == LcoreRole::Worker)
            .collect()
    }

    /// The CPU lcore `id` runs on (the first of its CPU set), if it is an lcore of this EAL.
    pub fn lcore_cpu(&self, id: u32) -> Option<u32> {
        if self.lcore_role(id) == LcoreRole::Off {
            return None;
        }
        // SAFETY: EAL is up and `id` is an enabled lcore; a plain query.
        let cpu = unsafe { dpdk_sys::rte_lcore_to_cpu_id(id as c_int) };
        u32::try_from(cpu).ok()
    }

    /// Runs each job on its EAL worker lcore (`rte_eal_remote_launch`: the worker's thread,
    /// renamed `job.name` while it runs, is pinned to that lcore's CPUs) while `main` runs
    /// on the calling thread, which must be the main lcore's. Returns once `main` and every
    /// job have returned: `main`'s value, and each job's in the order given. A panic in
    /// `main` is resumed after the jobs have returned, so `main` must make them return.
    pub fn run_on_workers<'a, T: Send + 'a, R>(
        &self,
        jobs: Vec<WorkerJob<'a, T>>,
        main: impl FnOnce() -> R,
    ) -> Result<(R, Vec<Result<T, WorkerError>>), WorkerError> {
        if super::lcore_id() != Some(self.main_lcore()) {
            return Err(WorkerError::NotMainLcore);
        }
        for (k, j) in jobs.iter().enumerate() {
            if self.lcore_role(j.lcore) != LcoreRole::Worker {
                return Err(WorkerError::NotWorker(j.lcore));
            }
            // SAFETY: EAL is up and `j.lcore` is a worker lcore; a plain query.
            let state = unsafe { dpdk_sys::rte_eal_get_lcore_state(j.lcore) };
            if state != dpdk_sys::WAIT || jobs[..k].iter().any(|o| o.lcore == j.lcore) {
                return Err(WorkerError::Busy(j.lcore));
            }
        }
        let mut outs: Vec<Option<std::thread::Result<T>>> = jobs.iter().map(|_| None).collect();
        let lcores: Vec<u32> = jobs.iter().map(|j| j.lcore).collect();
        let mut tasks: Vec<Task<'_>> = jobs
            .into_iter()
            .zip(outs.iter_mut())
            .map(|(j, out)| {
                let mut job = Some(j.job);
                let name = CString::new(j.name.replace('\0', "")).unwrap_or_default();
                Task {
                    name,
                    run: Box::new(move || {
                        if let Some(job) = job.take() {
                            *out = Some(panic::catch_unwind(AssertUnwindSafe(job)));
                        }
                    }),
                }
            })
            .collect();
        let mut launched = vec![None; tasks.len()];
        for (k, task) in tasks.iter_mut().enumerate() {
            let arg = std::ptr::from_mut::<Task<'_>>(task).cast::<c_void>();
            // SAFETY: `arg` points to a Task that is neither moved nor dropped until
            // rte_eal_wait_lcore below has returned for this lcore, which happens before this
            // function returns or unwinds (`main` runs under catch_unwind); nothing else
            // touches the Task meanwhile. The lcore is a worker in the WAIT state and we are
            // on the main lcore, as rte_eal_remote_launch requires.
            let ret = unsafe {
                dpdk_sys::rte_eal_remote_launch(Some(trampoline as LcoreFn), arg, lcores[k])
            };
            launched[k] = Some(ret);
        }
        let result = panic::catch_unwind(AssertUnwindSafe(main));
        for (k, ret) in launched.iter().enumerate() {
            if *ret == Some(0) {
                // SAFETY: called from the main lcore for a worker we launched; it blocks until
                // the worker's function has returned.
                unsafe { dpdk_sys::rte_eal_wait_lcore(lcores[k]) };
            }
        }
        drop(tasks);
        let value = match result {
            Ok(v) => v,
            Err(p) => panic::resume_unwind(p),
        };
        let results = outs
            .into_iter()
            .zip(launched)
            .zip(lcores)
            .map(|((out, ret), lcore)| match (ret, out) {
                (Some(0), Some(Ok(v))) => Ok(v),
                (Some(0), _) => Err(WorkerError::Panicked(lcore)),
                (code, _) => Err(WorkerError::Launch {
                    lcore,
                    code: code.unwrap_or(-1),
                }),
            })
            .collect();
        Ok((value, results))
    }
}

/// Names the calling thread (at most 15 bytes are kept); returns its previous name.
fn rename_thread(name: &CString) -> Option<CString> {
    let mut old = [0 as c_char; 16];
    // SAFETY: `old` has room for the 16 bytes pthread_getname_np may write (NUL included);
    // the thread handle is the calling thread's.
    let got =
        unsafe { libc::pthread_getname_np(libc::pthread_self(), old.as_mut_ptr(), old.len()) };
    let mut short = name.as_bytes().to_vec();
    short.truncate(15);
    let short = CString::new(short).ok()?;
    // SAFETY: `short` is a NUL-terminated string of at most 15 bytes, as Linux requires.
    unsafe { libc::pthread_setname_np(libc::pthread_self(), short.as_ptr()) };
    if got != 0 {
        return None;
    }
    // SAFETY: pthread_getname_np succeeded, so `old` holds a NUL-terminated string.
    Some(unsafe { std::ffi::CStr::from_ptr(old.as_ptr()) }.to_owned())
}

/// What EAL calls on the worker: runs the [`Task`] `arg` points to under its name.
extern "C" fn trampoline(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the Task `run_on_workers` launched, alive and untouched by others
    // until this function returns (see there).
    let task = unsafe { &mut *arg.cast::<Task<'static>>() };
    let old = rename_thread(&task.name);
    // Panics are caught inside `run`: none crosses into C.
    (task.run)();
    if let Some(old) = old {
        rename_thread(&old);
    }
    0
}
