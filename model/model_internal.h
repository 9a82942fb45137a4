/* model/model_internal.h - what model/model.c (the step) and model/model_build.c (making the
 * model) share. Internal to model/. */
#ifndef SL_MODEL_INTERNAL_H
#define SL_MODEL_INTERNAL_H

#include "model/model.h"

/* Room for `cap` micro-batch slots of step statistics (sl_model_read_stats; model_build.c),
 * keeping the slots recorded so far. */
void sl_model_stats_reserve(sl_model *m, int cap);

#endif
