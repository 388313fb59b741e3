//! The walk: table row, else frame pointer, else scan; generic over the reader.
