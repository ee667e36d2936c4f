//! The progress bar `perf_report` draws on stderr: its policy for the
//! profiler's progress reports, kept out of the core.

use std::time::{Duration, Instant};

use crate::profile::{Progress, ProgressFn};

/// A bar of the share read, drawn in place once the run has lasted `after`
/// (short runs show none), then at each report; at the end, if drawn at
/// all, drawn full and its line ended.
pub(super) fn bar(after: Duration) -> ProgressFn {
    let shown_from = Instant::now() + after;
    let mut drawn = false;
    Box::new(move |p: Progress| {
        if p.finished {
            if drawn {
                draw(1.0, p.samples);
                eprintln!();
            }
        } else if Instant::now() >= shown_from {
            draw(p.done as f64 / p.total.max(1) as f64, p.samples);
            drawn = true;
        }
    })
}

fn draw(fraction: f64, samples: u64) {
    const WIDTH: usize = 40;
    let filled = ((fraction * WIDTH as f64) as usize).min(WIDTH);
    let bar: String = "#".repeat(filled) + &"-".repeat(WIDTH - filled);
    eprint!("\r[{bar}] {:3.0}% {samples} samples", fraction * 100.0);
}
