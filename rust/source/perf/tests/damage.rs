//! Damaged and random input: truncated at every offset, bytes changed,
//! noise; the events before the damage, then an error naming its offset.

use super::*;
use crate::source::perf::bytes::read_u16;

#[test]
fn truncated_at_every_offset() {
    let (bytes, layout) = standard_file();
    let (full, err, _) = read_all(&bytes).unwrap();
    assert!(err.is_none());
    for cut in 0..bytes.len() {
        let part = &bytes[..cut];
        let (events, err, header) = match read_all(part) {
            Ok(r) => r,
            Err(e) => {
                assert!(cut < layout.data_offset, "cut {cut}: open failed: {e}");
                assert!(!e.to_string().is_empty());
                continue;
            }
        };
        assert!(cut >= layout.data_offset, "cut {cut}: opened a file without its attributes");
        assert!(header.feature_error.is_some(), "cut {cut}: features read from a cut file");
        // The records that end at or before the cut.
        let ends = full.iter().skip(1).map(|(o, _)| *o).chain([layout.data_end as u64]);
        let whole: Vec<_> = full
            .iter()
            .zip(ends)
            .take_while(|&(_, end)| end as usize <= cut)
            .map(|(e, _)| e.clone())
            .collect();
        assert_eq!(events, whole, "cut {cut}: the events before the damage");
        if cut >= layout.data_end {
            assert!(err.is_none(), "cut {cut}: {err:?}");
        } else {
            let err = err.unwrap_or_else(|| panic!("cut {cut}: no error"));
            let first_cut = full.get(whole.len()).map(|(o, _)| *o).unwrap();
            assert!(
                matches!(err, PerfError::TruncatedRecord { offset } if offset == first_cut),
                "cut {cut}: {err}"
            );
            assert!(err.to_string().contains(&format!("{first_cut:#x}")), "{err}");
        }
    }
}

#[test]
fn pipe_mode_truncated_at_every_offset() {
    let (data, _) = standard_records();
    let bytes = pipe(&[AttrSpec::dwarf(vec![314, 315])], &data, &standard_features());
    let (full, err, _) = read_all(&bytes).unwrap();
    assert!(err.is_none());
    let mut boundaries = vec![16];
    while let Some(&at) = boundaries.last().filter(|&&at| at < bytes.len()) {
        boundaries.push(at + usize::from(read_u16(&bytes, at + 6).unwrap()));
    }
    for cut in 0..bytes.len() {
        // Without a length in the header, a cut between records is an
        // ordinary end; inside one it is an error. Either way: a prefix.
        if let Ok((events, err, _)) = read_all(&bytes[..cut]) {
            assert_eq!(events[..], full[..events.len()], "cut {cut}");
            let at_boundary = boundaries.contains(&cut);
            assert_eq!(err.is_none(), at_boundary, "cut {cut}: {err:?}");
        }
    }
}

/// xorshift64*: deterministic random bytes without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (good, layout) = standard_file();
    for round in 0..20000 {
        let bytes = match round % 5 {
            // Noise, with and without the magic.
            0 => {
                let n = rng.below(600);
                rng.bytes(n)
            }
            1 => {
                let n = rng.below(600) + 16;
                let mut b = rng.bytes(n);
                b[..8].copy_from_slice(MAGIC);
                b
            }
            // A good header, noise for data.
            2 => {
                let mut b = good.clone();
                let noise = rng.bytes(layout.data_end - layout.data_offset);
                b[layout.data_offset..layout.data_end].copy_from_slice(&noise);
                b
            }
            // Extreme values in a word of the header or the attributes.
            3 => {
                let mut b = good.clone();
                let at = 8 * rng.below(layout.data_offset / 8);
                let extremes = [u64::MAX, u64::MAX - 7, 1 << 63, 1 << 32, 0, rng.next()];
                let value = extremes[rng.below(extremes.len())];
                b[at..at + 8].copy_from_slice(&value.to_le_bytes());
                b
            }
            // A good file with a few bytes changed.
            _ => {
                let mut b = good.clone();
                for _ in 0..rng.below(6) + 1 {
                    let at = rng.below(b.len());
                    b[at] = rng.next() as u8;
                }
                b
            }
        };
        if let Ok((_, Some(err), _)) = read_all(&bytes) {
            assert!(!err.to_string().is_empty());
        }
        let mut pipe_mode = bytes.clone();
        if pipe_mode.len() >= 16 {
            pipe_mode[..8].copy_from_slice(MAGIC);
            pipe_mode[8..16].copy_from_slice(&16u64.to_le_bytes());
            let _ = read_all(&pipe_mode);
        }
    }
}

