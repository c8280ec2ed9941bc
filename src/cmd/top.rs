//! `jvmperf top -p PID`: a live terminal view of a JVM's hottest methods, like py-spy's top: self
//! and total shares over a sliding window of the last seconds, refreshed every second. It runs
//! the recording engine `record` runs, taking its profile one interval (a second) at a time.
//!
//! Keys: `s` switches between sorting by self and by total samples, `t` cycles through the
//! busiest threads (and back to all), `q`, Esc or Ctrl-C quits. The terminal is restored on every
//! way out: quitting, SIGINT/SIGTERM/SIGHUP (a closed ssh session), the JVM's exit, and a panic.

use super::event_args::Event as Sampled;
use super::report::{rows, SortBy};
use crate::engine::{Agent, Engine, EngineOptions, Interval};
use crate::error::{Error, ErrorKind, Result};
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, queue, style, terminal};
use std::collections::{HashMap, VecDeque};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct TopOptions {
    /// Process id of the JVM.
    #[arg(short, long)]
    pub pid: u32,
    /// Samples per second per thread.
    #[arg(
        short = 'F',
        long = "frequency",
        value_name = "HZ",
        default_value_t = 99
    )]
    pub frequency_hz: u64,
    /// Seconds of samples the table covers (a sliding window).
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = crate::cli::seconds)]
    pub window: Duration,
    /// Order by self or total samples (`s` switches).
    #[arg(long, value_enum, default_value = "self")]
    pub sort: SortBy,
    /// Only threads whose name contains this (`t` cycles through the busiest threads).
    #[arg(long, value_name = "NAME")]
    pub thread: Option<String>,
    #[command(flatten)]
    pub events: super::event_args::EventArgs,
    /// Per CPU, per thread, or per CPU where allowed (as `record --sampling`).
    #[arg(long, value_enum, env = "JVMPERF_SAMPLING", default_value = "auto")]
    pub sampling: crate::sampler::Sampling,
}

const REFRESH: Duration = Duration::from_secs(1);

