//! Fault injection: a middleware port that drops, reorders, duplicates, corrupts, truncates
//! and delays frames passing through any other port.
//!
//! Each fault has a rate (parts per million of frames). Decisions come from a seeded
//! pseudo-random generator, so a given seed and frame sequence always gives the same faults.
//! Faults are applied per frame in this order: drop, truncate, corrupt, duplicate, then
//! delay or reorder (hold back). Receive and transmit directions have separate state and
//! counters; which directions are affected is configurable.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};
use tcp::Lent;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use smoltcp::wire::{EthernetProtocol, IpAddress, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket};

use super::api::{PacketBuf, Port, PortInfo, PortOffloads, PortStats, VlanOffload};
use crate::frame::{parse_l2, IPV6_HLEN};
use crate::settings::{check_range, de_ranged};
use crate::telemetry::Dict;

/// A probability, in parts per million of frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rate(u32);

/// One million: the rate of "every frame".
const PPM: u32 = 1_000_000;

impl Rate {
    /// Never.
    pub const NEVER: Rate = Rate(0);
    /// Every frame.
    pub const ALWAYS: Rate = Rate(PPM);

    /// A rate in parts per million (`None` above 1 000 000).
    pub fn from_ppm(ppm: u32) -> Option<Rate> {
        (ppm <= PPM).then_some(Rate(ppm))
    }

    /// A rate in percent (`None` outside 0..=100).
    pub fn from_percent(pct: f64) -> Option<Rate> {
        (0.0..=100.0)
            .contains(&pct)
            .then(|| Rate((pct * 10_000.0).round() as u32))
    }

    /// The rate in parts per million.
    pub fn ppm(self) -> u32 {
        self.0
    }

    /// True for a rate above zero.
    pub fn is_active(self) -> bool {
        self.0 > 0
    }
}

/// Why a rate string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid rate {0:?} (expected e.g. \"1.5%\" or \"200ppm\", at most 100%)")]
pub struct RateError(pub String);

impl FromStr for Rate {
    type Err = RateError;

    /// Parses `"N%"`, `"Nppm"` or a bare number of percent.
    fn from_str(s: &str) -> Result<Rate, RateError> {
        let err = || RateError(s.to_string());
        let t = s.trim();
        if let Some(num) = t.strip_suffix("ppm") {
            let ppm: u32 = num.trim().parse().map_err(|_| err())?;
            Rate::from_ppm(ppm).ok_or_else(err)
        } else {
            let num = t.strip_suffix('%').unwrap_or(t).trim();
            let pct: f64 = num.parse().map_err(|_| err())?;
            if !pct.is_finite() {
                return Err(err());
            }
            Rate::from_percent(pct).ok_or_else(err)
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(10_000) {
            write!(f, "{}%", self.0 / 10_000)
        } else {
            write!(f, "{}ppm", self.0)
        }
    }
}

/// A rate is written `"1%"`, `"200ppm"` or as a number of percent.
impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Rate, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Rate;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a rate like \"1%\", \"200ppm\" or a number of percent")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Rate, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Rate, E> {
                self.visit_f64(v as f64)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Rate, E> {
                self.visit_f64(v as f64)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Rate, E> {
                Rate::from_percent(v)
                    .ok_or_else(|| E::custom(format!("invalid rate {v} (must be 0..=100 percent)")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A word that is not one of a setting's choices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {setting} {given:?} (expected {choices})")]
pub struct ChoiceError {
    /// The setting, e.g. `direction`.
    pub setting: &'static str,
    /// The word given.
    pub given: String,
    /// The words accepted, as a phrase.
    pub choices: &'static str,
}

/// Which directions of a port the faults apply to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Direction {
    /// Received frames only.
    Rx,
    /// Transmitted frames only.
    Tx,
    /// Both directions (each with its own state).
    #[default]
    Both,
}

impl FromStr for Direction {
    type Err = ChoiceError;

    /// Parses `"rx"`, `"tx"` or `"both"`.
    fn from_str(s: &str) -> Result<Direction, ChoiceError> {
        match s {
            "rx" => Ok(Direction::Rx),
            "tx" => Ok(Direction::Tx),
            "both" => Ok(Direction::Both),
            _ => Err(ChoiceError {
                setting: "direction",
                given: s.to_string(),
                choices: "\"rx\", \"tx\" or \"both\"",
            }),
        }
    }
}

/// A direction is written as [`Direction::from_str`] reads it.
impl<'de> Deserialize<'de> for Direction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Direction, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// How a frame chosen for corruption is corrupted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CorruptMode {
    /// Flip one random bit anywhere in the frame (checksums then usually catch it).
    #[default]
    BitFlip,
    /// Flip one random bit of the TCP payload and recompute the TCP checksum, so only an
    /// upper-layer check (the MPA CRC) can detect it. Frames without TCP payload are left
    /// alone and counted as `corrupt_skipped`.
    TcpPayload,
}

impl FromStr for CorruptMode {
    type Err = ChoiceError;

    /// Parses `"bitflip"` or `"tcp-payload"`.
    fn from_str(s: &str) -> Result<CorruptMode, ChoiceError> {
        match s {
            "bitflip" => Ok(CorruptMode::BitFlip),
            "tcp-payload" => Ok(CorruptMode::TcpPayload),
            _ => Err(ChoiceError {
                setting: "corrupt mode",
                given: s.to_string(),
                choices: "\"bitflip\" or \"tcp-payload\"",
            }),
        }
    }
}

/// A corrupt mode is written as [`CorruptMode::from_str`] reads it.
impl<'de> Deserialize<'de> for CorruptMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CorruptMode, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// The faults to inject and their rates.
///
/// Deserialized from a configuration file's `[ports.fault]` section, whose keys are the
/// field names except for the times, given in microseconds: `reorder_max_hold_us` and
/// `delay_us`; missing keys keep their [`Default`]. The command line's `--fault` uses the
/// same keys ([`FaultConfig::apply_overrides`]).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
// `expecting` keeps the configuration's type error as it was (`invalid type: ..., expected
// struct FaultSection`, after the `[ports.fault]` section's former type).
#[serde(expecting = "struct FaultSection", deny_unknown_fields, default)]
pub struct FaultConfig {
    /// Seed of the pseudo-random decisions.
    pub seed: u64,
    /// Directions affected.
    pub direction: Direction,
    /// Frames dropped.
    pub drop: Rate,
    /// Frames held back and released after `reorder_depth` later frames.
    pub reorder: Rate,
    /// How many later frames overtake a held-back frame, 1..=1024.
    #[serde(deserialize_with = "de_depth")]
    pub reorder_depth: usize,
    /// A held-back frame is released after this long even if not enough frames followed.
    #[serde(rename = "reorder_max_hold_us", deserialize_with = "de_micros")]
    pub reorder_max_hold: Duration,
    /// Frames sent twice.
    pub duplicate: Rate,
    /// Frames corrupted.
    pub corrupt: Rate,
    /// How frames are corrupted.
    pub corrupt_mode: CorruptMode,
    /// Frames cut short (to a random length of at least one byte).
    pub truncate: Rate,
    /// Frames delayed by `delay_time`.
    pub delay: Rate,
    /// How long a delayed frame is held.
    #[serde(rename = "delay_us", deserialize_with = "de_micros")]
    pub delay_time: Duration,
}

impl Default for FaultConfig {
    fn default() -> FaultConfig {
        FaultConfig {
            seed: 1,
            direction: Direction::Both,
            drop: Rate::NEVER,
            reorder: Rate::NEVER,
            reorder_depth: 3,
            reorder_max_hold: Duration::from_millis(10),
            duplicate: Rate::NEVER,
            corrupt: Rate::NEVER,
            corrupt_mode: CorruptMode::BitFlip,
            truncate: Rate::NEVER,
            delay: Rate::NEVER,
            delay_time: Duration::from_millis(1),
        }
    }
}

impl FaultConfig {
    /// True when at least one fault has a non-zero rate.
    pub fn is_active(&self) -> bool {
        [
            self.drop,
            self.reorder,
            self.duplicate,
            self.corrupt,
            self.truncate,
            self.delay,
        ]
        .iter()
        .any(|r| r.is_active())
    }

    /// Applies `key=value,key=value` overrides (the command line's `--fault` syntax, same
    /// keys as the configuration file). Errors name the offending item.
    pub fn apply_overrides(&mut self, spec: &str) -> Result<(), String> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("fault setting {item:?} is not KEY=VALUE"))?;
            let (k, v) = (k.trim(), v.trim());
            let bad = |why: String| format!("fault setting {k}: {why}");
            let rate = |v: &str| v.parse::<Rate>().map_err(|e| bad(e.to_string()));
            let num = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| bad(format!("invalid number {v:?}")))
            };
            match k {
                "seed" => self.seed = num(v)?,
                "direction" => {
                    self.direction = v.parse().map_err(|e: ChoiceError| bad(e.to_string()))?
                }
                "drop" => self.drop = rate(v)?,
                "reorder" => self.reorder = rate(v)?,
                "reorder_depth" => {
                    let d = num(v)? as usize;
                    check_range(d, 1..=1024).map_err(bad)?;
                    self.reorder_depth = d;
                }
                "reorder_max_hold_us" => self.reorder_max_hold = Duration::from_micros(num(v)?),
                "duplicate" => self.duplicate = rate(v)?,
                "corrupt" => self.corrupt = rate(v)?,
                "corrupt_mode" => {
                    self.corrupt_mode = v.parse().map_err(|e: ChoiceError| bad(e.to_string()))?
                }
                "truncate" => self.truncate = rate(v)?,
                "delay" => self.delay = rate(v)?,
                "delay_us" => self.delay_time = Duration::from_micros(num(v)?),
                _ => return Err(format!("unknown fault setting {k:?}")),
            }
        }
        Ok(())
    }
}

