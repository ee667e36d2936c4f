//! Records decoded from their bytes into [`Event`]s. The [`Decoder`] holds
//! what says how a file's records read (its attributes); decoding does no
//! I/O and owns no thread, so worker threads share one decoder.

use super::abi::{
    BUILD_ID_MAX, PERF_FORMAT_GROUP, PERF_FORMAT_ID, PERF_FORMAT_LOST,
    PERF_FORMAT_TOTAL_TIME_ENABLED, PERF_FORMAT_TOTAL_TIME_RUNNING, PERF_RECORD_COMM,
    PERF_RECORD_COMPRESSED, PERF_RECORD_EXIT, PERF_RECORD_FINISHED_ROUND, PERF_RECORD_FORK,
    PERF_RECORD_MISC_COMM_EXEC, PERF_RECORD_MISC_MMAP_BUILD_ID, PERF_RECORD_MMAP,
    PERF_RECORD_MMAP2, PERF_RECORD_SAMPLE, PERF_SAMPLE_ADDR, PERF_SAMPLE_BRANCH_HW_INDEX,
    PERF_SAMPLE_BRANCH_STACK, PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_CPU, PERF_SAMPLE_ID,
    PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD, PERF_SAMPLE_RAW, PERF_SAMPLE_READ,
    PERF_SAMPLE_REGS_ABI_NONE, PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER,
    PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};
use super::bytes::{read_u16, read_u32, read_u64, until_nul, Fields};
use super::event::{Event, Inode, MmapEvent, Sample, SampleIds, Words};
use super::header::Attr;
use super::{bad, PerfError};

/// Decodes records: the attributes and the index of their ids. Shared
/// read-only (it is `Sync`), so worker threads can decode samples in place.
#[derive(Debug, Default)]
pub struct Decoder {
    pub(super) attrs: Vec<Attr>,
    pub(super) index: AttrIndex,
}

impl Decoder {
    pub(super) fn new(attrs: &[Attr]) -> Decoder {
        Decoder { attrs: attrs.to_vec(), index: AttrIndex::build(attrs) }
    }

    /// The event in `rec` (a whole record, header included) found at file
    /// offset `offset`.
    pub fn decode<'r>(&self, rec: &'r [u8], offset: u64) -> Result<Event<'r>, PerfError> {
        decode(rec, offset, &self.attrs, &self.index)
    }

    /// The leading fields of the sample in `rec` (a whole `PERF_RECORD_SAMPLE`
    /// record), read without the rest: its callchain, registers and stack
    /// are not looked at, nor checked (`decode` checks them). `Ok(None)` when
    /// its event id is unknown, as `decode` gives `Event::Other`.
    pub fn sample_ids(&self, rec: &[u8], offset: u64) -> Result<Option<SampleIds>, PerfError> {
        let Some(i) = self.index.for_sample(&self.attrs, rec, offset)? else { return Ok(None) };
        let ids = leading_fields(&mut Fields::new(rec, 8), self.attrs[i].sample_type);
        let cut = "fields run past the end of the record";
        ids.map(Some).ok_or_else(|| bad(offset, PERF_RECORD_SAMPLE, cut))
    }
}

/// Where the event id sits in records, per the first attribute (perf
/// requires every attribute of a file to agree on it).
#[derive(Debug, Default)]
pub(super) struct AttrIndex {
    /// (id, attr index), sorted by id.
    by_id: Vec<(u64, usize)>,
    /// In a sample: the byte offset of the id.
    sample_id_at: Option<usize>,
    /// In other records' trailer: the id's distance from the end, in words.
    trailer_id_from_end: Option<usize>,
}

impl AttrIndex {
    fn build(attrs: &[Attr]) -> AttrIndex {
        let mut by_id: Vec<(u64, usize)> = attrs
            .iter()
            .enumerate()
            .flat_map(|(i, a)| a.ids.iter().map(move |&id| (id, i)))
            .collect();
        by_id.sort_unstable();
        let st = attrs.first().map_or(0, |a| a.sample_type);
        let (sample_id_at, trailer_id_from_end) = if st & PERF_SAMPLE_IDENTIFIER != 0 {
            (Some(8), Some(1))
        } else if st & PERF_SAMPLE_ID != 0 {
            let before = [PERF_SAMPLE_IP, PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_ADDR];
            let words = before.iter().filter(|&&b| st & b != 0).count();
            let after = [PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_CPU];
            (Some(8 + 8 * words), Some(1 + after.iter().filter(|&&b| st & b != 0).count()))
        } else {
            (None, None)
        };
        AttrIndex { by_id, sample_id_at, trailer_id_from_end }
    }

