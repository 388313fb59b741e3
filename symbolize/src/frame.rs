//! What a lookup gives: one frame per function, inlined ones first.
//! A file of its own so that the fuzz targets can take the parsers
//! (`breakpad.rs`, `gsym.rs`) with it and nothing else.

/// One frame of a symbolized address: a function, where in it, and nothing
/// more. An address in inlined code gives several, innermost first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymFrame {
    /// The function's name as the source stores it (possibly mangled).
    pub function: Option<String>,
    /// The source file, as the source stores it.
    pub file: Option<String>,
    /// The line, 0 when unknown.
    pub line: u32,
    /// The column, 0 when unknown (or when the format has none).
    pub column: u32,
}
