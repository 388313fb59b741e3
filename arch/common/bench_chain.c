/* Recursion with both SFrame and frame pointers (-O2 -fno-omit-frame-pointer
   -Wa,--gsframe), so every unwinder in the benchmarks (SFrame, frame
   pointers, .eh_frame) walks the very same stack. */
typedef unsigned long (*sm_callback)(unsigned long);

__attribute__((noinline)) unsigned long c_bench_recurse(sm_callback cb, unsigned long depth)
{
    volatile unsigned long pad[2];
    pad[0] = depth;
    pad[1] = depth ^ 1;
    if (depth == 0)
        return cb(pad[1]);
    unsigned long r = c_bench_recurse(cb, depth - 1);
    return r + pad[0];
}
