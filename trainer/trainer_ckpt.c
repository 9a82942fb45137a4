/*
 * trainer/trainer_ckpt.c - the trainer's checkpoints (see trainer_impl.h): what it stores beside
 * the tensors (docs/checkpoint-format.md, "What the trainer stores"), saving, resuming, and the
 * final Hugging Face weights.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "core/rng.h"
#include "model/hf_export.h"
#include "trainer/trainer_impl.h"

/* The state rank 0 stores with a checkpoint: everything besides the tensors that continues the
 * run exactly. */
static cJSON *train_state(trainer *t, int step) {
    const sl_config *c = t->cfg;
    const sl_stage *st = sl_trainer_stage(t);
    cJSON *s = cJSON_CreateObject();
    cJSON_AddNumberToObject(s, "step", step);
    cJSON_AddNumberToObject(s, "optimizer_step", t->opt.step);
    cJSON_AddNumberToObject(s, "tokens", (double)sl_trainer_tokens_after(t, step));
    cJSON *stage = cJSON_AddObjectToObject(s, "stage");
    cJSON_AddNumberToObject(stage, "index", t->cur);
    cJSON_AddStringToObject(stage, "name", st->name);
    cJSON_AddNumberToObject(stage, "first_step", t->first_step[t->cur]);
    cJSON_AddNumberToObject(stage, "seq_len", st->train.seq_len);
    char *cursor = sl_reader_cursor_json(t->train_reader);
    cJSON *cj = cJSON_Parse(cursor);
    free(cursor);
    cJSON_AddItemToObject(s, "data_cursor", cj ? cj : cJSON_CreateNull());
    cJSON *world = cJSON_AddObjectToObject(s, "layout");
    cJSON_AddNumberToObject(world, "ranks", t->topo.size);
    cJSON_AddNumberToObject(world, "expert_parallel", t->topo.ep_size);
    cJSON_AddBoolToObject(world, "zero1", c->parallel.zero1);
    /* hf_config: the model as the current stage runs it (its RoPE settings) */
    char *cfg = sl_config_to_json(c), *hf = sl_hf_config_json(&t->model->cfg);
    char hash[24];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)sl_hash_str(cfg));
    cJSON_AddStringToObject(s, "config_hash", hash); /* of the config JSON below */
    cJSON *cfgj = cJSON_Parse(cfg), *hfj = cJSON_Parse(hf);
    free(cfg), free(hf);
    cJSON_AddItemToObject(s, "config", cfgj ? cfgj : cJSON_CreateNull());
    cJSON_AddItemToObject(s, "hf_config", hfj ? hfj : cJSON_CreateNull());
    if (t->has_tokenizer) { /* so that `ckpt export` copies the very file trained with */
        char hex[2 * SL_TOKENIZER_HASH_BYTES + 1];
        for (int i = 0; i < SL_TOKENIZER_HASH_BYTES; i++)
            snprintf(hex + 2 * i, 3, "%02x", t->tok_hash[i]);
        cJSON *tk = cJSON_AddObjectToObject(s, "tokenizer");
        cJSON_AddStringToObject(tk, "path", c->data.tokenizer);
        cJSON_AddStringToObject(tk, "sha256", hex);
    }
    return s;
}

int sl_trainer_finish_pending(trainer *t) {
    if (!t->pending) return 0;
    const double t0 = sl_trainer_now();
    const int rc = sl_train_ckpt_save_finish(t->pending, t->err, sizeof t->err);
    t->pending = NULL;
    if (rc != 0) {
        sl_error("checkpoint of step %d: %s", t->pending_step, t->err);
        return -1;
    }
    sl_info("committed checkpoint %s/checkpoints/step-%d (written in the background; the commit "
            "waited %.3f s)",
            t->cfg->train.out_dir, t->pending_step, sl_trainer_now() - t0);
    return 0;
}

/* With training.async_save (and not at the end) the step waits only for the copy to host
 * memory; the commit follows after the next step (sl_trainer_finish_pending). */
