//! Flame graphs: folded stacks drawn as an SVG by inferno.

use std::fs::File;
use std::path::Path;

/// The folded stacks in the file `folded` drawn into the SVG file `svg`,
/// its title `title`, its counts called samples.
pub fn flamegraph(folded: &Path, svg: &Path, title: &str) -> std::io::Result<()> {
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_owned();
    options.count_name = "samples".to_owned();
    let out = std::io::BufWriter::new(File::create(svg)?);
    inferno::flamegraph::from_files(&mut options, &[folded.to_path_buf()], out)
}
