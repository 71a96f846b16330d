//! EAL start-up failures, in this test binary's own process: a failed `rte_eal_init` is
//! reported with DPDK's reason, and EAL cannot be started again afterwards.
#![cfg(feature = "dpdk")]

use dataplane::dpdk::{Eal, EalError};

#[test]
fn failed_init_reports_rte_errno_and_blocks_a_retry() {
    let args: Vec<String> = ["--no-huge", "-m", "512", "--no-pci", "--no-such-eal-option"]
        .map(String::from)
        .to_vec();
    let err = Eal::init(&args).unwrap_err();
    match &err {
        EalError::Init { args, reason, code } => {
            assert_eq!(*code, 22, "EINVAL");
            assert_eq!(reason, "Invalid argument");
            assert!(args.starts_with("dataplane --no-huge"), "{args}");
            assert!(args.contains("--file-prefix=dataplane-"), "{args}");
        }
        other => panic!("expected EalError::Init, got {other:?}"),
    }
    let line = err.to_string();
    assert!(!line.contains('\n'), "one line: {line}");
    assert!(
        line.contains("rte_eal_init(") && line.contains("Invalid argument"),
        "{line}"
    );
    // DPDK does not support a second rte_eal_init in one process.
    let again = Eal::init(&["--no-huge".to_string(), "-m".into(), "512".into()]).unwrap_err();
    assert!(matches!(again, EalError::AlreadyInitialised), "{again}");
}

#[test]
fn nul_bytes_in_arguments_are_rejected_before_init() {
    let err = Eal::init(&["--vdev=net_null0\0x".to_string(), "--no-huge".into()]).unwrap_err();
    assert!(
        matches!(err, EalError::InvalidArg(ref a) if a.contains("net_null0")),
        "{err}"
    );
}
