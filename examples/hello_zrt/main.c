/* hello_zrt_c: the same through the C API, with random inputs made here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zrt/zrt_c.h>

int main(int argc, char **argv) {
  zrt_session *s = NULL;
  if (argc < 2) {
    fprintf(stderr, "usage: hello_zrt_c PLAN\n");
    return 2;
  }
  if (zrt_open(argv[1], 0, 0, &s) != 0) {
    fprintf(stderr, "hello_zrt_c: %s\n", zrt_last_error());
    zrt_shutdown();
    return 1;
  }
  for (int i = 0; i < zrt_num_inputs(s); ++i) {
    size_t n = zrt_input_bytes(s, i);
    unsigned char *buf = calloc(n, 1);
    if (zrt_bind_input(s, zrt_input_name(s, i), buf, n) != 0) fprintf(stderr, "hello_zrt_c: %s\n", zrt_last_error());
    free(buf);
  }
  int rc = zrt_run(s);
  if (rc != 0) fprintf(stderr, "hello_zrt_c: %s\n", zrt_last_error());
  zrt_memory_report m;
  zrt_get_memory_report(s, &m);
  printf("hello_zrt_c: rank %d of %d ran; planned %llu B measured %llu B\n", zrt_rank(s), zrt_world_size(s),
         (unsigned long long)m.planned_arena_bytes[0], (unsigned long long)m.measured_arena_bytes[0]);
  zrt_close(s);
  zrt_shutdown();
  return rc;
}
