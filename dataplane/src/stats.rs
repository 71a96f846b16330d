//! Statistics output: a periodic one-line rate report and an aligned summary table.

use std::fmt::Write as _;
use std::time::Duration;

use crate::clock::Instant;

use crate::port::{Port, PortStats};

/// Writes a line to stdout, ignoring errors (a closed pipe must not abort the program the
/// way `println!` would).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stdout().lock(), $($arg)*);
    }};
}

/// Formats a rate with an SI prefix: `12.3 M`, `987 k`, `12`.
pub fn si(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2} G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} k", v / 1e3)
    } else {
        format!("{v:.0} ")
    }
}

/// Prints one line of per-port rates every `interval`.
#[derive(Debug)]
pub struct RateReporter {
    interval: Duration,
    start: Instant,
    last: Instant,
    prev: Vec<PortStats>,
}

impl RateReporter {
    /// A reporter starting now; an `interval` of zero never reports.
    pub fn new(interval: Duration, now: Instant, ports: usize) -> RateReporter {
        RateReporter {
            interval,
            start: now,
            last: now,
            prev: vec![PortStats::default(); ports],
        }
    }

    /// True when the next report is due (so callers gather counters only then).
    pub fn due(&self, now: Instant) -> bool {
        !self.interval.is_zero() && now.saturating_since(self.last) >= self.interval
    }

    /// The report line of `ports` when an interval has passed since the last one (their
    /// names and counters are read only then).
    pub fn poll_ports<P: Port>(&mut self, now: Instant, ports: &[P]) -> Option<String> {
        if !self.due(now) {
            return None;
        }
        let named: Vec<(&str, PortStats)> = ports
            .iter()
            .map(|p| (p.info().name.as_str(), p.stats()))
            .collect();
        self.poll(now, &named)
    }

    /// Returns the report line when an interval has passed since the last one.
    pub fn poll(&mut self, now: Instant, ports: &[(&str, PortStats)]) -> Option<String> {
        if !self.due(now) {
            return None;
        }
        let dt = now.saturating_since(self.last).as_secs_f64();
        let mut line = format!("[{:8.2}s]", now.saturating_since(self.start).as_secs_f64());
        self.prev.resize(ports.len(), PortStats::default());
        for (i, (name, s)) in ports.iter().enumerate() {
            let p = self.prev[i];
            let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
            let _ = write!(
                line,
                "{} {}: rx {}pps {}bit/s tx {}pps {}bit/s drop rx {} tx {}",
                if i == 0 { "" } else { " |" },
                name,
                si(rate(s.rx_packets, p.rx_packets)),
                si(rate(s.rx_bytes, p.rx_bytes) * 8.0),
                si(rate(s.tx_packets, p.tx_packets)),
                si(rate(s.tx_bytes, p.tx_bytes) * 8.0),
                s.rx_dropped.saturating_sub(p.rx_dropped),
                s.tx_dropped.saturating_sub(p.tx_dropped),
            );
            self.prev[i] = *s;
        }
        self.last = now;
        Some(line)
    }
}

/// A text table with a header row; the first column is left-aligned, the others right.
#[derive(Clone, Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells are empty).
    pub fn row<S: ToString>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows
            .push(cells.into_iter().map(|c| c.to_string()).collect());
    }

    /// Number of data rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when the table has no data row.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cols = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let mut width = vec![0; cols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, w) in width.iter().enumerate() {
                let c = r.get(i).map(String::as_str).unwrap_or("");
                if i == 0 {
                    let _ = write!(line, "{c:<w$}");
                } else {
                    let _ = write!(line, "  {c:>w$}");
                }
            }
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock;

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(["port", "rx", "tx"]);
        t.row(["p0", "1", "123456"]);
        t.row(["longname", "22", "3"]);
        let s = t.to_string();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "port      rx      tx");
        assert_eq!(lines[1], "p0         1  123456");
        assert_eq!(lines[2], "longname  22       3");
    }

    #[test]
    fn reporter_reports_rates_once_per_interval() {
        let t0 = clock::now();
        let mut r = RateReporter::new(Duration::from_secs(1), t0, 1);
        let s = PortStats {
            rx_packets: 2_000_000,
            rx_bytes: 125_000_000,
            ..PortStats::default()
        };
        assert!(r
            .poll(t0 + Duration::from_millis(500), &[("p0", s)])
            .is_none());
        let line = r.poll(t0 + Duration::from_secs(2), &[("p0", s)]).unwrap();
        assert_eq!(
            line,
            "[    2.00s] p0: rx 1.00 Mpps 500.00 Mbit/s tx 0 pps 0 bit/s drop rx 0 tx 0"
        );
        assert!(r
            .poll(t0 + Duration::from_millis(2500), &[("p0", s)])
            .is_none());
        let mut never = RateReporter::new(Duration::ZERO, t0, 1);
        assert!(never
            .poll(t0 + Duration::from_secs(9), &[("p0", s)])
            .is_none());
    }

    #[test]
    fn si_prefixes() {
        assert_eq!(si(999.0), "999 ");
        assert_eq!(si(1500.0), "1.5 k");
        assert_eq!(si(2.5e9), "2.50 G");
    }
}
