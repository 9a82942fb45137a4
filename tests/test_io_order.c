/* tests/test_io_order.c - the global data order, in stream order and with the sequence
 * shuffle (data.shuffle_window): the same global batches at dp = 1, 2 and 4 (batch hashes,
 * only touched frames decoded), cursors that resume the identical stream at arbitrary points
 * and at another world size, and mixture weights over a million tokens. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/reader.h"
#include "tests/reader_fixture.h"
#include "tests/test_util.h"

/* Resume: a reader restored from a cursor continues with the identical stream, at arbitrary
 * points (mid-frame, across epochs, two corpora mixed, rank 1 of 2). */
static void test_resume(void) {
    char da[512], db[512];
    snprintf(da, sizeof da, "%s/ra", g_dir);
    snprintf(db, sizeof db, "%s/rb", g_dir);
    truth ta = make_corpus(da, 3, 1000, 128, 0, 100000, 4);
    truth tb = make_corpus(db, 2, 700, 90, 50000, 100000, 4);
    sl_data_config d = config(7, 2);
    add_corpus(&d, da, 2);
    add_corpus(&d, db, 1);
    const int L = 37, N = 300;
    sl_reader *ref = open_reader(&d, 1, 2, L, false);
    const int cut[] = {0, 1, 17, 100, 199, 250};
    char *cur[6];
    int done = 0;
    record parts[6];
    for (int c = 0; c < 6; c++) {
        if (cut[c] > done) {
            record_seqs(ref, &parts[c], cut[c] - done, L);
            done = cut[c];
        } else {
            memset(&parts[c], 0, sizeof parts[c]);
        }
        cur[c] = sl_reader_cursor_json(ref);
    }
    record tail;
    record_seqs(ref, &tail, N - done, L);
    sl_reader_stats st;
    sl_reader_get_stats(ref, &st);
    CHECK(st.epoch[0] >= 2 && st.epoch[1] >= 2, "the run spans several epochs (%llu, %llu)",
          (unsigned long long)st.epoch[0], (unsigned long long)st.epoch[1]);
    /* the full reference stream */
    record full = {.L = L, .n = N};
    full.tok = malloc(sizeof(int32_t) * N * (L + 1));
    full.ds = calloc((size_t)N * (L + 1), 4);
    full.nd = calloc(N, sizeof(int));
    int at = 0;
    for (int c = 0; c <= 6; c++) {
        record *p = c < 6 ? &parts[c] : &tail;
        if (!p->n) continue;
        memcpy(full.tok + (size_t)at * (L + 1), p->tok, 4 * (size_t)p->n * (L + 1));
        memcpy(full.ds + (size_t)at * (L + 1), p->ds, 4 * (size_t)p->n * (L + 1));
        memcpy(full.nd + at, p->nd, sizeof(int) * (size_t)p->n);
        at += p->n;
    }
    for (int c = 0; c < 6; c++) {
        sl_reader *r = open_reader(&d, 1, 2, L, false);
        char err[1024];
        CHECK(sl_reader_restore(r, cur[c], err, sizeof err) == 0, "restore: %s", err);
        record again;
        record_seqs(r, &again, N - cut[c], L);
        CHECK(record_eq(&full, cut[c], &again, 0, N - cut[c]),
              "resume after %d sequences gives the identical stream", cut[c]);
        char *c2 = sl_reader_cursor_json(r);
        sl_reader_restore(ref, cur[c], err, sizeof err); /* rewinding a live reader */
        record again2;
        record_seqs(ref, &again2, 5, L);
        CHECK(record_eq(&full, cut[c], &again2, 0, 5), "rewinding a live reader to cursor %d", c);
        record_free(&again), record_free(&again2);
        free(c2);
        sl_reader_close(r);
    }
    /* cursors that do not fit are refused, and the reader keeps going */
    sl_reader *r = open_reader(&d, 1, 2, L, false);
    char err[1024];
    int32_t tok[38];
    sl_reader_next(r, tok, NULL, NULL, err, sizeof err);
    sl_data_config dseed = config(8, 2);
    add_corpus(&dseed, da, 2);
    add_corpus(&dseed, db, 1);
    sl_reader *other_seed = open_reader(&dseed, 1, 2, L, false);
    sl_reader *other_rank = open_reader(&d, 0, 2, L, false);
    sl_data_config done1 = config(7, 2);
    add_corpus(&done1, da, 2);
    sl_reader *one_corpus = open_reader(&done1, 1, 2, L, false);
    sl_data_config swapped = config(7, 2);
    add_corpus(&swapped, db, 2);
    add_corpus(&swapped, da, 1);
    sl_reader *swap = open_reader(&swapped, 1, 2, L, false);
    CHECK(sl_reader_restore(other_seed, cur[3], err, sizeof err) != 0 && strstr(err, "seed"),
          "cursor with another seed: %s", err);
    /* between global batches (here of 2 sequences, one per rank) the position is global */
    CHECK(sl_reader_restore(other_rank, cur[3], err, sizeof err) == 0,
          "a cursor between batches restores into another rank: %s", err);
    CHECK(sl_reader_restore(one_corpus, cur[3], err, sizeof err) != 0 && strstr(err, "corpora"),
          "cursor with another number of corpora: %s", err);
    CHECK(sl_reader_restore(swap, cur[3], err, sizeof err) != 0 && strstr(err, "different shards"),
          "cursor for other shards: %s", err);
    CHECK(sl_reader_restore(r, "{not json", err, sizeof err) != 0, "garbage cursor: %s", err);
    char *bad = strdup(cur[3]);
    char *o = strstr(bad, "\"position\":");
    CHECK(o != NULL, "the cursor has positions: %s", cur[3]);
    if (o) memcpy(o, "\"positiox\":", 11);
    CHECK(sl_reader_restore(r, bad, err, sizeof err) != 0 && strstr(err, "position"),
          "cursor without a position: %s", err);
    free(bad);
    CHECK(sl_reader_next(r, tok, NULL, NULL, err, sizeof err) == 1 &&
              memcmp(tok, full.tok + (L + 1), sizeof tok) == 0,
          "a refused cursor leaves the reader where it was");
    sl_reader_close(r), sl_reader_close(other_seed), sl_reader_close(other_rank);
    sl_reader_close(one_corpus), sl_reader_close(swap);
    for (int c = 0; c < 6; c++) free(cur[c]), record_free(&parts[c]);
    record_free(&tail), record_free(&full);
    sl_reader_close(ref);
    truth_free(&ta), truth_free(&tb);
}

