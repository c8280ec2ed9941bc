//! Kernel symbols from `/proc/kallsyms`: text symbols sorted by address, looked up by binary search.

use crate::error::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicBool, Ordering};

const UNKNOWN: &str = "[unknown]";

/// A resolved kernel address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSymbol<'a> {
    pub name: &'a str,
    /// The module (`ext4`), or `None` for the core kernel.
    pub module: Option<&'a str>,
    pub offset: u64,
}

pub struct KernelSymbols {
    /// (address, name range in `names`, module index + 1 or 0), sorted by address.
    symbols: Vec<(u64, u32, u32, u32)>,
    names: String,
    modules: Vec<String>,
    /// kallsyms showed only zero addresses: kptr_restrict, or not privileged.
    restricted: bool,
    warned: AtomicBool,
}

impl KernelSymbols {
    pub fn load() -> Result<Self> {
        let text = std::fs::read_to_string("/proc/kallsyms").map_err(|e| {
            Error::new(
                ErrorKind::Permission,
                format!("cannot read /proc/kallsyms: {e} (kernel frames need it)"),
            )
        })?;
        Ok(Self::parse(&text))
    }

    /// Parse kallsyms text, keeping text (code) symbols only.
    pub fn parse(text: &str) -> Self {
        let mut names = String::new();
        let mut modules: Vec<String> = Vec::new();
        let mut symbols = Vec::new();
        let mut any = false;
        let mut nonzero = false;
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            if !matches!(kind, "t" | "T" | "w" | "W") {
                continue;
            }
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            any = true;
            nonzero |= addr != 0;
            let module = match fields
                .next()
                .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'))
            {
                Some(m) => match modules.iter().position(|x| x == m) {
                    Some(i) => i as u32 + 1,
                    None => {
                        modules.push(m.to_string());
                        modules.len() as u32
                    }
                },
                None => 0,
            };
            let start = names.len() as u32;
            names.push_str(name);
            symbols.push((addr, start, names.len() as u32, module));
        }
        symbols.sort_by_key(|s| s.0);
        KernelSymbols {
            restricted: any && !nonzero,
            symbols: if nonzero { symbols } else { Vec::new() },
            names,
            modules,
            warned: AtomicBool::new(false),
        }
    }

    pub fn is_restricted(&self) -> bool {
        self.restricted
    }

    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// The symbol at or before `addr`. Addresses past the last symbol resolve to it: kallsyms has
    /// no sizes.
    pub fn lookup(&self, addr: u64) -> Option<KernelSymbol<'_>> {
        let i = self
            .symbols
            .partition_point(|s| s.0 <= addr)
            .checked_sub(1)?;
        let (start, from, to, module) = self.symbols[i];
        Some(KernelSymbol {
            name: &self.names[from as usize..to as usize],
            module: module
                .checked_sub(1)
                .map(|m| self.modules[m as usize].as_str()),
            offset: addr - start,
        })
    }

    /// The function name at `addr`, or `[unknown]`. When kallsyms hides addresses, says so once
    /// on stderr.
    pub fn symbolize(&self, addr: u64) -> &str {
        if self.restricted && !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!("jvmperf: {}", Self::restricted_message());
        }
        self.lookup(addr).map_or(UNKNOWN, |s| s.name)
    }

    pub fn restricted_message() -> &'static str {
        "/proc/kallsyms shows only zero addresses, so kernel frames appear as [unknown]: \
         run as root, or set `sysctl kernel.kptr_restrict=0` (1 hides them from non-root users)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_kallsyms_resolves_a_known_symbol() {
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
        let syms = KernelSymbols::parse(&text);
        if syms.is_restricted() {
            // Not a failure of ours: say why and check the restricted behaviour instead.
            eprintln!(
                "kallsyms is restricted here: {}",
                KernelSymbols::restricted_message()
            );
            assert_eq!(syms.symbolize(0xffff_ffff_8100_0000), UNKNOWN);
            return;
        }
        let addr_of = |want: &str| {
            text.lines().find_map(|l| {
                let mut f = l.split_whitespace();
                let (addr, kind, name) = (f.next()?, f.next()?, f.next()?);
                (name == want && kind.eq_ignore_ascii_case("t"))
                    .then(|| u64::from_str_radix(addr, 16).ok())?
            })
        };
        let schedule = addr_of("schedule").expect("every kernel has schedule()");
        let hit = syms.lookup(schedule + 4).unwrap();
        assert_eq!((hit.name, hit.module, hit.offset), ("schedule", None, 4));
        assert_eq!(syms.symbolize(schedule), "schedule");
        assert!(syms.len() > 10_000, "only {} text symbols", syms.len());
    }

    #[test]
    fn modules_and_unsorted_input() {
        let syms = KernelSymbols::parse(
            "ffffffffc0002000 t ext4_write\t[ext4]\n\
             ffffffff81000000 T _stext\n\
             ffffffff81000100 D some_data\n\
             ffffffff81000200 T do_syscall_64\n",
        );
        assert_eq!(syms.len(), 3, "data symbols are dropped");
        let s = syms.lookup(0xffffffffc0002010).unwrap();
        assert_eq!(
            (s.name, s.module, s.offset),
            ("ext4_write", Some("ext4"), 0x10)
        );
        assert_eq!(syms.lookup(0xffffffff81000150).unwrap().name, "_stext");
        assert!(syms.lookup(0x1000).is_none());
    }

    #[test]
    fn zero_addresses_mean_restricted() {
        let syms =
            KernelSymbols::parse("0000000000000000 T _stext\n0000000000000000 T do_syscall_64\n");
        assert!(syms.is_restricted());
        assert!(syms.is_empty());
        assert_eq!(syms.symbolize(0xffffffff81000200), UNKNOWN);
        assert!(syms.warned.load(Ordering::Relaxed));
    }
}
