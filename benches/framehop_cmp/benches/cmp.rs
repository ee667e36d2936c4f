//! stackwalk's unwind loop against framehop's, per frame, on the stacks captured in
//! `$FRAMEHOP_CMP_CAPTURES` (capture files, `*.json`, named for the stack): first whether both
//! give the same addresses, then criterion's measurement of each, then both measured
//! interleaved (in rounds, alternating which goes first), which a shared, loaded machine
//! needs for a fair ratio: the table at the end gives medians and minimums of those rounds.
//!
//! Both walk warm (caches filled by earlier walks), over the same stack bytes, to the end of
//! the stack. framehop recovers rip, rsp and rbp; stackwalk also every callee-saved register,
//! the CFA and the trust of each frame.
//!
//! `FRAMEHOP_CMP_CRITERION=0` skips criterion (the interleaved table only);
//! `FRAMEHOP_CMP_ROUNDS` sets the interleaved rounds (default 31); `FRAMEHOP_CMP_ONLY=NAME`
//! measures one stack (the capture `NAME.json`), for a profile of its walks.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use _core::unwind::Frame;
use criterion::{Criterion, Throughput};
use framehop::x86_64::CacheX86_64;
use framehop_cmp::Stack;

fn load_stacks() -> Vec<Stack> {
    let Some(dir) = std::env::var_os("FRAMEHOP_CMP_CAPTURES") else {
        eprintln!("FRAMEHOP_CMP_CAPTURES: not set (a directory of capture files; see run.py)");
        std::process::exit(2);
    };
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(e) => {
            eprintln!("{}: {e}", PathBuf::from(dir).display());
            std::process::exit(2);
        }
    };
    paths.retain(|p| p.extension().is_some_and(|x| x == "json"));
    if let Some(only) = std::env::var_os("FRAMEHOP_CMP_ONLY") {
        paths.retain(|p| p.file_stem() == Some(only.as_os_str()));
    }
    paths.sort();
    paths
        .iter()
        .map(|path| {
            let name = path.file_stem().unwrap_or_default().to_string_lossy();
            Stack::load(&name, path).unwrap_or_else(|e| {
                eprintln!("{}: {e}", path.display());
                std::process::exit(2);
            })
        })
        .collect()
}

/// What each unwinder found on one stack.
struct Walks {
    stackwalk: Vec<Frame>,
    framehop: Vec<u64>,
}

fn walks(stack: &mut Stack) -> Walks {
    let mut frames = Vec::new();
    let memory = stack.memory.clone();
    let mut regions =
        _core::source::memory::Regions::from_sorted(memory.iter().map(|(s, b)| (*s, &b[..])));
    let end = stack.walk_stackwalk(&mut regions, &mut frames);
    let mut addresses = Vec::new();
    let mut cache = CacheX86_64::new();
    let fh_end = stack.walk_framehop(&mut cache, &mut addresses);
    // Warm: what one more walk costs each rule cache.
    let before = stack.stackwalk.cache_stats();
    stack.walk_stackwalk(&mut regions, &mut frames);
    let after = stack.stackwalk.cache_stats();
    stack.walk_framehop(&mut cache, &mut addresses).ok();
    let fh_before = cache.stats();
    stack.walk_framehop(&mut cache, &mut addresses).ok();
    let fh_after = cache.stats();
    let pcs: Vec<u64> = frames.iter().map(|f| f.pc).collect();
    let gdb = if pcs == stack.gdb_pcs { "gdb's pcs" } else { "NOT gdb's pcs" };
    println!(
        "{}: stackwalk {} frames ({}, {gdb}); framehop {} addresses ({})",
        stack.name,
        pcs.len(),
        stack.stackwalk.describe(&end),
        addresses.len(),
        match &fh_end {
            Ok(()) => "ended: root reached".to_owned(),
            Err(e) => format!("ended: {e}"),
        }
    );
    println!(
        "  warm walk: stackwalk's rule cache {} hits, {} misses; framehop's {} hits, {} misses",
        after.hits - before.hits,
        after.misses - before.misses,
        fh_after.hits() - fh_before.hits(),
        fh_after.misses() - fh_before.misses(),
    );
    let same = pcs.iter().zip(&addresses).take_while(|(a, b)| a == b).count();
    if same == pcs.len() && same == addresses.len() {
        println!("  the same {same} addresses");
    } else {
        println!("  the first {same} addresses agree; then:");
        for i in same..pcs.len().max(addresses.len()).min(same + 4) {
            let ours = frames.get(i).map_or("-".to_owned(), |f| {
                let how = if f.interrupted { " (interrupted: not a return address)" } else { "" };
                format!("{:#x}{how}", f.pc)
            });
            let theirs = addresses.get(i).map_or("-".to_owned(), |a| format!("{a:#x}"));
            println!("    #{i:<3} stackwalk {ours:<50} framehop {theirs}");
        }
    }
    Walks { stackwalk: frames, framehop: addresses }
}

