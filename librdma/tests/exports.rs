//! The shared object exports exactly the ABI of Debian's rdma-core 44 libraries: every
//! symbol that `libibverbs.so.1` and `librdmacm.so.1` define as their default version
//! (`name@@NODE`), under the same node, and no other symbol (no Rust internals). Programs
//! and provider libraries are all linked with immediate binding, so one missing name or
//! version makes them fail to load.
//!
//! The reference is the installed libraries themselves (packages `libibverbs1` and
//! `librdmacm1`), read with binutils' `readelf`. Their compatibility-only versions
//! (`name@IBVERBS_1.0`, the 2006 ABI of libibverbs 1.0, and `ibv_register_driver@IBVERBS_1.1`)
//! serve only binaries linked against libibverbs 1.0 and are not required.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One dynamic symbol definition: `name@@version` (default), `name@version` (compatibility
/// only), or an unversioned `name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Export {
    name: String,
    version: Option<String>,
    default: bool,
}

impl fmt::Display for Export {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.version, self.default) {
            (Some(v), true) => write!(f, "{}@@{v}", self.name),
            (Some(v), false) => write!(f, "{}@{v}", self.name),
            (None, _) => write!(f, "{} (unversioned)", self.name),
        }
    }
}

/// The symbol definitions of a shared object's dynamic symbol table, without the absolute
/// symbols some linkers add for the version nodes' names.
fn dynamic_exports(object: &Path) -> BTreeSet<Export> {
    let output = Command::new("readelf")
        .args(["--dyn-syms", "--wide"])
        .arg(object)
        .output()
        .unwrap_or_else(|e| {
            panic!("running readelf: {e}; install binutils (apt-get install -y binutils)")
        });
    assert!(
        output.status.success(),
        "readelf --dyn-syms {} failed: {}",
        object.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut exports = BTreeSet::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        // Num: Value Size Type Bind Vis Ndx Name
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [num, _value, _size, _type, bind, _vis, ndx, name, ..] = fields[..] else {
            continue;
        };
        if !num.ends_with(':') || ndx == "UND" || !["GLOBAL", "WEAK"].contains(&bind) {
            continue;
        }
        let export = match name.split_once('@') {
            Some((name, version)) => match version.strip_prefix('@') {
                Some(version) => Export {
                    name: name.into(),
                    version: Some(version.into()),
                    default: true,
                },
                None => Export {
                    name: name.into(),
                    version: Some(version.into()),
                    default: false,
                },
            },
            None if ndx == "ABS" => continue,
            None => Export {
                name: name.into(),
                version: None,
                default: true,
            },
        };
        exports.insert(export);
    }
    exports
}

/// Everything Debian's rdma-core 44 libraries export; fails if they are not installed.
fn rdma_core_exports() -> BTreeSet<Export> {
    let dir = format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH);
    let mut exports = BTreeSet::new();
    for (library, package) in [
        ("libibverbs.so.1", "libibverbs1"),
        ("librdmacm.so.1", "librdmacm1"),
    ] {
        let path = Path::new(&dir).join(library);
        assert!(
            path.exists(),
            "{} not found: the exported ABI is checked against Debian's rdma-core 44 libraries; \
             install package {package} (apt-get install -y libibverbs1 librdmacm1)",
            path.display()
        );
        let found = dynamic_exports(&path);
        assert!(!found.is_empty(), "{} exports nothing", path.display());
        exports.extend(found);
    }
    exports
}

/// The shared object this crate builds, next to the test binary (`target/<profile>/deps`).
fn our_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let path = exe
        .parent()
        .expect("the test binary's directory")
        .join("librdma_dataplane.so");
    assert!(
        path.exists(),
        "{} not found: cargo builds it with this test (cargo build -p librdma)",
        path.display()
    );
    path
}

/// The required exports: the default version of every symbol of rdma-core 44.
fn required(rdma_core: &BTreeSet<Export>) -> BTreeSet<Export> {
    rdma_core.iter().filter(|e| e.default).cloned().collect()
}

/// `exports` as one line per version node: `NODE (n): a b c`.
fn by_node<'a>(exports: impl IntoIterator<Item = &'a Export>) -> String {
    let mut nodes: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for e in exports {
        nodes
            .entry(e.version.as_deref().unwrap_or("(unversioned)"))
            .or_default()
            .push(&e.name);
    }
    nodes
        .iter()
        .map(|(node, names)| format!("  {node} ({}): {}\n", names.len(), names.join(" ")))
        .collect()
}

