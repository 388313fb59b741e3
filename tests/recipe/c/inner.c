/* Two more levels, in a second object (a second SFrame piece), the
   innermost calling back into Rust. */
typedef unsigned long (*cdep_callback)(unsigned long);

__attribute__((noinline, noclone)) static unsigned long cdep_inner(cdep_callback f, unsigned long x)
{
    volatile unsigned long scratch[3];
    scratch[1] = x;
    return f(scratch[1] * 2) + scratch[1];
}

__attribute__((noinline, noclone)) unsigned long cdep_mid(cdep_callback f, unsigned long x)
{
    volatile unsigned long scratch[9];
    scratch[4] = x;
    return cdep_inner(f, scratch[4] ^ 5) - scratch[4];
}