    fn lookup(&self, id: u64) -> Option<usize> {
        self.by_id.binary_search_by_key(&id, |&(i, _)| i).ok().map(|k| self.by_id[k].1)
    }

    /// The attribute of a sample record; `Ok(None)` when its id is unknown.
    fn for_sample(
        &self,
        attrs: &[Attr],
        rec: &[u8],
        offset: u64,
    ) -> Result<Option<usize>, PerfError> {
        match (attrs.len(), self.sample_id_at) {
            (0, _) => Err(bad(offset, PERF_RECORD_SAMPLE, "a sample before any event attribute")),
            (1, _) | (_, None) => Ok(Some(0)),
            (_, Some(at)) => {
                let id = read_u64(rec, at)
                    .ok_or_else(|| bad(offset, PERF_RECORD_SAMPLE, "too short for its event id"))?;
                Ok(self.lookup(id))
            }
        }
    }

    /// The attribute that shapes the `sample_id_all` trailer of a record
    /// other than a sample (the first one when the id says nothing).
    fn for_trailer<'a>(&self, attrs: &'a [Attr], rec: &[u8]) -> Option<&'a Attr> {
        let first = attrs.first()?;
        if attrs.len() > 1 && first.sample_id_all {
            if let Some(words) = self.trailer_id_from_end {
                let at = rec.len().checked_sub(8 * words)?;
                if at >= 8 {
                    if let Some(i) = read_u64(rec, at).and_then(|id| self.lookup(id)) {
                        return attrs.get(i);
                    }
                }
            }
        }
        Some(first)
    }
}

/// Decode the record in `rec` (header included) at file offset `offset`.
pub(super) fn decode<'a>(
    rec: &'a [u8],
    offset: u64,
    attrs: &[Attr],
    index: &AttrIndex,
) -> Result<Event<'a>, PerfError> {
    let type_ = read_u32(rec, 0).unwrap_or(0);
    let misc = read_u16(rec, 4).unwrap_or(0);
    let short = || bad(offset, type_, "too short for its fields");
    match type_ {
        PERF_RECORD_SAMPLE => match index.for_sample(attrs, rec, offset)? {
            Some(i) => decode_sample(rec, offset, i, &attrs[i]).map(Event::Sample),
            None => Ok(Event::Other { type_ }),
        },
        PERF_RECORD_MMAP | PERF_RECORD_MMAP2 | PERF_RECORD_COMM | PERF_RECORD_FORK
        | PERF_RECORD_EXIT => {
            let (body_end, time) = trailer(rec, index.for_trailer(attrs, rec)).ok_or_else(short)?;
            let body = &rec[..body_end];
            let mut f = Fields::new(body, 8);
            match type_ {
                PERF_RECORD_COMM => {
                    let (pid, tid) = (f.u32().ok_or_else(short)?, f.u32().ok_or_else(short)?);
                    Ok(Event::Comm {
                        pid: pid as i32,
                        tid: tid as i32,
                        comm: until_nul(f.rest()),
                        exec: misc & PERF_RECORD_MISC_COMM_EXEC != 0,
                        time,
                    })
                }
                PERF_RECORD_FORK | PERF_RECORD_EXIT => {
                    let mut ids = [0i32; 4];
                    for id in &mut ids {
                        *id = f.u32().ok_or_else(short)? as i32;
                    }
                    let [pid, ppid, tid, ptid] = ids;
                    // The body has a time too, taken a little earlier than
                    // the trailer's, which perf orders and prints by.
                    let time = time.unwrap_or(f.u64().ok_or_else(short)?);
                    Ok(if type_ == PERF_RECORD_FORK {
                        Event::Fork { pid, ppid, tid, ptid, time }
                    } else {
                        Event::Exit { pid, ppid, tid, ptid, time }
                    })
                }
                _ => decode_mmap(&mut f, type_, misc, time).ok_or_else(short).map(Event::Mmap),
            }
        }
        PERF_RECORD_FINISHED_ROUND => Ok(Event::FinishedRound),
        PERF_RECORD_COMPRESSED => Err(PerfError::Unsupported {
            offset,
            what: "zstd-compressed records (perf record -z); record without -z",
        }),
        _ => Ok(Event::Other { type_ }),
    }
}

