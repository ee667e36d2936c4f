//! The progress bars drawn on stderr, of `perf_report` and of debuginfod's
//! downloads: their policy for the core's progress reports, kept out of the core.

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

/// A caller's delay before a bar is drawn, in seconds, made a duration
/// (at most 1e6 s); a ValueError for one that is not a number of seconds
/// (NaN, below 0).
pub(super) fn seconds(after: f64) -> pyo3::PyResult<Duration> {
    if after.is_nan() || after < 0.0 {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "progress: {after} is not a delay in seconds (0 or more)"
        )));
    }
    Ok(Duration::from_secs_f64(after.min(1e6)))
}

fn draw(fraction: f64, samples: u64) {
    const WIDTH: usize = 40;
    let filled = ((fraction * WIDTH as f64) as usize).min(WIDTH);
    let bar: String = "#".repeat(filled) + &"-".repeat(WIDTH - filled);
    eprint!("\r[{bar}] {:3.0}% {samples} samples", fraction * 100.0);
}

/// The bar of debuginfod's downloads, drawn on stderr in place once they
/// have lasted `after` (quick ones show none), at most every tenth of a
/// second; its line ended when the bar is dropped, if it was drawn.
pub(super) struct DownloadBar {
    shown_from: Instant,
    /// When it was last drawn; None: never.
    last: std::sync::Mutex<Option<Instant>>,
}

impl DownloadBar {
    pub(super) fn new(after: Duration) -> Self {
        DownloadBar { shown_from: Instant::now() + after, last: std::sync::Mutex::new(None) }
    }

    pub(super) fn report(&self, d: crate::space::debuginfod::Downloads) {
        let now = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let due = last.is_none_or(|t| now >= t + Duration::from_millis(100));
        // Nothing downloaded (every file in the cache, or refused): no bar.
        let idle = d.received == 0 && d.announced == 0;
        if now < self.shown_from || idle || !(due || d.answered == d.files) {
            return;
        }
        *last = Some(now);
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        let fraction = if d.announced > 0 { d.received as f64 / d.announced as f64 } else { 0.0 };
        const WIDTH: usize = 30;
        let filled = ((fraction.min(1.0) * WIDTH as f64) as usize).min(WIDTH);
        let bar: String = "#".repeat(filled) + &"-".repeat(WIDTH - filled);
        eprint!(
            "\rdebuginfod [{bar}] {:.1} of {:.1} MiB, {}/{} files",
            mib(d.received),
            mib(d.announced),
            d.answered,
            d.files
        );
    }
}

impl Drop for DownloadBar {
    fn drop(&mut self) {
        if self.last.get_mut().map(|l| l.is_some()).unwrap_or(true) {
            eprintln!();
        }
    }
}
