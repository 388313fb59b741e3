/* A function with neither SFrame nor a frame pointer, which also destroys
   the frame-pointer chain: x29 holds garbage while it calls back. Built with
   -O2 -fomit-frame-pointer and no --gsframe. Only stack scanning can
   recover its caller. */
typedef unsigned long (*sm_callback)(unsigned long);

__attribute__((noinline)) unsigned long c_noinfo(sm_callback cb, unsigned long x)
{
    volatile unsigned long pad[4] = {x, x + 1, x + 2, x + 3};
    register unsigned long arg __asm__("x0") = pad[0];
    /* The callback's address goes in x16, a scratch register, so it is not
       saved anywhere the scan looks (a callee-saved register would be
       spilled by the callback, and an address right after a function that
       ends in a call looks like a return address). */
    register sm_callback fn __asm__("x16") = cb;
    /* Call with x29 = 1; x29 and x30 are declared clobbered, so the
       compiler saves and restores them. */
    __asm__ volatile("mov x29, #1\n\t"
                     "blr %[cb]\n\t"
                     : "+r"(arg)
                     : [cb] "r"(fn)
                     : "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12",
                       "x13", "x14", "x15", "x17", "x18", "x29", "x30", "memory", "cc",
                       "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v16", "v17", "v18", "v19",
                       "v20", "v21", "v22", "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30",
                       "v31");
    return arg + pad[1] + pad[3];
}