/// Where a record's body ends (its `sample_id_all` trailer starts) and the
/// trailer's time.
fn trailer(rec: &[u8], attr: Option<&Attr>) -> Option<(usize, Option<u64>)> {
    let Some(attr) = attr.filter(|a| a.sample_id_all) else {
        return Some((rec.len(), None));
    };
    let st = attr.sample_type;
    let fields = [
        PERF_SAMPLE_TID,
        PERF_SAMPLE_TIME,
        PERF_SAMPLE_ID,
        PERF_SAMPLE_STREAM_ID,
        PERF_SAMPLE_CPU,
        PERF_SAMPLE_IDENTIFIER,
    ];
    let words = fields.iter().filter(|&&b| st & b != 0).count();
    let start = rec.len().checked_sub(8 * words).filter(|&s| s >= 8)?;
    let time = if st & PERF_SAMPLE_TIME != 0 {
        let at = start + if st & PERF_SAMPLE_TID != 0 { 8 } else { 0 };
        Some(read_u64(rec, at)?)
    } else {
        None
    };
    Some((start, time))
}

fn decode_mmap<'a>(
    f: &mut Fields<'a>,
    type_: u32,
    misc: u16,
    time: Option<u64>,
) -> Option<MmapEvent<'a>> {
    let pid = f.u32()? as i32;
    let tid = f.u32()? as i32;
    let (start, len, pgoff) = (f.u64()?, f.u64()?, f.u64()?);
    let (mut prot, mut flags, mut build_id, mut inode) = (None, None, None, None);
    if type_ == PERF_RECORD_MMAP2 {
        let id_or_inode = f.take(24)?;
        if misc & PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
            let len = usize::from(id_or_inode[0]).min(BUILD_ID_MAX);
            build_id = id_or_inode.get(4..4 + len);
        } else {
            inode = Some(Inode {
                maj: read_u32(id_or_inode, 0)?,
                min: read_u32(id_or_inode, 4)?,
                ino: read_u64(id_or_inode, 8)?,
                generation: read_u64(id_or_inode, 16)?,
            });
        }
        prot = Some(f.u32()?);
        flags = Some(f.u32()?);
    }
    Some(MmapEvent {
        misc,
        pid,
        tid,
        start,
        len,
        pgoff,
        filename: until_nul(f.rest()),
        prot,
        flags,
        build_id,
        inode,
        time,
    })
}

