/* zrt/zrt_c.h - the zplan runtime's C API, a thin layer over zrt/zrt.h for other languages.
 *
 * Every function returns 0 on success and a nonzero zrt error code (the values of zrt::Code) on failure;
 * zrt_last_error() then gives the message (thread-local, valid until the next call on the thread).
 * Collective calls (zrt_open, zrt_run, zrt_read_output) must be made by every rank of the job. */
#ifndef ZRT_ZRT_C_H
#define ZRT_ZRT_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zrt_session zrt_session;

typedef struct zrt_memory_report {
  int rank;
  uint64_t planned_arena_bytes[2];  /* indexed by memory space: 0 device, 1 host */
  uint64_t measured_arena_bytes[2];
  uint64_t measured_instr_bytes[2];
  uint64_t runtime_scratch_bytes;
} zrt_memory_report;

/* init_random: 0 loads weights from the plan's files, 1 fills file-backed weights from `seed`. */
int zrt_open(const char *plan_path, int init_random, uint64_t seed, zrt_session **out);
void zrt_close(zrt_session *s);
const char *zrt_last_error(void);

int zrt_rank(const zrt_session *s);
int zrt_world_size(const zrt_session *s);
int zrt_num_inputs(const zrt_session *s);
int zrt_num_outputs(const zrt_session *s);
/* Name and global size in bytes of input/output i (NULL / 0 when i is out of range). */
const char *zrt_input_name(const zrt_session *s, int i);
size_t zrt_input_bytes(const zrt_session *s, int i);
const char *zrt_output_name(const zrt_session *s, int i);
size_t zrt_output_bytes(const zrt_session *s, int i);

int zrt_bind_input(zrt_session *s, const char *name, const void *data, size_t bytes);
int zrt_run(zrt_session *s);
/* The global output on rank 0; other ranks may pass data = NULL. */
int zrt_read_output(zrt_session *s, const char *name, void *data, size_t bytes);
int zrt_get_memory_report(const zrt_session *s, zrt_memory_report *out);

/* Plan format 2: named programs, scalar run inputs and persistent state. */
int zrt_num_programs(const zrt_session *s);
const char *zrt_program_name(const zrt_session *s, int i); /* NULL when i is out of range */
/* Runs the named program once (zrt_run runs "main" or the only program). Collective. */
int zrt_run_program(zrt_session *s, const char *program);
/* Sets a scalar run input ("lr", "step") of every program that has it; unset scalars take the plan's default. */
int zrt_set_scalar(zrt_session *s, const char *name, double value);
/* The state table: every persistent tensor (parameters, master weights, moments, gradient buffers), with the
 * bytes this rank holds of it. */
int zrt_num_state(const zrt_session *s);
const char *zrt_state_name(const zrt_session *s, int i);
const char *zrt_state_kind(const zrt_session *s, int i);
size_t zrt_state_bytes(const zrt_session *s, int i);
/* This rank's part of a persistent tensor, `bytes` == zrt_state_bytes. Not collective. */
int zrt_read_state(zrt_session *s, const char *name, void *data, size_t bytes);
int zrt_write_state(zrt_session *s, const char *name, const void *data, size_t bytes);
/* One training step (zrt::Session::train_step): binds the global batch to `input`, sets "step", runs the
 * training program(s); *loss and *grad_norm (either may be NULL) get the step's figures. Collective. */
int zrt_train_step(zrt_session *s, const char *input, const void *data, size_t bytes, int64_t step, double *loss,
                   double *grad_norm);

/* Sharded checkpoints (zrt::Session::save_checkpoint / load_checkpoint, docs/checkpoint-format.md): `step`
 * optimizer steps done, `samples` global samples consumed, `lr` a rate set over the plan's schedule (< 0:
 * none). Loading accepts a checkpoint saved under any (tp, dp, zero, offload); any of the out pointers may be
 * NULL. Collective. */
int zrt_save_checkpoint(zrt_session *s, const char *dir, int64_t step, int64_t samples, double lr);
int zrt_load_checkpoint(zrt_session *s, const char *path, int64_t *step, int64_t *samples, double *lr);
/* Generation (docs/generation.md), a plan made by zplan --generate: the planned batch B and cache length L;
 * one prefill of `batch` prompts ([batch, prompt_len] row-major, prompt b its first lengths[b] tokens) and one
 * decode step (token b at position positions[b]). next[batch] gets the greedy next tokens on every rank.
 * Collective. */
int zrt_generation_shape(const zrt_session *s, int64_t *batch, int64_t *max_seq);
int zrt_prefill(zrt_session *s, const int64_t *prompt, int64_t batch, int64_t prompt_len, const int64_t *lengths,
                int64_t *next);
int zrt_decode_step(zrt_session *s, const int64_t *tokens, const int64_t *positions, int64_t batch, int64_t *next);

/* Ends MPI if zrt started it; call after closing every session. */
void zrt_shutdown(void);

#ifdef __cplusplus
}
#endif

#endif /* ZRT_ZRT_C_H */
