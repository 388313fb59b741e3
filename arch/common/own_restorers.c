/* Signal-return trampolines of the program's own, as language runtimes
   install them through rt_sigaction: the kernel's sigreturn sequence,
   - after a trap instruction, so the byte before it (where a return
     address is looked up, one byte early) is in no function;
   - right after a function that has an SFrame row, so that lookup lands in
     the function. The function ends in `ret`, not a call.
   Built with -Wa,--gsframe (extra.txt of each architecture). */
#if defined(__x86_64__)
#define SM_TRAP "    int3\n"
#define SM_LEAF_BODY "    xor %eax, %eax\n    ret\n"
#define SM_SIGRETURN "    mov $15, %rax\n    syscall\n" /* rt_sigreturn */
#define SM_FUNCTION "@function"
#elif defined(__aarch64__)
#define SM_TRAP "    brk #0\n"
#define SM_LEAF_BODY "    mov x0, #0\n    ret\n"
#define SM_SIGRETURN "    mov x8, #139\n    svc #0\n" /* rt_sigreturn */
#define SM_FUNCTION "%function"
#endif

__asm__(".text\n"
        ".p2align 4\n" SM_TRAP
        ".globl sm_restorer_after_trap\n"
        ".type sm_restorer_after_trap, " SM_FUNCTION "\n"
        "sm_restorer_after_trap:\n" SM_SIGRETURN
        ".size sm_restorer_after_trap, .-sm_restorer_after_trap\n"
        ".p2align 4\n"
        ".globl sm_row_before_restorer\n"
        ".type sm_row_before_restorer, " SM_FUNCTION "\n"
        "sm_row_before_restorer:\n"
        ".cfi_startproc\n" SM_LEAF_BODY ".cfi_endproc\n"
        ".size sm_row_before_restorer, .-sm_row_before_restorer\n"
        ".globl sm_restorer_after_row\n"
        ".type sm_restorer_after_row, " SM_FUNCTION "\n"
        "sm_restorer_after_row:\n" SM_SIGRETURN
        ".size sm_restorer_after_row, .-sm_restorer_after_row\n");
