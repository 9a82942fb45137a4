/*
 * trainer/config_sections.h - the sections of a run config, for trainer/config.c.
 * Internal to the run-configuration code; users include trainer/config.h.
 */
#ifndef SL_TRAINER_CONFIG_SECTIONS_H
#define SL_TRAINER_CONFIG_SECTIONS_H

#include "core/config_keys.h"
#include "trainer/config.h"

typedef struct {
    const char *name;       /* "model", "training", ... */
    const sl_cfg_key *keys; /* its key table */
    const int *nkeys;
    size_t off; /* offset of the section's struct in sl_config */
} sl_config_section;

extern const sl_config_section sl_config_sections[];
extern const int sl_config_nsections;

/* training.metrics_file = <out_dir>/metrics.jsonl (-1 when too long). */
int sl_config_derive_metrics_file(sl_train_config *t);
/* Defaults of the training section that depend on other keys (obj: the JSON section). */
int sl_config_train_finish(const sl_cfg_ctx *c, const cJSON *obj, sl_train_config *t);
/* training.stages (trainer/config_stages.c): the key table's type check; the parse, once every
 * other section is known (stages inherit from them); printing; validation. */
int sl_config_stages_check(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec);
int sl_config_stages_parse(const sl_cfg_ctx *c, const cJSON *train_obj, sl_config *cfg);
void sl_config_stages_emit(cJSON *train_obj, const sl_config *cfg);
int sl_config_stages_validate(const sl_cfg_vctx *v, const sl_config *cfg);
/* The checks of a training section (or a stage's resolved one) against its model. */
int sl_config_validate_train(const sl_cfg_vctx *v, const sl_train_config *t,
                             const sl_model_config *m);
/* Range and cross-field checks of every section; messages start with `name`. */
int sl_config_validate_named(const sl_config *cfg, const char *name, char *err, size_t errlen);

#endif
