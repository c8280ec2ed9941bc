//! SVG flame graphs through inferno: titled with what was profiled, a subtitle with the clock, the
//! span, the rate and the samples, and every frame coloured by its kind (C2, C1, inlined,
//! interpreted, native, VM stub, kernel, jvmperf's own agent) through inferno's palette map.
//!
//! Frames keep their kind without a visible suffix: each name carries one invisible character
//! (a zero-width or invisible-operator code point) that stands for its kind. The flame graph then
//! keeps a method's C1 and C2 frames apart and colours each, while every label reads as the plain
//! name.

use super::{collapsed, OutputOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::profile::{Clock, Frame, FrameKind, Profile};
use inferno::flamegraph::color::{BasicPalette, Color, PaletteMap};
use inferno::flamegraph::{self, Options, Palette};

/// What a frame is, as the flame graphs (this SVG and the HTML page) colour it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shade {
    C2,
    C1,
    Inlined,
    Interpreted,
    Native,
    Stub,
    Kernel,
    Agent,
    Thread,
    Allocated,
    Lock,
}

impl Shade {
    pub(crate) const ALL: [Shade; 11] = [
        Shade::C2,
        Shade::C1,
        Shade::Inlined,
        Shade::Interpreted,
        Shade::Native,
        Shade::Stub,
        Shade::Kernel,
        Shade::Agent,
        Shade::Thread,
        Shade::Allocated,
        Shade::Lock,
    ];

    pub(crate) fn of(frame: &Frame) -> Shade {
        match frame.kind {
            FrameKind::Jit if frame.code.is_some_and(|c| c.is_c1()) => Shade::C1,
            FrameKind::Jit => Shade::C2,
            FrameKind::Inlined => Shade::Inlined,
            FrameKind::Interpreted => Shade::Interpreted,
            FrameKind::Kernel => Shade::Kernel,
            FrameKind::Stub => Shade::Stub,
            FrameKind::Thread => Shade::Thread,
            FrameKind::Allocated => Shade::Allocated,
            FrameKind::Lock => Shade::Lock,
            FrameKind::Native
                if frame
                    .module
                    .as_deref()
                    .is_some_and(|m| m.starts_with("libjvmperf-shim")) =>
            {
                Shade::Agent
            }
            FrameKind::Native => Shade::Native,
        }
    }

    /// The kind of a collapsed-format label, by its suffix (see `collapsed`), and the name
    /// without it.
    fn of_label(label: &str) -> (&str, Option<Shade>) {
        for (suffix, shade) in [
            ("_[j]", Shade::C2),
            ("_[1]", Shade::C1),
            ("_[i]", Shade::Inlined),
            ("_[0]", Shade::Interpreted),
            ("_[k]", Shade::Kernel),
            ("_[a]", Shade::Allocated),
            ("_[l]", Shade::Lock),
        ] {
            if let Some(name) = label.strip_suffix(suffix) {
                return (name, Some(shade));
            }
        }
        (label, None)
    }

    /// The invisible character a name of this kind ends with.
    fn mark(self) -> char {
        match self {
            Shade::C2 => '\u{200B}',
            Shade::C1 => '\u{200C}',
            Shade::Inlined => '\u{200D}',
            Shade::Interpreted => '\u{2060}',
            Shade::Native => '\u{2061}',
            Shade::Stub => '\u{2062}',
            Shade::Kernel => '\u{2063}',
            Shade::Agent => '\u{2064}',
            Shade::Thread => '\u{FEFF}',
            Shade::Allocated => '\u{2065}',
            Shade::Lock => '\u{206F}',
        }
    }

    pub(crate) fn color(self) -> Color {
        let (r, g, b) = match self {
            Shade::C2 => (80, 190, 90),
            Shade::C1 => (175, 215, 80),
            Shade::Inlined => (70, 195, 205),
            Shade::Interpreted => (230, 100, 90),
            Shade::Native => (225, 200, 70),
            Shade::Stub => (205, 175, 130),
            Shade::Kernel => (240, 145, 50),
            Shade::Agent => (175, 125, 220),
            Shade::Thread => (185, 185, 185),
            Shade::Allocated => (90, 130, 230),
            Shade::Lock => (230, 110, 180),
        };
        Color { r, g, b }
    }

    /// What the legend calls the kind.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Shade::C2 => "C2",
            Shade::C1 => "C1",
            Shade::Inlined => "inlined",
            Shade::Interpreted => "interpreted",
            Shade::Native => "native",
            Shade::Stub => "VM stub",
            Shade::Kernel => "kernel",
            Shade::Agent => "jvmperf agent",
            Shade::Thread => "thread",
            Shade::Allocated => "allocated class",
            Shade::Lock => "lock class",
        }
    }

    fn legend(self) -> String {
        let colour = match self {
            Shade::C2 => "green",
            Shade::C1 => "lime",
            Shade::Inlined => "aqua",
            Shade::Interpreted => "red",
            Shade::Native => "yellow",
            Shade::Stub => "tan",
            Shade::Kernel => "orange",
            Shade::Agent => "purple",
            Shade::Thread => "grey",
            Shade::Allocated => "blue",
            Shade::Lock => "pink",
        };
        format!("{} {colour}", self.name())
    }
}

