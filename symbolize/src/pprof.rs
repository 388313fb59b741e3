//! The pprof profile format (`perftools.profiles.Profile`, google/pprof's
//! `proto/profile.proto`), written with `prost`: the messages are derived
//! here with that file's field numbers, so no `protoc` and no build script
//! are needed. Only what stackmark writes is declared; a reader skips any
//! field it does not know, so leaving the rest out is valid.
//!
//! Every string is an index into [`Profile::string_table`], whose entry 0
//! is `""`; every id is nonzero. [`Strings`] keeps the table.

use std::collections::HashMap;

use prost::Message;

/// A whole profile.
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    /// What each of a sample's values counts, in order.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// The modules, each with its address range and build ID.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// The code addresses the samples name.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// The functions the locations' lines name.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string of the profile; entry 0 is `""`.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// When the profile started, in nanoseconds since the epoch (UTC).
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long it ran, in nanoseconds.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What the period counts.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The events between two samples.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free text (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type shown by default (string index of its type).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// A type and unit, e.g. `samples`/`count`.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// String index of the type.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// String index of the unit.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// One stack with its values and labels.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Location ids, the leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per [`Profile::sample_type`].
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels: the thread, here.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A label: a key and a string or a number.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// String index of the key.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String index of the value, for a string label.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// The value of a numeric label.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// String index of a numeric label's unit.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// A module mapped into the process.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// First address of the range.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// One past its last address.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// String index of the file's name.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// String index of the build ID, in lower-case hex.
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Whether the locations in it carry functions...
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// ...file names...
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// ...line numbers...
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// ...and inlined frames.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// A code address, and in a symbolized profile its frames.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The mapping it lies in, 0 for none.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The address (a return address less one: inside its call).
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// The frames at the address, inlined ones first, the caller last.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// A function and line of a location.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// The line, 0 when unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// A function.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// String index of the readable (demangled) name.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// String index of the name as the symbols store it (mangled).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// String index of the source file.
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// A profile's string table: each string stored once.
#[derive(Debug)]
pub struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Default for Strings {
    fn default() -> Strings {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }
}

impl Strings {
    /// The index of `s`, added on first use.
    pub fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }

    /// The table, for [`Profile::string_table`].
    pub fn into_table(self) -> Vec<String> {
        self.table
    }
}

impl Profile {
    /// The profile as a pprof file: the message, gzipped.
    pub fn to_gzip(&self) -> Vec<u8> {
        use std::io::Write;
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        // Writing to a Vec cannot fail.
        let _ = z.write_all(&self.encode_to_vec());
        z.finish().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field numbers as bytes on the wire: a hand-encoded message
    /// decodes to the same values (tag = field << 3 | wire type).
    #[test]
    fn fields_have_profile_protos_numbers() {
        let m = Mapping {
            id: 1,
            memory_start: 2,
            memory_limit: 3,
            file_offset: 4,
            filename: 5,
            build_id: 6,
            has_functions: true,
            has_filenames: false,
            has_line_numbers: false,
            has_inline_frames: true,
        };
        let wire = [
            0x08, 1, 0x10, 2, 0x18, 3, 0x20, 4, 0x28, 5, 0x30, 6, 0x38, 1, 0x50, 1,
        ];
        assert_eq!(m.encode_to_vec(), wire);
        let l = Location {
            id: 7,
            mapping_id: 1,
            address: 0x10,
            line: vec![Line {
                function_id: 3,
                line: 9,
            }],
        };
        assert_eq!(
            l.encode_to_vec(),
            [0x08, 7, 0x10, 1, 0x18, 0x10, 0x22, 4, 0x08, 3, 0x10, 9]
        );
        let p = Profile {
            time_nanos: 1,
            duration_nanos: 2,
            period: 3,
            default_sample_type: 4,
            string_table: vec![String::new()],
            ..Default::default()
        };
        assert_eq!(
            p.encode_to_vec(),
            [0x32, 0, 0x48, 1, 0x50, 2, 0x60, 3, 0x70, 4]
        );
    }
}
