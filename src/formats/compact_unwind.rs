//! Apple compact unwind (`__unwind_info`) reader.
