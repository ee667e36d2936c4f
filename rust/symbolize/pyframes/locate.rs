//! Finding an interpreter in a module's ELF file: the dynamic symbols a
//! python3 executable or libpython exports (`_PyRuntime`, the type objects
//! of code, str and bytes) and its version (`Py_Version`, the
//! `PY_VERSION_HEX` that 3.11 and later export, else the file's name:
//! `python3.11`, `libpython3.11.so.1.0`).

use object::{Object, ObjectSection, ObjectSymbol};

/// What a module's file says of the interpreter in it, at ELF addresses
/// (add the module's bias for run-time ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbols {
    pub version: (u8, u8),
    pub runtime: u64,
    pub code_type: Option<u64>,
    pub unicode_type: Option<u64>,
    pub bytes_type: Option<u64>,
    /// `PyFrame_Type`: 3.10's frames are its objects.
    pub frame_type: Option<u64>,
}

impl Symbols {
    /// The same symbols at run-time addresses, for a module placed with `bias`.
    pub fn placed(&self, bias: u64) -> Symbols {
        let at = |a: u64| a.wrapping_add(bias);
        Symbols {
            version: self.version,
            runtime: at(self.runtime),
            code_type: self.code_type.map(at),
            unicode_type: self.unicode_type.map(at),
            bytes_type: self.bytes_type.map(at),
            frame_type: self.frame_type.map(at),
        }
    }
}

/// Whether a file name is one of CPython's: `python3.11`, `python3`,
/// `libpython3.11.so.1.0`, `libpython3.11d.so`, a free-threaded build's
/// `python3.13t`... (and the version its name gives, if it gives one).
pub fn python_file_name(name: &str) -> Option<Option<(u8, u8)>> {
    let rest = name.strip_prefix("lib").unwrap_or(name).strip_prefix("python")?;
    if rest.bytes().all(|b| b.is_ascii_digit()) {
        return Some(None); // python, python3
    }
    let version = rest.split(".so").next().unwrap_or(rest).trim_end_matches(|c| "dmut".contains(c));
    let (major, minor) = version.split_once('.')?;
    Some(Some((major.parse().ok()?, minor.parse().ok()?)))
}

/// The interpreter's symbols in the ELF file `data` named `name`; None
/// when it exports no `_PyRuntime` (not CPython, or a build that hides it).
pub fn find(data: &[u8], name: &str) -> Option<Symbols> {
    let file = object::File::parse(data).ok()?;
    let mut runtime = None;
    let mut code_type = None;
    let mut unicode_type = None;
    let mut bytes_type = None;
    let mut frame_type = None;
    let mut version_at = None;
    for symbol in file.dynamic_symbols().chain(file.symbols()) {
        if symbol.is_undefined() {
            continue;
        }
        let slot = match symbol.name() {
            Ok("_PyRuntime") => &mut runtime,
            Ok("PyCode_Type") => &mut code_type,
            Ok("PyUnicode_Type") => &mut unicode_type,
            Ok("PyBytes_Type") => &mut bytes_type,
            Ok("PyFrame_Type") => &mut frame_type,
            Ok("Py_Version") => &mut version_at,
            _ => continue,
        };
        slot.get_or_insert(symbol.address());
    }
    let runtime = runtime?;
    let version = version_at
        .and_then(|at| read_u32(&file, at))
        .map(|hex| ((hex >> 24) as u8, (hex >> 16) as u8))
        .or_else(|| python_file_name(name).flatten())?;
    Some(Symbols { version, runtime, code_type, unicode_type, bytes_type, frame_type })
}

/// The 4 bytes at ELF address `address` of the file's sections.
fn read_u32(file: &object::File<'_>, address: u64) -> Option<u32> {
    let section =
        file.sections().find(|s| s.address() <= address && address < s.address() + s.size())?;
    let data = section.data().ok()?;
    let off = usize::try_from(address - section.address()).ok()?;
    Some(u32::from_le_bytes(data.get(off..off.checked_add(4)?)?.try_into().ok()?))
}

/// The interpreter among a process's file mappings, at run-time
/// addresses: the first file named like CPython's (`python3.11`,
/// `libpython3.11.so.1.0`) that exports `_PyRuntime`, placed by its
/// mapping. `mappings` are (path, where its file can be read now, start,
/// file offset).
pub fn in_mappings<'a>(
    mappings: impl IntoIterator<Item = (&'a [u8], &'a str, u64, u64)>,
    page: u64,
) -> Option<Symbols> {
    let mut tried: Vec<&[u8]> = Vec::new();
    for (path, readable, start, offset) in mappings {
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        let name = String::from_utf8_lossy(name);
        let name = name.strip_suffix(" (deleted)").unwrap_or(&name);
        if python_file_name(name).is_none() || tried.contains(&path) {
            continue;
        }
        tried.push(path);
        let Ok(data) = crate::source::files::map(std::path::Path::new(readable)) else { continue };
        let Some(symbols) = find(&data, name) else { continue };
        let Ok(summary) = crate::space::elf::summarize(&data) else { continue };
        let segments: Vec<_> = summary.segments().collect();
        return Some(symbols.placed(crate::space::bias(&segments, start, offset, page)));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::python_file_name;

    #[test]
    fn names() {
        assert_eq!(python_file_name("python3.11"), Some(Some((3, 11))));
        assert_eq!(python_file_name("libpython3.12.so.1.0"), Some(Some((3, 12))));
        assert_eq!(python_file_name("libpython3.11d.so"), Some(Some((3, 11))));
        assert_eq!(python_file_name("python3.13t"), Some(Some((3, 13))));
        assert_eq!(python_file_name("libpython3.13t.so.1.0"), Some(Some((3, 13))));
        assert_eq!(python_file_name("python3"), Some(None));
        assert_eq!(python_file_name("python"), Some(None));
        assert_eq!(python_file_name("libc.so.6"), None);
        assert_eq!(python_file_name("pythonista"), None);
    }
}