/* The data order does not depend on the number of ranks: for every step, the sequences of dp
 * = 2 and dp = 4 readers, concatenated in rank order, are the dp = 1 reader's global batch,
 * token for token with the same document starts, across epoch boundaries of both corpora; the
 * ranks' batch hashes add up to the global batch's; and a rank decodes only the frames its
 * sequences touch. */
static void test_dp_invariance(void) {
    sl_data_config d;
    truth ta, tb;
    dp_dataset("dpi", &d, &ta, &tb);
    enum { L = 37, S = 8, T = 40 };
    sl_reader *rd[7];
    rd[0] = open_batched(&d, 0, 1, L, S);
    for (int r = 0; r < 2; r++) rd[1 + r] = open_batched(&d, r, 2, L, S);
    for (int r = 0; r < 4; r++) rd[3 + r] = open_batched(&d, r, 4, L, S);
    for (int i = 0; i < 7; i++)
        if (!rd[i]) return;
    const size_t w = L + 1;
    int32_t *rt = malloc(4 * S * w), *rds = malloc(4 * S * w), *gt = malloc(4 * S * w),
            *gds = malloc(4 * S * w);
    int rnd_[S], gnd[S];
    bool same[2] = {true, true}, hash_ok = true, hash_dp = true;
    int last_frame[4][2], runs[4] = {0, 0, 0, 0}, distinct[4] = {0, 0, 0, 0};
    memset(last_frame, 0xFF, sizeof last_frame);
    enum { FRAME_IDS = 4096 };
    bool *touched = calloc(4 * FRAME_IDS, 1);
    for (int t = 0; t < T; t++) {
        if (!read_into(rd[0], S, L, 0, rt, rds, rnd_)) break;
        uint64_t want = 0;
        for (int j = 0; j < S; j++)
            want += sl_sequence_hash((uint64_t)t * S + (uint64_t)j, rt + j * w, w);
        hash_ok &= sl_reader_take_hash(rd[0]) == want;
        for (int k = 0; k < 2; k++) {
            const int dp = k == 0 ? 2 : 4, first = k == 0 ? 1 : 3, share = S / dp;
            uint64_t h = 0;
            for (int r = 0; r < dp; r++) {
                if (!read_into(rd[first + r], share, L, r * share, gt, gds, gnd)) break;
                h += sl_reader_take_hash(rd[first + r]);
                if (dp != 4) continue;
                for (int j = r * share; j < (r + 1) * share; j++)
                    for (size_t i = 0; i < w; i++) {
                        int f = frame_id(gt[j * w + i]), c = f >= 1000000;
                        if (f != last_frame[r][c]) runs[r]++, last_frame[r][c] = f;
                        const int slot = (f % 1000000) * 2 + c;
                        if (slot < FRAME_IDS && !touched[r * FRAME_IDS + slot])
                            touched[r * FRAME_IDS + slot] = true, distinct[r]++;
                    }
            }
            same[k] &= seqs_eq(rt, rds, rnd_, gt, gds, gnd, S, L);
            hash_dp &= h == want;
        }
    }
    CHECK(same[0], "dp = 2: the ranks' sequences make up the dp = 1 global batches");
    CHECK(same[1], "dp = 4: the ranks' sequences make up the dp = 1 global batches");
    CHECK(hash_ok, "a batch hash is the sum of sl_sequence_hash over (global index, tokens)");
    CHECK(hash_dp, "the ranks' batch hashes add up to the global batch's at dp = 2 and 4");
    sl_reader_stats s1, s4;
    sl_reader_get_stats(rd[0], &s1);
    CHECK(s1.position[0] / s1.tokens[0] >= 2 && s1.position[1] / s1.tokens[1] >= 2 &&
              s1.sequence == (uint64_t)T * S,
          "the run crosses two epochs of both corpora (positions %llu, %llu; %llu sequences)",
          (unsigned long long)s1.position[0], (unsigned long long)s1.position[1],
          (unsigned long long)s1.sequence);
    for (int r = 0; r < 4; r++) {
        sl_reader_get_stats(rd[3 + r], &s4);
        /* every frame touched is decoded at least once, and at most once per run of sequences
         * in it (a frame still cached is not decoded again); the queue (prefetch sequences)
         * may hold sequences beyond the last one read, each touching up to 3 frames */
        CHECK(s4.frames >= (uint64_t)distinct[r] && s4.frames <= (uint64_t)runs[r] + 2 * 3,
              "dp 4 rank %d decoded %llu frames for %d touched (%d runs)", r,
              (unsigned long long)s4.frames, distinct[r], runs[r]);
        CHECK(s4.frames < s1.frames, "dp 4 rank %d decoded fewer frames (%llu) than dp 1 (%llu)", r,
              (unsigned long long)s4.frames, (unsigned long long)s1.frames);
        CHECK(s4.sequence == s1.sequence &&
                  memcmp(s4.position, s1.position, sizeof s1.position) == 0,
              "dp 4 rank %d stands at the same global position as dp 1", r);
    }
    for (int i = 0; i < 7; i++) sl_reader_close(rd[i]);
    free(rt), free(rds), free(gt), free(gds), free(touched);
    truth_free(&ta), truth_free(&tb);
}

