//! Generates the rdma-core ABI (struct layouts, enums, constants) from the system's
//! libibverbs and librdmacm headers, and links the shared object with rdma-core's symbol
//! version nodes and the `libibverbs.so.1` soname.

use std::env;
use std::path::PathBuf;

const INSTALL_HINT: &str = "infiniband/verbs.h or rdma/rdma_cma.h not found: install them with \
`apt-get install -y libibverbs-dev librdmacm-dev libclang-dev` (or run testbed/setup)";

fn main() {
    println!("cargo::rerun-if-changed=wrapper.h");
    println!("cargo::rerun-if-changed=exports.map");
    for header in [
        "/usr/include/infiniband/verbs.h",
        "/usr/include/rdma/rdma_cma.h",
    ] {
        if !std::path::Path::new(header).exists() {
            println!("cargo::error={INSTALL_HINT}");
            return;
        }
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_type("ibv_.*|_ibv_.*|verbs_context|rdma_.*|ib_uverbs_.*|ib_user_.*")
        .allowlist_var("IBV_.*|RDMA_.*|RAI_.*|_RDMA_.*")
        .blocklist_function(".*")
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .generate_comments(false)
        .prepend_enum_name(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen over the rdma-core headers failed: {e}"));
    bindings
        .write_to_file(out.join("abi.rs"))
        .expect("write abi.rs");

    // rdma-core's version nodes (IBVERBS_1.0 ... IBVERBS_1.14, IBVERBS_PRIVATE_34,
    // RDMACM_1.0 ... 1.3) and soname: binaries linked against rdma-core find every version
    // they need here.
    let map =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("manifest dir")).join("exports.map");
    println!(
        "cargo::rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    // The map names every symbol of both libraries; that each one is defined (with its
    // version) is checked against the installed rdma-core libraries by tests/exports.rs.
    println!("cargo::rustc-cdylib-link-arg=-Wl,--undefined-version");
}
