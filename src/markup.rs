//! The allocation-free symbolizer markup writer.
