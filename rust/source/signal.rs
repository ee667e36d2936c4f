//! The signal that stopped a process and the thread that crashed, from what
//! each thread records: a core's `pr_cursig` (`NT_PRSTATUS`) and
//! `NT_SIGINFO`, a Linux minidump's exception stream; a Windows or Apple
//! dump names its crashing thread in its exception stream instead.
//!
//! Names are Linux's (`asm-generic/signal.h`: x86_64, aarch64 and i386
//! alike), the crashed system's numbering, not the host's (a macOS host
//! numbers SIGBUS 10).

/// Signals whose siginfo carries the faulting address (when `si_code` > 0:
/// sent by the kernel): SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV.
const FAULT_SIGNALS: [i32; 5] = [4, 5, 7, 8, 11];
/// `si_code` of a signal the kernel sends with no fault behind it (a SIGSEGV
/// forced where a handler could not be called, e.g. a stack overflow with no
/// alternate stack): `si_addr` is 0, not an address.
const SI_KERNEL: i32 = 0x80;
/// Signals that stop a process and never dump it: a core whose threads show
/// one of these (or none) is a snapshot of a live process (gdb's `gcore`
/// attaches with SIGSTOP), not a crash: SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU.
const STOP_SIGNALS: [i32; 4] = [19, 20, 21, 22];
/// Linux's names of signals 1 to 31.
const NAMES: [&str; 31] = [
    "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
    "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG",
    "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
];

/// The Linux signal's name ("SIGSEGV"; glibc's SIGRTMIN 34 and SIGRTMAX 64),
/// "SIG<n>" for a number Linux does not name.
pub fn name(number: i32) -> String {
    let named = match number {
        1..=31 => Some(NAMES[number as usize - 1]),
        34 => Some("RTMIN"),
        64 => Some("RTMAX"),
        _ => None,
    };
    match named {
        Some(name) => format!("SIG{name}"),
        None => format!("SIG{number}"),
    }
}

/// The signal that stopped a thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signal {
    pub number: i32,
    /// The faulting address of SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, where
    /// the kernel gives one.
    pub address: Option<u64>,
    /// `si_code` (None without a siginfo).
    pub code: Option<i32>,
}

impl Signal {
    /// The signal of a thread stopped by `cursig` (0: none), with its
    /// siginfo's (`si_signo`, `si_code`, `si_addr`) where recorded.
    pub fn of(cursig: i32, siginfo: Option<(i32, i32, u64)>) -> Option<Signal> {
        if let Some((signo, code, address)) = siginfo.filter(|s| s.0 != 0) {
            let fault = FAULT_SIGNALS.contains(&signo) && 0 < code && code < SI_KERNEL;
            return Some(Signal {
                number: signo,
                address: fault.then_some(address),
                code: Some(code),
            });
        }
        (cursig != 0).then_some(Signal { number: cursig, address: None, code: None })
    }

    pub fn name(&self) -> String {
        name(self.number)
    }

    /// Whether it is a crash's, not a stop's.
    pub fn is_crash(&self) -> bool {
        !STOP_SIGNALS.contains(&self.number)
    }
}

/// Which thread crashed, and so the order a report gives the threads in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crash {
    /// The threads' indexes, the crashing thread's first, the others in the
    /// order recorded.
    pub order: Vec<usize>,
    /// The crashing thread's index, if one crashed.
    pub crashing: Option<usize>,
    /// The process's signal: the crashing thread's, else (a snapshot of a
    /// process that did not crash) the first thread's stop signal, if any.
    pub signal: Option<Signal>,
}

