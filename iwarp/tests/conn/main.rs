//! Connections (`iwarp::conn`) over simulated TCP: MPA negotiation, every RDMAP operation,
//! markers, CRC errors, stalls, arbitrary input, siw replays and verbs on top.

mod common;

mod crc;
mod fast_path;
mod fuzz;
mod markers;
mod negotiate;
mod ops;
mod read_ahead;
mod send_in_place;
mod siw_replay;
mod stall;
mod verbs;
