/* A shared library built with SFrame (-O2 -fomit-frame-pointer
   -Wa,--gsframe, linked by GNU ld: PT_GNU_SFRAME), loaded with dlopen. */
typedef unsigned long (*sm_callback)(unsigned long);

__attribute__((noinline)) unsigned long so_level_2(sm_callback cb, unsigned long x)
{
    volatile unsigned long pad[5];
    pad[0] = x + 3;
    unsigned long r = cb(pad[0]);
    return r + pad[0];
}

__attribute__((noinline)) unsigned long so_level_1(sm_callback cb, unsigned long x)
{
    volatile unsigned long pad[3];
    pad[0] = x + 4;
    unsigned long r = so_level_2(cb, pad[0]);
    return r + pad[0];
}