fn de_depth<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    de_ranged(d, 1..=1024).map(|v| v as usize)
}

fn de_micros<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_micros)
}

/// Counters of one direction of a fault port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Frames that entered the fault stage.
    pub seen: u64,
    /// Frames dropped.
    pub dropped: u64,
    /// Frames held back for reordering.
    pub reordered: u64,
    /// Extra copies sent.
    pub duplicated: u64,
    /// Frames with a flipped bit.
    pub corrupted: u64,
    /// Frames whose TCP payload was corrupted and checksum recomputed.
    pub corrupted_tcp: u64,
    /// Frames chosen for TCP payload corruption that had no TCP payload.
    pub corrupt_skipped: u64,
    /// Frames cut short.
    pub truncated: u64,
    /// Frames delayed.
    pub delayed: u64,
    /// Duplicates not made because no buffer could be allocated.
    pub alloc_failures: u64,
}

impl std::ops::Add for FaultCounters {
    type Output = FaultCounters;
    fn add(self, o: FaultCounters) -> FaultCounters {
        FaultCounters {
            seen: self.seen + o.seen,
            dropped: self.dropped + o.dropped,
            reordered: self.reordered + o.reordered,
            duplicated: self.duplicated + o.duplicated,
            corrupted: self.corrupted + o.corrupted,
            corrupted_tcp: self.corrupted_tcp + o.corrupted_tcp,
            corrupt_skipped: self.corrupt_skipped + o.corrupt_skipped,
            truncated: self.truncated + o.truncated,
            delayed: self.delayed + o.delayed,
            alloc_failures: self.alloc_failures + o.alloc_failures,
        }
    }
}

/// SplitMix64: a small, fast generator whose output depends only on the seed.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    fn hit(&mut self, rate: Rate) -> bool {
        rate.is_active() && self.below(PPM as u64) < rate.ppm() as u64
    }

    /// The number of frames that pass before the next one `rate` hits when each is hit on
    /// its own with probability `rate`: geometric, drawn by inverting its distribution
    /// (`P(gap >= k) = (1 - rate)^k`) at one uniform draw in `(0, 1]`. `rate` is active.
    #[cold]
    #[inline(never)]
    fn gap(&mut self, rate: Rate) -> u64 {
        if rate.ppm() >= PPM {
            return 0;
        }
        let u = ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
        let p = f64::from(rate.ppm()) / f64::from(PPM);
        // Both logarithms are at most 0: the quotient is at least 0 (`as` saturates).
        (u.ln() / (-p).ln_1p()).floor() as u64
    }
}

/// The frames a rate hits, drawn as the gaps between hits (one draw per hit, not per
/// frame): the same Bernoulli process, frame by frame, as a draw for each frame.
#[derive(Clone, Copy, Debug, Default)]
struct Gaps {
    /// Frames up to and including the next hit; 0 while the next gap is not drawn (at the
    /// start and after each hit).
    left: u64,
}

impl Gaps {
    /// Whether `rate` hits the next frame.
    #[inline]
    fn step(&mut self, rate: Rate, rng: &mut SplitMix64) -> bool {
        if !rate.is_active() {
            return false;
        }
        if self.left == 0 {
            self.left = rng.gap(rate).saturating_add(1);
        }
        self.left -= 1;
        self.left == 0
    }

    /// How many of the next frames `rate` surely does not hit (none while the next gap is
    /// not drawn).
    #[inline]
    fn misses_ahead(self, rate: Rate) -> u64 {
        if rate.is_active() {
            self.left.saturating_sub(1)
        } else {
            u64::MAX
        }
    }

    /// Takes the steps of `n` frames it surely misses (`n <= misses_ahead`).
    #[inline]
    fn skip(&mut self, rate: Rate, n: u64) {
        if rate.is_active() {
            self.left -= n;
        }
    }
}

struct Held<B> {
    buf: B,
    remaining: usize,
    since: Instant,
}

/// What becomes of a frame that was not dropped, before any copy is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// Sent on now.
    Emit,
    /// Held for the delay time.
    Delay,
    /// Held back until `reorder_depth` later frames passed.
    Hold,
}

/// Why [`Stage::process_burst`]'s pass-through stopped at a frame, with what was drawn
/// for it.
#[derive(Clone, Copy, Debug)]
enum Stopped {
    /// Dropped.
    Dropped,
    /// To be duplicated (its fate not drawn yet).
    Copied,
    /// Not duplicated, delayed or held back.
    Placed(Fate),
}

/// The fault state of one direction.
struct Stage<B> {
    rng: SplitMix64,
    /// The frames (and copies) delayed.
    delay_gaps: Gaps,
    /// The frames (and copies) not delayed that are held back.
    reorder_gaps: Gaps,
    held: VecDeque<Held<B>>,
    delayed: VecDeque<(Instant, B)>,
    counters: FaultCounters,
    /// Frames the stage leaves in order and untouched stay where the caller put them
    /// ([`Stage::process_burst`]); off only in tests comparing with the general path.
    pass_through: bool,
}

impl<B: PacketBuf> Stage<B> {
    fn new(seed: u64) -> Stage<B> {
        Stage {
            rng: SplitMix64(seed),
            delay_gaps: Gaps::default(),
            reorder_gaps: Gaps::default(),
            held: VecDeque::new(),
            delayed: VecDeque::new(),
            counters: FaultCounters::default(),
            pass_through: true,
        }
    }

    /// Puts `buf` on the output and lets held-back frames count one more overtaking frame.
    fn emit(&mut self, buf: B, out: &mut Vec<B>) {
        out.push(buf);
        for h in self.held.iter_mut() {
            h.remaining = h.remaining.saturating_sub(1);
        }
        while self.held.front().is_some_and(|h| h.remaining == 0) {
            if let Some(h) = self.held.pop_front() {
                out.push(h.buf);
            }
        }
    }

