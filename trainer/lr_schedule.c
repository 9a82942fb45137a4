/* trainer/lr_schedule.c - see lr_schedule.h. */
#include "trainer/lr_schedule.h"

#include <math.h>

double sl_lr_at(const sl_train_config *t, int step) {
    if (t->warmup_steps > 0 && step < t->warmup_steps)
        return t->lr * (double)(step + 1) / (double)t->warmup_steps;
    const int span = t->max_steps - t->warmup_steps;
    const double p = span > 0 ? fmin(1.0, (double)(step - t->warmup_steps) / span) : 1.0;
    switch (t->schedule) {
    case SL_LR_COSINE:
        return t->min_lr + (t->lr - t->min_lr) * 0.5 * (1.0 + cos(M_PI * p));
    case SL_LR_WSD: {
        const double decay_start = 1.0 - t->decay_fraction;
        if (p <= decay_start || t->decay_fraction <= 0.0) return t->lr;
        return t->lr + (t->min_lr - t->lr) * (p - decay_start) / t->decay_fraction;
    }
    case SL_LR_CONSTANT:
        break;
    }
    return t->lr;
}
