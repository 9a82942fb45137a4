/* core/env.c - the SLUICE_* switches read from the environment (see env.h). */
#include "core/env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

int sl_env_choice(const char *name, const char *const *values, int n) {
    const char *e = getenv(name);
    if (!e || !*e) return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(e, values[i]) == 0) return i;
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        const size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%s",
                 i == 0       ? ""
                 : i + 1 == n ? " or "
                              : ", ",
                 values[i]);
    }
    sl_fatal("%s=%s: expected %s", name, e, list);
    return -1;
}
