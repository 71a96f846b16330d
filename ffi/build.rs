//! Finds the system's DPDK (22.11) with pkg-config, generates bindings for the parts the
//! data plane uses, and compiles the C shim for DPDK's static-inline fast path.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const INSTALL_HINT: &str = "libdpdk (DPDK >= 22.11) not found by pkg-config: install it with \
`apt-get install -y libdpdk-dev pkg-config libclang-dev` (or run testbed/setup)";

fn main() {
    println!("cargo::rerun-if-changed=wrapper.h");
    println!("cargo::rerun-if-changed=shim.h");
    println!("cargo::rerun-if-changed=shim.c");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG_PATH");

    let lib = match pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
    {
        Ok(lib) => lib,
        Err(_) => {
            println!("cargo::error={INSTALL_HINT}");
            return;
        }
    };
    let cflags = dpdk_cflags();

    let mut shim = cc::Build::new();
    shim.file("shim.c").include(".").warnings(false);
    for flag in &cflags {
        shim.flag(flag);
    }
    shim.compile("dpdk_shim");

    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_arg("-I.")
        .clang_args(cflags.iter().cloned())
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .derive_debug(false)
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .prepend_enum_name(false);
    for pattern in ALLOWED_FUNCTIONS {
        builder = builder.allowlist_function(pattern);
    }
    for pattern in ALLOWED_TYPES {
        builder = builder.allowlist_type(pattern);
    }
    for pattern in ALLOWED_VARS {
        builder = builder.allowlist_var(pattern);
    }
    let bindings = builder
        .generate()
        .unwrap_or_else(|e| panic!("bindgen over DPDK headers failed: {e}"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");

    // Keep the include paths visible to dependants (`DEP_DPDK_INCLUDE`).
    let includes: Vec<String> = lib
        .include_paths
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    println!("cargo::metadata=include={}", includes.join(":"));
}

/// `pkg-config --cflags libdpdk` split into arguments: include paths, `-include rte_config.h`
/// and the `-march=` DPDK was built for, which clang needs to see the same struct layouts
/// and intrinsics.
fn dpdk_cflags() -> Vec<String> {
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let output = Command::new(pkg_config)
        .args(["--cflags", "libdpdk"])
        .output()
        .expect("run pkg-config --cflags libdpdk");
    assert!(
        output.status.success(),
        "pkg-config --cflags libdpdk failed"
    );
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

const ALLOWED_FUNCTIONS: &[&str] = &[
    "dpdk_shim_.*",
    "rte_eal_.*",
    "rte_eth_.*",
    "rte_pktmbuf_.*",
    "rte_mempool_.*",
    "rte_mbuf_.*",
    "rte_lcore_.*",
    "rte_memzone_.*",
    "rte_malloc.*",
    "rte_zmalloc.*",
    "rte_free",
    "rte_strerror",
    "rte_socket_id",
    "rte_socket_count",
    "rte_get_tsc_hz",
    "rte_get_main_lcore",
    "rte_vdev_init",
    "rte_vdev_uninit",
    "rte_version",
    "rte_exit",
    "rte_thread_is_intr",
    "rte_intr_instance_alloc",
    "rte_intr_instance_free",
    "rte_intr_fd_set",
    "rte_intr_type_set",
    "rte_intr_callback_register",
    "rte_tel_data_.*",
    "rte_telemetry_register_cmd",
];

const ALLOWED_TYPES: &[&str] = &[
    "rte_mbuf",
    "rte_mempool",
    "rte_eth_.*",
    "rte_ether_addr",
    "rte_memzone",
    "rte_eth_dev_info",
    "rte_tel_data",
    "rte_tel_value_type",
    "telemetry_cb",
];

const ALLOWED_VARS: &[&str] = &[
    "RTE_ETH_.*",
    "RTE_MBUF_.*",
    "RTE_PKTMBUF_HEADROOM",
    "RTE_MAX_ETHPORTS",
    "RTE_MAX_LCORE",
    "RTE_ETHER_.*",
    "RTE_MEMPOOL_.*",
    "SOCKET_ID_ANY",
    "LCORE_ID_ANY",
    "E_RTE_.*",
    "RTE_MAX_ERRNO",
    "RTE_TEL_.*",
    "RTE_INTR_.*",
];
