//! What `record` and `top` sample: `-e cpu|wall|alloc|lock`, `--wall` (as `-e wall`), `-c` and
//! `--lock-threshold`.

use crate::engine::alloc::AllocOptions;
use crate::engine::lock::LockOptions;
use crate::engine::{SampledEvents, Wall};
use crate::error::{Error, ErrorKind, Result};

#[derive(clap::Args)]
pub struct EventArgs {
    /// What to sample: CPU time; wall-clock time (as --wall); allocations (bytes allocated, by
    /// stack and class allocated: uprobes on libjvm's allocation tracer); or lock contention
    /// (time waited to enter monitors and take java.util.concurrent locks, by stack and lock
    /// class: uprobes on libjvm's contended paths). Uprobes are opened per thread and need
    /// libjvm's symbols, and root or CAP_PERFMON.
    #[arg(short = 'e', long = "event", value_enum, default_value = "cpu")]
    pub event: Event,
    /// With -e alloc: a sample every this many TLAB refills or allocations outside a TLAB.
    #[arg(short = 'c', long = "period", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub period: u64,
    /// Wall-clock time (-e wall): every thread counts at the rate whether it runs or not, so
    /// sleeping, parking, lock waits, I/O and waiting for a CPU show with their share of the time
    /// (per CPU the stacks of waiting threads are read from outside; per thread each context
    /// switch costs the thread a stack sample; see docs/wall-clock.md).
    #[arg(long)]
    pub wall: bool,
    /// With -e lock: waits shorter than this are left out (a number with a unit: 10us, 1ms).
    #[arg(long, value_name = "TIME", default_value = "10us", value_parser = humantime::parse_duration)]
    pub lock_threshold: std::time::Duration,
}

/// What is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Event {
    Cpu,
    Wall,
    Alloc,
    Lock,
}

impl EventArgs {
    /// The event asked for, `--wall` being `-e wall`.
    pub fn event(&self) -> Result<Event> {
        let event = match (self.wall, self.event) {
            (true, Event::Cpu | Event::Wall) => Event::Wall,
            (true, other) => {
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!("--wall is -e wall: it cannot go with -e {other:?}").to_lowercase(),
                ))
            }
            (false, event) => event,
        };
        if self.period != 1 && event != Event::Alloc {
            return Err(Error::new(
                ErrorKind::Usage,
                "-c goes with -e alloc: CPU and wall-clock time are sampled at -F HZ",
            ));
        }
        Ok(event)
    }

    /// What the engine samples besides CPU or wall-clock time.
    pub fn sampled(&self, event: Event) -> SampledEvents {
        SampledEvents {
            alloc: (event == Event::Alloc).then_some(AllocOptions {
                period: self.period,
            }),
            lock: (event == Event::Lock).then_some(LockOptions {
                threshold_ns: u64::try_from(self.lock_threshold.as_nanos()).unwrap_or(u64::MAX),
            }),
        }
    }
}

impl Event {
    /// The engine's wall-clock option for this event.
    pub fn wall(self, idle: bool) -> Option<Wall> {
        (self == Event::Wall).then_some(Wall { idle })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        events: EventArgs,
    }

    fn event(args: &[&str]) -> Result<Event> {
        let cli = Cli::try_parse_from(["jvmperf"].iter().chain(args)).unwrap();
        cli.events.event()
    }

    #[test]
    fn wall_is_an_alias_of_e_wall_and_c_goes_with_alloc() {
        assert_eq!(event(&[]).unwrap(), Event::Cpu);
        assert_eq!(event(&["--wall"]).unwrap(), Event::Wall);
        assert_eq!(event(&["-e", "wall"]).unwrap(), Event::Wall);
        assert_eq!(event(&["-e", "alloc", "-c", "10"]).unwrap(), Event::Alloc);
        assert_eq!(event(&["--event", "alloc"]).unwrap(), Event::Alloc);
        assert_eq!(
            event(&["-e", "lock", "--lock-threshold", "1ms"]).unwrap(),
            Event::Lock
        );
        assert!(event(&["-e", "lock", "-c", "2"]).is_err());
        assert!(Cli::try_parse_from(["jvmperf", "--lock-threshold", "10"]).is_err());
        assert!(event(&["--wall", "-e", "alloc"]).is_err());
        assert!(event(&["-c", "10"]).is_err());
        assert!(Cli::try_parse_from(["jvmperf", "-e", "nosuch"]).is_err());
        assert!(Cli::try_parse_from(["jvmperf", "-e", "alloc", "-c", "0"]).is_err());
    }
}
