//! The `rping` and `perf` commands from the outside: the in-process loopback over the
//! software pair, and one-line usage errors with exit code 2.

use std::process::Command;

fn dataplane(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn perf_loopback_on_the_software_pair() {
    let (code, out, err) = dataplane(&[
        "perf",
        "write",
        "--loopback",
        "-s",
        "4096",
        "-n",
        "200",
        "--crc",
        "--config",
        "configs/rdma-soft-pair.toml",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("BW peak[MB/sec]"), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with(" 4096       200 ")),
        "{out}"
    );
    assert!(out.contains("rdma-crc-errors: 0"), "{out}");
}

#[test]
fn usage_errors_are_one_line_and_exit_2() {
    for args in [
        &["rping", "--config", "configs/rdma-soft-pair.toml"][..],
        &["rping", "-c", "--config", "configs/rdma-soft-pair.toml"][..],
        &[
            "rping",
            "-s",
            "-S",
            "4",
            "--config",
            "configs/rdma-soft-pair.toml",
        ][..],
        &[
            "perf",
            "atomic",
            "-s",
            "16",
            "--config",
            "configs/rdma-soft-pair.toml",
        ][..],
    ] {
        let (code, out, err) = dataplane(args);
        assert_eq!(code, 2, "{args:?}: {out}\n{err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}
