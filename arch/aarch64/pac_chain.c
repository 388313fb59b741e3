/* SFrame-only functions whose saved return addresses are signed with
   pointer authentication. Compiled twice (see extra.txt): with
   -mbranch-protection=pac-ret (key A) and pac-ret+b-key (key B), with
   PAC_PREFIX naming each copy. */
typedef unsigned long (*sm_callback)(unsigned long);

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define NAME(n) CAT(PAC_PREFIX, n)

__attribute__((noinline)) unsigned long NAME(level_2)(sm_callback cb, unsigned long x)
{
    volatile unsigned long pad[4] = {x, x + 1, x + 2, x + 3};
    unsigned long r = cb(pad[2]);
    return r + pad[0];
}

__attribute__((noinline)) unsigned long NAME(level_1)(sm_callback cb, unsigned long x)
{
    volatile unsigned long pad[2] = {x, x * 3};
    unsigned long r = NAME(level_2)(cb, pad[1]);
    return r + pad[0];
}
