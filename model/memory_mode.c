/* model/memory_mode.c - the names of the activation memory modes (see model.h). */
#include <string.h>

#include "core/log.h"
#include "model/model.h"

const char *sl_memory_mode_name(sl_memory_mode mode) {
    switch (mode) {
    case SL_MEMORY_NONE:
        return "none";
    case SL_MEMORY_ATTENTION:
        return "attention";
    case SL_MEMORY_LAYER:
        return "layer";
    case SL_MEMORY_FORWARD_ONLY:
        return "forward-only";
    }
    return "?";
}

int sl_memory_mode_parse(const char *name, sl_memory_mode *out) {
    static const sl_memory_mode modes[] = {SL_MEMORY_NONE, SL_MEMORY_ATTENTION, SL_MEMORY_LAYER};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(name, sl_memory_mode_name(modes[i])) == 0) {
            *out = modes[i];
            return 0;
        }
    return -1;
}

sl_memory_mode sl_memory_mode_of_recompute(const char *recompute) {
    sl_memory_mode mode;
    if (sl_memory_mode_parse(recompute, &mode) == 0) return mode;
    sl_fatal("training.recompute: unknown mode \"%s\" (expected \"none\", \"attention\" or "
             "\"layer\")",
             recompute);
}
