/* A function with neither SFrame nor a frame pointer, which also destroys
   the frame-pointer chain: rbp holds garbage while it calls back. Built with
   -O2 -fomit-frame-pointer and no --gsframe. Only stack scanning can
   recover its caller. */
typedef unsigned long (*sm_callback)(unsigned long);

__attribute__((noinline)) unsigned long c_noinfo(sm_callback cb, unsigned long x)
{
    volatile unsigned long pad[4] = {x, x + 1, x + 2, x + 3};
    unsigned long r;
    /* Call with rbp = 1 on a 16-byte aligned stack; rbp and r12 are
       declared clobbered, so the compiler saves and restores them. Built
       with -mno-red-zone since the call writes below the stack pointer. */
    __asm__ volatile("mov %%rsp, %%r12\n\t"
                     "and $-16, %%rsp\n\t"
                     "mov $1, %%ebp\n\t"
                     "call *%[cb]\n\t"
                     "mov %%r12, %%rsp\n\t"
                     : "=a"(r)
                     : [cb] "r"(cb), "D"(pad[0])
                     : "rbp", "r12", "rcx", "rdx", "rsi", "r8", "r9", "r10", "r11", "memory", "cc",
                       "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                       "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
    return r + pad[1] + pad[3];
}
