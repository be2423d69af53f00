// tests/emu/lm_emu_runtime.cpp — the C entry points of the host emulation (see include/lm_emu.h).
#include "lm_emu.h"

extern "C" const char *lm_emu_last_error(void) { return lmemu::g_failed ? lmemu::g_error.c_str() : ""; }

extern "C" void lm_emu_reset(void) {
  lmemu::g_failed = false;
  lmemu::g_abort_block = false;
  lmemu::g_error.clear();
}

extern "C" void lm_emu_stats(uint64_t *launches, uint64_t *threads, uint64_t *collectives) {
  *launches = lmemu::g_launches;
  *threads = lmemu::g_threads_run;
  *collectives = lmemu::g_collectives;
}

#ifdef LM_EMU_FAST_SWITCH
// void lm_emu_switch(void **save, void *to): System V x86-64, callee-saved registers only.
__asm__(
    ".text\n"
    ".globl lm_emu_switch\n"
    ".type lm_emu_switch,@function\n"
    "lm_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size lm_emu_switch, .-lm_emu_switch\n");
#endif
