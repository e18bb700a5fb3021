/* The checkpoint calls of the C API on one CPU rank: a session trains 3 steps, saves, trains 2 more; a second
 * session of the same plan loads the checkpoint and must give the same 2 losses bit for bit (the same plan,
 * the same state, the same kernels). A missing checkpoint fails with a message naming it.
 * Usage: c_api_test PLAN TOKENS.npy CHECKPOINT_DIR */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zrt/zrt_c.h"

/* Reads the int64 [2, 16] token array of the shared test models (a .npy file, format 1.0). */
static int read_ids(const char *path, int64_t *ids, size_t n) {
  FILE *f = fopen(path, "rb");
  unsigned char pre[10];
  if (!f || fread(pre, 1, 10, f) != 10) return 1;
  size_t header = pre[8] | ((size_t)pre[9] << 8);
  if (fseek(f, (long)(10 + header), SEEK_SET) != 0 || fread(ids, 8, n, f) != n) return 1;
  fclose(f);
  return 0;
}

#define CHECK(call)                                                                   \
  do {                                                                                \
    if ((call) != 0) {                                                                \
      fprintf(stderr, "FAIL: %s: %s\n", #call, zrt_last_error());                     \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  int64_t ids[32];
  if (read_ids(argv[2], ids, 32)) {
    fprintf(stderr, "FAIL: cannot read %s\n", argv[2]);
    return 1;
  }
  double first[2], second[2], loss = 0;
  zrt_session *a = NULL, *b = NULL;
  CHECK(zrt_open(argv[1], 0, 0, &a));
  CHECK(zrt_run_program(a, "init"));
  for (int64_t t = 1; t <= 5; ++t) {
    CHECK(zrt_train_step(a, "input_ids", ids, sizeof(ids), t, &loss, NULL));
    if (t == 3) CHECK(zrt_save_checkpoint(a, argv[3], 3, 6, -1.0));
    if (t > 3) first[t - 4] = loss;
  }
  zrt_close(a);

  CHECK(zrt_open(argv[1], 0, 0, &b));
  CHECK(zrt_run_program(b, "init"));
  if (zrt_load_checkpoint(b, "no-such-checkpoint", NULL, NULL, NULL) == 0 ||
      !strstr(zrt_last_error(), "no-such-checkpoint")) {
    fprintf(stderr, "FAIL: a missing checkpoint loaded, or the message does not name it: %s\n", zrt_last_error());
    return 1;
  }
  int64_t step = 0, samples = 0;
  double lr = 0;
  CHECK(zrt_load_checkpoint(b, argv[3], &step, &samples, &lr));
  if (step != 3 || samples != 6 || lr >= 0) {
    fprintf(stderr, "FAIL: loaded step %lld samples %lld lr %g, saved 3, 6, -1\n", (long long)step, (long long)samples, lr);
    return 1;
  }
  for (int64_t t = 4; t <= 5; ++t) CHECK(zrt_train_step(b, "input_ids", ids, sizeof(ids), t, &second[t - 4], NULL));
  zrt_close(b);
  zrt_shutdown();
  for (int k = 0; k < 2; ++k) {
    printf("step %d: loss %.9f straight, %.9f resumed\n", k + 4, first[k], second[k]);
    if (first[k] != second[k] || !isfinite(first[k])) {
      fprintf(stderr, "FAIL: the resumed loss differs\n");
      return 1;
    }
  }
  return 0;
}
