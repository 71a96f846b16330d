//! The data plane's configuration parser (`dataplane::config`): arbitrary text as a TOML
//! file, and arbitrary `--fault` override strings. Errors are typed; nothing panics, and
//! every accessor of an accepted configuration works.
//!
//! Input: `[file text] NUL [override spec]` (both UTF-8; other inputs are skipped).
#![no_main]

use dataplane::config::{parse_mac, Config};
use dataplane::port::fault::FaultConfig;
use dataplane::port::open::PortPlan;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (text, spec) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let (Ok(text), Ok(spec)) = (std::str::from_utf8(text), std::str::from_utf8(spec)) else {
        return;
    };
    match Config::parse(text, "fuzz.toml") {
        Ok(cfg) => {
            let _ = cfg.needs_eal();
            let _ = cfg.eal.argv(&["--extra".to_string()]);
            for p in &cfg.ports {
                assert!(cfg.port(p.name()).is_some(), "every port is found by name");
                let _ = p.device();
                assert_eq!(p.settings().name, p.name(), "settings keep the name");
                if let Some(ip) = p.ipv4 {
                    let _ = ip.contains(std::net::Ipv4Addr::new(10, 0, 0, 1));
                }
                if let Some(f) = &p.fault {
                    let mut f = f.clone();
                    let _ = f.is_active();
                    if f.apply_overrides(spec).is_ok() {
                        let _ = f.is_active();
                    }
                }
            }
            assert_eq!(PortPlan::from(&cfg).ports.len(), cfg.ports.len());
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.is_empty());
        }
    }
    let mut f = FaultConfig::default();
    if f.apply_overrides(spec).is_ok() {
        let _ = f.is_active();
    }
    let _ = parse_mac(spec);
});
