/*
 * tests/emu/test_nccl_emu_c.c - nccl.h included from C, as core/comm_nccl.c does: in the
 * emulated build it reaches emu's cuda_runtime.h, which must then give C the runtime API
 * alone. Called by test_nccl_emu.cc.
 */
#include <nccl.h>

/* The version the emulator's NCCL reports, or -1 when the call fails. */
int nccl_emu_c_smoke(void);
int nccl_emu_c_smoke(void) {
    int v = -1;
    return ncclGetVersion(&v) == ncclSuccess ? v : -1;
}