#[test]
fn every_rdma_core_symbol_is_exported_with_its_version() {
    let rdma_core = rdma_core_exports();
    let ours = dynamic_exports(&our_library());
    let mut missing = Vec::new();
    let mut misversioned = Vec::new();
    for want in required(&rdma_core) {
        if ours.contains(&want) {
            continue;
        }
        let have: Vec<String> = ours
            .iter()
            .filter(|e| e.name == want.name)
            .map(ToString::to_string)
            .collect();
        if have.is_empty() {
            missing.push(want);
        } else {
            misversioned.push(format!("  {want}: exported as {}\n", have.join(", ")));
        }
    }
    assert!(
        missing.is_empty() && misversioned.is_empty(),
        "librdma_dataplane.so lacks {} of the {} default exports of rdma-core 44.\n\
         Not exported ({}), by version node:\n{}\
         Exported under another version ({}; give the definition its node with symver!):\n{}",
        missing.len() + misversioned.len(),
        required(&rdma_core).len(),
        missing.len(),
        by_node(&missing),
        misversioned.len(),
        misversioned.concat(),
    );
}

#[test]
fn nothing_but_rdma_core_symbols_is_exported() {
    let rdma_core = rdma_core_exports();
    let names: BTreeSet<&str> = rdma_core.iter().map(|e| e.name.as_str()).collect();
    let ours = dynamic_exports(&our_library());
    let extra: Vec<&Export> = ours
        .iter()
        .filter(|e| !names.contains(e.name.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "librdma_dataplane.so exports {} names that rdma-core 44 does not (only the names of \
         exports.map may be #[no_mangle]):\n{}",
        extra.len(),
        by_node(extra.iter().copied()),
    );
    let foreign: Vec<String> = ours
        .iter()
        .filter(|e| names.contains(e.name.as_str()) && e.version.is_some())
        .filter(|e| !rdma_core.contains(e))
        .map(|e| format!("  {e}\n"))
        .collect();
    assert!(
        foreign.is_empty(),
        "librdma_dataplane.so exports versions rdma-core 44 does not have:\n{}",
        foreign.concat()
    );
}

/// The `(name, node)` pairs of a version script of `NODE { global: a; b; local: *; } PARENT;`
/// blocks.
fn version_script(text: &str) -> BTreeSet<(String, String)> {
    let text: String = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let text = strip_c_comments(&text);
    let mut pairs = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(open) = rest.find('{') {
        let node = rest[..open]
            .rsplit([';', '}'])
            .next()
            .unwrap_or("")
            .split_whitespace()
            .last()
            .unwrap_or("")
            .to_string();
        let close = rest[open..].find('}').expect("unclosed version node") + open;
        let body = &rest[open + 1..close];
        let mut global = true;
        for item in body.split(';') {
            let mut item = item.trim();
            for (label, is_global) in [("global:", true), ("local:", false)] {
                if let Some(after) = item.strip_prefix(label) {
                    global = is_global;
                    item = after.trim();
                }
            }
            if global && !item.is_empty() {
                pairs.insert((item.to_string(), node.clone()));
            }
        }
        rest = &rest[close + 1..];
    }
    pairs
}

/// `text` without its `/* ... */` comments.
fn strip_c_comments(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        rest = rest[start..]
            .find("*/")
            .map_or("", |end| &rest[start + end + 2..]);
    }
    out.push_str(rest);
    out
}

#[test]
fn exports_map_lists_exactly_the_rdma_core_symbols() {
    let map_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("exports.map");
    let map = version_script(&std::fs::read_to_string(&map_path).expect("read exports.map"));
    let want: BTreeSet<(String, String)> = required(&rdma_core_exports())
        .into_iter()
        .map(|e| (e.name, e.version.expect("a default export has a version")))
        .collect();
    let format = |pairs: Vec<&(String, String)>| -> String {
        pairs.iter().map(|(n, v)| format!("  {n}@@{v}\n")).collect()
    };
    assert!(
        map == want,
        "exports.map differs from rdma-core 44.\nNot in exports.map:\n{}In exports.map only:\n{}",
        format(want.difference(&map).collect()),
        format(map.difference(&want).collect()),
    );
}

#[test]
fn version_scripts_are_parsed_per_node() {
    let pairs = version_script(
        "/* c */ A_1 {\n global:\n\ta; b;\n local: *;\n};\nA_2 { global: c; } A_1;\n# x\nP { d; };",
    );
    let pairs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [("a", "A_1"), ("b", "A_1"), ("c", "A_2"), ("d", "P")]
    );
}
