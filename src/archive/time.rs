//! Wall-clock times in the two forms archives use: RFC 3339 UTC text and DOS date/time.

use std::time::{SystemTime, UNIX_EPOCH};

/// (year, month, day) of the civil date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn parts(t: SystemTime) -> (i64, u32, u32, u32, u32, u32) {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400) as u32;
    (y, mo, d, s / 3600, s / 60 % 60, s % 60)
}

/// `t` as RFC 3339 UTC with second precision, e.g. `2024-05-01T12:00:00Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = parts(t);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// The current time as a DOS (date, time) pair, clamped to the DOS range 1980–2107.
pub fn dos_now() -> (u16, u16) {
    let (y, mo, d, h, mi, s) = parts(SystemTime::now());
    if !(1980..=2107).contains(&y) {
        return (0x21, 0); // 1980-01-01 00:00
    }
    let date = ((y - 1980) as u16) << 9 | (mo as u16) << 5 | d as u16;
    let time = (h as u16) << 11 | (mi as u16) << 5 | (s / 2) as u16;
    (date, time)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_714_564_799)),
            "2024-05-01T11:59:59Z"
        );
    }
}
