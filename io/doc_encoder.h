/*
 * io/doc_encoder.h - documents encoded by a tokenizer on several threads, their ids handed
 * back in the order the documents came (internal to io/build.c).
 *
 * The caller submits documents (text bytes, copied) from one thread; they are grouped into
 * batches of about 1 MiB, each batch encoded by one worker thread with its own sl_tok_state.
 * At most 2 x threads batches are in flight: when the ring is full, submit waits for the
 * oldest batch and passes its documents to `emit`, in submission order, on the caller's
 * thread. So memory is bounded by the ring (plus the largest document, which a batch always
 * takes whole), never by the corpus, and the output does not depend on the thread count.
 */
#ifndef SL_IO_DOC_ENCODER_H
#define SL_IO_DOC_ENCODER_H

#include <stddef.h>
#include <stdint.h>

#include "io/tokenizer.h"

typedef struct sl_doc_encoder sl_doc_encoder;

/* Where a document came from, for messages: its file and either its line (JSONL, line > 0)
 * or the file offset of its first byte (text). */
typedef struct {
    const char *path; /* must outlive the encoder */
    uint64_t line, offset;
} sl_doc_origin;

/* Receives one document's ids (on the submitting thread, in submission order). 0, or -1
 * with err. */
typedef int (*sl_doc_emit_fn)(void *user, const uint32_t *ids, size_t n, char *err, size_t errlen);

/* threads: worker threads (0: all cores). */
sl_doc_encoder *sl_doc_encoder_new(const sl_tokenizer *t, int threads, sl_doc_emit_fn emit,
                                   void *user);
/* Queues one document. 0, or -1 with err (a document that failed to encode, this one or an
 * earlier one, named by its origin; or an emit failure). */
int sl_doc_encoder_submit(sl_doc_encoder *e, const char *text, size_t len, sl_doc_origin origin,
                          char *err, size_t errlen);
/* Encodes and emits everything queued. 0, or -1 with err. */
int sl_doc_encoder_finish(sl_doc_encoder *e, char *err, size_t errlen);
/* Stops the workers and frees (after finish, or to abandon the work). */
void sl_doc_encoder_free(sl_doc_encoder *e);

#endif
