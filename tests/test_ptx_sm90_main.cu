/*
 * tests/test_ptx_sm90_main.cu - how test_ptx_sm90 runs its sections: each in a process of its
 * own, so that a sticky CUDA error in one (an illegal instruction, a fault) cannot fail the
 * others. On an H200 on 2026-11-26 the first TMA load failed with cudaErrorIllegalInstruction
 * and, in one process, every later check failed with it and told nothing.
 *
 *   test_ptx_sm90             every section, each in a child (this executable with the
 *                             section's name); one line per section at the end; exit 1 when
 *                             any failed, 77 when the device check skipped (no CUDA device, or
 *                             one other than compute capability 9.x, which cannot run sm_90a)
 *   test_ptx_sm90 SECTION     one section in this process (exit 0, 1, or 77 as above)
 *   test_ptx_sm90 --list      the sections' names
 *   test_ptx_sm90 bench       wgmma's cost (emu/README.md's figures)
 *
 * Sections: device (the check), wgmma, wgmma_chain, the isolating iso_* of
 * tests/test_ptx_sm90_iso.cu, tma_load/0 .. tma_load/N-1 (one TMA load case each), tma_store,
 * tma_reduce, barriers, gemm_example. The parent makes no CUDA call (it would create a context that
 * every child then shares a device with for nothing, and a fault there would end the whole run). On
 * a GPU a child that has not finished after 20 s is ended (SIGALRM): an mbarrier wait whose
 * phase never completes hangs instead of failing.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/cuda_common.cuh"
#include "tests/emu/emu_test.h"
#include "tests/test_ptx_sm90.h"

static const unsigned kSectionSeconds = 20; /* the whole test took 1.2 s on the H200 */

struct section {
    std::string name, what;
};

static std::vector<section> all_sections() {
    std::vector<section> s = {{"wgmma", "wgmma m64nNk16, every N, swizzle, major-ness, SS and RS"},
                              {"wgmma_chain", "wgmma k-slices chained on one accumulator"}};
    for (int i = 0; i < ptx_iso_count; i++)
        s.push_back({ptx_iso_sections[i].name, ptx_iso_sections[i].what});
    for (int i = 0; i < ptx_tma_load_cases(); i++)
        s.push_back({"tma_load/" + std::to_string(i), "TMA load " + ptx_tma_load_case_name(i)});
    s.push_back({"tma_store", "TMA stores, 2D to 4D, swizzle none and 128B"});
    s.push_back({"tma_reduce", "TMA fp32 add reductions from four blocks, 128B swizzle"});
    s.push_back({"barriers", "mbarrier phases and named barriers"});
    s.push_back({"gemm_example", "the composed example kernel (tests/test_ptx_sm90_gemm.cu)"});
    return s;
}

/* 0 when this process can run the sections (*emulated: on the emulator), else 77 after saying
 * why. Creates the CUDA context: children only. */
static int device_check(bool *emulated) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("test_ptx_sm90: no CUDA device, skipped\n");
        return 77;
    }
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    if (p.major != 9) { /* sm_90a code runs on 9.x only */
        printf("test_ptx_sm90: compute capability %d.%d, not 9.x, skipped\n", p.major, p.minor);
        return 77;
    }
    *emulated = strcmp(p.name, "sluice SIMT emulator") == 0;
    printf("test_ptx_sm90: %s, compute capability %d.%d\n", p.name, p.major, p.minor);
    return 0;
}

