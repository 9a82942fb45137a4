/*
 * trainer/trainer_sample.c - a short sample from the model being trained (training.sample_every;
 * docs/generate.md): the fixed prompt training.sample_prompt after the end-of-document token
 * (when the tokenizer has one; data.tokenizer decodes, or bytes for byte-level models),
 * continued by training.sample_tokens tokens, greedy (sample_temperature 0) or drawn from stream
 * `step` of training.seed, so a resumed run samples what the uninterrupted one did.
 *
 * The decoder computes with the training weights themselves (sl_model_create_shared: no copy) in
 * activations of its own, so the training model's activations and statistics are untouched. With
 * several ranks every rank decodes (expert parallelism routes its tokens through every rank's
 * experts) and rank 0's tokens are broadcast; rank 0 prints the text and writes the "sample"
 * event to the metrics file.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/text_codec.h"
#include "model/decode.h"
#include "trainer/trainer_impl.h"

/* The metrics event body: "step", "prompt", "text" (valid UTF-8) and "ids" (exact). */
static void record(trainer *t, int step, const sl_train_config *tc, const char *text,
                   const int32_t *ids, int n) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "step", step);
    cJSON_AddStringToObject(o, "prompt", tc->sample_prompt);
    cJSON_AddNumberToObject(o, "temperature", tc->sample_temperature);
    cJSON_AddStringToObject(o, "text", text);
    cJSON *a = cJSON_AddArrayToObject(o, "ids");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    const size_t len = strlen(json); /* "{...}": the body without its braces */
    json[len - 1] = '\0';
    sl_metrics_event(&t->metrics, "sample", json + 1);
    free(json);
    /* the log line: the text on one line, newlines shown as \n */
    char *line = sl_xmalloc(2 * strlen(text) + 1), *p = line;
    for (const char *s = text; *s; s++) {
        if (*s == '\n')
            *p++ = '\\', *p++ = 'n';
        else
            *p++ = *s;
    }
    *p = '\0';
    sl_info("sample at step %d: %s%s", step, tc->sample_prompt, line);
    free(line);
}

int sl_trainer_sample(trainer *t, int step) {
    const sl_train_config *tc = &sl_trainer_stage(t)->train;
    sl_model *m = t->model;
    char err[1024];
    int rc = -1, n_prompt = 0, n_out = 0;
    int32_t *prompt = NULL, *out = NULL;
    sl_model *sm = NULL;
    sl_decoder *d = NULL;
    sl_sampler s = {0};
    /* data.tokenizer decodes the samples (bytes without one); loaded once per run */
    const char *tok = t->cfg->data.tokenizer[0] ? t->cfg->data.tokenizer : NULL;
    if (!t->sample_codec &&
        !(t->sample_codec = sl_text_codec_open(tok, m->cfg.vocab_size, err, sizeof err)))
        goto done;
    const sl_text_codec *codec = t->sample_codec;
    prompt = sl_xmalloc(sizeof *prompt);
    if (sl_text_codec_eod(codec) >= 0) prompt[n_prompt++] = sl_text_codec_eod(codec);
    if (sl_text_codec_encode(codec, tc->sample_prompt, strlen(tc->sample_prompt), &prompt,
                             &n_prompt, err, sizeof err) != 0)
        goto done;
    if (!(sm = sl_model_create_shared(m, 1, 1, err, sizeof err))) goto done;
    if (!(d = sl_decoder_create(sm, 1, n_prompt + tc->sample_tokens, 256, err, sizeof err)))
        goto done;
    const sl_sampler_params sp = {
        .temperature = tc->sample_temperature, .top_p = 1.0, .seed = tc->seed};
    sl_sampler_init(&s, &sp, m->cfg.vocab_size, (uint64_t)step);
    const sl_generate_opts o = {.max_new = tc->sample_tokens,
                                .stop_id = sl_text_codec_eod(codec),
                                .sync = sl_comm_size(t->topo.world) > 1 ? t->topo.world : NULL};
    const int32_t *prompts[1] = {prompt};
    if (sl_generate(d, &s, prompts, &n_prompt, &o, &out, &n_out, err, sizeof err) != 0) goto done;
    if (t->topo.rank == 0) {
        char *text = sl_text_codec_printable(codec, out, n_out);
        record(t, step, tc, text, out, n_out);
        free(text);
    }
    rc = 0;
done:
    if (rc != 0) sl_error("training.sample_every: step %d: %s", step, err);
    free(prompt);
    free(out);
    if (s.prob) sl_sampler_free(&s);
    sl_decoder_free(d);
    sl_model_free(sm);
    return rc;
}
