//! Range checks shared by the settings that configuration files and command lines give
//! (the configuration file's sections and the port layer's own settings).

use std::fmt;
use std::ops::RangeInclusive;

use serde::de::{self, Deserializer, Visitor};

/// `v` if it lies in `r`, else the message `invalid value V (must be A..=B)`.
pub(crate) fn check_range<T: PartialOrd + fmt::Display + Copy>(
    v: T,
    r: RangeInclusive<T>,
) -> Result<T, String> {
    if r.contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "invalid value {v} (must be {}..={})",
            r.start(),
            r.end()
        ))
    }
}

/// Deserializes an integer that must lie in `r`.
pub(crate) fn de_ranged<'de, D: Deserializer<'de>>(
    d: D,
    r: RangeInclusive<i64>,
) -> Result<i64, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = i64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v).map_err(|_| E::custom(format!("invalid value {v} (too large)")))
        }
    }
    let v = d.deserialize_i64(V)?;
    check_range(v, r).map_err(de::Error::custom)
}
