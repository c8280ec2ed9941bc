//! The daemon's CPU budget: its own CPU time (all its threads, from getrusage) is measured per
//! window; over the budget the sampling rate is lowered in proportion, well under it the rate
//! goes back up towards the one asked for. Every change is logged.

use std::time::{Duration, Instant};

pub struct CpuBudget {
    max_percent: f64,
    max_hz: u64,
    rate_hz: u64,
    window_start: (Instant, Duration),
    /// The daemon's CPU in the last window, percent of one core.
    pub last_percent: f64,
}

impl CpuBudget {
    pub fn new(max_percent: f64, max_hz: u64) -> Self {
        CpuBudget {
            max_percent,
            max_hz,
            rate_hz: max_hz,
            window_start: (Instant::now(), own_cpu()),
            last_percent: 0.0,
        }
    }

    pub fn rate_hz(&self) -> u64 {
        self.rate_hz
    }

    /// Close the measuring window. A window that held one-off work (an attach, native debug
    /// info being opened) is only measured, it changes no rate. Returns a line saying what
    /// changed, if the rate did.
    pub fn review(&mut self, one_off_work: bool) -> Option<String> {
        let (started, cpu_then) = self.window_start;
        let now = (Instant::now(), own_cpu());
        let wall = now.0.duration_since(started).as_secs_f64();
        self.window_start = now;
        if wall <= 0.0 {
            return None;
        }
        self.last_percent = 100.0 * now.1.saturating_sub(cpu_then).as_secs_f64() / wall;
        if one_off_work {
            return None;
        }
        let next = next_rate(
            self.rate_hz,
            self.max_hz,
            self.last_percent,
            self.max_percent,
        );
        if next == self.rate_hz {
            return None;
        }
        let line = format!(
            "CPU {:.2}% of one core in the last {:.0} s ({} --max-cpu {}%): sampling rate {} from {} to {} Hz",
            self.last_percent,
            wall,
            if next < self.rate_hz { "over" } else { "well under" },
            self.max_percent,
            if next < self.rate_hz { "lowered" } else { "raised" },
            self.rate_hz,
            next
        );
        self.rate_hz = next;
        Some(line)
    }
}

/// The rate for the next window: over the budget, lowered in proportion (with a margin) but at
/// least 1 Hz; under half of it, doubled up to `max_hz`.
pub fn next_rate(rate: u64, max_hz: u64, used_percent: f64, budget_percent: f64) -> u64 {
    if used_percent > budget_percent {
        let scaled = rate as f64 * 0.9 * budget_percent / used_percent;
        (scaled.floor() as u64).clamp(1, rate)
    } else if used_percent < budget_percent / 2.0 && rate < max_hz {
        (rate * 2).min(max_hz)
    } else {
        rate
    }
}

/// CPU time of this process, all threads (user + system).
pub fn own_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_SELF).map_or(Duration::ZERO, |u| {
        let tv = |t: nix::sys::time::TimeVal| {
            Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000)
        };
        tv(u.user_time()) + tv(u.system_time())
    })
}

#[cfg(test)]
mod tests {
    use super::next_rate;

    #[test]
    fn over_budget_lowers_in_proportion_and_under_half_raises() {
        assert_eq!(next_rate(19, 19, 2.0, 1.0), 8);
        assert_eq!(next_rate(19, 19, 0.9, 1.0), 19);
        assert_eq!(next_rate(2, 19, 50.0, 1.0), 1);
        assert_eq!(next_rate(8, 19, 0.3, 1.0), 16);
        assert_eq!(next_rate(16, 19, 0.3, 1.0), 19);
        assert_eq!(next_rate(16, 19, 0.7, 1.0), 16);
    }
}