    /// Releases delayed frames that are due and held frames held too long.
    fn release(&mut self, cfg: &FaultConfig, now: Instant, out: &mut Vec<B>) {
        while self.delayed.front().is_some_and(|(due, _)| *due <= now) {
            if let Some((_, buf)) = self.delayed.pop_front() {
                self.emit(buf, out);
            }
        }
        while self
            .held
            .front()
            .is_some_and(|h| now.duration_since(h.since) >= cfg.reorder_max_hold)
        {
            if let Some(h) = self.held.pop_front() {
                out.push(h.buf);
            }
        }
    }

    /// Counts a frame in and draws its drop, truncate, corrupt and duplicate decisions,
    /// cutting or corrupting it in place: `None` if it is dropped, else whether it is
    /// duplicated.
    fn decide_front(&mut self, cfg: &FaultConfig, buf: &mut B) -> Option<bool> {
        self.counters.seen += 1;
        if self.rng.hit(cfg.drop) {
            self.counters.dropped += 1;
            return None;
        }
        if self.rng.hit(cfg.truncate) && buf.len() > 1 {
            let new_len = 1 + self.rng.below(buf.len() as u64 - 1) as usize;
            buf.truncate(new_len);
            self.counters.truncated += 1;
        }
        if self.rng.hit(cfg.corrupt) {
            match cfg.corrupt_mode {
                CorruptMode::BitFlip => {
                    if !buf.is_empty() {
                        let bit = self.rng.below(buf.len() as u64 * 8) as usize;
                        buf.as_mut()[bit / 8] ^= 1 << (bit % 8);
                        self.counters.corrupted += 1;
                    }
                }
                CorruptMode::TcpPayload => {
                    let r = self.rng.next_u64();
                    if corrupt_tcp_payload(buf.as_mut(), r) {
                        self.counters.corrupted_tcp += 1;
                    } else {
                        self.counters.corrupt_skipped += 1;
                    }
                }
            }
        }
        Some(self.rng.hit(cfg.duplicate))
    }

    /// Draws whether a frame (or its copy) is delayed, held back or sent on: each rate's
    /// process takes one step a frame (a hit of both is a delay), and draws only at a hit.
    #[inline]
    fn decide_fate(&mut self, cfg: &FaultConfig) -> Fate {
        let delay = self.delay_gaps.step(cfg.delay, &mut self.rng);
        let hold = self.reorder_gaps.step(cfg.reorder, &mut self.rng);
        if delay {
            Fate::Delay
        } else if hold {
            Fate::Hold
        } else {
            Fate::Emit
        }
    }

    /// Delays, holds back or emits `buf` as `fate` says.
    fn place(&mut self, cfg: &FaultConfig, now: Instant, buf: B, fate: Fate, out: &mut Vec<B>) {
        match fate {
            Fate::Delay => {
                self.counters.delayed += 1;
                self.delayed.push_back((now + cfg.delay_time, buf));
            }
            Fate::Hold => {
                self.counters.reordered += 1;
                self.held.push_back(Held {
                    buf,
                    remaining: cfg.reorder_depth.max(1),
                    since: now,
                });
            }
            Fate::Emit => self.emit(buf, out),
        }
    }

    /// The rest of a frame's way once its front decisions were drawn (`dup`) and maybe its
    /// fate: the copy made, then each placed.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &mut self,
        cfg: &FaultConfig,
        now: Instant,
        buf: B,
        dup: bool,
        fate: Option<Fate>,
        out: &mut Vec<B>,
        alloc: &mut dyn FnMut(usize) -> Option<B>,
    ) {
        let copy = if dup {
            match alloc(buf.len()) {
                Some(mut c) => {
                    c.as_mut().copy_from_slice(buf.as_ref());
                    if let Some(tci) = buf.offloaded_vlan() {
                        c.set_offloaded_vlan(tci);
                    }
                    self.counters.duplicated += 1;
                    Some(c)
                }
                None => {
                    self.counters.alloc_failures += 1;
                    None
                }
            }
        } else {
            None
        };
        let fate = fate.unwrap_or_else(|| self.decide_fate(cfg));
        self.place(cfg, now, buf, fate, out);
        if let Some(c) = copy {
            let fate = self.decide_fate(cfg);
            self.place(cfg, now, c, fate, out);
        }
    }

    /// The general path: one frame through every fault.
    fn process(
        &mut self,
        cfg: &FaultConfig,
        now: Instant,
        mut buf: B,
        out: &mut Vec<B>,
        alloc: &mut dyn FnMut(usize) -> Option<B>,
    ) {
        if let Some(dup) = self.decide_front(cfg, &mut buf) {
            self.finish(cfg, now, buf, dup, None, out, alloc);
        }
    }

    /// Runs the frames `bufs[from..]` through the stage. While nothing is delayed or
    /// waiting in `out` (and, unless only fates are drawn, nothing is held), frames that
    /// are neither dropped, duplicated, delayed nor held back stay in `bufs` in order (cut
    /// or corrupted in place); from the first other frame on, every frame takes the general
    /// path into `out`. The frames leave as `bufs[from..]` then `out`, in the order the
    /// general path alone would give, with the same decisions; `bufs[from..]` grows to at
    /// most `limit` frames (the caller's burst size: what the general path would hand out
    /// at once).
    #[allow(clippy::too_many_arguments)]
    fn process_burst(
        &mut self,
        cfg: &FaultConfig,
        now: Instant,
        bufs: &mut Vec<B>,
        from: usize,
        limit: usize,
        out: &mut Vec<B>,
        alloc: &mut dyn FnMut(usize) -> Option<B>,
    ) {
        let mut at = from;
        let mut stopped = None;
        // Without drops, cuts, corruption or copies a frame's front decisions draw nothing:
        // only its fate is drawn.
        let fate_only = !(cfg.drop.is_active()
            || cfg.truncate.is_active()
            || cfg.corrupt.is_active()
            || cfg.duplicate.is_active());
        if self.pass_through && fate_only && self.delayed.is_empty() && out.is_empty() {
            let cap = from.saturating_add(limit);
            stopped = self.pass_fates(cfg, now, bufs, &mut at, cap, out);
        } else if self.pass_through
            && self.held.is_empty()
            && self.delayed.is_empty()
            && out.is_empty()
        {
            while at < bufs.len() {
                let stop = match self.decide_front(cfg, &mut bufs[at]) {
                    None => Stopped::Dropped,
                    Some(true) => Stopped::Copied,
                    Some(false) => match self.decide_fate(cfg) {
                        Fate::Emit => {
                            at += 1;
                            continue;
                        }
                        fate => Stopped::Placed(fate),
                    },
                };
                stopped = Some(stop);
                break;
            }
        }
        let mut rest = bufs.drain(at..);
        if let Some(stop) = stopped {
            // The frame decided above (a dropped one is freed here).
            if let Some(buf) = rest.next() {
                match stop {
                    Stopped::Dropped => {}
                    Stopped::Copied => self.finish(cfg, now, buf, true, None, out, alloc),
                    Stopped::Placed(fate) => {
                        self.finish(cfg, now, buf, false, Some(fate), out, alloc)
                    }
                }
            }
        }
        for buf in rest {
            self.process(cfg, now, buf, out, alloc);
        }
    }

    /// [`Stage::process_burst`]'s pass-through when only fates are drawn, from `bufs[*at]`:
    /// a frame held back leaves `bufs` for the held queue, and a held frame its last
    /// overtaking frame releases goes back into `bufs` right behind that frame, as
    /// [`Stage::emit`] would put it, while `bufs` stays within `cap` frames; else it goes
    /// to `out` with any released after it, and the frames from `*at` on take the general
    /// path (`None`). Stops at a frame to delay, with its fate drawn.
    fn pass_fates(
        &mut self,
        cfg: &FaultConfig,
        now: Instant,
        bufs: &mut Vec<B>,
        at: &mut usize,
        cap: usize,
        out: &mut Vec<B>,
    ) -> Option<Stopped> {
        let (mut i, mut seen) = (*at, 0);
        let stop = 'pass: loop {
            if self.held.is_empty() {
                // Nothing held: frames pass until one is held back or delayed, those both
                // processes surely miss at once.
                let fate = loop {
                    if i >= bufs.len() {
                        break 'pass None;
                    }
                    let misses = self.delay_gaps.misses_ahead(cfg.delay);
                    let misses = misses.min(self.reorder_gaps.misses_ahead(cfg.reorder));
                    let n = misses.min((bufs.len() - i) as u64);
                    if n > 0 {
                        self.delay_gaps.skip(cfg.delay, n);
                        self.reorder_gaps.skip(cfg.reorder, n);
                        i += n as usize;
                        seen += n;
                        continue;
                    }
                    seen += 1;
                    match self.decide_fate(cfg) {
                        Fate::Emit => i += 1,
                        fate => break fate,
                    }
                };
                if fate == Fate::Delay {
                    break Some(Stopped::Placed(Fate::Delay));
                }
                let buf = bufs.remove(i);
                self.place(cfg, now, buf, Fate::Hold, out);
                continue;
            }
            if i >= bufs.len() {
                break None;
            }
            seen += 1;
            match self.decide_fate(cfg) {
                Fate::Emit => {
                    i += 1;
                    if !self.release_behind(bufs, &mut i, cap, out) {
                        break None;
                    }
                }
                Fate::Hold => {
                    let buf = bufs.remove(i);
                    self.place(cfg, now, buf, Fate::Hold, out);
                }
                Fate::Delay => break Some(Stopped::Placed(Fate::Delay)),
            }
        };
        self.counters.seen += seen;
        *at = i;
        stop
    }

    /// [`Stage::emit`]'s count for a frame left in `bufs` before `*at`: the held frames it
    /// releases go into `bufs` at `*at` while `bufs` stays within `cap` frames, else (and
    /// any released after) to `out`; whether `bufs` can go on passing frames through.
    #[inline(never)]
    fn release_behind(
        &mut self,
        bufs: &mut Vec<B>,
        at: &mut usize,
        cap: usize,
        out: &mut Vec<B>,
    ) -> bool {
        for h in self.held.iter_mut() {
            h.remaining = h.remaining.saturating_sub(1);
        }
        while self.held.front().is_some_and(|h| h.remaining == 0) {
            let Some(h) = self.held.pop_front() else {
                break;
            };
            if out.is_empty() && bufs.len() < cap {
                bufs.insert(*at, h.buf);
                *at += 1;
            } else {
                out.push(h.buf);
            }
        }
        out.is_empty()
    }
}