fn marked(name: &str, shade: Shade) -> String {
    let mut s = String::with_capacity(name.len() + 3);
    s.push_str(name);
    s.push(shade.mark());
    s
}

pub fn render(profile: &Profile, opts: &OutputOptions) -> Result<Vec<u8>> {
    let labels: Vec<String> = profile
        .frames
        .iter()
        .map(|f| {
            let label = collapsed::frame_label(f);
            marked(Shade::of_label(&label).0, Shade::of(f))
        })
        .collect();
    let folded = collapsed::folded_with(profile, opts, &labels, |thread| {
        marked(thread, Shade::Thread)
    });
    let lines: Vec<String> = folded
        .into_iter()
        .map(|(stack, count)| format!("{stack} {count}"))
        .collect();
    let mut options = Options::default();
    options.title = title(profile);
    options.subtitle = Some(subtitle(profile));
    options.count_name = profile.clock.unit().to_string();
    // Wide enough for the subtitle's legend.
    options.image_width = Some(1500);
    // Names without a mark (an unknown stack) in blue.
    options.colors = Palette::Basic(BasicPalette::Blue);
    let mut palette = PaletteMap::default();
    palette.insert("", Shade::Thread.color()); // the root, "all"
    for shade in Shade::ALL {
        for label in &labels {
            if label.ends_with(shade.mark()) {
                palette.insert(label, shade.color());
            }
        }
    }
    for name in profile.thread_names.values() {
        palette.insert(marked(name, Shade::Thread), Shade::Thread.color());
    }
    options.palette_map = Some(&mut palette);
    svg(&mut options, lines.iter().map(String::as_str))
}

/// A differential SVG from folded lines with two counts (before, after), coloured by change;
/// labels lose their kind suffixes as in [`render`].
pub fn from_folded(folded: &str, title: &str) -> Result<Vec<u8>> {
    let lines: Vec<String> = folded
        .lines()
        .map(|line| {
            let (stack, counts) = line.split_once(' ').unwrap_or((line, ""));
            let frames: Vec<String> = stack
                .split(';')
                .map(|label| match Shade::of_label(label) {
                    (name, Some(shade)) => marked(name, shade),
                    (name, None) => name.to_string(),
                })
                .collect();
            format!("{} {counts}", frames.join(";"))
        })
        .collect();
    let mut options = Options::default();
    options.title = title.to_string();
    options.count_name = "samples".to_string();
    svg(&mut options, lines.iter().map(String::as_str))
}

fn svg<'a>(options: &mut Options, lines: impl IntoIterator<Item = &'a str>) -> Result<Vec<u8>> {
    let mut svg = Vec::new();
    flamegraph::from_lines(options, lines, &mut svg).map_err(|e| {
        Error::new(
            ErrorKind::Output,
            format!("cannot render the flame graph: {e}"),
        )
    })?;
    Ok(svg)
}

fn label<'a>(profile: &'a Profile, key: &str) -> Option<&'a str> {
    profile
        .labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// `bench.Phases (pid 4242) on web-1`, from the profile's labels.
pub(crate) fn title(profile: &Profile) -> String {
    let main = label(profile, "main").unwrap_or("JVM");
    let pid = label(profile, "pid").map_or(String::new(), |p| format!(" (pid {p})"));
    let host = label(profile, "host")
        .filter(|h| !h.is_empty())
        .map_or(String::new(), |h| format!(" on {h}"));
    format!("{main}{pid}{host}")
}

/// `CPU time · 10.0 s from 2026-11-25 02:11:07 UTC · 99 Hz · 1980 samples · C2 green, …`.
fn subtitle(profile: &Profile) -> String {
    let mut parts = description(profile);
    let legend: Vec<String> = Shade::ALL
        .iter()
        .filter(|&&s| s != Shade::Thread)
        .filter(|&&s| s != Shade::Allocated || profile.clock == Clock::Alloc)
        .filter(|&&s| s != Shade::Lock || profile.clock == Clock::Lock)
        .map(|s| s.legend())
        .collect();
    parts.push(legend.join(", "));
    parts.join(" · ")
}

