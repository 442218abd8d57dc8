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
