#!/usr/bin/env bash
# Rebuilds the Mach-O fixtures in tests/data/macho/ from their sources with
# clang-16 and ld64.lld-16 (Debian's clang-16 and lld-16), without an SDK:
# dylibs whose undefined symbols resolve at load time.
set -euo pipefail
cd "$(dirname "$0")/../tests/data/macho"
python3 pages.py pages.c
build() { # NAME SOURCE ARCH FLAGS...
  local name=$1 src=$2 arch=$3
  shift 3
  clang-16 -target "$arch-apple-macos11" -O2 -fexceptions "$@" -c "$src" -o "/tmp/$name.o"
  ld64.lld-16 -arch "$arch" -platform_version macos 11.0 11.0 -dylib -undefined dynamic_lookup \
    "/tmp/$name.o" -o "$name.dylib"
  rm -f "/tmp/$name.o"
}
for arch in x86_64 arm64; do
  # Frame pointers kept: frame-based encodings with saved registers.
  build "encodings-fp-$arch" encodings.c "$arch"
  # Frame pointers omitted: frameless (immediate and, on x86_64,
  # stack-indirect), DWARF, LSDA, and the null encoding of bare assembly.
  build "encodings-nofp-$arch" encodings.c "$arch" -fomit-frame-pointer
  # Thousands of functions: several second-level pages.
  build "pages-$arch" pages.c "$arch" -fomit-frame-pointer
  # Regular pages, then compressed ones: 1200 functions with distinct
  # frameless encodings, then 2400 alternating between two.
  python3 regular_pages.py "$arch" "/tmp/regular-pages-$arch.s"
  clang-16 -target "$arch-apple-macos11" -c "/tmp/regular-pages-$arch.s" -o "/tmp/regular-pages-$arch.o"
  ld64.lld-16 -arch "$arch" -platform_version macos 11.0 11.0 -dylib -undefined dynamic_lookup \
    "/tmp/regular-pages-$arch.o" -o "regular-pages-$arch.dylib"
  rm -f "/tmp/regular-pages-$arch.s" "/tmp/regular-pages-$arch.o"
done
rm -f pages.c
ls -l ./*.dylib
