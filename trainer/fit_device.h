/*
 * trainer/fit_device.h - a config's model cut to the decoder layers that fit one device, made
 * as `sluice train` makes it for one rank, for measuring a training step: the memory estimate
 * and the layer count it gives, the measurement's settings applied through the config API (so
 * they are validated like a config file's), the model and optimizer, random tokens. Shared by
 * bench/gpu_train_bench.c and `sluice doctor` (launch/doctor_speed.c).
 */
#ifndef SL_TRAINER_FIT_DEVICE_H
#define SL_TRAINER_FIT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/comm.h"
#include "model/model.h"
#include "trainer/config.h"
#include "trainer/optimizer.h"

/* ---- memory estimate (bench/perf_model.py mirrors model/counts.c's activation count) ------ */

/* Bytes per parameter: fp32 master, fp32 gradient, AdamW m and v, and in bf16 mode the bf16
 * compute copy (docs/cuda.md, "Precision"). */
double sl_fit_state_bytes_per_param(bool bf16);

typedef struct {
    double state, activations, workspace, total; /* bytes */
    double deferred; /* the parked expert rows of training.defer_expert_wgrad (in total) */
} sl_fit_estimate;

/* The device memory of `full` cut to `layers` decoder layers, with `tokens` per micro-batch,
 * every layer's activations kept (memory mode none), on one device (no expert exchange), and
 * the expert rows the deferred weight gradients park for `parked` micro-batches at once
 * (sl_model_deferred_wgrad_bytes each, as rows or by_tokens; 0: no deferral, 1 for pairs,
 * group size - 1). */
sl_fit_estimate sl_fit_estimate_memory(const sl_model_config *full, int layers, int64_t tokens,
                                       bool bf16, int parked, bool by_tokens);
/* What the model may use of `device_bytes`: 92% less 2 GiB (the CUDA context, cuBLAS
 * workspaces and the caching allocator's slack take the rest). */
double sl_fit_usable_bytes(double device_bytes);
/* The most layers (1 up to the config's) whose estimate fits `budget` device bytes. */
int sl_fit_layers(const sl_model_config *m, int64_t tokens, bool bf16, int parked, bool by_tokens,
                  double budget);

/* ---- the model --------------------------------------------------------------------------- */

typedef struct {
    int layers, seq, batch, accum; /* decoder layers, sequence length, micro-batch, micro-batches */
    const char *precision;         /* training.precision: "bf16" or "fp32" */
    bool nondeterministic;         /* backend.deterministic = false */
} sl_fit_settings;

/* Applies the settings to cfg through the config API (model.num_hidden_layers,
 * training.seq_len / micro_batch_size / global_batch_tokens (= batch x seq x accum) /
 * precision, backend.name = cuda, backend.deterministic). Returns 0, or -1 with the reason. */
int sl_fit_configure(sl_config *cfg, const sl_fit_settings *s, char *err, size_t errlen);

/* The model and its optimizer on backend `be`, as trainer/trainer.c makes them for one rank
 * (MoE options, compute dtype, bucketed reducer over `world`). */
typedef struct {
    sl_model *model;
    sl_optimizer opt;
    bool opt_ready;
} sl_fit_model;

/* How the weights are filled: the config's initialization (sl_params_randomize: Box-Muller
 * on the host, about 16 ns per parameter on one core, split over the OpenMP threads since
 * 2026-11-28 (8.5 ns on two), a minute for a 15A2B cut to 9 layers on one core), or
 * SL_FIT_INIT_FAST: every parameter filled from a pool of 2^22 normal values of the config's
 * init std at a random offset (one upload per parameter; a few seconds), for timing only: the
 * experts' weights repeat the pool, the routers still get distinct values. */
typedef enum { SL_FIT_INIT_CONFIG = 0, SL_FIT_INIT_FAST } sl_fit_init;

/* Creates the model and optimizer of cfg (already configured). Returns 0, or -1 with the
 * reason (nothing to free then). */
int sl_fit_create(sl_fit_model *fm, const sl_config *cfg, sl_backend *be, sl_comm *world,
                  sl_fit_init init, char *err, size_t errlen);
void sl_fit_free(sl_fit_model *fm);

/* ---- tokens ------------------------------------------------------------------------------ */

typedef struct {
    int batch, seq, vocab;
} sl_fit_tokens;

/* An sl_batch_fn (trainer/train_step.h) of random tokens, `user` an sl_fit_tokens: micro-batch
 * `micro` always gets the same ones, so every step sees the same data. */
int sl_fit_random_batch(void *user, int micro, int32_t *tokens, char *err, size_t errlen);

#endif