fn criterion_runs(stacks: &mut [Stack], counts: &[Walks]) {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    for (stack, walks) in stacks.iter_mut().zip(counts) {
        let mut group = c.benchmark_group(stack.name.clone());
        group.throughput(Throughput::Elements(walks.framehop.len() as u64));
        let mut cache = CacheX86_64::new();
        let mut out = Vec::with_capacity(256);
        group.bench_function("framehop", |b| {
            b.iter(|| black_box(stack.walk_framehop(&mut cache, &mut out)))
        });
        group.throughput(Throughput::Elements(walks.stackwalk.len() as u64));
        let memory = stack.memory.clone();
        let mut regions =
            _core::source::memory::Regions::from_sorted(memory.iter().map(|(s, b)| (*s, &b[..])));
        let mut frames = Vec::with_capacity(256);
        group.bench_function("stackwalk", |b| {
            b.iter(|| black_box(stack.walk_stackwalk(&mut regions, &mut frames)))
        });
        group.finish();
    }
    c.final_summary();
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Nanoseconds per frame of `iterations` calls of `walk`, finding `frames` frames each.
fn time(iterations: u32, frames: usize, mut walk: impl FnMut()) -> f64 {
    let started = Instant::now();
    for _ in 0..iterations {
        walk();
    }
    started.elapsed().as_nanos() as f64 / f64::from(iterations) / frames as f64
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_owned()
}

/// Both unwinders in turn, `rounds` times, each batch about 2 ms; ns/frame medians and minimums.
fn interleaved(stacks: &mut [Stack], counts: &[Walks], rounds: usize) {
    println!("\ninterleaved: {rounds} rounds, load average before: {}", loadavg());
    let mut rows = Vec::new();
    for (stack, walks) in stacks.iter_mut().zip(counts) {
        let (n_sw, n_fh) = (walks.stackwalk.len(), walks.framehop.len());
        let mut cache = CacheX86_64::new();
        let mut out = Vec::with_capacity(256);
        let memory = stack.memory.clone();
        let mut regions =
            _core::source::memory::Regions::from_sorted(memory.iter().map(|(s, b)| (*s, &b[..])));
        let mut frames = Vec::with_capacity(256);
        // ~2 ms per batch at the earlier figures' ~30 ns/frame.
        let iterations = (2_000_000 / (30 * n_sw.max(1))).max(10) as u32;
        let (mut fh, mut sw) = (Vec::new(), Vec::new());
        for round in 0..rounds + 1 {
            let mut run_fh = || {
                time(iterations, n_fh, || {
                    black_box(stack.walk_framehop(&mut cache, &mut out)).ok();
                })
            };
            let a = if round % 2 == 0 { Some(run_fh()) } else { None };
            let s = time(iterations, n_sw, || {
                black_box(stack.walk_stackwalk(&mut regions, &mut frames));
            });
            let f = match a {
                Some(f) => f,
                None => time(iterations, n_fh, || {
                    black_box(stack.walk_framehop(&mut cache, &mut out)).ok();
                }),
            };
            if round > 0 {
                // Round 0 warms up.
                fh.push(f);
                sw.push(s);
            }
        }
        let (fh_min, sw_min) = (
            fh.iter().copied().fold(f64::MAX, f64::min),
            sw.iter().copied().fold(f64::MAX, f64::min),
        );
        let (fh_med, sw_med) = (median(&mut fh), median(&mut sw));
        rows.push((stack.name.clone(), n_fh, n_sw, fh_med, fh_min, sw_med, sw_min));
    }
    println!("load average after: {}", loadavg());
    println!(
        "\n{:<12} {:>6} {:>6} | {:>16} | {:>16} | {:>18}",
        "stack", "fh fr", "sw fr", "framehop ns/fr", "stackwalk ns/fr", "stackwalk/framehop"
    );
    println!(
        "{:<12} {:>6} {:>6} | {:>16} | {:>16} | {:>18}",
        "", "", "", "median (min)", "median (min)", "median (min)"
    );
    for (name, n_fh, n_sw, fh_med, fh_min, sw_med, sw_min) in rows {
        println!(
            "{name:<12} {n_fh:>6} {n_sw:>6} | {fh_med:>7.1} ({fh_min:>6.1}) | {sw_med:>7.1} ({sw_min:>6.1}) | {:>8.2} ({:>6.2})",
            sw_med / fh_med,
            sw_min / fh_min
        );
    }
}

fn main() {
    let mut stacks = load_stacks();
    let counts: Vec<Walks> = stacks.iter_mut().map(walks).collect();
    if std::env::var("FRAMEHOP_CMP_CRITERION").as_deref() != Ok("0") {
        criterion_runs(&mut stacks, &counts);
    }
    let rounds =
        std::env::var("FRAMEHOP_CMP_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(31);
    interleaved(&mut stacks, &counts, rounds);
}
