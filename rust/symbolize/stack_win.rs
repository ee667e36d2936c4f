//! Windows x86 frame data records as the symbol files hold them: a
//! Breakpad file's `STACK WIN` lines (`crate::symbolize::breakpad`) and a
//! PDB's FPO and frame data streams (`crate::symbolize::pdb`), kept in two
//! sorted lists (frame data programs, FPO data) with rust-minidump's
//! handling of the overlapping records PDBs hold, and turned into what the
//! unwinder takes ([`FrameData`]).

use crate::unwind::frame_data::{FrameData, FrameRule};

/// A `STACK WIN` record of type 0 or 4 (or a PDB's frame data record: see
/// `crate::symbolize::pdb`), its program held as `P`.
#[derive(Clone, Copy, Debug)]
pub struct WinFrame<P> {
    pub address: u64,
    pub size: u64,
    pub params: u32,
    pub saved: u32,
    pub locals: u32,
    /// The frame data program, if it has one.
    pub program: Option<P>,
    pub allocates_base_pointer: bool,
}

impl<P: Copy> WinFrame<P> {
    fn end(&self) -> u64 {
        self.address.saturating_add(self.size)
    }

    /// The record as the unwinder takes it, its program's text by `text`.
    pub fn data<'a>(&self, text: impl FnOnce(P) -> &'a str) -> FrameData<'a> {
        let rule = match self.program {
            Some(p) => FrameRule::Program(text(p)),
            None => FrameRule::Fpo { allocates_base_pointer: self.allocates_base_pointer },
        };
        FrameData {
            parameter_size: self.params,
            saved_register_size: self.saved,
            local_size: self.locals,
            rule,
        }
    }
}

/// The record at `address` of `lists` ([frame data programs, FPO data],
/// each sorted, none overlapping): a frame data program's before FPO
/// data's, as Breakpad and rust-minidump prefer.
pub fn find_win_frame<P: Copy>(lists: &[Vec<WinFrame<P>>; 2], address: u64) -> Option<WinFrame<P>> {
    lists.iter().find_map(|list| {
        let i = list.partition_point(|w| w.address <= address).checked_sub(1)?;
        (address < list[i].end()).then_some(list[i])
    })
}

/// Add a `STACK WIN` record to its list, as rust-minidump's reader does with
/// the overlapping records PDBs hold: a record starting inside the one
/// before it ends that one where it starts (the tables give each part of a
/// function, from its own start to the function's end); one starting at or
/// before the previous record's start and overlapping it is dropped; an
/// empty one is dropped.
pub fn push_win_frame<P: Copy>(list: &mut Vec<WinFrame<P>>, frame: WinFrame<P>) {
    if frame.size == 0 {
        return;
    }
    if let Some(last) = list.last_mut() {
        if frame.address < last.end() && last.address < frame.end() {
            if frame.address <= last.address {
                return;
            }
            last.size = frame.address - last.address;
        }
    }
    list.push(frame);
}