/// What the profile is: its clock, span, rate and samples (`CPU time`, `10.0 s from …`, …).
pub(crate) fn description(profile: &Profile) -> Vec<String> {
    let mut parts = vec![match profile.clock {
        Clock::Cpu => "CPU time".to_string(),
        Clock::Wall => "wall-clock time".to_string(),
        Clock::Alloc => "allocated bytes".to_string(),
        Clock::Lock => "time waited for locks".to_string(),
    }];
    if let Some(span) = profile.interval {
        let start = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(span.start_unix_ns);
        let stamp = humantime::format_rfc3339_seconds(start).to_string();
        parts.push(format!(
            "{:.1} s from {} UTC",
            span.duration_ns as f64 / 1e9,
            stamp.trim_end_matches('Z').replace('T', " ")
        ));
    }
    if profile.period_ns > 0 {
        parts.push(format!("{:.0} Hz", 1e9 / profile.period_ns as f64));
    }
    let samples: u64 = profile.samples.iter().map(|s| s.weight).sum();
    match profile.clock {
        Clock::Alloc => parts.push(format!(
            "{samples} bytes ({:.1} MiB)",
            samples as f64 / f64::from(1 << 20)
        )),
        Clock::Lock => parts.push(format!("{:.3} s waited", samples as f64 / 1e9)),
        _ => parts.push(format!("{samples} samples")),
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{CompiledCode, Sample};

    fn profile() -> Profile {
        let mut p = Profile::default();
        p.period_ns = 10_101_010;
        p.labels = vec![
            ("host".into(), "web-1".into()),
            ("pid".into(), "4242".into()),
            ("main".into(), "bench.Phases".into()),
        ];
        p.interval = Some(crate::profile::WallInterval {
            start_unix_ns: 1_764_036_667_000_000_000,
            duration_ns: 10_000_000_000,
        });
        let mut c1 = Frame::named("bench.Phases.drive", FrameKind::Jit);
        c1.code = Some(CompiledCode {
            level: 3,
            compile_id: 0,
            osr_bci: None,
            code_size: 0,
        });
        let frames = [
            Frame::named("bench.Phases.main", FrameKind::Interpreted),
            c1,
            Frame::named("bench.Phases.hotLoop", FrameKind::Jit),
            Frame::named("bench.Phases.helper", FrameKind::Inlined),
            Frame::named("asm_exc_page_fault", FrameKind::Kernel),
        ];
        let ids: Vec<_> = frames.into_iter().map(|f| p.intern_frame(f)).collect();
        let mut agent = Frame::named("shim_main", FrameKind::Native);
        agent.module = Some("libjvmperf-shim-0.1.0-abcd.so".into());
        let agent = p.intern_frame(agent);
        for (stack, weight) in [
            (p.intern_stack(ids.clone()), 7),
            (p.intern_stack(vec![ids[0], ids[2]]), 3),
            (p.intern_stack(vec![agent]), 1),
        ] {
            p.samples.push(Sample {
                time: 0,
                tid: 1,
                stack,
                weight,
            });
        }
        p
    }

    fn rgb(c: Color) -> String {
        format!("rgb({},{},{})", c.r, c.g, c.b)
    }

    #[test]
    fn titled_coloured_by_kind_and_labelled_without_suffixes() {
        let svg = String::from_utf8(render(&profile(), &OutputOptions { threads: false }).unwrap())
            .unwrap();
        assert!(svg.contains("bench.Phases (pid 4242) on web-1"), "{svg}");
        assert!(
            svg.contains("CPU time · 10.0 s from 2025-11-25 02:11:07 UTC · 99 Hz · 11 samples · C2 green, C1 lime"),
            "{svg}"
        );
        for suffix in ["_[j]", "_[1]", "_[0]", "_[i]", "_[k]"] {
            assert!(!svg.contains(suffix), "{suffix} shown: {svg}");
        }
        for shade in [
            Shade::C2,
            Shade::C1,
            Shade::Inlined,
            Shade::Interpreted,
            Shade::Kernel,
            Shade::Agent,
        ] {
            assert!(svg.contains(&rgb(shade.color())), "{shade:?} not coloured");
        }
        // Each label is the plain name and its kind's mark: drive (C1) under main, hotLoop (C2).
        assert!(
            svg.contains("bench.Phases.drive\u{200C} (7 samples"),
            "{svg}"
        );
        assert!(
            svg.contains("bench.Phases.hotLoop\u{200B} (3 samples"),
            "{svg}"
        );
    }

    #[test]
    fn an_allocation_profile_counts_bytes_and_colours_its_classes() {
        let mut p = profile();
        p.clock = Clock::Alloc;
        p.period_ns = 0;
        let class = p.intern_frame(Frame::named("long[]", FrameKind::Allocated));
        let stack = p.intern_stack(vec![0, class]);
        p.samples = vec![Sample {
            time: 0,
            tid: 1,
            stack,
            weight: 3 << 20,
        }];
        let svg =
            String::from_utf8(render(&p, &OutputOptions { threads: false }).unwrap()).unwrap();
        assert!(svg.contains("allocated bytes · 10.0 s from "), "{svg}");
        assert!(svg.contains("3145728 bytes (3.0 MiB)"), "{svg}");
        assert!(svg.contains("allocated class blue"), "{svg}");
        assert!(svg.contains("(3,145,728 bytes, 100.00%)"), "{svg}");
        assert!(svg.contains(&rgb(Shade::Allocated.color())));
        // Not in the legend of a CPU profile.
        let cpu = String::from_utf8(render(&profile(), &OutputOptions { threads: false }).unwrap())
            .unwrap();
        assert!(!cpu.contains("allocated class"));
    }

    #[test]
    fn threads_are_grey_roots() {
        let mut p = profile();
        p.thread_names.insert(1, "worker-1".into());
        let svg = String::from_utf8(render(&p, &OutputOptions { threads: true }).unwrap()).unwrap();
        assert!(svg.contains("worker-1\u{FEFF} (11 samples"), "{svg}");
        assert!(svg.contains(&rgb(Shade::Thread.color())));
    }
}