int sl_trainer_save(trainer *t, int step, bool last) {
    const sl_train_config *tc = &t->cfg->train;
    const sl_train_ckpt parts = {.model = t->model, .opt = &t->opt, .topo = &t->topo};
    const sl_train_ckpt_save_opts o = {.out_dir = tc->out_dir,
                                       .step = step,
                                       .keep_last = tc->keep_last,
                                       .keep_every = tc->keep_every,
                                       .keep_steps = t->keep_steps,
                                       .n_keep_steps = t->n_keep_steps};
    if (sl_trainer_finish_pending(t) != 0) return -1; /* at most one save in flight */
    cJSON *state = t->topo.rank == 0 ? train_state(t, step) : NULL;
    const double t0 = sl_trainer_now();
    if (tc->async_save && !last) {
        t->pending = sl_train_ckpt_save_async(&parts, &o, state, t->err, sizeof t->err);
        if (!t->pending) {
            sl_error("checkpoint of step %d: %s", step, t->err);
            return -1;
        }
        t->pending_step = step;
        sl_info("checkpoint of step %d: the step waited %.3f s (copy to host memory); writing in "
                "the background",
                step, sl_trainer_now() - t0);
        return 0;
    }
    const int rc = sl_train_ckpt_save(&parts, &o, state, t->err, sizeof t->err);
    cJSON_Delete(state);
    if (rc != 0) {
        sl_error("checkpoint of step %d: %s", step, t->err);
        return -1;
    }
    sl_info("saved checkpoint %s/checkpoints/step-%d in %.2f s", tc->out_dir, step,
            sl_trainer_now() - t0);
    return 0;
}

/* The model keys that define what the weights compute: a checkpoint resumed under another
 * value would train a different model from its weights, silently where no tensor's shape
 * changes (top-k, a tied LM head, the gate's kind, the norm of the top-k weights, ...). The
 * other model keys may change (RoPE and context length, as stages do; the loss coefficients;
 * the norms' epsilon), with a warning. */
static bool architecture_key(const char *k) {
    static const char *const keys[] = {"vocab_size",
                                       "hidden_size",
                                       "num_hidden_layers",
                                       "num_attention_heads",
                                       "num_key_value_heads",
                                       "head_dim",
                                       "partial_rotary_factor",
                                       "num_experts",
                                       "num_experts_per_tok",
                                       "moe_intermediate_size",
                                       "shared_expert_intermediate_size",
                                       "intermediate_size",
                                       "norm_topk_prob",
                                       "mlp_only_layers",
                                       "tie_word_embeddings",
                                       "attn_output_gate"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(k, keys[i]) == 0) return true;
    return false;
}

/* Lists, in a warning, the run settings that differ from those the checkpoint was saved with:
 * allowed (a new learning rate, schedule or batch size is how runs are steered), but said.
 * A changed architecture key (architecture_key) is an error instead: -1 with it held. */
static int check_changed_settings(const trainer *t, const sl_ckpt *ck, const cJSON *saved_cfg) {
    char *now_s = sl_config_to_json(t->cfg);
    cJSON *now = cJSON_Parse(now_s);
    free(now_s);
    char arch[1024] = "", list[1024] = "";
    const char *sections[] = {"model", "training", "parallel", "data", "backend"};
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(saved_cfg, sections[i]);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(now, sections[i]);
        const cJSON *item;
        cJSON_ArrayForEach(item, b) {
            const cJSON *old = cJSON_GetObjectItemCaseSensitive(a, item->string);
            if (old && cJSON_Compare(old, item, true)) continue;
            if (old && i == 0 && architecture_key(item->string)) {
                char *was = cJSON_PrintUnformatted(old), *is = cJSON_PrintUnformatted(item);
                const size_t n = strlen(arch);
                snprintf(arch + n, sizeof arch - n, "%smodel.%s (checkpoint %s, config %s)",
                         n ? ", " : "", item->string, was ? was : "?", is ? is : "?");
                free(was), free(is);
                continue;
            }
            const size_t n = strlen(list);
            snprintf(list + n, sizeof list - n, "%s%s.%s", n ? ", " : "", sections[i],
                     item->string);
        }
    }
    cJSON_Delete(now);
    if (arch[0]) {
        sl_error_hold("--resume: %s was trained as another model: %s. A resumed run keeps its "
                      "architecture; start a new run (another training.out_dir) to change it",
                      sl_ckpt_dir(ck), arch);
        return -1;
    }
    if (list[0] && t->topo.rank == 0)
        sl_warn("--resume: settings changed since the checkpoint: %s", list);
    return 0;
}

