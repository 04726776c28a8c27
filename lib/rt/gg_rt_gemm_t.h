/* gg_rt_gemm_t.h: a BLAS product of one element type with strided operands, split over threads in
 * panels, the epilogue after each panel. Included by gg_rt_gemm.c once per type, with T (the element
 * type), GEMM_NAME (the function's name) and GEMM_CBLAS (the CBLAS routine) defined.
 * An operand with a unit stride along its rows is row-major with leading dimension = the other
 * stride; with a unit stride along its columns, it is the transpose of a row-major matrix. */
static void CAT(GEMM_NAME, _one)(int64_t M, int64_t N, int64_t K, const T *A, int64_t sam, int64_t sak, const T *B, int64_t sbk, int64_t sbn,
                       T *C, int64_t ldc) {
  bool ta = sak != 1 || (sam == 1 && K == 1 && M > 1), tb = sbn != 1 || (sbk == 1 && N == 1 && K > 1);
  int64_t lda = ta ? sak : sam, ldb = tb ? sbn : sbk;
  if (!ta && lda < K) lda = K;
  if (ta && lda < M) lda = M;
  if (!tb && ldb < N) ldb = N;
  if (tb && ldb < K) ldb = K;
  GEMM_CBLAS(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, 1, A, (int)lda, B,
        (int)ldb, 0, C, (int)ldc);
}
void GEMM_NAME(int64_t M, int64_t N, int64_t K, const T *A, int64_t sam, int64_t sak, const T *B, int64_t sbk, int64_t sbn, T *C,
          const gg_epi *ep) {
  if (M == 0 || N == 0) return;
  if (K == 0) { memset(C, 0, sizeof(T) * (size_t)(M * N)); epi_run(ep, C, N, M, N); return; }
  pthread_once(&blas_once, blas_setup);
  int nt = omp_in_parallel() || !blas_panels ? 1 : omp_get_max_threads();
  if (nt > 1 && (double)M * (double)N * (double)K < 4e6) nt = 1;
  if (nt <= 1) {
    CAT(GEMM_NAME, _one)(M, N, K, A, sam, sak, B, sbk, sbn, C, N);
    epi_run(ep, C, N, M, N);
    return;
  }
  /* panels of columns when N is wide, else of rows; multiples of 16 keep the kernels aligned */
  bool cols = N >= M;
  int64_t len = cols ? N : M, step = ((len + nt - 1) / nt + 15) / 16 * 16;
  _Pragma("omp parallel for schedule(static)")
  for (int64_t at = 0; at < len; at += step) {
    int64_t n = len - at < step ? len - at : step;
    if (cols) {
      CAT(GEMM_NAME, _one)(M, n, K, A, sam, sak, B + at * sbn, sbk, sbn, C + at, N);
      epi_run(ep, C + at, N, M, n);
    } else {
      CAT(GEMM_NAME, _one)(n, N, K, A + at * sam, sam, sak, B, sbk, sbn, C + at * N, N);
      epi_run(ep, C + at * N, N, n, N);
    }
  }
}