/// Flips one bit (chosen by `r`) of the TCP payload of an Ethernet (802.1Q-tagged or not)
/// IPv4/TCP or IPv6/TCP frame and recomputes the TCP checksum. Returns false (frame
/// untouched) if the frame holds no well-formed TCP segment with payload (an IPv4 fragment,
/// an IPv6 extension header).
pub fn corrupt_tcp_payload(frame: &mut [u8], r: u64) -> bool {
    let Some(l2) = parse_l2(frame, None) else {
        return false;
    };
    let l3 = &mut frame[l2.l3_offset..];
    let (src, dst, segment) = match l2.ethertype {
        EthernetProtocol::Ipv4 => {
            let Ok(ip) = Ipv4Packet::new_checked(&*l3) else {
                return false;
            };
            if ip.next_header() != IpProtocol::Tcp || ip.frag_offset() != 0 || ip.more_frags() {
                return false;
            }
            let (src, dst) = (
                IpAddress::Ipv4(ip.src_addr()),
                IpAddress::Ipv4(ip.dst_addr()),
            );
            let at = usize::from(ip.header_len())..usize::from(ip.total_len());
            (src, dst, &mut l3[at])
        }
        EthernetProtocol::Ipv6 => {
            let Ok(ip) = Ipv6Packet::new_checked(&*l3) else {
                return false;
            };
            if ip.next_header() != IpProtocol::Tcp {
                return false;
            }
            let (src, dst) = (
                IpAddress::Ipv6(ip.src_addr()),
                IpAddress::Ipv6(ip.dst_addr()),
            );
            let at = IPV6_HLEN..ip.total_len();
            (src, dst, &mut l3[at])
        }
        _ => return false,
    };
    let Ok(mut tcp) = TcpPacket::new_checked(segment) else {
        return false;
    };
    let payload = tcp.payload_mut();
    if payload.is_empty() {
        return false;
    }
    let bit = ((r as u128 * (payload.len() as u128 * 8)) >> 64) as usize;
    payload[bit / 8] ^= 1 << (bit % 8);
    tcp.fill_checksum(&src, &dst);
    true
}

/// A port wrapper injecting faults into the frames of `P`.
pub struct FaultPort<P: Port> {
    inner: P,
    cfg: FaultConfig,
    rx: Stage<P::Buf>,
    tx: Stage<P::Buf>,
    rx_ready: Vec<P::Buf>,
    tx_ready: Vec<P::Buf>,
}

