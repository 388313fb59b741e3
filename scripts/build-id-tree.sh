#!/usr/bin/env bash
# Makes a .build-id tree for `llvm-symbolizer --debug-file-directory=OUTDIR`.
#
#   scripts/build-id-tree.sh OUTDIR TARGET_DIR     (a Cargo target/ directory)
#   scripts/build-id-tree.sh OUTDIR FILE...        (ELF files)
#
# For every ELF file with a GNU build ID it creates the symlink
# OUTDIR/.build-id/xx/rest.debug -> FILE (absolute). In a Cargo target
# directory it takes the executables and shared libraries of every profile
# and target (tests, examples, benches, build-script outputs), not objects or
# rlibs. Mach-O images (macOS) are linked the same way by their LC_UUID when
# llvm-objdump is available, since markup names them elf:UUID.
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
out=$1
shift
mkdir -p "$out/.build-id"

objdump_bin=$(command -v llvm-objdump-19 || command -v llvm-objdump-16 || command -v llvm-objdump || true)

candidates() {
  for arg in "$@"; do
    if [ -d "$arg" ]; then
      find "$arg" -type f \( -perm -u+x -o -name '*.so' -o -name '*.so.*' -o -name '*.dylib' \) \
        ! -name '*.rlib' ! -name '*.d' ! -name '*.o' ! -name '*.rmeta' ! -path '*/incremental/*' \
        ! -path '*/.fingerprint/*' 2>/dev/null
    else
      printf '%s\n' "$arg"
    fi
  done
}

build_id() {
  local f=$1 magic
  magic=$(head -c 4 "$f" 2>/dev/null | od -An -tx1 | tr -d ' \n')
  case "$magic" in
    7f454c46)
      readelf -n "$f" 2>/dev/null | sed -n 's/^[[:space:]]*Build ID: \([0-9a-f]*\)$/\1/p' | head -n 1
      ;;
    cffaedfe|cefaedfe)
      [ -n "$objdump_bin" ] || return 0
      "$objdump_bin" --macho --private-headers "$f" 2>/dev/null |
        sed -n 's/^[[:space:]]*uuid \([0-9A-Fa-f-]*\)$/\1/p' | head -n 1 | tr -d '-' | tr 'A-F' 'a-f'
      ;;
  esac
}

count=0
while IFS= read -r f; do
  [ -f "$f" ] || continue
  id=$(build_id "$f")
  [ ${#id} -ge 4 ] || continue
  dir="$out/.build-id/${id:0:2}"
  mkdir -p "$dir"
  ln -sfn "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$dir/${id:2}.debug"
  count=$((count + 1))
done < <(candidates "$@")
echo "build-id-tree: linked $count files under $out/.build-id" >&2
