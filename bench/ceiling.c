/* ceiling.c: what this machine can do at most, to say how far a model is from it: the sgemm rate
 * of its BLAS (a 2048^3 product) and the bandwidth of a large memcpy split among the OpenMP threads,
 * each the best of several runs. Prints {"sgemm_gflops": ..., "copy_gbs": ...}. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (double)t.tv_sec + (double)t.tv_nsec * 1e-9; }

int main(void) {
  int n = 2048;
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
  for (int i = 0; i < n * n; i++) { a[i] = (float)(i % 13) * 0.1f; b[i] = (float)(i % 7) * 0.2f; }
  double best = 1e9;
  for (int r = 0; r < 5; r++) {
    double t = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    t = now() - t;
    if (t < best) best = t;
  }
  double gflops = 2.0 * n * n * (double)n / best / 1e9;
  size_t bytes = (size_t)1 << 28;
  char *s = malloc(bytes), *d = malloc(bytes);
  memset(s, 1, bytes);
  memset(d, 2, bytes);
  double bc = 1e9;
  for (int r = 0; r < 5; r++) {
    double t = now();
    _Pragma("omp parallel")
    {   /* one slice per thread */
      size_t nt = (size_t)omp_get_num_threads(), i = (size_t)omp_get_thread_num(), step = (bytes / nt + 63) & ~(size_t)63;
      size_t at = i * step < bytes ? i * step : bytes, n = bytes - at < step ? bytes - at : step;
      memcpy(d + at, s + at, n);
    }
    t = now() - t;
    if (t < bc) bc = t;
  }
  printf("{\"sgemm_gflops\": %.1f, \"copy_gbs\": %.2f}\n", gflops, 2.0 * (double)bytes / bc / 1e9);   /* read + write */
  return c[7] == 12345 && d[5] == 9;   /* keep the work */
}
