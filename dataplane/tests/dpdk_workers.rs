//! `Eal::run_on_workers`, in this test binary's own process (EAL `-l 0-1`): a closure runs
//! on its EAL worker lcore, on that lcore's CPU, under the name given, while `main` runs on
//! the calling thread; borrowed data is handed back; a panic on a worker is reported, and
//! lcores that are not free workers are refused before anything runs.

#![cfg(feature = "dpdk")]

mod dpdk_common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use dataplane::dpdk::{lcore_id, Eal, LcoreRole, WorkerError, WorkerJob};
use dpdk_common::eal_args;

/// The calling thread's name and `Cpus_allowed_list`.
fn this_thread() -> (String, String) {
    let comm = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let cpus = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap();
    (comm.trim().to_string(), cpus.trim().to_string())
}

/// One test: EAL starts once per process and its main lcore is the thread that started it.
#[test]
fn closures_run_on_worker_lcores() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        if std::env::var_os("DATAPLANE_TEST_FEW_CPUS").is_some() {
            eprintln!("skipped: {cpus} CPU available, two lcores need two");
            return;
        }
        panic!(
            "{cpus} CPU available: this test needs two (set DATAPLANE_TEST_FEW_CPUS=1 to skip it)"
        );
    }
    let eal = Eal::init(&eal_args("workers", &["-l", "0-1"])).unwrap();
    assert_eq!(eal.main_lcore(), 0);
    assert_eq!(lcore_id(), Some(0));
    assert_eq!(eal.lcore_role(0), LcoreRole::Main);
    assert_eq!(eal.lcore_role(1), LcoreRole::Worker);
    assert_eq!(eal.lcore_role(2), LcoreRole::Off);
    assert_eq!(eal.lcore_role(100_000), LcoreRole::Off);
    assert_eq!(eal.lcore_cpu(1), Some(1));
    assert_eq!(eal.lcore_cpu(2), None);

    // A job borrows from this stack frame, runs until `main` says stop, and returns.
    let stop = AtomicBool::new(false);
    let spins = AtomicU64::new(0);
    let job = WorkerJob {
        lcore: 1,
        name: "lcore-1".into(),
        job: Box::new(|| {
            while !stop.load(Ordering::Relaxed) {
                spins.fetch_add(1, Ordering::Relaxed);
                std::hint::spin_loop();
            }
            (lcore_id(), this_thread())
        }),
    };
    let (main, results) = eal
        .run_on_workers(vec![job], || {
            while spins.load(Ordering::Relaxed) == 0 {
                std::thread::yield_now();
            }
            stop.store(true, Ordering::Relaxed);
            "main done"
        })
        .unwrap();
    assert_eq!(main, "main done");
    let (lcore, (name, cpus)) = results.into_iter().next().unwrap().unwrap();
    assert_eq!(lcore, Some(1));
    assert_eq!(name, "lcore-1");
    assert_eq!(cpus, "1");
    assert!(spins.load(Ordering::Relaxed) > 0);

    // A panic stays on the worker, which is free again afterwards.
    let job = WorkerJob {
        lcore: 1,
        name: "boom".into(),
        job: Box::new(|| -> u32 { panic!("on purpose") }),
    };
    // Silently: no message, and no backtrace to symbolise while other tests need the CPUs.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let (_, results) = eal.run_on_workers(vec![job], || ()).unwrap();
    std::panic::set_hook(hook);
    assert!(
        matches!(results[..], [Err(WorkerError::Panicked(1))]),
        "{results:?}"
    );
    let job = |lcore| WorkerJob {
        lcore,
        name: "again".into(),
        job: Box::new(move || lcore),
    };
    let (_, results) = eal.run_on_workers(vec![job(1)], || ()).unwrap();
    assert!(matches!(results[..], [Ok(1)]), "{results:?}");

    // Refused before anything runs: the main lcore, an lcore EAL does not run, one worker
    // given twice, and a caller that is not the main lcore's thread.
    let refused = |jobs| eal.run_on_workers(jobs, || ()).map(|_| ()).unwrap_err();
    assert!(matches!(refused(vec![job(0)]), WorkerError::NotWorker(0)));
    assert!(matches!(refused(vec![job(2)]), WorkerError::NotWorker(2)));
    assert!(matches!(
        refused(vec![job(1), job(1)]),
        WorkerError::Busy(1)
    ));
    let from_other_thread = std::thread::scope(|s| {
        s.spawn(|| eal.run_on_workers(vec![job(1)], || ()).map(|_| ()))
            .join()
            .unwrap()
    });
    assert!(matches!(from_other_thread, Err(WorkerError::NotMainLcore)));
}