/* A cursor written between batches at dp = 4 is the same on every rank and restores at dp = 2
 * and dp = 1 into the identical continuing stream; one written inside a rank's share restores
 * only into that rank of the same layout. */
static void test_cursor_across_dp(void) {
    sl_data_config d;
    truth ta, tb;
    dp_dataset("dpc", &d, &ta, &tb);
    enum { L = 37, S = 8, K = 13, M = 30 };
    const size_t w = L + 1;
    sl_reader *ref = open_batched(&d, 0, 1, L, S);
    record full;
    record_seqs(ref, &full, (K + M) * S, L);
    sl_reader_close(ref);
    sl_reader *r4[4];
    int32_t *tok = malloc(4 * S * w), *ds = malloc(4 * S * w);
    int nd[S];
    char *cur[4];
    for (int r = 0; r < 4; r++) {
        r4[r] = open_batched(&d, r, 4, L, S);
        for (int t = 0; t < K; t++) read_into(r4[r], S / 4, L, 0, tok, ds, nd);
        cur[r] = sl_reader_cursor_json(r4[r]);
    }
    bool equal = true;
    for (int r = 1; r < 4; r++) equal &= strcmp(cur[0], cur[r]) == 0;
    CHECK(equal, "every dp 4 rank writes the same cursor after %d steps: %s", K, cur[0]);
    CHECK(strstr(cur[0], "\"rank\"") == NULL, "a cursor between batches names no rank");
    char err[1024];
    for (int dp = 1; dp <= 4; dp *= 2) {
        sl_reader *rr[4];
        bool ok = true, same = true;
        for (int r = 0; r < dp; r++) {
            rr[r] = open_batched(&d, r, dp, L, S);
            ok &= rr[r] && sl_reader_restore(rr[r], cur[r % 4], err, sizeof err) == 0;
        }
        CHECK(ok, "restore the dp 4 cursor at dp %d: %s", dp, err);
        for (int t = K; ok && t < K + M; t++) {
            for (int r = 0; r < dp; r++) read_into(rr[r], S / dp, L, r * (S / dp), tok, ds, nd);
            same &= seqs_eq(full.tok + (size_t)t * S * w, full.ds + (size_t)t * S * w,
                            full.nd + t * S, tok, ds, nd, S, L);
        }
        CHECK(same, "after the dp 4 cursor, dp %d continues with the identical global batches", dp);
        for (int r = 0; r < dp; r++) sl_reader_close(rr[r]);
    }
    /* inside a share: rank 1 of 2 has taken 2 of its 4 sequences of batch K */
    sl_reader *a = open_batched(&d, 1, 2, L, S);
    for (int t = 0; t < K; t++) read_into(a, S / 2, L, 0, tok, ds, nd);
    read_into(a, 2, L, 0, tok, ds, nd);
    char *mid = sl_reader_cursor_json(a);
    CHECK(strstr(mid, "\"rank\"") != NULL, "a cursor inside a share names the rank: %s", mid);
    sl_reader *b0 = open_batched(&d, 0, 2, L, S), *b4 = open_batched(&d, 1, 4, L, S),
              *bs = open_batched(&d, 1, 2, L, 2 * S), *b = open_batched(&d, 1, 2, L, S);
    CHECK(sl_reader_restore(b0, mid, err, sizeof err) != 0 && strstr(err, "rank"),
          "a mid-share cursor of rank 1 refused by rank 0: %s", err);
    CHECK(sl_reader_restore(b4, mid, err, sizeof err) != 0 && strstr(err, "rank"),
          "a mid-share cursor of rank 1 of 2 refused by rank 1 of 4: %s", err);
    CHECK(sl_reader_restore(bs, mid, err, sizeof err) != 0 && strstr(err, "sequences"),
          "a mid-share cursor refused with another batch size: %s", err);
    CHECK(sl_reader_restore(b, mid, err, sizeof err) == 0, "mid-share restore: %s", err);
    /* the rest of the share (global K S + 6, + 7), then rank 1's share of batch K + 1 */
    read_into(b, 2, L, 0, tok, ds, nd);
    read_into(b, 4, L, 2, tok, ds, nd);
    CHECK(seqs_eq(full.tok + ((size_t)K * S + 6) * w, full.ds + ((size_t)K * S + 6) * w,
                  full.nd + K * S + 6, tok, ds, nd, 2, L) &&
              seqs_eq(full.tok + ((size_t)(K + 1) * S + 4) * w,
                      full.ds + ((size_t)(K + 1) * S + 4) * w, full.nd + (K + 1) * S + 4,
                      tok + 2 * w, ds + 2 * w, nd + 2, 4, L),
          "a mid-share cursor continues the rank's share and the next batch");
    char *after = sl_reader_cursor_json(b);
    CHECK(strstr(after, "\"rank\"") == NULL, "after its share the cursor is global again");
    free(after), free(mid);
    sl_reader_close(a), sl_reader_close(b0), sl_reader_close(b4), sl_reader_close(bs);
    sl_reader_close(b);
    for (int r = 0; r < 4; r++) sl_reader_close(r4[r]), free(cur[r]);
    free(tok), free(ds);
    record_free(&full);
    truth_free(&ta), truth_free(&tb);
}

