//! Profile samples as records: the form in which `stackwalk.Recording`
//! takes them from the native pipeline, numbers as numbers (no hex strings
//! to parse back). One record per sample, little-endian:
//!
//! - the sample: pid (i32), tid (i32), time (u64, ns), comm (string), the
//!   count of frames (u32), then each frame;
//! - a frame: pc (u64), module (string or none), module offset (u64),
//!   function (string or none), function offset (u64 or none), kernel
//!   (u8: 0 or 1), trust (string or none: the kernel's frames), file
//!   (string or none), line and column (u64 or none), inline (u8: 0 or 1).
//!
//! A string is its length (u32) and its UTF-8 bytes; none, the length
//! `u32::MAX`. A number or none is a byte (0: none, 1: a u64 follows).

/// One frame of a sample, as a report shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameRecord {
    pub pc: u64,
    pub module: Option<String>,
    pub module_offset: u64,
    pub function: Option<String>,
    pub function_offset: Option<u64>,
    pub kernel: bool,
    pub trust: Option<String>,
    pub file: Option<String>,
    pub line: Option<u64>,
    pub column: Option<u64>,
    pub inline: bool,
}

/// A sample: its process, thread, time and command, and its frames,
/// innermost first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SampleRecord {
    pub pid: i32,
    pub tid: i32,
    pub time: u64,
    pub comm: String,
    pub frames: Vec<FrameRecord>,
}

use std::io::Read;

const NONE: u32 = u32::MAX;

/// Writes one sample's record into `out`: `start` it, `frame` each frame,
/// `finish` it (which writes the count of frames in its place).
pub struct RecordWriter<'o> {
    out: &'o mut Vec<u8>,
    count_at: usize,
    count: u32,
}

impl<'o> RecordWriter<'o> {
    pub fn start(out: &'o mut Vec<u8>, pid: i32, tid: i32, time: u64, comm: &str) -> Self {
        out.extend_from_slice(&pid.to_le_bytes());
        out.extend_from_slice(&tid.to_le_bytes());
        out.extend_from_slice(&time.to_le_bytes());
        put_str(out, Some(comm));
        let count_at = out.len();
        out.extend_from_slice(&0u32.to_le_bytes());
        RecordWriter { out, count_at, count: 0 }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn frame(
        &mut self,
        pc: u64,
        module: Option<&str>,
        module_offset: u64,
        function: Option<&str>,
        function_offset: Option<u64>,
        kernel: bool,
        trust: Option<&str>,
        source: (Option<&str>, Option<u64>, Option<u64>),
        inline: bool,
    ) {
        let out = &mut *self.out;
        out.extend_from_slice(&pc.to_le_bytes());
        put_str(out, module);
        out.extend_from_slice(&module_offset.to_le_bytes());
        put_str(out, function);
        put_number(out, function_offset);
        out.push(u8::from(kernel));
        put_str(out, trust);
        put_str(out, source.0);
        put_number(out, source.1);
        put_number(out, source.2);
        out.push(u8::from(inline));
        self.count += 1;
    }

    pub fn finish(self) {
        self.out[self.count_at..self.count_at + 4].copy_from_slice(&self.count.to_le_bytes());
    }
}

fn put_str(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        // (A name of 4 GiB is no name: cut, as no report could show it.)
        Some(s) => {
            let s = &s.as_bytes()[..s.len().min(NONE as usize - 1)];
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s);
        }
        None => out.extend_from_slice(&NONE.to_le_bytes()),
    }
}

fn put_number(out: &mut Vec<u8>, value: Option<u64>) {
    match value {
        Some(v) => {
            out.push(1);
            out.extend_from_slice(&v.to_le_bytes());
        }
        None => out.push(0),
    }
}