/// A sample's fields, in `sample_type` bit order, up to the user stack;
/// later fields (weight, data source, ...) are left unread.
fn decode_sample<'a>(
    rec: &'a [u8],
    offset: u64,
    attr_index: usize,
    attr: &Attr,
) -> Result<Sample<'a>, PerfError> {
    let short = |what| bad(offset, PERF_RECORD_SAMPLE, what);
    let st = attr.sample_type;
    let has = |bit: u64| st & bit != 0;
    let mut f = Fields::new(rec, 8);
    let mut s = Sample {
        attr_index,
        misc: read_u16(rec, 4).unwrap_or(0),
        id: None,
        ip: 0,
        pid: 0,
        tid: 0,
        time: None,
        addr: None,
        cpu: None,
        period: None,
        callchain: None,
        regs_abi: PERF_SAMPLE_REGS_ABI_NONE,
        regs_mask: 0,
        regs: &[],
        stack: &[],
    };
    let cut = "fields run past the end of the record";
    let ids = leading_fields(&mut f, st).ok_or_else(|| short(cut))?;
    (s.id, s.ip, s.pid, s.tid, s.time) = (ids.id, ids.ip, ids.pid, ids.tid, ids.time);
    if has(PERF_SAMPLE_ADDR) {
        s.addr = Some(f.u64().ok_or_else(|| short(cut))?);
    }
    if has(PERF_SAMPLE_ID) {
        s.id = Some(f.u64().ok_or_else(|| short(cut))?);
    }
    if has(PERF_SAMPLE_STREAM_ID) {
        f.u64().ok_or_else(|| short(cut))?;
    }
    if has(PERF_SAMPLE_CPU) {
        s.cpu = Some(f.u32().ok_or_else(|| short(cut))?);
        f.u32().ok_or_else(|| short(cut))?;
    }
    if has(PERF_SAMPLE_PERIOD) {
        s.period = Some(f.u64().ok_or_else(|| short(cut))?);
    }
    if has(PERF_SAMPLE_READ) {
        let rf = attr.read_format;
        let flag = |bit: u64| u64::from(rf & bit != 0);
        let times = flag(PERF_FORMAT_TOTAL_TIME_ENABLED) + flag(PERF_FORMAT_TOTAL_TIME_RUNNING);
        let per_value = 1 + flag(PERF_FORMAT_ID) + flag(PERF_FORMAT_LOST);
        let words = if rf & PERF_FORMAT_GROUP != 0 {
            let nr = f.u64().ok_or_else(|| short(cut))?;
            nr.checked_mul(per_value).and_then(|w| w.checked_add(times))
        } else {
            Some(per_value + times)
        };
        f.take_words(words).ok_or_else(|| short("read values run past the end of the record"))?;
    }
    if has(PERF_SAMPLE_CALLCHAIN) {
        let nr = f.u64().ok_or_else(|| short(cut))?;
        let ips = f.take_words(Some(nr)).ok_or_else(|| short("callchain runs past the end"))?;
        s.callchain = Some(Words(ips));
    }
    if has(PERF_SAMPLE_RAW) {
        let size = f.u32().ok_or_else(|| short(cut))?;
        f.take(u64::from(size)).ok_or_else(|| short("raw data runs past the end"))?;
    }
    if has(PERF_SAMPLE_BRANCH_STACK) {
        let nr = f.u64().ok_or_else(|| short(cut))?;
        if attr.branch_sample_type & PERF_SAMPLE_BRANCH_HW_INDEX != 0 {
            f.u64().ok_or_else(|| short(cut))?;
        }
        f.take_words(nr.checked_mul(3)).ok_or_else(|| short("branch stack runs past the end"))?;
    }
    if has(PERF_SAMPLE_REGS_USER) {
        s.regs_abi = f.u64().ok_or_else(|| short(cut))?;
        if s.regs_abi != PERF_SAMPLE_REGS_ABI_NONE {
            let mask = attr.sample_regs_user;
            s.regs = f
                .take_words(Some(u64::from(mask.count_ones())))
                .ok_or_else(|| short("user registers run past the end"))?;
            s.regs_mask = mask;
        }
    }
    if has(PERF_SAMPLE_STACK_USER) {
        let size = f.u64().ok_or_else(|| short(cut))?;
        if size != 0 {
            let data = f.take(size).ok_or_else(|| short("user stack runs past the end"))?;
            let dyn_size = f.u64().ok_or_else(|| short(cut))?;
            s.stack = usize::try_from(dyn_size)
                .ok()
                .and_then(|n| data.get(..n))
                .ok_or_else(|| short("user stack dyn_size larger than its size"))?;
        }
    }
    Ok(s)
}

fn leading_fields(f: &mut Fields<'_>, sample_type: u64) -> Option<SampleIds> {
    let has = |bit: u64| sample_type & bit != 0;
    let mut ids = SampleIds::default();
    if has(PERF_SAMPLE_IDENTIFIER) {
        ids.id = Some(f.u64()?);
    }
    if has(PERF_SAMPLE_IP) {
        ids.ip = f.u64()?;
    }
    if has(PERF_SAMPLE_TID) {
        ids.pid = f.u32()? as i32;
        ids.tid = f.u32()? as i32;
    }
    if has(PERF_SAMPLE_TIME) {
        ids.time = Some(f.u64()?);
    }
    Some(ids)
}
