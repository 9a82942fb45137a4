/* core/env.h - the SLUICE_* switches read from the environment (kernel strategies and forms
 * that a run may pick by hand; each documented where its kernel is). */
#ifndef SL_ENV_H
#define SL_ENV_H

#ifdef __cplusplus
extern "C" {
#endif

/* The index in values[0 .. n) of environment variable `name`'s value, or -1 where it is unset
 * or empty. Any other value stops the run with one message naming the variable, its value and
 * the values it takes ("NAME=v: expected a, b or c"). */
int sl_env_choice(const char *name, const char *const *values, int n);

#ifdef __cplusplus
}
#endif

#endif
