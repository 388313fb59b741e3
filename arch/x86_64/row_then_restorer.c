/* A signal-return trampoline placed right after a function that has an
   SFrame row, as a runtime may lay out its own restorer. The return address
   into the trampoline, looked up one byte early as every return address is,
   lands in the function before it. The function ends in `ret`, not a call.
   Built with -Wa,--gsframe (extra.txt). */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl sm_row_before_restorer\n"
        ".type sm_row_before_restorer, @function\n"
        "sm_row_before_restorer:\n"
        ".cfi_startproc\n"
        "    xor %eax, %eax\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size sm_row_before_restorer, .-sm_row_before_restorer\n"
        ".globl sm_restorer_after_row\n"
        ".type sm_restorer_after_row, @function\n"
        "sm_restorer_after_row:\n"
        "    mov $15, %rax\n" /* rt_sigreturn */
        "    syscall\n"
        ".size sm_restorer_after_row, .-sm_restorer_after_row\n");