impl<P: Port> FaultPort<P> {
    /// Wraps `inner`. The transmit stage is seeded with `seed + 1` so the directions differ.
    pub fn new(inner: P, cfg: FaultConfig) -> FaultPort<P> {
        FaultPort {
            rx: Stage::new(cfg.seed),
            tx: Stage::new(cfg.seed.wrapping_add(1)),
            inner,
            cfg,
            rx_ready: Vec::new(),
            tx_ready: Vec::new(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    /// Fault counters of the receive and transmit directions.
    pub fn counters(&self) -> (FaultCounters, FaultCounters) {
        (self.rx.counters, self.tx.counters)
    }

    /// The wrapped port.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// Frames held inside the fault stages (delayed, held back, or waiting for the inner
    /// port's transmit ring).
    pub fn in_flight(&self) -> usize {
        self.rx.held.len()
            + self.rx.delayed.len()
            + self.tx.held.len()
            + self.tx.delayed.len()
            + self.rx_ready.len()
            + self.tx_ready.len()
    }

    fn applies_rx(&self) -> bool {
        matches!(self.cfg.direction, Direction::Rx | Direction::Both)
    }

    fn applies_tx(&self) -> bool {
        matches!(self.cfg.direction, Direction::Tx | Direction::Both)
    }

    /// Releases due transmit frames and offers the transmit backlog (at most one call's
    /// frames and the held ones released, see [`FaultPort::tx_burst`]) to the inner port.
    fn flush_tx(&mut self, now: Instant) {
        self.tx.release(&self.cfg, now, &mut self.tx_ready);
        if !self.tx_ready.is_empty() {
            self.inner.tx_burst(&mut self.tx_ready);
        }
    }
}

impl<P: Port> Port for FaultPort<P> {
    type Buf = P::Buf;

    fn info(&self) -> &PortInfo {
        self.inner.info()
    }

    fn rx_burst(&mut self, out: &mut Vec<P::Buf>, max: usize) -> usize {
        let now = Instant::now();
        self.flush_tx(now);
        if !self.applies_rx() {
            return self.inner.rx_burst(out, max);
        }
        self.rx.release(&self.cfg, now, &mut self.rx_ready);
        let start = out.len();
        let n = self.rx_ready.len().min(max);
        out.extend(self.rx_ready.drain(..n));
        if self.rx_ready.is_empty() && n < max {
            // Received frames the stage leaves alone stay in `out` as received.
            let from = out.len();
            self.inner.rx_burst(out, max - n);
            let inner = &mut self.inner;
            self.rx.process_burst(
                &self.cfg,
                now,
                out,
                from,
                max - n,
                &mut self.rx_ready,
                &mut |len| inner.alloc_tx(len),
            );
            let room = max.saturating_sub(out.len() - start);
            let n = self.rx_ready.len().min(room);
            out.extend(self.rx_ready.drain(..n));
        }
        out.len() - start
    }

    fn alloc_tx(&mut self, len: usize) -> Option<P::Buf> {
        self.inner.alloc_tx(len)
    }

    /// Takes frames only while the inner port keeps up: while frames of an earlier call
    /// still wait for its ring, none, and they stay in `bufs` as the inner port would have
    /// left them. The caller then sees the back-pressure it would see without the fault
    /// stage (a sender's data waits in its own queues, not here), and the backlog offered
    /// again on each call stays one call's frames long.
    fn tx_burst(&mut self, bufs: &mut Vec<P::Buf>) -> usize {
        if !self.applies_tx() {
            return self.inner.tx_burst(bufs);
        }
        let now = Instant::now();
        self.flush_tx(now);
        if !self.tx_ready.is_empty() {
            return 0;
        }
        let n = bufs.len();
        let inner = &mut self.inner;
        self.tx.process_burst(
            &self.cfg,
            now,
            bufs,
            0,
            usize::MAX,
            &mut self.tx_ready,
            &mut |len| inner.alloc_tx(len),
        );
        // The frames left in `bufs`, then the general path's, in one burst; what the ring
        // does not take waits in the stage.
        bufs.append(&mut self.tx_ready);
        self.inner.tx_burst(bufs);
        self.tx_ready.append(bufs);
        n
    }

    fn stats(&self) -> PortStats {
        self.inner.stats()
    }

    /// The inner port's facts, then the faults injected each way.
    fn describe(&self, out: &mut Dict) {
        self.inner.describe(out);
        let (rx, tx) = self.counters();
        for (dir, c) in [("rx", rx), ("tx", tx)] {
            out.put(&format!("fault_{dir}_dropped"), c.dropped);
            out.put(&format!("fault_{dir}_reordered"), c.reordered);
            out.put(&format!("fault_{dir}_duplicated"), c.duplicated);
            out.put(
                &format!("fault_{dir}_corrupted"),
                c.corrupted + c.corrupted_tcp,
            );
        }
    }

    fn vlan_offload(&self) -> VlanOffload {
        self.inner.vlan_offload()
    }

    fn offloads(&self) -> PortOffloads {
        self.inner.offloads()
    }

    /// As the inner port, unless transmitted frames are cut, corrupted or duplicated: those
    /// faults rewrite or copy the frame's bytes, and a payload behind the headers is not
    /// among them. Drops, delays and reordering only hold frames.
    fn sends_payloads_in_place(&self) -> bool {
        let rewrites_tx = self.cfg.direction != Direction::Rx
            && (self.cfg.truncate.is_active()
                || self.cfg.corrupt.is_active()
                || self.cfg.duplicate.is_active());
        !rewrites_tx && self.inner.sends_payloads_in_place()
    }

    fn attach_payload<'p>(
        &mut self,
        buf: &mut P::Buf,
        at: usize,
        payload: Lent<'p>,
    ) -> Result<(), Lent<'p>> {
        if !self.sends_payloads_in_place() {
            return Err(payload);
        }
        self.inner.attach_payload(buf, at, payload)
    }

    fn attach_frame<'p>(
        &mut self,
        buf: &mut P::Buf,
        at: usize,
        payload: Lent<'p>,
    ) -> Result<P::Buf, Lent<'p>> {
        if !self.sends_payloads_in_place() {
            return Err(payload);
        }
        self.inner.attach_frame(buf, at, payload)
    }

    fn take_returned_payloads(&mut self, out: &mut Vec<u64>) {
        self.inner.take_returned_payloads(out);
    }
}

