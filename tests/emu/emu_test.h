/*
 * tests/emu/emu_test.h - a small harness for the emulator's own tests (C++, emulated build
 * only): checks that count failures, and running one case of the same executable in a child
 * process (fresh environment, fresh emulator) to assert on how it ended and what it printed -
 * the way to test that a faulty kernel is flagged, since a fault aborts the process.
 */
#ifndef SL_EMU_TEST_H
#define SL_EMU_TEST_H

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static int emu_failures, emu_checks;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        emu_checks++;                                                                              \
        if (!(cond)) {                                                                             \
            emu_failures++;                                                                        \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

/* A CUDA call that must succeed. */
#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        CHECK(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorName(e_));                           \
    } while (0)

static inline int emu_finish(const char *name) {
    printf("%s: %d checks, %d failed\n", name, emu_checks, emu_failures);
    return emu_failures ? 1 : 0;
}

struct emu_child {
    bool exited;     /* ended by exit() */
    int code;        /* its exit code */
    int signal;      /* or the signal that ended it */
    std::string err; /* what it wrote to stderr (and stdout) */
};

/* Runs `self case_name` with the environment variables in `env` ("NAME=value" strings, null
 * terminated list, may be null) added, and collects its output. */
static inline emu_child emu_run_child(const char *self, const char *case_name,
                                      const char *const *env = nullptr) {
    int fd[2];
    emu_child r{false, -1, 0, ""};
    if (pipe(fd) != 0) return r;
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        for (const char *const *e = env; e && *e; e++) putenv(strdup(*e));
        /* No core files from the deliberate aborts. */
        signal(SIGABRT, SIG_DFL);
        execl("/proc/self/exe", self, case_name, (char *)nullptr);
        _exit(127);
    }
    close(fd[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(fd[0], buf, sizeof buf)) > 0) r.err.append(buf, (size_t)n);
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    r.exited = WIFEXITED(st);
    r.code = r.exited ? WEXITSTATUS(st) : -1;
    r.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    return r;
}

static inline bool emu_has(const emu_child &c, const char *needle) {
    return c.err.find(needle) != std::string::npos;
}

#endif
