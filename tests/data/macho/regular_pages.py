# Writes regular-pages-ARCH.s: functions whose compact encodings are all
# different, then functions alternating between two encodings.
#
# ld64.lld packs the second-level pages greedily in the compressed format,
# which holds 127 common encodings plus at most 129 of the page's own; when a
# page that is not the last runs out of encoding slots before it holds 511
# entries, lld writes it in the regular format instead (511 entries of
# offset and encoding). So the unique encodings come out as regular pages,
# and the alternating functions (two common encodings, which lld cannot fold
# since no two neighbours are equal) as compressed pages, the last included.
#
# x86_64: frameless functions (mode 2) that push a distinct ordered subset of
# rbx, r12-r15 and rbp, then reserve a distinct stack size; the assembler
# derives the encoding from the CFI. arm64: frameless functions (mode 2)
# with distinct stack sizes.
#
# Usage: python3 regular_pages.py x86_64|arm64 OUT.s
import itertools
import sys

UNIQUE = 1200  # about 2.3 regular pages
ALTERNATING = 2400  # about 2.4 compressed pages

arch, out_path = sys.argv[1], sys.argv[2]
out = open(out_path, 'w')
out.write('\t.section __TEXT,__text,regular,pure_instructions\n')


def function(name, body):
    out.write(f'\t.globl _{name}\n\t.p2align 2\n_{name}:\n\t.cfi_startproc\n')
    out.write(body)
    out.write('\t.cfi_endproc\n')


def x86_64(pushed, size):
    """Pushes `pushed` in order, then `subq $size`; CFA offsets follow."""
    body = ''
    cfa = 8
    for r in pushed:
        cfa += 8
        body += f'\tpushq %{r}\n\t.cfi_def_cfa_offset {cfa}\n'
    if size:
        cfa += size
        body += f'\tsubq ${size}, %rsp\n\t.cfi_def_cfa_offset {cfa}\n'
    # Saved registers, the last pushed first, as compilers list them.
    for i in reversed(range(len(pushed))):
        body += f'\t.cfi_offset %{pushed[i]}, {-16 - 8 * i}\n'
    if size:
        body += f'\taddq ${size}, %rsp\n'
    for r in reversed(pushed):
        body += f'\tpopq %{r}\n'
    return body + '\tretq\n'


def arm64(size):
    """Reserves `size` bytes (a multiple of 16) and releases them."""
    body = ''
    hi, lo = size & ~0xfff, size & 0xfff
    if hi:
        body += f'\tsub sp, sp, #{hi >> 12}, lsl #12\n'
    if lo:
        body += f'\tsub sp, sp, #{lo}\n'
    body += f'\t.cfi_def_cfa_offset {size}\n'
    if hi:
        body += f'\tadd sp, sp, #{hi >> 12}, lsl #12\n'
    if lo:
        body += f'\tadd sp, sp, #{lo}\n'
    return body + '\tret\n'


if arch == 'x86_64':
    regs = ['rbx', 'r12', 'r13', 'r14', 'r15', 'rbp']
    # Every ordered choice of up to three registers, with every stack size
    # (in 8-byte slots, the return address and pushes included) up to 255.
    shapes = []
    for k in range(4):
        for pushed in itertools.permutations(regs, k):
            for slots in range(1 + k, 256):
                shapes.append((pushed, 8 * (slots - 1 - k)))
    # Spread the picks over the whole set: many register sets and sizes.
    step = len(shapes) // UNIQUE
    unique = [x86_64(*shapes[i * step]) for i in range(UNIQUE)]
    common = [x86_64((), 8), x86_64(('rbx',), 0)]
    assert len(set(unique + common)) == UNIQUE + 2
else:
    unique = [arm64(16 * (k + 2)) for k in range(UNIQUE)]
    common = [arm64(16), '\tret\n']
for i, body in enumerate(unique):
    function(f'u{i}', body)
for i in range(ALTERNATING):
    function(f'a{i}', common[i % 2])
