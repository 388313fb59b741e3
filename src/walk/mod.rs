//! The walk: table row, else frame pointer, else scan; generic over the reader.
//!
//! - `frame.rs`: frames, methods, pc kinds, lookups, options, stop reasons;
//! - `code_map.rs`: the [`CodeMap`] the walker asks about code;
//! - `answer.rs` and `fast.rs`: the hot path's one-word answers and loop;
//! - `walker.rs`: the [`Walker`] and its steps, one function per method;
//! - `ending.rs` and `end_words.rs`: remembered walk ends.

#![forbid(unsafe_code)]

internal! {
    mod answer;
    mod fast;
}
mod code_map;
mod end_words;
pub(crate) mod ending;
mod frame;
mod walker;

/// The rows a [`CodeMap`] answers with, in the walker's terms.
pub use crate::formats::sframe::{CfaRule, RegRule, Row};
pub(crate) use code_map::code_map_through_deref;
pub(crate) use code_map::{classify_at, classify_quick_at};
pub use code_map::{CodeMap, SnapshotCode};
pub use end_words::END_WORDS;
pub(crate) use end_words::{used as walk_end_used, END_HEAD};
pub use frame::{
    sp_order_holds, Frame, Lookup, Method, PcKind, StopReason, WalkOptions, MAX_SIGNAL_FRAMES,
    SCAN_MEMO_WORDS,
};
pub use walker::Walker;

#[cfg(test)]
pub(crate) mod tests;
