/*
 * tests/fuzz/fuzz_shard.c - libFuzzer harness for the shard header, frame index and frame
 * decoder (io/shard.c), built with clang -fsanitize=fuzzer,address,undefined by
 * tests/fuzz/run_fuzz.sh.
 *
 * The first input byte picks a mode; the rest is a shard image:
 *   even: parsed as is (exercises magic, version, size and checksum rejection);
 *   odd:  the header, index and frame checksums are recomputed first, so mutations reach the
 *         structural checks behind them (index consistency, zstd frame headers, document
 *         offsets, token ids against the vocabulary).
 * Every frame the index lists is then decoded (at most 256). The harness only asserts that
 * nothing reads out of bounds or hits undefined behaviour, and that a successfully decoded frame
 * is consistent with its index entry.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/crc32c.h"
#include "io/shard.h"

static void repair(unsigned char *b, size_t n) {
    if (n < SL_SHARD_HEADER_BYTES) return;
    unsigned char *c = b + 8;
    uint64_t ioff = sl_le64(c + 56), ibytes = sl_le64(c + 64), nframes = sl_le64(c + 48);
    if (ioff <= n && ibytes <= n - ioff && ioff + 8 + ibytes <= n && ibytes >= 8) {
        unsigned char *ix = b + ioff + 8;
        uint64_t k = (ibytes - 8) / SL_SHARD_ENTRY_BYTES;
        if (k > nframes) k = nframes;
        for (uint64_t i = 0; i < k; i++) {
            unsigned char *e = ix + 8 + SL_SHARD_ENTRY_BYTES * i;
            sl_shard_frame f = {
                .offset = sl_le64(e), .csize = sl_le32(e + 24), .n_docs = sl_le32(e + 32)};
            uint64_t span = sl_shard_frame_span(&f);
            if (f.offset <= n && span <= n - f.offset)
                sl_put32(e + 36, sl_crc32c(0, b + f.offset, (size_t)span));
        }
        sl_put32(c + 88, sl_crc32c(0, ix, (size_t)ibytes));
    }
    sl_put32(c + 124, sl_crc32c(0, c, 124));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0] & 1;
    size_t n = size - 1;
    /* an exact-size copy, so that any read past the image is caught by ASan */
    unsigned char *b = malloc(n ? n : 1);
    memcpy(b, data + 1, n);
    if (mode) repair(b, n);
    char err[1024];
    sl_shard *s = sl_shard_open_mem(b, n, "fuzz", err, sizeof err);
    if (s) {
        const sl_shard_header *h = sl_shard_hdr(s);
        sl_frame_buf fb = {0};
        uint64_t nf = h->n_frames < 256 ? h->n_frames : 256;
        for (uint64_t i = 0; i < nf; i++) {
            if (sl_shard_read_frame(s, i, &fb, err, sizeof err) == 0) {
                const sl_shard_frame *f = &sl_shard_frames(s)[i];
                if (fb.n_tokens != f->n_tokens || fb.n_docs != f->n_docs) abort();
                for (uint32_t d = 0; d < fb.n_docs; d++)
                    if (fb.docs[d] >= fb.n_tokens) abort();
            }
        }
        sl_frame_buf_free(&fb);
        sl_shard_close(s);
    }
    free(b);
    return 0;
}