/* One section in this process: its exit status. */
static int run_section(const char *name) {
    bool emulated = false;
    const int rc = device_check(&emulated);
    if (rc) return rc;
    if (!emulated) alarm(kSectionSeconds); /* the emulator reports a deadlock itself */
    ptx_tally t{0, 0};
    const char *const tl = "tma_load/";
    if (!strcmp(name, "device")) {
        return 0;
    } else if (!strcmp(name, "wgmma")) {
        t = ptx_section_wgmma(emulated);
    } else if (!strcmp(name, "wgmma_chain")) {
        t = ptx_section_wgmma_chain(emulated);
    } else if (!strncmp(name, tl, strlen(tl))) {
        char *end = nullptr;
        const long i = strtol(name + strlen(tl), &end, 10);
        if (end == name + strlen(tl) || *end || i < 0 || i >= ptx_tma_load_cases()) {
            fprintf(stderr, "test_ptx_sm90: no TMA load case %s (0 .. %d)\n", name,
                    ptx_tma_load_cases() - 1);
            return 2;
        }
        t = ptx_section_tma_load((int)i);
    } else if (!strcmp(name, "tma_store")) {
        t = ptx_section_tma_store();
    } else if (!strcmp(name, "tma_reduce")) {
        t = ptx_section_tma_reduce();
    } else if (!strcmp(name, "barriers")) {
        t = ptx_section_barriers();
    } else if (!strcmp(name, "gemm_example")) {
        const int failures = test_gemm_example(emulated);
        CHECK(failures == 0, "the composed example kernel: %d failed checks", failures);
        t = ptx_tally_here();
    } else {
        int i = 0;
        while (i < ptx_iso_count && strcmp(name, ptx_iso_sections[i].name)) i++;
        if (i == ptx_iso_count) {
            fprintf(stderr, "test_ptx_sm90: no section %s (--list names them)\n", name);
            return 2;
        }
        t = ptx_section_iso(i);
    }
    printf("test_ptx_sm90 %s: %d checks, %d failed\n", name, t.checks, t.failures);
    return t.failures ? 1 : 0;
}

/* How a child ended, for the summary line; *status: 0 pass, 77 skip, 1 fail. */
static std::string outcome(const emu_child &c, int *status) {
    char buf[128];
    if (c.exited && (c.code == 0 || c.code == 77)) {
        *status = c.code;
        return c.code ? "SKIP" : "PASS";
    }
    *status = 1;
    if (c.exited)
        snprintf(buf, sizeof buf, "FAIL (exit %d)", c.code);
    else if (c.signal == SIGALRM)
        snprintf(buf, sizeof buf, "FAIL (not done after %u s: ended)", kSectionSeconds);
    else
        snprintf(buf, sizeof buf, "FAIL (signal %d, %s)", c.signal, strsignal(c.signal));
    return buf;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "bench")) return ptx_bench();
    if (argc > 1 && !strcmp(argv[1], "--list")) {
        for (const section &s : all_sections())
            printf("%-26s %s\n", s.name.c_str(), s.what.c_str());
        return 0;
    }
    if (argc > 2) {
        fprintf(stderr, "usage: test_ptx_sm90 [SECTION | --list | bench]\n");
        return 2;
    }
    if (argc == 2) return run_section(argv[1]);

    /* The parent: no CUDA call here (see the top). */
    const emu_child dev = emu_run_child(argv[0], "device");
    fputs(dev.err.c_str(), stdout);
    int st = 0;
    const std::string dev_out = outcome(dev, &st);
    if (st == 77) return 77;
    if (st != 0) {
        printf("test_ptx_sm90: the device check %s\n", dev_out.c_str());
        return 1;
    }
    const std::vector<section> secs = all_sections();
    std::vector<std::string> lines;
    int failed = 0, skipped = 0;
    for (const section &s : secs) {
        const emu_child c = emu_run_child(argv[0], s.name.c_str());
        printf("---- %s (%s)\n", s.name.c_str(), s.what.c_str());
        fputs(c.err.c_str(), stdout);
        fflush(stdout);
        const std::string o = outcome(c, &st);
        failed += st == 1;
        skipped += st == 77;
        char line[512];
        snprintf(line, sizeof line, "%-26s %-4s %s", s.name.c_str(), o.c_str(), s.what.c_str());
        lines.push_back(line);
    }
    printf("\ntest_ptx_sm90: %zu sections, each in its own process:\n", secs.size());
    for (const std::string &l : lines) printf("  %s\n", l.c_str());
    printf("test_ptx_sm90: %zu passed, %d failed, %d skipped\n", secs.size() - failed - skipped,
           failed, skipped);
    if (failed) return 1;
    return skipped == (int)secs.size() ? 77 : 0;
}