/* The training stage whose reader wrote a cursor at step `step`: the one holding step - 1. */
static int stage_before(const trainer *t, int step) {
    for (int i = 0; i < t->n_stages; i++)
        if (t->stages[i].steps > 0 && t->first_step[i] < step && step <= t->first_step[i + 1])
            return i;
    return -1;
}

/* For --resume auto, when the newest checkpoint `newest` cannot be loaded: the older one to
 * resume from instead, if one opens (its structure; its data is checked as it loads, or by
 * `sluice ckpt verify`), as "; ..." for the error; else "". */
static void previous_hint(bool autom, const char *newest, char *out, size_t n) {
    char prev[SL_PATH_MAX + 64];
    out[0] = 0;
    if (autom && sl_ckpt_find_previous(newest, prev, sizeof prev) == 1)
        snprintf(out, n,
                 "; the previous checkpoint %s is committed and its structure checks: resume "
                 "from it with --resume %s (sluice ckpt verify %s checks its data)",
                 prev, prev, prev);
}

/* Appends s to buf (n bytes), after ", " unless buf is empty. */
static void append_item(char *buf, size_t n, const char *s) {
    const size_t len = strlen(buf);
    if (len < n) snprintf(buf + len, n - len, "%s%s", len ? ", " : "", s);
}

/* A resume continues the training reader where the checkpoint's cursor left it, in the stage
 * that wrote it, or at a boundary in the next training stage when that stage reads the same
 * data. The cursor restores only into the corpora it was written for (each corpus's shards, by
 * fingerprint, in order) under the same data.seed: a config that changed them for that stage is
 * refused here, naming the key, rather than listed among the allowed changes and then failing
 * in the reader. Data moved to another path (the same shards) passes. 0, or -1 with the error
 * held. */
