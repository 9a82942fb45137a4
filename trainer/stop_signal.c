/* trainer/stop_signal.c - a stop asked by a signal, recorded for the loop (stop_signal.h). */
#include "trainer/stop_signal.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

static const int k_signals[] = {SIGTERM, SIGINT, SIGUSR1};
enum { N_SIGNALS = sizeof k_signals / sizeof k_signals[0] };
static volatile sig_atomic_t g_received;
static struct sigaction g_old[N_SIGNALS];
static bool g_installed;

static void on_signal(int sig) {
    if (!g_received) g_received = sig;
}

void sl_stop_signal_install(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* SA_RESTART: the interrupted read or MPI wait goes on; SA_RESETHAND: a second signal of
     * the same kind takes its default action (ends the process) */
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    for (int i = 0; i < N_SIGNALS; i++) sigaction(k_signals[i], &sa, &g_old[i]);
    g_installed = true;
}

int sl_stop_signal_received(void) {
    return (int)g_received;
}

void sl_stop_signal_restore(void) {
    if (!g_installed) return;
    for (int i = 0; i < N_SIGNALS; i++) sigaction(k_signals[i], &g_old[i], NULL);
    g_installed = false;
}

const char *sl_stop_signal_name(int sig) {
    static char other[32];
    switch (sig) {
    case SIGTERM:
        return "SIGTERM";
    case SIGINT:
        return "SIGINT";
    case SIGUSR1:
        return "SIGUSR1";
    default:
        snprintf(other, sizeof other, "signal %d", sig);
        return other;
    }
}