pub fn run(opts: &TopOptions) -> Result<()> {
    let event = opts.events.event()?;
    let _priority = crate::priority::raise(&[opts.pid]);
    if !std::io::stdout().is_terminal() {
        return Err(Error::new(
            ErrorKind::Usage,
            "top needs a terminal (to write a profile to a file, use `jvmperf record`)",
        ));
    }
    // Ctrl-C and SIGTERM as in `record` (they also end the attach's waits); a closed terminal too.
    crate::interrupt::install()?;
    let hung_up = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hung_up.clone())
        .map_err(|e| Error::new(ErrorKind::Internal, format!("cannot handle signals: {e}")))?;
    // An attach to a JVM of thousands of threads can take seconds; the terminal is still in its
    // own mode, where Ctrl-C interrupts it.
    eprintln!("jvmperf: attaching to JVM {}…", opts.pid);
    let mut engine = Engine::start_events(
        EngineOptions {
            pid: opts.pid,
            frequency_hz: opts.frequency_hz,
            stack_size: crate::sampler::DEFAULT_STACK_SIZE,
            max_stacks: 1_000_000,
            kernel: false,
            precise_inlining: false,
            spill: None,
            keep_sample_times: false,
            agent: Agent::Fallback,
            wall: event.wall(false),
            sampling: opts.sampling,
            host: None,
        },
        opts.events.sampled(event),
    )?;
    let screen = Screen::enter().map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            format!("cannot set up the terminal: {e}"),
        )
    })?;
    let mut view = View {
        pid: opts.pid,
        window: opts.window,
        sort: opts.sort,
        thread: opts.thread.clone(),
        intervals: VecDeque::new(),
        agentless: engine.agentless().is_some(),
        event,
    };
    let outcome = view.run(&mut engine, &hung_up);
    drop(screen);
    match outcome {
        Ok(Some(why)) => {
            eprintln!("jvmperf: top ended: {why}");
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The terminal in raw mode on the alternate screen, cursor hidden, until dropped (also when a
/// panic unwinds through it).
struct Screen;

impl Screen {
    fn enter() -> std::io::Result<Screen> {
        terminal::enable_raw_mode()?;
        let screen = Screen;
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        Ok(screen)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = execute!(
            std::io::stdout(),
            cursor::Show,
            terminal::LeaveAlternateScreen
        );
        let _ = terminal::disable_raw_mode();
    }
}

struct View {
    pid: u32,
    window: Duration,
    sort: SortBy,
    thread: Option<String>,
    /// The intervals in the window, oldest first.
    intervals: VecDeque<Interval>,
    agentless: bool,
    event: Sampled,
}

impl View {
    /// Polls the engine and the keyboard until quit; returns why it ended if not by the user.
    fn run(&mut self, engine: &mut Engine, hung_up: &AtomicBool) -> Result<Option<String>> {
        let mut next = Instant::now();
        loop {
            engine.poll(Duration::from_millis(20))?;
            if let Some(why) = engine.ended() {
                return Ok(Some(why.to_string()));
            }
            if hung_up.load(Ordering::Relaxed) || crate::interrupt::requested() {
                return Ok(None);
            }
            let mut redraw = false;
            while event::poll(Duration::ZERO).map_err(terminal_error)? {
                match event::read().map_err(terminal_error)? {
                    Event::Key(key) if key.kind != KeyEventKind::Release => {
                        if self.key(key) {
                            return Ok(None);
                        }
                        redraw = true;
                    }
                    Event::Resize(..) => redraw = true,
                    _ => {}
                }
            }
            if Instant::now() >= next {
                next += REFRESH;
                if let Some(interval) = engine.take_interval() {
                    self.intervals.push_back(interval);
                }
                let newest = self.intervals.back().map_or(0, |i| i.end_ns);
                let window = self.window.as_nanos() as u64;
                while self
                    .intervals
                    .front()
                    .is_some_and(|i| i.end_ns + window <= newest)
                {
                    self.intervals.pop_front();
                }
                redraw = true;
            }
            if redraw {
                self.draw().map_err(terminal_error)?;
            }
        }
    }

    /// Acts on a key; true to quit.
    fn key(&mut self, key: KeyEvent) -> bool {
        match key.code {
            KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => return true,
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => return true,
            KeyCode::Char('s') => {
                self.sort = match self.sort {
                    SortBy::SelfSamples => SortBy::Total,
                    SortBy::Total => SortBy::SelfSamples,
                }
            }
            KeyCode::Char('t') => {
                let threads = self.busiest_threads();
                self.thread = match &self.thread {
                    None => threads.first().cloned(),
                    Some(current) => threads.iter().skip_while(|t| *t != current).nth(1).cloned(),
                };
            }
            _ => {}
        }
        false
    }

    /// Thread names in the window, busiest first.
    fn busiest_threads(&self) -> Vec<String> {
        let mut by_name: HashMap<String, u64> = HashMap::new();
        for i in &self.intervals {
            for s in &i.profile.samples {
                *by_name.entry(i.profile.thread_name(s.tid)).or_default() += s.weight;
            }
        }
        let mut names: Vec<(String, u64)> = by_name.into_iter().collect();
        names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        names.into_iter().map(|(name, _)| name).collect()
    }

    /// (method, self, total) over the window for the threads shown, hottest first, and the
    /// samples they hold.
    fn table(&self) -> (Vec<(String, u64, u64)>, u64) {
        let mut by_method: HashMap<String, (u64, u64)> = HashMap::new();
        let mut samples = 0;
        for i in &self.intervals {
            let p = &i.profile;
            let keep = |s: &crate::profile::Sample| {
                self.thread
                    .as_ref()
                    .is_none_or(|t| p.thread_name(s.tid).contains(t.as_str()))
            };
            let (rows, total) = rows(p, self.sort, keep);
            samples += total;
            for r in rows {
                let e = by_method.entry(r.method).or_default();
                e.0 += r.self_samples;
                e.1 += r.total;
            }
        }
        let mut table: Vec<(String, u64, u64)> = by_method
            .into_iter()
            .map(|(m, (own, total))| (m, own, total))
            .collect();
        table.sort_by(|a, b| {
            let key = |r: &(String, u64, u64)| match self.sort {
                SortBy::SelfSamples => (r.1, r.2),
                SortBy::Total => (r.2, r.1),
            };
            key(b).cmp(&key(a)).then_with(|| a.0.cmp(&b.0))
        });
        (table, samples)
    }

    fn draw(&self) -> std::io::Result<()> {
        let (_, height) = terminal_size();
        let (table, samples) = self.table();
        let lost: u64 = self.intervals.iter().map(|i| i.lost).sum();
        let rate = self.intervals.back().map_or(0, |i| i.frequency_hz);
        let covered = match (self.intervals.front(), self.intervals.back()) {
            (Some(a), Some(b)) => (b.end_ns - a.start_ns) as f64 / 1e9,
            _ => 0.0,
        };
        let (what, weight) = match self.event {
            Sampled::Cpu => (format!("{rate} Hz"), format!("{samples} samples")),
            Sampled::Wall => (
                format!("{rate} Hz wall-clock"),
                format!("{samples} samples"),
            ),
            Sampled::Alloc => (
                "allocations".to_string(),
                format!("{:.1} MiB allocated", samples as f64 / (1 << 20) as f64),
            ),
            Sampled::Lock => (
                "lock contention".to_string(),
                format!("{:.1} ms waited", samples as f64 / 1e6),
            ),
        };
        let mut lines = vec![
            format!(
                "jvmperf top — JVM {} — {what} — last {covered:.0} s (named ~2 s behind): {weight}, {lost} lost{}",
                self.pid,
                if self.agentless { " — without the agent" } else { "" }
            ),
            format!(
                "threads: {} — sort: {} — keys: s sort, t thread, q quit",
                self.thread.as_deref().unwrap_or("all"),
                match self.sort {
                    SortBy::SelfSamples => "self",
                    SortBy::Total => "total",
                }
            ),
            String::new(),
            format!("{:>7} {:>7}  METHOD", "SELF%", "TOTAL%"),
        ];
        if samples == 0 {
            lines.push(
                "  (no samples yet: the first ones are named about 2 s after they are taken)"
                    .into(),
            );
        }
        let pct = |n: u64| 100.0 * n as f64 / samples.max(1) as f64;
        let room = height.saturating_sub(lines.len());
        for (method, own, total) in table.iter().take(room) {
            lines.push(format!(
                "{:>6.1}% {:>6.1}%  {method}",
                pct(*own),
                pct(*total)
            ));
        }
        draw_lines(&lines)
    }
}

/// Clears the screen and writes `lines` from the top, each cut to the terminal's width.
fn draw_lines(lines: &[String]) -> std::io::Result<()> {
    let (width, height) = terminal_size();
    let mut out = std::io::stdout().lock();
    queue!(out, terminal::Clear(terminal::ClearType::All))?;
    for (row, line) in lines.iter().take(height).enumerate() {
        let shown: String = line.chars().take(width).collect();
        queue!(out, cursor::MoveTo(0, row as u16), style::Print(shown))?;
    }
    out.flush()
}

/// The terminal's columns and rows; 80×24 where it does not say (a pty nobody sized reports 0×0).
fn terminal_size() -> (usize, usize) {
    match terminal::size() {
        Ok((w, h)) if w > 0 && h > 0 => (usize::from(w), usize::from(h)),
        _ => (80, 24),
    }
}

fn terminal_error(e: std::io::Error) -> Error {
    Error::new(ErrorKind::Internal, format!("terminal: {e}"))
}
