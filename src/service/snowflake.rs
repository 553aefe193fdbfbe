//! Snowflake IDs read back: an ID given as text parsed and decoded in a layout, and a
//! timestamp shown as Leaf shows it (both decode routes answer with them).

use std::time::{Duration, UNIX_EPOCH};

use crate::snowflake::{self, Decoded, Layout};

/// Parses `value` as a snowflake ID (a non-negative decimal `i64` within the layout's
/// bits) and decodes it in `layout`.
pub fn parse_and_decode(value: &str, epoch_ms: i64, layout: &Layout) -> Result<Decoded, String> {
    let shown: String = value.chars().take(32).collect();
    let id = value
        .parse::<i64>()
        .map_err(|_| format!("snowflakeId must be a decimal integer, got `{shown}`"))?;
    snowflake::decode(id, epoch_ms, layout).map_err(|e| format!("snowflakeId `{shown}`: {e}"))
}

/// `ms` as Leaf's `yyyy-MM-dd HH:mm:ss.SSS`, in UTC. Decoded timestamps are at or
/// after a non-negative epoch; a wide layout's may lie past the year 9999, which the
/// formatter does not hold: those are shown as its last millisecond.
pub fn leaf_time(ms: i64) -> String {
    /// 9999-12-31 23:59:59.999 UTC.
    const LAST_MS: u64 = 253_402_300_799_999;
    let since = Duration::from_millis(u64::try_from(ms).unwrap_or(0).min(LAST_MS));
    humantime::format_rfc3339_millis(UNIX_EPOCH + since)
        .to_string()
        .replacen('T', " ", 1)
        .trim_end_matches('Z')
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_shown_as_leaf_shows_them() {
        // Leaf's own example, 1567733700834, shown at UTC+8 as 2019-09-06 09:35:00.834.
        assert_eq!(leaf_time(1_567_733_700_834), "2019-09-06 01:35:00.834");
        assert_eq!(leaf_time(0), "1970-01-01 00:00:00.000");
    }

    #[test]
    fn malformed_values_are_refused_clearly() {
        for bad in ["", "abc", "1.5", "-1", "99999999999999999999"] {
            let e = parse_and_decode(bad, snowflake::LEAF_EPOCH_MS, &Layout::LEAF).unwrap_err();
            assert!(e.contains("snowflakeId"), "{bad}: {e}");
        }
        let e = parse_and_decode("9007199254740992", 0, &Layout::JS).unwrap_err();
        assert!(e.contains("53 bits"), "{e}");
        assert_eq!(leaf_time(i64::MAX), "9999-12-31 23:59:59.999");
    }
}