/// Reads records written by [`RecordWriter`] from `input`, one sample at
/// a time: `Ok(None)` at the end; an error for a record cut short or
/// damaged.
pub fn read_record(input: &mut impl Read) -> std::io::Result<Option<SampleRecord>> {
    let mut first = [0u8; 4];
    match input.read(&mut first)? {
        0 => return Ok(None),
        n if n < 4 => input.read_exact(&mut first[n..])?,
        _ => {}
    }
    let mut r = Reader { input };
    let pid = i32::from_le_bytes(first);
    let tid = r.u32()? as i32;
    let time = r.u64()?;
    let comm = r.string()?.unwrap_or_default();
    let count = r.u32()?;
    let mut frames = Vec::with_capacity(count.min(4096) as usize);
    for _ in 0..count {
        frames.push(FrameRecord {
            pc: r.u64()?,
            module: r.string()?,
            module_offset: r.u64()?,
            function: r.string()?,
            function_offset: r.number()?,
            kernel: r.u8()? != 0,
            trust: r.string()?,
            file: r.string()?,
            line: r.number()?,
            column: r.number()?,
            inline: r.u8()? != 0,
        });
    }
    Ok(Some(SampleRecord { pid, tid, time, comm, frames }))
}

struct Reader<'i, R> {
    input: &'i mut R,
}

impl<R: Read> Reader<'_, R> {
    fn bytes<const N: usize>(&mut self) -> std::io::Result<[u8; N]> {
        let mut b = [0u8; N];
        self.input.read_exact(&mut b)?;
        Ok(b)
    }

    fn u8(&mut self) -> std::io::Result<u8> {
        Ok(self.bytes::<1>()?[0])
    }

    fn u32(&mut self) -> std::io::Result<u32> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> std::io::Result<u64> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    fn number(&mut self) -> std::io::Result<Option<u64>> {
        match self.u8()? {
            0 => Ok(None),
            _ => Ok(Some(self.u64()?)),
        }
    }

    fn string(&mut self) -> std::io::Result<Option<String>> {
        let len = self.u32()?;
        if len == NONE {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        let read = (&mut *self.input).take(u64::from(len)).read_to_end(&mut bytes)?;
        if read != len as usize {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_written() {
        let mut out = Vec::new();
        let mut w = RecordWriter::start(&mut out, 7, -1, 123, "comm \u{e9}");
        w.frame(
            0xffff_8000,
            Some("[kernel.kallsyms]"),
            0xffff_8000,
            None,
            None,
            true,
            None,
            (None, None, None),
            false,
        ); // fmt: skip
        w.frame(
            0x40_1000,
            Some("/bin/x"),
            0x1000,
            Some("f"),
            Some(0x10),
            false,
            Some("cfi"),
            (Some("x.c"), Some(12), Some(0)),
            true,
        ); // fmt: skip
        w.finish();
        RecordWriter::start(&mut out, 1, 2, 3, "").finish();
        let mut input = &out[..];
        let first = read_record(&mut input).unwrap().unwrap();
        assert_eq!((first.pid, first.tid, first.time, &*first.comm), (7, -1, 123, "comm \u{e9}"));
        let kernel = FrameRecord {
            pc: 0xffff_8000,
            module: Some("[kernel.kallsyms]".into()),
            module_offset: 0xffff_8000,
            kernel: true,
            ..FrameRecord::default()
        };
        let user = FrameRecord {
            pc: 0x40_1000,
            module: Some("/bin/x".into()),
            module_offset: 0x1000,
            function: Some("f".into()),
            function_offset: Some(0x10),
            kernel: false,
            trust: Some("cfi".into()),
            file: Some("x.c".into()),
            line: Some(12),
            column: Some(0),
            inline: true,
        };
        assert_eq!(first.frames, [kernel, user]);
        let second = read_record(&mut input).unwrap().unwrap();
        assert_eq!((second.pid, second.frames.len()), (1, 0));
        assert!(read_record(&mut input).unwrap().is_none());
        // Cut anywhere inside a record: an error, never a sample.
        for cut in 1..out.len() - 24 {
            let mut input = &out[..cut];
            assert!(read_record(&mut input).is_err(), "cut at {cut}");
        }
    }
}
