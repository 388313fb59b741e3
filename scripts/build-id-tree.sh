#!/usr/bin/env bash
# Makes a .build-id tree for `llvm-symbolizer --debug-file-directory=OUTDIR`.
#
#   scripts/build-id-tree.sh OUTDIR TARGET_DIR     (a Cargo target/ directory)
#   scripts/build-id-tree.sh OUTDIR FILE...        (binaries; directories are searched)
#
# For every ELF file with a GNU build ID it creates the symlink
# OUTDIR/.build-id/xx/rest.debug -> FILE (an absolute path). Run again over
# the same tree, it removes the links that no longer lead to a file with
# their build ID (a binary rebuilt in place, or deleted): llvm-symbolizer
# does not check, and would name an old report's frames from the new code.
# An argument that does not exist is an error. In a directory
# it takes the executables and shared libraries of every profile and target
# (tests, examples, benches, build scripts), not objects, rlibs or the
# incremental cache.
#
# Mach-O images (macOS) are linked the same way by their LC_UUID, since the
# markup names them elf:UUID; this needs llvm-objdump (or Apple's objdump).
# A dSYM bundle's DWARF file wins over the image with the same UUID: it holds
# the line tables. Universal (fat) files are split into one thin file per
# architecture under OUTDIR/.build-id/.slices (needs llvm-lipo or lipo),
# since llvm-symbolizer cannot pick the slice by UUID itself.
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,18p' "$0" >&2
  exit 2
fi
out=$1
shift
mkdir -p "$out/.build-id"
out=$(cd "$out" && pwd -P)

first_tool() {
  local t
  for t in "$@"; do
    if command -v "$t" >/dev/null 2>&1; then
      command -v "$t"
      return
    fi
  done
}
objdump_bin=$(first_tool llvm-objdump-19 llvm-objdump-16 llvm-objdump objdump)
lipo_bin=$(first_tool llvm-lipo-19 llvm-lipo-16 llvm-lipo lipo)

# Every file to look at, dSYM DWARF files last (so that they win).
candidates() {
  local arg
  for arg in "$@"; do
    if [ -d "$arg" ]; then
      find "$arg" \( -name incremental -o -name .fingerprint \) -prune -o -type f \
        \( -perm -u+x -o -name '*.so' -o -name '*.so.*' -o -name '*.dylib' \
        -o -path '*.dSYM/Contents/Resources/DWARF/*' \) \
        ! -name '*.rlib' ! -name '*.rmeta' ! -name '*.d' ! -name '*.o' -print 2>/dev/null
    else
      printf '%s\n' "$arg"
    fi
  done | awk '/\.dSYM\// { late[++n] = $0; next } { print } END { for (i = 1; i <= n; i++) print late[i] }'
}

magic() {
  head -c 4 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n'
}

elf_build_id() {
  readelf -n "$1" 2>/dev/null | sed -n 's/^[[:space:]]*Build ID: \([0-9a-f]*\)$/\1/p' | head -n 1
}

macho_uuid() {
  [ -n "$objdump_bin" ] || return 0
  "$objdump_bin" --macho --private-headers "$1" 2>/dev/null |
    sed -n 's/^[[:space:]]*uuid \([0-9A-Fa-f-]*\)$/\1/p' | head -n 1 | tr -d '-' | tr 'A-F' 'a-f'
}

# The ID of an ELF or Mach-O file, if it has one (MAGIC: its magic()).
file_id() { # FILE [MAGIC]
  case "${2:-$(magic "$1")}" in
    7f454c46) elf_build_id "$1" ;;
    cffaedfe | cefaedfe) macho_uuid "$1" ;;
  esac
}

for arg in "$@"; do
  if [ ! -e "$arg" ]; then
    echo "build-id-tree: $arg: no such file or directory" >&2
    exit 1
  fi
done

# Links this run makes are newer than the stamp; older ones are checked.
stamp=$(mktemp)
trap 'rm -f "$stamp"' EXIT

count=0
link() { # ID FILE
  local id=$1 f=$2 dir
  [ ${#id} -ge 4 ] || return 0
  dir="$out/.build-id/${id:0:2}"
  mkdir -p "$dir"
  ln -sfn "$(cd "$(dirname "$f")" && pwd -P)/$(basename "$f")" "$dir/${id:2}.debug"
  count=$((count + 1))
}

# Splits a universal file into thin files and links each by its UUID.
fat() { # FILE
  local f=$1 arch thin
  if [ -z "$lipo_bin" ]; then
    echo "build-id-tree: skipping universal file $f (no lipo)" >&2
    return 0
  fi
  for arch in $("$lipo_bin" -archs "$f" 2>/dev/null); do
    thin="$out/.build-id/.slices/$(printf '%s' "$f" | tr '/' '_')-$arch"
    mkdir -p "$out/.build-id/.slices"
    "$lipo_bin" "$f" -thin "$arch" -output "$thin" 2>/dev/null || continue
    link "$(macho_uuid "$thin")" "$thin"
  done
}

while IFS= read -r f; do
  [ -f "$f" ] || continue
  m=$(magic "$f")
  case "$m" in
    cafebabe | cafebabf) fat "$f" ;;
    *) link "$(file_id "$f" "$m")" "$f" ;;
  esac
done < <(candidates "$@")

# Links left from earlier runs whose file now has another ID, or is gone
# (a link this run made within the stamp's second is checked too).
stale=0
while IFS= read -r l; do
  rel=${l#"$out/.build-id/"}
  id="${rel%%/*}${rel#*/}"
  id=${id%.debug}
  target=$(readlink "$l")
  now=
  [ ! -f "$target" ] || now=$(file_id "$target")
  if [ "$now" != "$id" ]; then
    rm -f "$l"
    stale=$((stale + 1))
  fi
done < <(find "$out/.build-id" -mindepth 2 -maxdepth 2 -path "$out/.build-id/.slices" -prune \
  -o -type l -name '*.debug' ! -newer "$stamp" -print)
removed=
[ "$stale" -eq 0 ] || removed=", removed $stale stale links"
echo "build-id-tree: linked $count files under $out/.build-id$removed" >&2
