/* Functions with frame pointers and no SFrame: built with
   -O2 -fno-omit-frame-pointer and no --gsframe. */
typedef unsigned long (*sm_callback)(unsigned long);

__attribute__((noinline)) unsigned long c_fp_level_2(sm_callback cb, unsigned long x)
{
    volatile unsigned long pad[4];
    pad[0] = x + 1;
    unsigned long r = cb(pad[0]);
    return r + pad[0];
}

__attribute__((noinline)) unsigned long c_fp_level_1(sm_callback cb, unsigned long x)
{
    volatile unsigned long pad[2];
    pad[0] = x + 2;
    unsigned long r = c_fp_level_2(cb, pad[0]);
    return r + pad[0];
}
