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
/* Range and cross-field checks of every section; messages start with `name`. */
int sl_config_validate_named(const sl_config *cfg, const char *name, char *err, size_t errlen);

#endif