/* Mixture weights hold within 1% over a million tokens. */
static void test_mixture(void) {
    char d1[512], d2[512], d3[512];
    snprintf(d1, sizeof d1, "%s/m1", g_dir);
    snprintf(d2, sizeof d2, "%s/m2", g_dir);
    snprintf(d3, sizeof d3, "%s/m3", g_dir);
    truth t1 = make_corpus(d1, 2, 20000, 4096, 0, 60000, 2);
    truth t2 = make_corpus(d2, 1, 9000, 4096, 40000, 60000, 2);
    truth t3 = make_corpus(d3, 3, 3000, 1024, 50000, 60000, 2);
    const double w[3] = {0.5, 0.3, 0.2};
    sl_data_config d = config(11, 4);
    add_corpus(&d, d1, 5);
    add_corpus(&d, d2, 3);
    add_corpus(&d, d3, 2);
    const int L = 509;
    sl_reader *r = open_reader(&d, 0, 1, L, false);
    int32_t *tok = malloc(4 * (L + 1));
    uint64_t count[3] = {0, 0, 0}, total = 0;
    char err[1024];
    bool ok = true;
    while (total < 1000000) {
        if (sl_reader_next(r, tok, NULL, NULL, err, sizeof err) != 1) {
            ok = false;
            break;
        }
        for (int i = 1; i <= L; i++) {
            int c = tok[i] < 40000 ? 0 : tok[i] < 50000 ? 1 : 2;
            count[c]++;
        }
        total += L;
    }
    CHECK(ok, "mixture next: %s", err);
    for (int c = 0; c < 3; c++) {
        double f = (double)count[c] / (double)total;
        CHECK(f > w[c] - 0.01 && f < w[c] + 0.01,
              "corpus %d: share %.4f of %llu tokens, weight %.2f", c, f, (unsigned long long)total,
              w[c]);
    }
    sl_reader_stats st;
    sl_reader_get_stats(r, &st);
    CHECK(st.n_corpora == 3 && st.consumed[0] + st.consumed[1] + st.consumed[2] == total,
          "stats count the consumed tokens");
    free(tok);
    sl_reader_close(r);
    truth_free(&t1), truth_free(&t2), truth_free(&t3);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sluice_test_io_order_%d", (int)getpid());
    mkdir(g_dir, 0755);
    /* stream order; windows of a few sequences (many windows per epoch, epochs ending
     * mid-window); one window per epoch */
    const uint64_t windows[] = {0, 100, SL_SHUFFLE_EPOCH};
    for (int i = 0; i < 3; i++) {
        g_shuffle_window = windows[i];
        fprintf(stderr, "-- data.shuffle_window = %llu\n", (unsigned long long)windows[i]);
        test_resume();
        test_dp_invariance();
        test_cursor_across_dp();
        test_mixture();
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return sl_test_finish("test_io_order");
}
