//! The layout of a remembered walk end: the words an entry of the cache
//! of walk ends holds (`walk/ending.rs` writes and replays them).

/// The most frames a remembered end holds.
pub(crate) const END_FRAMES: usize = 6;
/// The most failed reads a remembered end holds.
pub(super) const END_FAILS: usize = 4;
/// The most stack words a remembered end's window holds.
pub(super) const END_WINDOW: usize = 48;

// Word indexes of an entry. Words 0 to `OPTS` are the state it starts
// from: pc, sp, frame pointer, the frame's method, precision and scans in
// a row, and the walk's options.
pub(super) const OPTS: usize = 4;
/// Frame count, stop reason, window length and failed-read count, a byte
/// each; a frame count of 0 marks a state whose walk does not end within
/// [`END_FRAMES`] general steps (not worth recording again), and a header
/// of [`SEEN`] one reached once, not yet recorded.
pub(super) const HEADER: usize = 5;
pub(super) const SEEN: u64 = 1 << 32;
pub(super) const WINDOW_LO: usize = 6;
pub(super) const LAST_FP: usize = 7;
/// A byte per frame: method code, and bit 7 for an exact pc.
pub(super) const METHODS: usize = 8;
/// Words at the start of every entry.
pub(crate) const END_HEAD: usize = 9;
pub(super) const FRAMES_AT: usize = END_HEAD;
pub(super) const FAILS_AT: usize = FRAMES_AT + 2 * END_FRAMES;
pub(super) const WINDOW_AT: usize = FAILS_AT + END_FAILS;
/// Words in a remembered walk end ([`CodeMap::recall_end`](crate::walk::CodeMap::recall_end)).
pub const END_WORDS: usize = WINDOW_AT + END_WINDOW;

/// How many words of an entry with this head are in use.
pub(crate) fn used(head: &[u64]) -> usize {
    match head[HEADER] {
        SEEN => END_HEAD,
        h => WINDOW_AT + (h >> 16 & 0xff) as usize,
    }
}
