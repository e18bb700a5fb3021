// The C API over zrt::Session.
#include "zrt/zrt_c.h"

#include <string>

#include "zrt/zrt.h"

struct zrt_session {
  std::unique_ptr<zrt::Session> s;
};

namespace {
thread_local std::string g_last_error;

int set(const zrt::Status &st) {
  if (st.ok()) return 0;
  g_last_error = st.message();
  return static_cast<int>(st.code());
}
}  // namespace

extern "C" {

int zrt_open(const char *plan_path, int init_random, uint64_t seed, zrt_session **out) {
  if (!plan_path || !out) return set(zrt::error(zrt::Code::invalid_argument, "zrt_open: null argument"));
  zrt::Options o;
  o.init = init_random ? zrt::InitMode::random : zrt::InitMode::file;
  o.seed = seed;
  std::unique_ptr<zrt::Session> s;
  if (int rc = set(zrt::Session::open(plan_path, o, &s))) return rc;
  *out = new zrt_session{std::move(s)};
  return 0;
}

void zrt_close(zrt_session *s) { delete s; }
const char *zrt_last_error(void) { return g_last_error.c_str(); }
int zrt_rank(const zrt_session *s) { return s->s->rank_info().rank; }
int zrt_world_size(const zrt_session *s) { return s->s->rank_info().world; }
int zrt_num_inputs(const zrt_session *s) { return static_cast<int>(s->s->inputs().size()); }
int zrt_num_outputs(const zrt_session *s) { return static_cast<int>(s->s->outputs().size()); }

const char *zrt_input_name(const zrt_session *s, int i) {
  return i >= 0 && i < zrt_num_inputs(s) ? s->s->inputs()[i].name.c_str() : nullptr;
}
size_t zrt_input_bytes(const zrt_session *s, int i) {
  return i >= 0 && i < zrt_num_inputs(s) ? s->s->inputs()[i].global_bytes() : 0;
}
const char *zrt_output_name(const zrt_session *s, int i) {
  return i >= 0 && i < zrt_num_outputs(s) ? s->s->outputs()[i].name.c_str() : nullptr;
}
size_t zrt_output_bytes(const zrt_session *s, int i) {
  return i >= 0 && i < zrt_num_outputs(s) ? s->s->outputs()[i].global_bytes() : 0;
}

int zrt_bind_input(zrt_session *s, const char *name, const void *data, size_t bytes) {
  return set(s->s->bind_input(name ? name : "", data, bytes));
}
int zrt_run(zrt_session *s) { return set(s->s->run()); }
int zrt_read_output(zrt_session *s, const char *name, void *data, size_t bytes) {
  return set(s->s->read_output(name ? name : "", data, bytes));
}

int zrt_get_memory_report(const zrt_session *s, zrt_memory_report *out) {
  const zrt::MemoryReport r = s->s->memory_report();
  out->rank = r.rank;
  for (int i = 0; i < 2; ++i) {
    out->planned_arena_bytes[i] = r.planned_arena_bytes[i];
    out->measured_arena_bytes[i] = r.measured_arena_bytes[i];
    out->measured_instr_bytes[i] = r.measured_instr_bytes[i];
  }
  out->runtime_scratch_bytes = r.runtime_scratch_bytes;
  return 0;
}

int zrt_num_programs(const zrt_session *s) { return static_cast<int>(s->s->programs().size()); }
const char *zrt_program_name(const zrt_session *s, int i) {
  return i >= 0 && i < zrt_num_programs(s) ? s->s->programs()[i].name.c_str() : nullptr;
}
int zrt_run_program(zrt_session *s, const char *program) { return set(s->s->run(program ? program : "")); }
int zrt_set_scalar(zrt_session *s, const char *name, double value) {
  return set(s->s->set_scalar(name ? name : "", value));
}
int zrt_num_state(const zrt_session *s) { return static_cast<int>(s->s->state().size()); }
const char *zrt_state_name(const zrt_session *s, int i) {
  return i >= 0 && i < zrt_num_state(s) ? s->s->state()[i].name.c_str() : nullptr;
}
const char *zrt_state_kind(const zrt_session *s, int i) {
  return i >= 0 && i < zrt_num_state(s) ? s->s->state()[i].kind.c_str() : nullptr;
}
size_t zrt_state_bytes(const zrt_session *s, int i) {
  return i >= 0 && i < zrt_num_state(s) ? s->s->state()[i].local_bytes() : 0;
}
int zrt_read_state(zrt_session *s, const char *name, void *data, size_t bytes) {
  return set(s->s->read_state(name ? name : "", data, bytes));
}
int zrt_write_state(zrt_session *s, const char *name, const void *data, size_t bytes) {
  return set(s->s->write_state(name ? name : "", data, bytes));
}

int zrt_train_step(zrt_session *s, const char *input, const void *data, size_t bytes, int64_t step, double *loss,
                   double *grad_norm) {
  zrt::StepResult r;
  if (int rc = set(s->s->train_step(input ? input : "", data, bytes, step, &r))) return rc;
  if (loss) *loss = r.loss;
  if (grad_norm) *grad_norm = r.grad_norm;
  return 0;
}

int zrt_save_checkpoint(zrt_session *s, const char *dir, int64_t step, int64_t samples, double lr) {
  zrt::TrainingState ts;
  ts.step = step;
  ts.samples = samples;
  ts.lr = lr;
  return set(s->s->save_checkpoint(dir ? dir : "", ts));
}

int zrt_load_checkpoint(zrt_session *s, const char *path, int64_t *step, int64_t *samples, double *lr) {
  zrt::TrainingState ts;
  if (int rc = set(s->s->load_checkpoint(path ? path : "", &ts))) return rc;
  if (step) *step = ts.step;
  if (samples) *samples = ts.samples;
  if (lr) *lr = ts.lr;
  return 0;
}

int zrt_generation_shape(const zrt_session *s, int64_t *batch, int64_t *max_seq) {
  return set(s->s->generation_shape(batch, max_seq));
}
int zrt_prefill(zrt_session *s, const int64_t *prompt, int64_t batch, int64_t prompt_len, const int64_t *lengths,
                int64_t *next) {
  return set(s->s->prefill(prompt, batch, prompt_len, lengths, next));
}
int zrt_decode_step(zrt_session *s, const int64_t *tokens, const int64_t *positions, int64_t batch, int64_t *next) {
  return set(s->s->decode_step(tokens, positions, batch, next));
}

void zrt_shutdown(void) { zrt::shutdown(); }

}  // extern "C"