static int check_resumed_data(const trainer *t, const sl_ckpt *ck, const cJSON *cursor, int step) {
    const sl_config *c = t->cfg;
    const int from = stage_before(t, step);
    int into = sl_trainer_stage_at(t, step);
    while (into < t->n_stages && t->stages[into].steps == 0) into++;
    if (from < 0 || into >= t->n_stages ||
        !sl_trainer_same_train_data(&t->stages[from].data, &t->stages[into].data))
        return 0; /* the cursor is not used: what follows starts its own data */
    const sl_data_config *d = &t->stages[from].data;
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(cursor, "seed");
    char now[32];
    snprintf(now, sizeof now, "%llu", (unsigned long long)d->seed);
    if (cJSON_IsString(seed) && strcmp(seed->valuestring, now) != 0) {
        sl_error_hold("%s: data.seed: %s, but %s continues a data order of seed %s: a resumed "
                      "run keeps its data order, which the seed decides; start a new run "
                      "(another training.out_dir) for another order",
                      c->path, now, sl_ckpt_dir(ck), seed->valuestring);
        return -1;
    }
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(cursor, "corpora");
    const int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
    char was[1024] = "", is[1024] = "", detail[1024] = "", key[160], err[1024];
    char src[SL_PATH_MAX + 16];
    sl_config_stage_data_key(c, into, false, key, sizeof key);
    sl_trainer_data_key_source(t, key, src, sizeof src);
    for (int i = 0; i < n; i++) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(arr, i), "path");
        append_item(was, sizeof was, cJSON_IsString(p) ? p->valuestring : "?");
    }
    for (int i = 0; i < d->n_train; i++) append_item(is, sizeof is, d->train[i].path);
    if (n != d->n_train)
        snprintf(detail, sizeof detail, "the checkpoint read %d corpora, this config names %d", n,
                 d->n_train);
    for (int i = 0; i < n && !detail[0]; i++) {
        const cJSON *e = cJSON_GetArrayItem(arr, i);
        const cJSON *fp = cJSON_GetObjectItemCaseSensitive(e, "fingerprint");
        uint32_t v = 0;
        if (sl_reader_fingerprint(d->train[i].path, &v, err, sizeof err) != 0) {
            sl_error_hold("%s: %s: %s", src, key, err);
            return -1;
        }
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", v);
        if (!cJSON_IsString(fp) || strcmp(fp->valuestring, hex) != 0)
            snprintf(detail, sizeof detail,
                     "data cursor: corpus %d was written for other shards (fingerprint %s; %s: "
                     "%s)",
                     i, cJSON_IsString(fp) ? fp->valuestring : "?", d->train[i].path, hex);
    }
    if (!detail[0]) return 0;
    char stage[64] = "";
    if (c->stages_given) snprintf(stage, sizeof stage, " of stage \"%s\"", t->stages[into].name);
    sl_error_hold("%s: %s: the training data%s changed since %s (it read %s; this config names "
                  "%s): a resumed %s continues the data it was reading. To train on other data, "
                  "add a stage with its own data.train (training.stages, docs/stages.md), or start "
                  "a new run (another training.out_dir)\n  %s",
                  src, key, stage, sl_ckpt_dir(ck), was, is, c->stages_given ? "stage" : "run",
                  detail);
    return -1;
}

int sl_trainer_resume(trainer *t, const char *resume) {
    const sl_train_config *tc = &t->cfg->train;
    char path[SL_PATH_MAX + 64];
    if (strcmp(resume, "auto") == 0) {
        const int found =
            sl_ckpt_find_latest(tc->out_dir, path, sizeof path, t->err, sizeof t->err);
        if (found < 0) {
            sl_error_hold("--resume auto: %s", t->err);
            return -1;
        }
        if (found == 0) {
            sl_info("--resume auto: no checkpoint under %s: a fresh start", tc->out_dir);
            return 0;
        }
    } else {
        snprintf(path, sizeof path, "%s", resume);
    }
    const bool autom = strcmp(resume, "auto") == 0;
    sl_ckpt *ck = sl_ckpt_open(path, t->err, sizeof t->err);
    if (!ck) {
        char hint[3 * SL_PATH_MAX + 512];
        previous_hint(autom, path, hint, sizeof hint);
        sl_error_hold("--resume: %s%s", t->err, hint);
        return -1;
    }
    const cJSON *st = sl_ckpt_train_state(ck);
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(st, "step");
    const cJSON *ostep = cJSON_GetObjectItemCaseSensitive(st, "optimizer_step");
    const cJSON *cursor = cJSON_GetObjectItemCaseSensitive(st, "data_cursor");
    const int total = t->first_step[t->n_stages];
    int rc = 0;
    if (!cJSON_IsNumber(step) || !cJSON_IsNumber(ostep) || !cJSON_IsObject(cursor)) {
        sl_error_hold("%s/train_state.json: step, optimizer_step or data_cursor missing",
                      sl_ckpt_dir(ck));
        rc = -1;
    } else if (step->valuedouble < 0 || step->valuedouble > total) {
        sl_error_hold("--resume: %s is at step %.0f, past the schedule's %d steps", sl_ckpt_dir(ck),
                      step->valuedouble, total);
        rc = -1;
    }
    const sl_train_ckpt parts = {.model = t->model, .opt = &t->opt, .topo = &t->topo};
    if (rc == 0 && sl_train_ckpt_load(&parts, ck, t->err, sizeof t->err) != 0) {
        char hint[3 * SL_PATH_MAX + 512];
        previous_hint(autom, sl_ckpt_dir(ck), hint, sizeof hint);
        sl_error_hold("--resume: %s%s", t->err, hint);
        rc = -1;
    }
    if (rc == 0 && check_resumed_data(t, ck, cursor, (int)step->valuedouble) != 0) rc = -1;
    const cJSON *saved = cJSON_GetObjectItemCaseSensitive(st, "config");
    if (rc == 0 && cJSON_IsObject(saved) && check_changed_settings(t, ck, saved) != 0) rc = -1;
    if (rc == 0) {
        t->start_step = (int)step->valuedouble;
        t->resumed = true;
        t->opt.step = (int)ostep->valuedouble;
        t->resume_cursor = cJSON_PrintUnformatted(cursor);
        t->reader_stage = stage_before(t, t->start_step);
        /* a checkpoint names the stage it was saved in; the config decides, but say so when
         * they disagree (a schedule edited between runs) */
        const cJSON *sj = cJSON_GetObjectItemCaseSensitive(st, "stage");
        const cJSON *sname = cJSON_GetObjectItemCaseSensitive(sj, "name");
        if (cJSON_IsString(sname) && t->reader_stage >= 0 &&
            strcmp(sname->valuestring, t->stages[t->reader_stage].name) != 0 && t->topo.rank == 0)
            sl_warn("--resume: %s was saved in stage \"%s\"; at its step %d this schedule is in "
                    "stage \"%s\"",
                    sl_ckpt_dir(ck), sname->valuestring, t->start_step,
                    t->stages[t->reader_stage].name);
        /* said once every rank has loaded its part (sl_trainer_resumed) */
        snprintf(t->resumed_from, sizeof t->resumed_from, "%s", sl_ckpt_dir(ck));
    }
    sl_ckpt_close(ck);
    return rc;
}

