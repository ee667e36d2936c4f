//! A frame's register file: the DWARF columns whose values are known.

use crate::arch::NUM_REGS;

#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Registers {
    values: [u64; NUM_REGS],
    known: u64,
}

impl Default for Registers {
    fn default() -> Self {
        Registers { values: [0; NUM_REGS], known: 0 }
    }
}

impl Registers {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn get(&self, reg: u16) -> Option<u64> {
        let i = reg as usize;
        if i < NUM_REGS && self.known & (1 << i) != 0 {
            Some(self.values[i])
        } else {
            None
        }
    }

    /// Set a column's value; columns this file does not track are ignored.
    #[inline]
    pub fn set(&mut self, reg: u16, value: u64) {
        let i = reg as usize;
        if i < NUM_REGS {
            self.values[i] = value;
            self.known |= 1 << i;
        }
    }

    #[inline]
    pub fn forget(&mut self, reg: u16) {
        let i = reg as usize;
        if i < NUM_REGS {
            self.known &= !(1 << i);
        }
    }

    /// Make this file hold `from`'s known columns among those in `mask`
    /// (bit n = column n), and nothing else. Only those values are copied:
    /// the values of unknown columns are never read.
    #[inline]
    pub fn inherit(&mut self, from: &Registers, mask: u64) {
        self.known = from.known & mask;
        let mut bits = self.known;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            self.values[i] = from.values[i];
            bits &= bits - 1;
        }
    }

    /// [`Registers::inherit`] for a mask known when compiling (an
    /// architecture's, in a walk compiled for it): every column of the mask
    /// is copied, known or not (the values of unknown columns are never
    /// read), which unrolls into a fixed handful of moves with no loop over
    /// the known bits.
    #[inline(always)]
    pub fn inherit_fixed(&mut self, from: &Registers, mask: u64) {
        self.known = from.known & mask;
        for i in 0..NUM_REGS {
            if (mask >> i) & 1 != 0 {
                self.values[i] = from.values[i];
            }
        }
    }

    /// [`Registers::inherit_fixed`], then the columns a step recovers set
    /// through the [`Recovery`] returned, which keeps the known mask in a
    /// register until it is dropped rather than in the file at every write.
    #[inline(always)]
    pub fn recover_from(&mut self, from: &Registers, mask: u64) -> Recovery<'_> {
        self.inherit_fixed(from, mask);
        let known = self.known;
        Recovery { file: self, known }
    }

    /// [`Registers::recover_from`] this file itself: the columns of `mask`
    /// keep their values, the others become unknown.
    #[inline(always)]
    pub fn recover_in_place(&mut self, mask: u64) -> Recovery<'_> {
        let known = self.known & mask;
        Recovery { file: self, known }
    }

    /// The known columns, in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        (0..NUM_REGS as u16).filter_map(move |r| self.get(r).map(|v| (r, v)))
    }
}

/// A register file being written by one step (see [`Registers::recover_from`]).
pub struct Recovery<'a> {
    file: &'a mut Registers,
    known: u64,
}

impl Recovery<'_> {
    /// Set a column's value; columns the file does not track are ignored.
    #[inline(always)]
    pub fn set(&mut self, reg: u16, value: u64) {
        let i = reg as usize;
        if i < NUM_REGS {
            self.file.values[i] = value;
            self.known |= 1 << i;
        }
    }

    #[inline(always)]
    pub fn forget(&mut self, reg: u16) {
        let i = reg as usize;
        if i < NUM_REGS {
            self.known &= !(1 << i);
        }
    }
}

impl Drop for Recovery<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.file.known = self.known;
    }
}

impl std::fmt::Debug for Registers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = f.debug_map();
        for (r, v) in self.iter() {
            map.entry(&r, &format_args!("{v:#x}"));
        }
        map.finish()
    }
}
