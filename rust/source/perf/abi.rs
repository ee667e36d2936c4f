//! The numbers of the perf.data format (`include/uapi/linux/perf_event.h`,
//! perf's `util/header.h`), and the bounds this reader puts on what a
//! damaged file can make it allocate.

// Record types (`enum perf_event_type`, and perf's own from 64 on).
pub const PERF_RECORD_MMAP: u32 = 1;
pub const PERF_RECORD_LOST: u32 = 2;
pub const PERF_RECORD_COMM: u32 = 3;
pub const PERF_RECORD_EXIT: u32 = 4;
pub const PERF_RECORD_FORK: u32 = 7;
pub const PERF_RECORD_SAMPLE: u32 = 9;
pub const PERF_RECORD_MMAP2: u32 = 10;
pub const PERF_RECORD_LOST_SAMPLES: u32 = 13;
pub const PERF_RECORD_HEADER_ATTR: u32 = 64;
pub const PERF_RECORD_HEADER_TRACING_DATA: u32 = 66;
pub const PERF_RECORD_HEADER_BUILD_ID: u32 = 67;
pub const PERF_RECORD_FINISHED_ROUND: u32 = 68;
pub const PERF_RECORD_AUXTRACE: u32 = 71;
pub const PERF_RECORD_HEADER_FEATURE: u32 = 80;
pub const PERF_RECORD_COMPRESSED: u32 = 81;

// `perf_event_attr.sample_type` bits, in the order the fields appear.
pub const PERF_SAMPLE_IP: u64 = 1 << 0;
pub const PERF_SAMPLE_TID: u64 = 1 << 1;
pub const PERF_SAMPLE_TIME: u64 = 1 << 2;
pub const PERF_SAMPLE_ADDR: u64 = 1 << 3;
pub const PERF_SAMPLE_READ: u64 = 1 << 4;
pub const PERF_SAMPLE_CALLCHAIN: u64 = 1 << 5;
pub const PERF_SAMPLE_ID: u64 = 1 << 6;
pub const PERF_SAMPLE_CPU: u64 = 1 << 7;
pub const PERF_SAMPLE_PERIOD: u64 = 1 << 8;
pub const PERF_SAMPLE_STREAM_ID: u64 = 1 << 9;
pub const PERF_SAMPLE_RAW: u64 = 1 << 10;
pub const PERF_SAMPLE_BRANCH_STACK: u64 = 1 << 11;
pub const PERF_SAMPLE_REGS_USER: u64 = 1 << 12;
pub const PERF_SAMPLE_STACK_USER: u64 = 1 << 13;
pub const PERF_SAMPLE_IDENTIFIER: u64 = 1 << 16;

// `perf_event_attr.read_format` bits.
pub(super) const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
pub(super) const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
pub(super) const PERF_FORMAT_ID: u64 = 1 << 2;
pub(super) const PERF_FORMAT_GROUP: u64 = 1 << 3;
pub(super) const PERF_FORMAT_LOST: u64 = 1 << 4;

/// `branch_sample_type` bit: each branch stack starts with a `hw_idx` word.
pub(super) const PERF_SAMPLE_BRANCH_HW_INDEX: u64 = 1 << 17;
/// `perf_event_attr` flag bit `sample_id_all`.
pub(super) const ATTR_FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;

// `perf_event_header.misc`.
pub const PERF_RECORD_MISC_CPUMODE_MASK: u16 = 7;
pub const PERF_RECORD_MISC_KERNEL: u16 = 1;
pub const PERF_RECORD_MISC_USER: u16 = 2;
/// MMAP/MMAP2: a data (not executable) mapping.
pub const PERF_RECORD_MISC_MMAP_DATA: u16 = 1 << 13;
/// COMM: the name changed because the task called exec.
pub const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;
/// MMAP2: the record holds a build id instead of device and inode numbers.
pub const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// A build-id entry of the `HEADER_BUILD_ID` feature carries its own size.
pub(super) const PERF_RECORD_MISC_BUILD_ID_SIZE: u16 = 1 << 15;

// Callchain context markers (`enum perf_callchain_context`): callchain
// entries at or above `PERF_CONTEXT_MAX` are markers, not addresses.
pub const PERF_CONTEXT_HV: u64 = -32i64 as u64;
pub const PERF_CONTEXT_KERNEL: u64 = -128i64 as u64;
pub const PERF_CONTEXT_USER: u64 = -512i64 as u64;
pub const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;

/// `regs_abi` of a sample with no user registers (a kernel thread).
pub const PERF_SAMPLE_REGS_ABI_NONE: u64 = 0;

// Feature bits (perf's `HEADER_*`) this reader decodes.
pub const HEADER_BUILD_ID: u32 = 2;
pub const HEADER_HOSTNAME: u32 = 3;
pub const HEADER_OSRELEASE: u32 = 4;
pub const HEADER_VERSION: u32 = 5;
pub const HEADER_ARCH: u32 = 6;
pub const HEADER_CMDLINE: u32 = 11;

pub(super) const MAGIC: &[u8; 8] = b"PERFILE2";
pub(super) const FILE_HEADER_SIZE: usize = 104;
pub(super) const PIPE_HEADER_SIZE: u64 = 16;
/// `perf_event_attr` as first published; smaller attributes are damage.
pub(super) const ATTR_SIZE_VER0: usize = 64;
/// The largest record: `perf_event_header.size` is a `u16`.
pub(super) const MAX_RECORD: usize = 1 << 16;
pub(super) const BUILD_ID_MAX: usize = 20;
/// Bounds on what a damaged header can make the reader allocate.
pub(super) const MAX_ATTRS: usize = 1 << 16;
pub(super) const MAX_IDS: usize = 1 << 22;
pub(super) const MAX_FEATURE_SIZE: u64 = 64 << 20;
pub(super) const MAX_BUILD_IDS: usize = 1 << 20;
