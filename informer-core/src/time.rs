//! Time as the core sees it: a monotonic instant passed in by the caller.

use core::ops::{Add, Sub};
use core::time::Duration;

/// A point on the caller's monotonic clock, measured from an arbitrary epoch.
///
/// The core never reads a clock. A runtime adapter converts its own clock (for example
/// `std::time::Instant` minus a base taken at start) into this type; a simulation uses virtual
/// time. Only differences between instants are meaningful.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(Duration);

impl Instant {
    /// The epoch of the caller's clock.
    pub const ZERO: Instant = Instant(Duration::ZERO);

    /// An instant `since_epoch` after the epoch.
    pub const fn from_epoch(since_epoch: Duration) -> Self {
        Instant(since_epoch)
    }

    /// The time since the epoch.
    pub const fn since_epoch(self) -> Duration {
        self.0
    }

    /// `self - earlier`, or zero if `earlier` is later than `self`.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(rhs))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: never panics on a clock that looks reversed.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

/// A wall-clock time, `since_unix_epoch` after 1970-01-01T00:00:00Z, as RFC 3339 in UTC with
/// `fraction_digits` digits of fraction (0: `metav1.Time`, `2006-01-02T15:04:05Z`; 6:
/// `metav1.MicroTime`, `2006-01-02T15:04:05.000000Z`; at most 9).
pub fn rfc3339(since_unix_epoch: Duration, fraction_digits: u32) -> alloc::string::String {
    let secs = since_unix_epoch.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    let mut out = alloc::format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
    );
    let digits = fraction_digits.min(9);
    if digits > 0 {
        let frac = since_unix_epoch.subsec_nanos() / 10u32.pow(9 - digits);
        out.push_str(&alloc::format!(".{frac:0width$}", width = digits as usize));
    }
    out.push('Z');
    out
}

/// The proleptic Gregorian date (year, month 1–12, day 1–31) of a day number since
/// 1970-01-01, negative before (Howard Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    // In range by construction: 1..=31 and 1..=12.
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// The day number since 1970-01-01 of a proleptic Gregorian date (`days_from_civil`; month
/// 1–12).
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if month > 2 { month - 3 } else { month + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_kubernetes_times() {
        let t = Duration::new(1_700_000_000, 123_456_789);
        assert_eq!(rfc3339(t, 0), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(t, 6), "2023-11-14T22:13:20.123456Z");
        assert_eq!(rfc3339(Duration::ZERO, 0), "1970-01-01T00:00:00Z");
        // A leap day, and the end of a century not a leap year's February.
        assert_eq!(
            rfc3339(Duration::from_secs(951_782_400), 0),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            rfc3339(Duration::from_secs(4_107_542_400), 0),
            "2100-03-01T00:00:00Z"
        );
    }
}
