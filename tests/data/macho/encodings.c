/* Functions chosen so the linker emits every kind of compact unwind
   encoding (built with clang-16 for x86_64 and arm64 macOS, linked by
   ld64.lld-16; see scripts/build-macho-fixtures.sh). */

int sink(int);

/* A frame with saved registers (RBP frame / arm64 frame with pairs). */
__attribute__((noinline)) int framed_saved(int a, int b, int c, int d)
{
    volatile int pad[16];
    int x = a * 3, y = b * 5, z = c * 7, w = d * 11;
    pad[0] = x;
    int r = sink(pad[0]);
    return r + x + y + z + w + sink(y + z);
}

/* Frameless with a small immediate stack size. */
__attribute__((noinline)) int frameless_small(int a)
{
    return sink(a) + 1;
}

/* A leaf without a frame at all. */
__attribute__((noinline)) int leaf(int a)
{
    return a * 2 + 1;
}

/* A large frame: x86_64 frameless stack-indirect (the size does not fit
   the encoding's immediate, so it is read from the `subq`). */
__attribute__((noinline, optnone)) int big_frame(int a)
{
    volatile char buf[70000];
    buf[a & 1023] = (char)a;
    return sink(buf[a & 511]);
}

/* Stack realignment: compact unwind cannot express it (DWARF mode). */
__attribute__((noinline)) int realigned(int a)
{
    __attribute__((aligned(128))) volatile int v[4];
    v[0] = a;
    return sink(v[0]);
}

/* A cleanup makes an LSDA (with -fexceptions). */
static void cleanup(int *p) { sink(*p); }
__attribute__((noinline)) int with_lsda(int a)
{
    __attribute__((cleanup(cleanup))) int guard = a;
    return sink(guard + 1);
}

/* Every callee-saved register: all five x86_64 registers, and every arm64
   pair, d8-d15 included. */
__attribute__((noinline)) int all_saved(int a)
{
#if defined(__x86_64__)
    __asm__ volatile("" ::: "rbx", "r12", "r13", "r14", "r15");
#else
    __asm__ volatile("" ::: "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26",
                     "x27", "x28", "d8", "d9", "d10", "d11", "d12", "d13", "d14", "d15");
#endif
    return sink(a) + 1;
}

/* A leaf that allocates stack but saves nothing: arm64 frameless with a
   stack size. */
__attribute__((noinline, no_stack_protector)) int leaf_stack(int a)
{
    volatile int v[8];
    v[a & 7] = a;
    return v[(a + 1) & 7];
}

/* Code without any unwind information: a null encoding. */
#if defined(__x86_64__)
__asm__(".text\n.globl _no_unwind\n_no_unwind:\n  nop\n  ret\n");
#else
__asm__(".text\n.globl _no_unwind\n_no_unwind:\n  nop\n  ret\n");
#endif