void sl_trainer_resumed(trainer *t) {
    sl_info("resumed from %s at step %d", t->resumed_from, t->start_step);
    if (t->topo.rank == 0) {
        char fields[SL_PATH_MAX + 96];
        snprintf(fields, sizeof fields, "\"step\": %d, \"checkpoint\": \"%s\"", t->start_step,
                 t->resumed_from);
        sl_metrics_event(&t->metrics, "resume", fields);
    }
}

/* The first expert-parallel group writes (one shard per EP rank); every rank learns the
 * result. The model's config is the last stage's, so config.json carries its RoPE settings. */
int sl_trainer_save_final(trainer *t) {
    char dir[SL_PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/final", t->cfg->train.out_dir);
    double fail = 0;
    sl_hf_format format = SL_HF_QWEN3_MOE; /* the config validated training.export_format */
    sl_hf_format_parse(t->cfg->train.export_format, &format);
    if (t->topo.rank < t->topo.ep_size &&
        sl_hf_save_format(t->model, format, dir, t->topo.ep, t->err, sizeof t->err) != 0) {
        sl_error("saving weights to %s: %s", dir, t->err);
        fail = 1;
    }
    /* the tokenizer beside config.json, so that Hugging Face loads the model with it */
    int copied = 0;
    if (fail == 0 && t->topo.rank == 0 && t->has_tokenizer) {
        copied = sl_tokenizer_copy_files(t->cfg->data.tokenizer, dir, t->tok_hash, t->err,
                                         sizeof t->err);
        if (copied < 0) {
            sl_error("data.tokenizer: copying it to %s: %s", dir, t->err);
            fail = 1;
        }
    }
    sl_comm_allreduce_max_f64(t->topo.world, &fail, 1);
    if (fail == 0)
        sl_info("saved weights to %s (safetensors + config.json%s%s)", dir,
                format == SL_HF_QWEN3_NEXT ? ", Qwen3-Next layout" : "",
                t->has_tokenizer ? " + the tokenizer" : "");
    return fail == 0 ? 0 : -1;
}
