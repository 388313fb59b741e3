//! ELF notes, program and section headers: what the module table needs.
