//! `dump-pid PID OUTPUT [BLAMED_TID]`: a minidump of process PID written to
//! OUTPUT, as a crash handler writes one (without a crash context: the
//! exception stream says the dump was requested, blaming BLAMED_TID, by
//! default PID's main thread).

use std::fs::File;
use std::process::ExitCode;
use std::time::Duration;

use minidump_writer::minidump_writer::MinidumpWriterConfig;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(pid), Some(output)) = (args.first(), args.get(1)) else {
        eprintln!("usage: dump-pid PID OUTPUT [BLAMED_TID]");
        return ExitCode::from(2);
    };
    let Ok(pid) = pid.parse() else {
        eprintln!("dump-pid: not a pid: {pid}");
        return ExitCode::from(2);
    };
    let blamed = match args.get(2).map(|t| t.parse()) {
        None => pid,
        Some(Ok(tid)) => tid,
        Some(Err(_)) => {
            eprintln!("dump-pid: not a thread id: {}", args[2]);
            return ExitCode::from(2);
        }
    };
    let mut file = match File::create(output) {
        Ok(file) => file,
        Err(e) => {
            eprintln!("dump-pid: {output}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut config = MinidumpWriterConfig::new(pid, blamed);
    // The tests stop the process before dumping it; a loaded machine must
    // not make the writer give up waiting for the stop.
    config.stop_timeout(Duration::from_secs(60));
    match config.write(&mut file) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dump-pid: cannot dump {pid}: {e}");
            ExitCode::FAILURE
        }
    }
}
