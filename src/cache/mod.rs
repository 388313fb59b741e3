//! The caches the walk keeps across walks, in static memory, shared by
//! every thread and safe in signal handlers: no lock, no allocation, no
//! waiting. [`crate::clear_caches`] is their one public handle.
//!
//! - [`rule`]: module-table lookups per pc, read by the general step;
//! - [`call`]: whether a call precedes a return address;
//! - [`step`]: the hot path's one-word answer per pc;
//! - [`scan`]: remembered stack scans;
//! - [`walk_ends`]: remembered walk ends (the start code below `main`);
//! - [`seq`]: the store behind them all.
//!
//! # The protocol
//!
//! Every cache is direct-mapped but the step cache, which is two-way (a
//! pc's own slot or the one next to it; [`step`] says why). Each entry is a sequence lock: a writer
//! claims it by making its sequence word odd (and gives up if another
//! writer holds it), writes the key and the words, then publishes an even
//! sequence word that also carries a cache generation. A reader takes an
//! entry only if that word is even, of its generation, and unchanged after
//! reading, so a torn entry reads as a miss and a refresh of the table
//! invalidates every entry at once.
//!
//! A cache generation is what a module table's answers are kept under
//! ([`crate::walk::CodeMap::answer_generation`]): every finished table takes a
//! new one, so two tables never share an answer. It is not
//! [`crate::modules::Table::generation`], the count of refreshes.

pub(crate) mod call;
pub(crate) mod rule;
pub(crate) mod scan;
pub(crate) mod seq;
pub(crate) mod step;
pub(crate) mod walk_ends;

/// Empties every cache. Safe at any time: a walk racing it only misses.
pub(crate) fn clear_all() {
    rule::clear();
    call::clear();
    step::clear();
    scan::clear();
    walk_ends::clear();
}
