/* The entry point of the C dependency: a function with a frame of its own,
   no frame pointer, that calls into the other object file. */
typedef unsigned long (*cdep_callback)(unsigned long);

unsigned long cdep_mid(cdep_callback f, unsigned long x);

__attribute__((noinline, noclone)) unsigned long cdep_outer(cdep_callback f, unsigned long x)
{
    volatile unsigned long scratch[6];
    scratch[2] = x;
    /* Used after the call, so the call is no tail call. */
    return cdep_mid(f, scratch[2] + 1) * 3 + scratch[2];
}
