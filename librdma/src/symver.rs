//! Symbol versions for the exported entry points.
//!
//! rustc links a cdylib with its own anonymous version script that lists every
//! `#[no_mangle]` name, and that list takes precedence over the nodes of `exports.map`: a
//! plain `#[no_mangle]` function is exported unversioned (`name`, not
//! `name@@IBVERBS_1.1`). `symver!` gives each name its rdma-core version node with a
//! `.symver name, name@@@NODE` directive, which renames the definition to the versioned one
//! in the object file, before the version scripts are consulted.
//!
//! The directive only applies to a definition in the same object file as the directive, and
//! rustc keeps the items of one module in one codegen unit: invoke `symver!` in the module
//! that defines the functions it names. A name given here but not defined in that module stays
//! unversioned or missing; `tests/exports.rs` reports both.

/// Puts each listed `#[no_mangle]` item of the calling module under its version node, e.g.
/// `symver! { "IBVERBS_1.1": ibv_wc_status_str, ibv_node_type_str; "IBVERBS_1.0": ibv_rate_to_mult; }`.
macro_rules! symver {
    ($($node:literal: $($name:ident),+ $(,)?;)+) => {
        ::std::arch::global_asm!(
            $($(::std::concat!(
                ".symver ", ::std::stringify!($name), ", ",
                ::std::stringify!($name), "@@@", $node
            ),)+)+
        );
    };
}

pub(crate) use symver;
