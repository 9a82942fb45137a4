/* core/placement.c - which device every rank computes on (see placement.h). */
#include "core/placement.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

/* Whole int64 words per placement, so the gather below moves it as integers. */
#define PLACE_WORDS ((sizeof(sl_rank_place) + 7) / 8)

void sl_host_name(char *buf, size_t len, const char *unknown) {
    if (gethostname(buf, len) != 0) snprintf(buf, len, "%s", unknown);
    buf[len - 1] = '\0'; /* a name cut to len is not terminated */
}

sl_rank_place *sl_placement_gather(sl_comm *world, const sl_backend *be) {
    const int n = sl_comm_size(world), me = sl_comm_rank(world);
    /* An all-gather through the sum of int64 words: every rank writes its own slot and zeros
     * elsewhere, and a sum with zeros is exact, so the bytes arrive unchanged. One host
     * collective at start-up; the communication interface has no host all-gather. */
    int64_t *words = sl_xcalloc((size_t)n * PLACE_WORDS, sizeof(int64_t));
    sl_rank_place mine;
    memset(&mine, 0, sizeof mine);
    sl_host_name(mine.host, sizeof mine.host, "?");
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(mine.visible, sizeof mine.visible, "%s", vis ? vis : "(unset)");
    mine.on_device = sl_backend_device(be, &mine.dev);
    memcpy(words + (size_t)me * PLACE_WORDS, &mine, sizeof mine);
    SL_CHECK(n * (int64_t)PLACE_WORDS <= INT32_MAX, "placement: %d ranks", n);
    sl_comm_allreduce_sum_i64(world, words, (int)(n * PLACE_WORDS));
    sl_rank_place *all = sl_xcalloc((size_t)n, sizeof *all);
    for (int r = 0; r < n; r++) memcpy(&all[r], words + (size_t)r * PLACE_WORDS, sizeof all[r]);
    free(words);
    return all;
}

static bool same_device(const sl_rank_place *x, const sl_rank_place *y) {
    return x->on_device && y->on_device &&
           memcmp(x->dev.uuid, y->dev.uuid, sizeof x->dev.uuid) == 0;
}

bool sl_placement_shared(const sl_rank_place *p, int n, int *a, int *b) {
    for (int j = 1; j < n; j++)
        for (int i = 0; i < j; i++)
            if (same_device(&p[i], &p[j])) {
                *a = i, *b = j;
                return true;
            }
    return false;
}

void sl_placement_device_name(const sl_rank_place *p, int r, char *buf, size_t len) {
    const sl_rank_place *x = &p[r];
    if (!x->on_device)
        snprintf(buf, len, "the host %s", x->host);
    else
        snprintf(buf, len, "CUDA device %d (%s, PCI %s) on host %s", x->dev.ordinal, x->dev.name,
                 x->dev.pci_bus, x->host);
}

void sl_placement_sharers(const sl_rank_place *p, int n, int r, char *buf, size_t len) {
    int count = 0, named = 0;
    for (int i = 0; i < n; i++) count += i == r || same_device(&p[i], &p[r]);
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && named < 16; i++) {
        if (i != r && !same_device(&p[i], &p[r])) continue;
        named++;
        const char *sep = named == 1 ? "" : named == count ? " and " : ", ";
        at += (size_t)snprintf(buf + at, at < len ? len - at : 0, "%s%d", sep, i);
    }
    if (named < count && at < len) snprintf(buf + at, len - at, " and %d more", count - named);
}

void sl_placement_describe(const sl_rank_place *p, int n, int max_lines, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = '\0';
    bool any = false;
    for (int r = 0; r < n; r++) any |= p[r].on_device;
    if (!any) return;
    for (int r = 0; r < n && at < len; r++) {
        if (r == max_lines) {
            snprintf(buf + at, len - at, "... %d more ranks\n", n - r);
            return;
        }
        char dev[200];
        sl_placement_device_name(p, r, dev, sizeof dev);
        if (p[r].on_device)
            at += (size_t)snprintf(buf + at, len - at,
                                   "rank %d: %s, chosen by %s, CUDA_VISIBLE_DEVICES=%s\n", r, dev,
                                   p[r].dev.chosen_by, p[r].visible);
        else
            at += (size_t)snprintf(buf + at, len - at, "rank %d: %s\n", r, dev);
    }
}

int sl_placement_host_ranks(const sl_rank_place *p, int n, int r) {
    int count = 0;
    for (int i = 0; i < n; i++) count += strcmp(p[i].host, p[r].host) == 0;
    return count;
}
