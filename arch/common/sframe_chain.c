/* Functions with SFrame and no frame pointer: built with
   -O2 -fomit-frame-pointer -Wa,--gsframe. Each keeps a real frame (locals,
   callee-saved registers) and does work after its call, so it is neither
   inlined nor turned into a tail call. */
typedef unsigned long (*sm_callback)(unsigned long);

__attribute__((noinline)) unsigned long c_level_2(sm_callback cb, unsigned long x)
{
    volatile unsigned long pad[6];
    for (int i = 0; i < 6; i++)
        pad[i] = x + i;
    unsigned long r = cb(pad[3]);
    return r + pad[0] * 3 + pad[5];
}

__attribute__((noinline)) unsigned long c_level_1(sm_callback cb, unsigned long x)
{
    volatile unsigned long pad[3];
    pad[0] = x * 2;
    pad[1] = x ^ 0x55;
    unsigned long r = c_level_2(cb, pad[0]);
    return r + pad[1];
}

/* Recursion of a chosen depth, ending in the callback: deep SFrame-only
   stacks for benchmarks and profiling. */
__attribute__((noinline)) unsigned long c_recurse(sm_callback cb, unsigned long depth)
{
    volatile unsigned long pad[2];
    pad[0] = depth;
    if (depth == 0)
        return cb(pad[0]);
    unsigned long r = c_recurse(cb, depth - 1);
    return r + pad[0];
}

/* A hot loop for the profiler test: all time is spent in this SFrame-only
   leaf, called through c_level-style frames. */
__attribute__((noinline)) unsigned long c_hot_leaf(unsigned long n)
{
    volatile unsigned long acc = 0;
    for (unsigned long i = 0; i < n; i++)
        acc += i * i;
    return acc;
}

__attribute__((noinline)) unsigned long c_hot_caller(unsigned long n)
{
    volatile unsigned long pad = n;
    unsigned long r = c_hot_leaf(pad);
    return r + pad;
}