#[test]
fn damage_is_named_with_its_offset() {
    let attrs = [AttrSpec::dwarf(vec![1])];
    let open = |bytes: &[u8]| PerfFile::new(Cursor::new(bytes.to_vec())).err().unwrap();
    let (good, layout) = file(&attrs, &record(PERF_RECORD_FINISHED_ROUND, 0, &[]), &[]);

    let mut b = good.clone();
    b[..8].copy_from_slice(b"ELF\x7f\0\0\0\0");
    assert!(matches!(open(&b), PerfError::BadMagic { .. }));
    b[..8].copy_from_slice(b"2ELIFREP");
    assert!(open(&b).to_string().contains("big-endian"), "{}", open(&b));
    b[..8].copy_from_slice(b"PERFFILE");
    assert!(matches!(open(&b), PerfError::Unsupported { .. }));
    assert!(matches!(open(&good[..50]), PerfError::TruncatedHeader { offset: 50, .. }));
    assert!(matches!(open(&good[..5]), PerfError::TruncatedHeader { offset: 5, .. }));
    assert!(matches!(open(b""), PerfError::TruncatedHeader { offset: 0, .. }));

    let data_at = layout.data_offset;
    let with_data = |data: &[u8]| file(&attrs, data, &[]).0;
    let last_error = |bytes: &[u8]| read_all(bytes).unwrap().1.unwrap();
    let mut small = record(PERF_RECORD_FINISHED_ROUND, 0, &[]);
    small.extend(record(PERF_RECORD_FINISHED_ROUND, 0, &[]));
    small[8 + 6] = 4;
    let err = last_error(&with_data(&small));
    assert!(
        matches!(err, PerfError::RecordTooSmall { offset, size: 4 } if offset == data_at as u64 + 8)
    );
    assert!(err.to_string().contains(&format!("{:#x}", data_at + 8)), "{err}");

    let mut long = record(PERF_RECORD_FINISHED_ROUND, 0, &[]);
    long[6] = 16;
    let err = last_error(&with_data(&long));
    assert!(matches!(err, PerfError::BadRecord { .. }), "{err}");

    let err = last_error(&with_data(&record(PERF_RECORD_COMPRESSED, 0, &[0; 8])));
    assert!(matches!(err, PerfError::Unsupported { .. }) && err.to_string().contains("-z"));

    // A sample whose stack runs past its record.
    let mut s = SampleSpec {
        misc: PERF_RECORD_MISC_USER,
        ip: 1,
        pid: 1,
        tid: 1,
        time: 1,
        cpu: 0,
        period: 1,
        chain: vec![],
        regs: Some(x86_regs()),
        stack: Some((vec![0; 16], 8)),
    }
    .record();
    let at = s.len() - 8 - 16 - 8;
    s[at] = 24;
    let err = last_error(&with_data(&s));
    assert!(matches!(err, PerfError::BadRecord { type_: PERF_RECORD_SAMPLE, .. }), "{err}");
    s[at] = 16;
    let dyn_at = s.len() - 8;
    s[dyn_at] = 17;
    let err = last_error(&with_data(&s));
    assert!(err.to_string().contains("dyn_size"), "{err}");
}

#[test]
fn an_unfinished_recording_is_read_to_the_end_of_the_file() {
    let (data, count) = standard_records();
    let (mut bytes, layout) = file(&[AttrSpec::dwarf(vec![314])], &data, &[]);
    bytes[48..56].copy_from_slice(&0u64.to_le_bytes()); // data size not written
    let (events, err, header) = read_all(&bytes).unwrap();
    assert_eq!((events.len(), header.data_size), (count, 0));
    assert!(err.is_none());
    // Cut inside the last record: the records before, then the damage.
    let (events, err, _) = read_all(&bytes[..layout.data_end - 4]).unwrap();
    assert_eq!(events.len(), count - 1);
    assert!(matches!(err, Some(PerfError::TruncatedRecord { .. })));
}