impl<P: Port> fmt::Debug for FaultPort<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultPort")
            .field("port", &self.inner.info().name)
            .field("cfg", &self.cfg)
            .field("counters", &self.counters())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Vlan;
    use crate::port::heap::HeapBuf;
    use crate::port::soft_pair::{test_pair, SoftPort};
    use std::net::IpAddr;

    /// A fault port on end `a` of a soft pair, and the plain end `b`.
    fn setup(cfg: FaultConfig) -> (FaultPort<SoftPort>, SoftPort) {
        let (a, b) = test_pair(8192);
        (FaultPort::new(a, cfg), b)
    }

    /// 64-byte frames of `port`, zeroed, each numbered by its index in `numbers` (big-endian,
    /// first 4 octets).
    fn numbered_frames<P: Port>(port: &mut P, numbers: std::ops::Range<u32>) -> Vec<P::Buf> {
        numbers
            .map(|i| {
                let mut buf = port.alloc_tx(64).unwrap();
                buf.as_mut().fill(0);
                buf.as_mut()[..4].copy_from_slice(&i.to_be_bytes());
                buf
            })
            .collect()
    }

    /// Sends `n` numbered 64-byte frames from `b`; receives everything on the fault port.
    fn pass_rx(cfg: FaultConfig, n: u32) -> (Vec<Vec<u8>>, FaultCounters) {
        let (mut f, mut b) = setup(cfg);
        let mut bufs = numbered_frames(&mut b, 0..n);
        assert_eq!(b.tx_burst(&mut bufs), n as usize);
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_millis(500);
        loop {
            let mut out = Vec::new();
            f.rx_burst(&mut out, 32);
            got.extend(out.into_iter().map(|b| b.as_ref().to_vec()));
            if f.in_flight() == 0 && f.inner().rx_pending() == 0 || Instant::now() > deadline {
                break;
            }
        }
        (got, f.counters().0)
    }

    fn seq(frame: &[u8]) -> u32 {
        u32::from_be_bytes(frame[..4].try_into().unwrap())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Whatever the mix of faults, every frame is accounted for: delivered frames =
        /// seen - dropped + duplicated, once delayed and held frames are released.
        #[test]
        fn frames_are_conserved(
            seed in proptest::prelude::any::<u64>(),
            rates in proptest::array::uniform6(0u32..300_000),
            depth in 1usize..8,
            n in 1u32..300,
        ) {
            let r = |i: usize| Rate::from_ppm(rates[i]).unwrap();
            let cfg = FaultConfig {
                seed,
                drop: r(0),
                reorder: r(1),
                reorder_depth: depth,
                reorder_max_hold: Duration::ZERO,
                duplicate: r(2),
                corrupt: r(3),
                truncate: r(4),
                delay: r(5),
                delay_time: Duration::ZERO,
                ..FaultConfig::default()
            };
            let (got, c) = pass_rx(cfg, n);
            proptest::prop_assert_eq!(c.seen, n as u64);
            proptest::prop_assert_eq!(got.len() as u64, c.seen - c.dropped + c.duplicated);
        }
    }

    /// Drives numbered frames in bursts of the given sizes through one stage, as a port
    /// does (release, then the burst, the ring taking everything) behind a frame already in
    /// the caller's vector (`from` = 1), then releases what is left. Returns the frames in
    /// the order they left, the counters and how many bursts left the general path's
    /// output empty.
    fn drive_stage(
        cfg: &FaultConfig,
        pass_through: bool,
        bursts: &[usize],
    ) -> (Vec<Vec<u8>>, FaultCounters, usize) {
        fn frame(i: u32) -> HeapBuf {
            let mut v = vec![0u8; 64];
            v[..4].copy_from_slice(&i.to_be_bytes());
            HeapBuf::unpooled(v)
        }
        let mut stage = Stage::<HeapBuf>::new(cfg.seed);
        stage.pass_through = pass_through;
        let now = Instant::now();
        let mut alloc = |len| Some(HeapBuf::unpooled(vec![0; len]));
        let (mut got, mut out, mut untouched, mut next) = (Vec::new(), Vec::new(), 0, 0u32);
        for &n in bursts {
            stage.release(cfg, now, &mut out);
            got.extend(out.drain(..).map(|b| b.as_ref().to_vec()));
            let mut bufs = vec![frame(u32::MAX)];
            bufs.extend((next..next + n as u32).map(frame));
            next += n as u32;
            stage.process_burst(cfg, now, &mut bufs, 1, usize::MAX, &mut out, &mut alloc);
            assert_eq!(
                seq(bufs[0].as_ref()),
                u32::MAX,
                "the frame before `from` stays"
            );
            untouched += usize::from(out.is_empty());
            got.extend(bufs[1..].iter().map(|b| b.as_ref().to_vec()));
            got.extend(out.drain(..).map(|b| b.as_ref().to_vec()));
        }
        stage.release(cfg, now + Duration::from_secs(3600), &mut out);
        got.extend(out.drain(..).map(|b| b.as_ref().to_vec()));
        (got, stage.counters, untouched)
    }

    // The pass-through path gives the frames, their order and the counters of the general
    // path for a seed: 1 % reordering in bursts of 32, as `--fault reorder=1%` on a sender.
    #[test]
    fn pass_through_matches_the_general_path_for_one_percent_reordering() {
        let cfg = FaultConfig {
            seed: 5,
            reorder: "1%".parse().unwrap(),
            ..FaultConfig::default()
        };
        let bursts = vec![32; 400];
        let fast = drive_stage(&cfg, true, &bursts);
        let general = drive_stage(&cfg, false, &bursts);
        assert_eq!(fast.0, general.0);
        assert_eq!(fast.1, general.1);
        assert!(fast.1.reordered > 50, "reordered {}", fast.1.reordered);
        let seqs: Vec<u32> = fast.0.iter().map(|f| seq(f)).collect();
        assert_ne!(
            seqs,
            (0..12_800).collect::<Vec<_>>(),
            "frames were reordered"
        );
        assert!(fast.2 > 200, "most bursts stayed in place: {}", fast.2);
        assert_eq!(general.2, 0, "the general path moves every frame");
    }

    /// Receives `n` numbered frames on a fault port, sent in chunks of `chunk` between
    /// receive calls of at most `maxes` frames (cycled), its receive stage on the
    /// pass-through or the general path: each call's frames, then `u32::MAX` and the
    /// frames left in the stage, and the counters.
    fn rx_calls(
        cfg: &FaultConfig,
        pass_through: bool,
        n: u32,
        chunk: u32,
        maxes: &[usize],
    ) -> (Vec<Vec<u32>>, FaultCounters) {
        let (mut f, mut b) = setup(cfg.clone());
        f.rx.pass_through = pass_through;
        let mut calls = Vec::new();
        let mut sent = 0;
        for &max in maxes.iter().cycle() {
            if sent < n {
                let mut bufs = numbered_frames(&mut b, sent..(sent + chunk).min(n));
                sent += bufs.len() as u32;
                let k = bufs.len();
                assert_eq!(b.tx_burst(&mut bufs), k);
            }
            let mut out = Vec::new();
            f.rx_burst(&mut out, max);
            assert!(out.len() <= max, "{} frames for {max}", out.len());
            calls.push(out.iter().map(|b| seq(b.as_ref())).collect());
            // Frames held back at the end stay there (no later frame overtakes them).
            let idle = calls
                .iter()
                .rev()
                .take_while(|c: &&Vec<u32>| c.is_empty())
                .count();
            if sent == n && (f.in_flight() == 0 && f.inner().rx_pending() == 0 || idle > 8) {
                break;
            }
        }
        calls.push(vec![u32::MAX, f.in_flight() as u32]);
        (calls, f.counters().0)
    }

    // Reordering alone on a receive port, frames held across calls and released into full
    // bursts: the pass-through path hands out the same frames in the same calls (burst
    // sizes included) with the same counters as the general path.
    #[test]
    fn held_frames_pass_through_in_the_general_paths_bursts() {
        for (seed, depth) in [(1, 1), (2, 3), (3, 5)] {
            let cfg = FaultConfig {
                seed,
                reorder: "5%".parse().unwrap(),
                reorder_depth: depth,
                reorder_max_hold: Duration::from_secs(3600),
                ..FaultConfig::default()
            };
            let fast = rx_calls(&cfg, true, 3000, 40, &[32, 7, 1, 16]);
            let general = rx_calls(&cfg, false, 3000, 40, &[32, 7, 1, 16]);
            assert_eq!(fast, general);
            assert!(fast.1.reordered > 100, "reordered {}", fast.1.reordered);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Reordering (and delays) alone, frames held across receive calls of any size:
        /// the pass-through path gives the general path's calls.
        #[test]
        fn held_frames_pass_through_as_the_general_path(
            seed in proptest::prelude::any::<u64>(),
            reorder in 0u32..200_000,
            delay in proptest::prelude::any::<bool>(),
            depth in 1usize..6,
            chunk in 1u32..64,
            maxes in proptest::collection::vec(1usize..40, 1..6),
        ) {
            let cfg = FaultConfig {
                seed,
                reorder: Rate::from_ppm(reorder).unwrap(),
                reorder_depth: depth,
                reorder_max_hold: Duration::from_secs(3600),
                delay: Rate::from_ppm(if delay { 20_000 } else { 0 }).unwrap(),
                delay_time: Duration::ZERO,
                ..FaultConfig::default()
            };
            let fast = rx_calls(&cfg, true, 600, chunk, &maxes);
            let general = rx_calls(&cfg, false, 600, chunk, &maxes);
            proptest::prop_assert_eq!(fast, general);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Whatever the faults and burst sizes, the pass-through path and the general path
        /// give the same frames in the same order with the same counters.
        #[test]
        fn pass_through_matches_the_general_path(
            seed in proptest::prelude::any::<u64>(),
            rates in proptest::array::uniform6(0u32..100_000),
            active in proptest::array::uniform6(proptest::prelude::any::<bool>()),
            depth in 1usize..6,
            bursts in proptest::collection::vec(0usize..40, 1..30),
        ) {
            let r = |i: usize| Rate::from_ppm(if active[i] { rates[i] } else { 0 }).unwrap();
            let cfg = FaultConfig {
                seed,
                drop: r(0),
                reorder: r(1),
                reorder_depth: depth,
                duplicate: r(2),
                corrupt: r(3),
                truncate: r(4),
                delay: r(5),
                ..FaultConfig::default()
            };
            let fast = drive_stage(&cfg, true, &bursts);
            let general = drive_stage(&cfg, false, &bursts);
            proptest::prop_assert_eq!(fast.0, general.0);
            proptest::prop_assert_eq!(fast.1, general.1);
        }
    }

    #[test]
    fn rate_parsing() {
        assert_eq!("1%".parse::<Rate>().unwrap().ppm(), 10_000);
        assert_eq!("0.5 %".parse::<Rate>().unwrap().ppm(), 5_000);
        assert_eq!("250ppm".parse::<Rate>().unwrap().ppm(), 250);
        assert_eq!("100".parse::<Rate>().unwrap(), Rate::ALWAYS);
        assert!("101%".parse::<Rate>().is_err());
        assert!("1000001ppm".parse::<Rate>().is_err());
        assert!("-1%".parse::<Rate>().is_err());
        assert!("NaN".parse::<Rate>().is_err());
        assert!("lots".parse::<Rate>().is_err());
        assert_eq!(Rate::from_ppm(10_000).unwrap().to_string(), "1%");
        assert_eq!(Rate::from_ppm(15).unwrap().to_string(), "15ppm");
    }

    #[test]
    fn no_faults_is_transparent() {
        let (got, c) = pass_rx(FaultConfig::default(), 100);
        assert_eq!(got.len(), 100);
        assert!(got.iter().enumerate().all(|(i, f)| seq(f) == i as u32));
        assert_eq!(c.seen, 100);
        assert_eq!(c.dropped + c.reordered + c.duplicated + c.corrupted, 0);
    }

    /// The fates `n` frames draw from a fresh stage of `cfg`.
    fn fates(cfg: &FaultConfig, n: usize) -> Vec<Fate> {
        let mut stage = Stage::<HeapBuf>::new(cfg.seed);
        (0..n).map(|_| stage.decide_fate(cfg)).collect()
    }

    /// Checks that the frames of `fates` that are `fate` are a Bernoulli process of rate
    /// `p`: their share within five standard deviations of `p`, and the gaps between
    /// them geometric (their mean, and the share of gaps of at least `k` frames for `k`
    /// about half, once and twice the mean, each within five standard deviations).
    fn assert_bernoulli(fates: &[Fate], fate: Fate, p: f64) {
        let n = fates.len() as f64;
        let hits: Vec<usize> = (0..fates.len()).filter(|&i| fates[i] == fate).collect();
        let sd = (n * p * (1.0 - p)).sqrt();
        let dev = (hits.len() as f64 - n * p).abs();
        assert!(dev <= 5.0 * sd, "{} of {n} at rate {p}", hits.len());
        // The frames passed before each hit (the first counted from the start).
        let gaps: Vec<f64> = std::iter::once(-1isize)
            .chain(hits.iter().map(|&i| i as isize))
            .collect::<Vec<_>>()
            .windows(2)
            .map(|w| (w[1] - w[0] - 1) as f64)
            .collect();
        let m = gaps.len() as f64;
        let mean = (1.0 - p) / p;
        let var = (1.0 - p) / (p * p);
        let got = gaps.iter().sum::<f64>() / m;
        assert!(
            (got - mean).abs() <= 5.0 * (var / m).sqrt() + 1e-9,
            "mean gap {got}, expected {mean} at rate {p}"
        );
        for k in [(mean / 2.0).ceil(), mean.round(), (2.0 * mean).round()] {
            let tail = (1.0 - p).powf(k);
            let share = gaps.iter().filter(|&&g| g >= k).count() as f64 / m;
            let sd = (tail * (1.0 - tail) / m).sqrt();
            assert!(
                (share - tail).abs() <= 5.0 * sd + 1e-9,
                "gaps of at least {k}: {share}, expected {tail} at rate {p}"
            );
        }
    }

    // The fates drawn as gaps between hits keep the configured rates: held back frames
    // (and delayed ones) a Bernoulli process of the rate, frame by frame.
    #[test]
    fn fate_gaps_keep_the_rate_and_are_geometric() {
        const N: usize = 4_000_000;
        for (seed, rate) in [(1, "0.1%"), (2, "1%"), (3, "30%"), (4, "100%"), (5, "5ppm")] {
            let cfg = FaultConfig {
                seed,
                reorder: rate.parse().unwrap(),
                ..FaultConfig::default()
            };
            let p = f64::from(cfg.reorder.ppm()) / f64::from(PPM);
            let fates = fates(&cfg, N);
            assert!(!fates.contains(&Fate::Delay));
            assert_bernoulli(&fates, Fate::Hold, p);
        }
        // Delays and reordering together: a frame both would hit is delayed, so the
        // frames held back are the rate's share of those not delayed.
        let cfg = FaultConfig {
            seed: 6,
            delay: "10%".parse().unwrap(),
            reorder: "30%".parse().unwrap(),
            ..FaultConfig::default()
        };
        let fates = fates(&cfg, N);
        assert_bernoulli(&fates, Fate::Delay, 0.1);
        assert_bernoulli(&fates, Fate::Hold, 0.9 * 0.3);
    }

    #[test]
    fn zero_rates_never_hit_and_draw_nothing() {
        let cfg = FaultConfig::default();
        let mut stage = Stage::<HeapBuf>::new(cfg.seed);
        assert!((0..1_000_000).all(|_| stage.decide_fate(&cfg) == Fate::Emit));
        assert_eq!(stage.rng.0, cfg.seed, "no draw");
    }

    #[test]
    fn same_seed_same_faults_other_seed_other_faults() {
        let cfg = FaultConfig {
            seed: 42,
            drop: "10%".parse().unwrap(),
            duplicate: "5%".parse().unwrap(),
            reorder: "5%".parse().unwrap(),
            corrupt: "5%".parse().unwrap(),
            ..FaultConfig::default()
        };
        let (a, ca) = pass_rx(cfg.clone(), 1000);
        let (b, cb) = pass_rx(cfg.clone(), 1000);
        assert_eq!(a, b);
        assert_eq!(ca, cb);
        let (c, _) = pass_rx(FaultConfig { seed: 43, ..cfg }, 1000);
        assert_ne!(a, c);
    }

    #[test]
    fn drop_rate_is_respected_and_counted() {
        let cfg = FaultConfig {
            drop: "20%".parse().unwrap(),
            ..FaultConfig::default()
        };
        let (got, c) = pass_rx(cfg, 5000);
        assert_eq!(got.len() as u64 + c.dropped, 5000);
        assert!((800..1200).contains(&c.dropped), "dropped {}", c.dropped);
        let seqs: Vec<u32> = got.iter().map(|f| seq(f)).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "order kept");
    }

    #[test]
    fn duplicate_sends_identical_copies() {
        let cfg = FaultConfig {
            duplicate: Rate::ALWAYS,
            ..FaultConfig::default()
        };
        let (got, c) = pass_rx(cfg, 10);
        assert_eq!(got.len(), 20);
        assert_eq!(c.duplicated, 10);
        for pair in got.chunks(2) {
            assert_eq!(pair[0], pair[1]);
        }
    }

    #[test]
    fn reorder_holds_a_frame_back_by_depth() {
        let cfg = FaultConfig {
            seed: 7,
            reorder: "10%".parse().unwrap(),
            reorder_depth: 3,
            ..FaultConfig::default()
        };
        let (got, c) = pass_rx(cfg, 2000);
        assert_eq!(got.len(), 2000, "reordering loses nothing");
        assert!(c.reordered > 100, "reordered {}", c.reordered);
        let seqs: Vec<u32> = got.iter().map(|f| seq(f)).collect();
        let mut sorted = seqs.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..2000).collect::<Vec<_>>());
        let out_of_order = seqs.windows(2).filter(|w| w[0] > w[1]).count();
        assert!(out_of_order > 0);
        // The first displaced frame is overtaken by at least `reorder_depth` frames.
        let first_held = (0..2000u32)
            .find(|&s| seqs.iter().position(|&x| x == s) != Some(s as usize))
            .unwrap();
        let pos = seqs.iter().position(|&x| x == first_held).unwrap();
        assert!(pos >= first_held as usize + 3, "held back by 3, at {pos}");
    }

    // With the inner ring full the fault stage pushes back as the inner port would: the
    // frames of a call it took wait in it, a later call takes none (they stay with the
    // caller) until the ring took those, and nothing is dropped or reordered.
    #[test]
    fn full_inner_ring_pushes_back_through_the_stage() {
        let (a, mut b) = test_pair(8);
        let cfg = FaultConfig {
            // Active (the stage runs) but no frame of this test is hit.
            reorder: Rate::from_ppm(1).unwrap(),
            ..FaultConfig::default()
        };
        let mut f = FaultPort::new(a, cfg);
        let mut first = numbered_frames(&mut f, 0..12);
        assert_eq!(
            f.tx_burst(&mut first),
            12,
            "the ring took 8, 4 wait in the stage"
        );
        let mut second = numbered_frames(&mut f, 12..16);
        assert_eq!(
            f.tx_burst(&mut second),
            0,
            "the stage's backlog not yet sent"
        );
        assert_eq!(second.len(), 4, "left with the caller");
        let mut got = Vec::new();
        b.rx_burst(&mut got, 64);
        assert_eq!(
            f.tx_burst(&mut second),
            4,
            "the backlog went out, then these"
        );
        while f.in_flight() > 0 || f.inner().rx_pending() > 0 || got.len() < 16 {
            b.rx_burst(&mut got, 64);
            f.tx_burst(&mut Vec::new());
        }
        let seqs: Vec<u32> = got.iter().map(|f| seq(f.as_ref())).collect();
        assert_eq!(seqs, (0..16).collect::<Vec<_>>());
        assert_eq!(f.counters().1.seen, 16, "each frame through the stage once");
        assert_eq!(f.stats().tx_packets, 16, "each frame sent once");
    }

    #[test]
    fn reorder_with_full_rate_and_idle_link_releases_after_max_hold() {
        let cfg = FaultConfig {
            reorder: Rate::ALWAYS,
            reorder_depth: 5,
            reorder_max_hold: Duration::from_millis(5),
            ..FaultConfig::default()
        };
        let (got, c) = pass_rx(cfg, 3);
        assert_eq!(c.reordered, 3);
        assert_eq!(got.len(), 3, "released by time, not lost");
    }

    #[test]
    fn truncate_shortens_frames() {
        let cfg = FaultConfig {
            truncate: Rate::ALWAYS,
            ..FaultConfig::default()
        };
        let (got, c) = pass_rx(cfg, 50);
        assert_eq!(c.truncated, 50);
        assert!(got.iter().all(|f| !f.is_empty() && f.len() < 64));
    }

    #[test]
    fn bit_flip_changes_exactly_one_bit() {
        let cfg = FaultConfig {
            corrupt: Rate::ALWAYS,
            ..FaultConfig::default()
        };
        let (got, c) = pass_rx(cfg, 50);
        assert_eq!(c.corrupted, 50);
        for (i, f) in got.iter().enumerate() {
            let mut orig = vec![0u8; 64];
            orig[..4].copy_from_slice(&(i as u32).to_be_bytes());
            let flipped: u32 = f.iter().zip(&orig).map(|(a, b)| (a ^ b).count_ones()).sum();
            assert_eq!(flipped, 1, "frame {i}");
        }
    }

    #[test]
    fn delay_holds_frames_for_the_delay_time() {
        let cfg = FaultConfig {
            delay: Rate::ALWAYS,
            delay_time: Duration::from_millis(20),
            ..FaultConfig::default()
        };
        let (mut f, mut b) = setup(cfg);
        let mut bufs = vec![b.alloc_tx(64).unwrap()];
        b.tx_burst(&mut bufs);
        let start = Instant::now();
        let mut out = Vec::new();
        f.rx_burst(&mut out, 8);
        assert!(out.is_empty(), "not yet");
        while out.is_empty() && start.elapsed() < Duration::from_secs(1) {
            f.rx_burst(&mut out, 8);
        }
        assert_eq!(out.len(), 1);
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert_eq!(f.counters().0.delayed, 1);
    }

    #[test]
    fn tx_direction_only_leaves_rx_alone() {
        let cfg = FaultConfig {
            direction: Direction::Tx,
            drop: Rate::ALWAYS,
            ..FaultConfig::default()
        };
        let (mut f, mut b) = setup(cfg);
        let mut to_f = vec![b.alloc_tx(64).unwrap()];
        b.tx_burst(&mut to_f);
        let mut out = Vec::new();
        assert_eq!(f.rx_burst(&mut out, 8), 1);
        let mut from_f = vec![f.alloc_tx(64).unwrap(), f.alloc_tx(64).unwrap()];
        assert_eq!(f.tx_burst(&mut from_f), 2);
        let mut got = Vec::new();
        assert_eq!(b.rx_burst(&mut got, 8), 0);
        assert_eq!(f.counters().1.dropped, 2);
        assert_eq!(f.counters().0.dropped, 0);
    }

    fn tcp_frame_of(v6: bool, vlan: Option<Vlan>, payload: &[u8]) -> Vec<u8> {
        let (src_ip, dst_ip): (IpAddr, IpAddr) = if v6 {
            ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap())
        } else {
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap())
        };
        let ends = crate::frame::Ends {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip,
            dst_ip,
            vlan,
        };
        crate::test_frames::tcp_frame(ends, payload)
    }

    fn tcp_frame(payload: &[u8]) -> Vec<u8> {
        tcp_frame_of(false, None, payload)
    }

    /// The addresses and TCP segment of an Ethernet/IP frame, its IPv4 checksum checked.
    fn segment_of(f: &[u8]) -> (IpAddress, IpAddress, &[u8]) {
        let l2 = parse_l2(f, None).unwrap();
        let l3 = &f[l2.l3_offset..];
        if l2.ethertype == EthernetProtocol::Ipv6 {
            let ip = Ipv6Packet::new_checked(l3).unwrap();
            let (s, d) = (ip.src_addr().into(), ip.dst_addr().into());
            (s, d, &l3[40..ip.total_len()])
        } else {
            let ip = Ipv4Packet::new_checked(l3).unwrap();
            assert!(ip.verify_checksum());
            let (s, d) = (ip.src_addr().into(), ip.dst_addr().into());
            (s, d, &l3[20..usize::from(ip.total_len())])
        }
    }

    // Over IPv4 and IPv6, tagged or not: one payload bit flips and the TCP checksum still
    // verifies (only the MPA CRC can catch it).
    #[test]
    fn tcp_payload_corruption_keeps_checksums_valid() {
        let tag = Vlan {
            id: 100,
            priority: 0,
        };
        for (v6, vlan) in [
            (false, None),
            (true, None),
            (false, Some(tag)),
            (true, Some(tag)),
        ] {
            let orig = tcp_frame_of(v6, vlan, b"an MPA FPDU would be here, CRC-protected");
            let mut frame = orig.clone();
            assert!(corrupt_tcp_payload(&mut frame, 0x1234_5678_9abc_def0));
            let diff: u32 = frame
                .iter()
                .zip(&orig)
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            // One payload bit plus the checksum change.
            assert!(diff >= 2);
            let (src, dst, seg) = segment_of(&frame);
            let tcp = TcpPacket::new_checked(seg).unwrap();
            assert!(
                tcp.verify_checksum(&src, &dst),
                "checksum recomputed ({v6}, {vlan:?})"
            );
            let (_, _, orig_seg) = segment_of(&orig);
            let orig_tcp = TcpPacket::new_checked(orig_seg).unwrap();
            let payload_diff: u32 = tcp
                .payload()
                .iter()
                .zip(orig_tcp.payload())
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(payload_diff, 1, "exactly one payload bit flipped");
        }
        // An IPv6 extension header first: left alone.
        let mut ext = tcp_frame_of(true, None, b"data");
        ext[14 + 6] = 60;
        let before = ext.clone();
        assert!(!corrupt_tcp_payload(&mut ext, 5));
        assert_eq!(ext, before);
    }

    #[test]
    fn tcp_payload_mode_skips_frames_without_payload() {
        let mut pure_ack = tcp_frame(b"");
        let before = pure_ack.clone();
        assert!(!corrupt_tcp_payload(&mut pure_ack, 99));
        assert_eq!(pure_ack, before);
        assert!(!corrupt_tcp_payload(&mut [0u8; 10], 1));

        let cfg = FaultConfig {
            corrupt: Rate::ALWAYS,
            corrupt_mode: CorruptMode::TcpPayload,
            ..FaultConfig::default()
        };
        let (mut f, mut b) = setup(cfg);
        let mut bufs = vec![
            b.alloc_tx(64).unwrap(),
            HeapBuf::unpooled(tcp_frame(b"data")),
        ];
        b.tx_burst(&mut bufs);
        let mut out = Vec::new();
        f.rx_burst(&mut out, 8);
        assert_eq!(out.len(), 2);
        let c = f.counters().0;
        assert_eq!((c.corrupted_tcp, c.corrupt_skipped), (1, 1));
    }

    #[test]
    fn fault_overrides() {
        let mut f = FaultConfig::default();
        f.apply_overrides("drop=2%, reorder=100ppm,seed=9,corrupt_mode=tcp-payload")
            .unwrap();
        assert_eq!(f.drop.ppm(), 20_000);
        assert_eq!(f.reorder.ppm(), 100);
        assert_eq!(f.seed, 9);
        assert_eq!(f.corrupt_mode, CorruptMode::TcpPayload);
        assert_eq!(
            f.apply_overrides("dorp=1%").unwrap_err(),
            "unknown fault setting \"dorp\""
        );
        f.apply_overrides("reorder_max_hold_us=250,delay_us=40")
            .unwrap();
        assert_eq!(f.reorder_max_hold, Duration::from_micros(250));
        assert_eq!(f.delay_time, Duration::from_micros(40));
        assert!(f.apply_overrides("drop").is_err());
        assert!(f.apply_overrides("reorder_depth=0").is_err());
    }
}
