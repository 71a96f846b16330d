//! Registered memory: STags, regions, windows, and where their bytes live.