impl Crash {
    /// From each thread's signal, in the order recorded. The kernel writes
    /// the thread that dumped (took the signal) first, gdb the thread it
    /// stopped in: the first thread with a signal that is not a stop signal
    /// crashed.
    pub fn by_signal(signals: impl IntoIterator<Item = Option<Signal>>) -> Crash {
        let mut first = None;
        let mut crashing = None;
        let mut count = 0;
        for (i, signal) in signals.into_iter().enumerate() {
            count += 1;
            if i == 0 {
                first = signal.clone();
            }
            if crashing.is_none() {
                if let Some(signal) = signal.filter(Signal::is_crash) {
                    crashing = Some((i, signal));
                }
            }
        }
        let order = match crashing {
            Some((c, _)) => std::iter::once(c).chain((0..count).filter(|&i| i != c)).collect(),
            None => (0..count).collect(),
        };
        match crashing {
            Some((c, signal)) => Crash { order, crashing: Some(c), signal: Some(signal) },
            None => Crash { order, crashing: None, signal: first },
        }
    }

    /// The thread an exception stream names crashed (a Windows or Apple
    /// dump's: an exception, not a signal), if it is among `tids`.
    pub fn named<T: PartialEq>(tids: &[T], tid: &T) -> Crash {
        let crashing = tids.iter().position(|t| t == tid);
        let order = crashing.into_iter().chain((0..tids.len()).filter(|&i| Some(i) != crashing));
        Crash { order: order.collect(), crashing, signal: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_address_only_where_the_kernel_gives_one() {
        // si_addr is the fault address where si_code is a fault's (SEGV_MAPERR
        // 1, SEGV_ACCERR 2); a signal sent by a process (si_code <= 0) or
        // forced by the kernel with no fault behind it (SI_KERNEL) has none.
        let address = |code| {
            let signal = Signal::of(11, Some((11, code, 0x1000))).unwrap();
            assert_eq!((signal.number, signal.code), (11, Some(code)));
            signal.address
        };
        let addresses: Vec<_> = [1, 2, 0, -6, 0x80].into_iter().map(address).collect();
        assert_eq!(addresses, [Some(0x1000), Some(0x1000), None, None, None]);
        // SIGABRT's si_addr is never an address; no siginfo: pr_cursig alone.
        assert_eq!(Signal::of(6, Some((6, 1, 0x1000))).unwrap().address, None);
        assert_eq!(Signal::of(6, None), Some(Signal { number: 6, address: None, code: None }));
        assert_eq!(Signal::of(0, None), None);
    }

    #[test]
    fn signal_names_are_linuxs() {
        // The name bash's `kill -l` gives for the numbers Linux names (1 to
        // 31, glibc's SIGRTMIN and SIGRTMAX), SIG<n> for any other (a
        // real-time signal past SIGRTMIN, a number no signal has).
        for number in -1..80 {
            let said = std::process::Command::new("bash")
                .args(["-c", &format!("kill -l {number}")])
                .output()
                .expect("bash runs");
            let said = String::from_utf8_lossy(&said.stdout).trim().to_owned();
            if (1..=31).contains(&number) || said == "RTMIN" || said == "RTMAX" {
                assert_eq!(name(number), format!("SIG{said}"), "{number}");
            } else {
                assert_eq!(name(number), format!("SIG{number}"), "{number}: {said}");
            }
        }
    }

    #[test]
    fn the_first_thread_with_a_crash_signal_crashed() {
        let stop = Signal::of(19, None);
        let segv = Signal::of(11, Some((11, 1, 8)));
        let crash = Crash::by_signal([stop.clone(), None, segv.clone(), Signal::of(6, None)]);
        assert_eq!(crash, Crash { order: vec![2, 0, 1, 3], crashing: Some(2), signal: segv });
        // gcore's snapshot: stop signals alone, none crashed, the first's signal.
        let crash = Crash::by_signal([stop.clone(), stop.clone()]);
        assert_eq!(crash, Crash { order: vec![0, 1], crashing: None, signal: stop });
        assert_eq!(Crash::by_signal([]), Crash { order: vec![], crashing: None, signal: None });
    }

    #[test]
    fn an_exception_stream_names_the_crashing_thread() {
        let crash = Crash::named(&[5, 7, 9], &9);
        assert_eq!(crash, Crash { order: vec![2, 0, 1], crashing: Some(2), signal: None });
        let crash = Crash::named(&[5, 7], &9); // not among the threads
        assert_eq!(crash, Crash { order: vec![0, 1], crashing: None, signal: None });
    }
}
