/* gg_rt_gemm.c: matrix products, part of the runtime (gg_rt.c includes it: one translation unit).
 * float32 and float64 products through BLAS with the epilogue after each panel, and the runtime's own
 * AVX-512 float32 kernel over panels packed at gg_open. */
/* ---------------------------------------------------------------- matrix products */

/* Threads: with OpenBLAS built on OpenMP (what gcc-graph links when Debian's libopenblas0-openmp is
 * installed), BLAS parallelizes each product in the same OpenMP pool as the kernels: one pool, no
 * contention. With the pthread build there are two pools; on a few cores, the one that wins is
 * OpenMP's, with BLAS single-threaded per panel (two pools spinning against each other doubled the
 * time on 2 cores); on many cores concurrent calls into the pthread build serialize, so BLAS runs
 * its own threads. */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static bool blas_panels;   /* split products into per-thread panels of single-threaded BLAS calls */
static void blas_setup(void) {
  blas_panels = openblas_get_parallel() != 2 && omp_get_max_threads() <= 4;
  if (blas_panels) openblas_set_num_threads(1);
}

/* The epilogue (the pointwise nodes fused after a product or convolution, gg_rt.h) on rows x cols
 * elements of the output at y, element (i, j) at y[i * ld + j]; none when ep is NULL */
static inline void epi_run(const gg_epi *ep, void *y, int64_t ld, int64_t rows, int64_t cols) {
  if (ep && rows > 0 && cols > 0) ep->fn(ep, y, ld, rows, cols);
}

/* ... as a pass over n elements of the output from y (BLAS paths), in spans of 4096, shared by threads */
void gg_rt_epi_pass(const gg_epi *ep, void *y, size_t esize, int64_t n) {
  if (!ep) return;
  _Pragma("omp parallel for schedule(static) if(n > 32768)")
  for (int64_t i = 0; i < n; i += 4096) ep->fn(ep, (char *)y + (size_t)i * esize, 4096, 1, n - i < 4096 ? n - i : 4096);
}

/* BLAS products of float32 and float64 (gg_rt_gemm_t.h) */
#define T float
#define GEMM_NAME blas_sgemm
#define GEMM_CBLAS cblas_sgemm
#include "gg_rt_gemm_t.h"
#undef T
#undef GEMM_NAME
#undef GEMM_CBLAS
#define T double
#define GEMM_NAME gg_rt_dgemm
#define GEMM_CBLAS cblas_dgemm
#include "gg_rt_gemm_t.h"
#undef T
#undef GEMM_NAME
#undef GEMM_CBLAS

/* ---------------------------------------------------------------- float32 products on packed panels */

/* Our own float32 kernel, for the products whose one operand is a weight (inference on the CPU):
 * the weight is packed once, at gg_open, into the panels the kernel reads; the other operand is
 * packed per call (a 2-d convolution's image is read in place instead: conv_rows); the bias is added
 * while a tile is in registers, the epilogue (gg_epi) applied while it is in L1. OpenBLAS would pack the weight again on every call
 * (9.4 MB for each of resnet18's last convolutions, for 49 output columns). The kernel is AVX-512,
 * chosen at run time, so a .so built on one x86-64 machine runs on another; elsewhere (and with
 * GCC_GRAPH_BLAS_ONLY=1) no weight is packed and the products go to BLAS.
 *
 * Layout: A (M x K) in panels of mr rows (pk_mr: 8, or 14 for a tall A), each K x mr with a row's
 * mr values together per k; B (K x N) in panels of PK_NR columns, each K x width (PK_NR, or 16 for a
 * last panel of at most 16 columns). Padding rows and columns are zeros. A micro-tile of mr x PK_NR
 * outputs lives in 16 or 28 zmm registers; the loops over it follow BLIS: for each PK_KC slice of K,
 * each B panel (its slice in L1) against every A panel of the tile (their slices in L2). The taller
 * tile loads B once per 14 rows instead of 8: on the 16-core Xeon host, products of BERT's shapes ran
 * 25% faster on one thread, 4-8% on 2 and 16 (medians of 5 rounds, session 44); a short A keeps 8
 * rows, whose padding wastes less. */
#define PK_MR 14   /* the most rows of a panel of A */
#define PK_NR 32
#ifndef PK_KC   /* tuning knobs (-D in --cflags): the depth of a slice of K, tiles per thread */
#define PK_KC 384
#endif
#ifndef PK_TILES_PER_THREAD
#define PK_TILES_PER_THREAD 2
#endif

static int64_t pk_width(int64_t N, int64_t jp) { return N - jp * PK_NR <= 16 ? 16 : PK_NR; }

/* the rows of A's panels for a product of M rows: 14 where that pads M by at most 5% more than 8
 * does (M >= PK_TALL_MIN), else 8. The packing at gg_open and the product derive it from M alike. */
#ifndef PK_TALL_MIN   /* a tuning knob too (-D in --cflags; a huge value keeps 8 rows everywhere) */
#define PK_TALL_MIN 112
#endif
static int pk_mr(int64_t M) {
  int64_t p8 = (M + 7) / 8 * 8, p14 = (M + 13) / 14 * 14;
  return M >= PK_TALL_MIN && p14 * 20 <= p8 * 21 ? 14 : 8;
}

int64_t gg_rt_pack_floats(int side, int64_t rows, int64_t cols) {
  int64_t h = pk_mr(rows);
  return side == 0 ? (rows + h - 1) / h * h * cols : (cols + PK_NR - 1) / PK_NR * PK_NR * rows;
}

void gg_rt_pack(int side, int64_t rows, int64_t cols, const float *src, int64_t srow, int64_t scol, float *dst) {
  if (side == 0) {
    int64_t M = rows, K = cols, h = pk_mr(M);
    _Pragma("omp parallel for schedule(static) if(M * K > 65536 && !omp_in_parallel())")
    for (int64_t ip = 0; ip < (M + h - 1) / h; ip++) {
      float *d = dst + ip * K * h;
      for (int64_t k = 0; k < K; k++)
        for (int64_t i = 0; i < h; i++) {
          int64_t r = ip * h + i;
          d[k * h + i] = r < M ? src[r * srow + k * scol] : 0;
        }
    }
  } else {
    int64_t K = rows, N = cols;
    _Pragma("omp parallel for schedule(static) if(N * K > 65536 && !omp_in_parallel())")
    for (int64_t jp = 0; jp < (N + PK_NR - 1) / PK_NR; jp++) {
      int64_t w = pk_width(N, jp);
      float *d = dst + jp * K * PK_NR;
      if (scol == 1 && (jp + 1) * PK_NR <= N) {   /* a whole panel of a row-major matrix: row copies */
        for (int64_t k = 0; k < K; k++) memcpy(d + k * w, src + k * srow + jp * PK_NR, sizeof(float) * PK_NR);
        continue;
      }
      for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < w; j++) {
          int64_t n = jp * PK_NR + j;
          d[k * w + j] = n < N ? src[k * srow + n * scol] : 0;
        }
    }
  }
}

/* an operand read in place from a convolution's image (conv_rows, gemm_run) */
typedef struct rows_src { const float *base; const int64_t *ro, *po; } rows_src;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GG_X512 __attribute__((target("avx512f,avx512dq,avx2,fma")))

static bool packed_on;
static pthread_once_t packed_once = PTHREAD_ONCE_INIT;
static void packed_setup(void) {
  const char *off = getenv("GCC_GRAPH_BLAS_ONLY");
  __builtin_cpu_init();
  packed_on = __builtin_cpu_supports("avx512f") && !(off && *off && strcmp(off, "0"));
}
bool gg_rt_packed_ok(void) {
  pthread_once(&packed_once, packed_setup);
  return packed_on;
}

/* C[0:mr, 0:nr] = (acc ? C : 0) + A panel slice @ B panel slice (kc deep; nv vectors of 16 wide), then
 * the row and column biases when given (the last slice of K). Either operand may be read in
 * place from a convolution's image (conv_rows): with bro, row k of the B slice is the nr floats at
 * b + bro[k]; with aro, row i of the A slice at k is a[aro[k] + apo[i]]. With ty, the finished tile is
 * stored transposed there instead of in c (c then only holds partial sums of earlier slices). */
static inline __attribute__((always_inline)) GG_X512 void pk_tile(const int MR, const int nv, int64_t kc, const float *a, const int64_t *aro, const int64_t *apo,
                                                                   const float *b, const int64_t *bro, float *c, int64_t ldc, int mr, int nr,
                                                                   bool acc, const float *rb, const float *cb, float *ty, int64_t tld) {
  __m512 c0[PK_MR], c1[PK_MR];   /* MR of them used */
  __mmask16 m0 = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1);
  __mmask16 m1 = nr >= 32 ? (__mmask16)0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
  int64_t po[PK_MR];
  for (int i = 0; i < MR; i++) {
    c0[i] = c1[i] = _mm512_setzero_ps();
    po[i] = apo ? apo[i] : i;
  }
  for (int64_t k = 0; k < kc; k++) {
    __m512 b0, b1;
    if (bro) {   /* masked: the columns past the last are not read (they may lie past the image) */
      const float *bk = b + bro[k];
      b0 = _mm512_maskz_loadu_ps(m0, bk);
      b1 = nv > 1 ? _mm512_maskz_loadu_ps(m1, bk + 16) : b0;
    } else {
      b0 = _mm512_loadu_ps(b);
      b1 = nv > 1 ? _mm512_loadu_ps(b + 16) : b0;
      b += 16 * nv;
    }
    const float *ak = aro ? a + aro[k] : a;
    for (int i = 0; i < MR; i++) {
      __m512 av = _mm512_set1_ps(ak[po[i]]);
      c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
      if (nv > 1) c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
    }
    if (!aro) a += MR;
  }
  __m512 cb0 = _mm512_setzero_ps(), cb1 = cb0;
  float t[PK_MR][PK_NR];
  if (cb) {
    cb0 = _mm512_maskz_loadu_ps(m0, cb);
    if (nv > 1) cb1 = _mm512_maskz_loadu_ps(m1, cb + 16);
  }
  for (int i = 0; i < mr && i < MR; i++) {
    float *ci = c + i * ldc;
    __m512 v0 = c0[i], v1 = c1[i];
    if (acc) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, ci));
      if (nv > 1) v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    if (rb) {
      __m512 r = _mm512_set1_ps(rb[i]);
      v0 = _mm512_add_ps(v0, r);
      v1 = _mm512_add_ps(v1, r);
    }
    if (cb) {
      v0 = _mm512_add_ps(v0, cb0);
      v1 = _mm512_add_ps(v1, cb1);
    }
    if (ty) {
      _mm512_storeu_ps(t[i], v0);
      if (nv > 1) _mm512_storeu_ps(t[i] + 16, v1);
      continue;
    }
    _mm512_mask_storeu_ps(ci, m0, v0);
    if (nv > 1) _mm512_mask_storeu_ps(ci + 16, m1, v1);
  }
  if (ty)   /* stored transposed, through the tile in L1: element (i, j) at ty[j * tld + i] */
    for (int j = 0; j < nr; j++)
      for (int i = 0; i < mr; i++) ty[j * tld + i] = t[i][j];
}
#define PK_TILE(NAME, MR, NV, ARO, APO, BRO, TY)                                                                                  \
  static GG_X512 void NAME(int64_t kc, const float *a, const int64_t *aro, const int64_t *apo, const float *b, const int64_t *bro, float *c, \
                           int64_t ldc, int mr, int nr, bool acc, const float *rb, const float *cb, float *ty, int64_t tld) {  \
    (void)aro; (void)apo; (void)bro; (void)ty;                                                                                \
    pk_tile(MR, NV, kc, a, ARO, APO, b, BRO, c, ldc, mr, nr, acc, rb, cb, TY, tld);                                           \
  }
/* each tile's variants for MR rows: B panels of 32 and 16 columns; packed, B read in place, A in place */
#define PK_TILES(MR)                                          \
  PK_TILE(pk_tile##MR##_32, MR, 2, NULL, NULL, NULL, NULL)    \
  PK_TILE(pk_tile##MR##_16, MR, 1, NULL, NULL, NULL, NULL)    \
  PK_TILE(pk_tile##MR##_32b, MR, 2, NULL, NULL, bro, NULL)    \
  PK_TILE(pk_tile##MR##_16b, MR, 1, NULL, NULL, bro, NULL)    \
  PK_TILE(pk_tile##MR##_32a, MR, 2, aro, apo, NULL, ty)       \
  PK_TILE(pk_tile##MR##_16a, MR, 1, aro, apo, NULL, ty)
PK_TILES(8)
PK_TILES(14)
typedef void pk_fn(int64_t, const float *, const int64_t *, const int64_t *, const float *, const int64_t *, float *, int64_t, int, int, bool,
                   const float *, const float *, float *, int64_t);
static pk_fn *const pk_fns[2][6] = {{pk_tile8_32, pk_tile8_16, pk_tile8_32b, pk_tile8_16b, pk_tile8_32a, pk_tile8_16a},
                                    {pk_tile14_32, pk_tile14_16, pk_tile14_32b, pk_tile14_16b, pk_tile14_32a, pk_tile14_16a}};

/* The product of packed panels (gg_rt_gemm_packed), or with one operand read in place from a
 * convolution's image (conv_rows): rows_src ar (A: row k at output position i is base[ro[k] + po[i]])
 * or br (B: row k is base[ro[k] + column]); the other operand is packed. With ty, the product is
 * stored transposed there (element (i, j) at ty[j * tld + i]), C holding only partial sums. The
 * epilogue ep goes to each finished tile where it is stored, in L1. */
static void gemm_run(int64_t M, int64_t N, int64_t K, const float *Ap, const rows_src *ar, const float *Bp, const rows_src *br, float *C,
                     int64_t ldc, const float *row_bias, const float *col_bias, const gg_epi *ep, float *ty, int64_t tld) {
  if (M <= 0 || N <= 0) return;
  const int h = pk_mr(M);   /* rows of A's panels */
  int64_t pm = (M + h - 1) / h, pn = (N + PK_NR - 1) / PK_NR;
  int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  /* one thread for a product too small to share (a fork and join costs microseconds), unless its
   * operands are large: a product of one row (a linear layer at batch 1) is memory-bound, and many
   * threads read its weight faster than one (resnet18's 2 MB classifier: 0.27 ms on one thread of the
   * 16-core host) */
  if ((double)M * (double)N * (double)K < 2e5 && (double)(M + N) * (double)K < 65536) nt = 1;
  /* a grid of gm x gn tiles of at most 128 rows (16 or 9 panels) x 8 panels (256 columns), refined until there
   * are PK_TILES_PER_THREAD (2) per thread and a multiple of the threads; tile r spans panels [r * pm / gm, (r+1) * pm / gm)
   * so that tiles differ by at most one panel (an uneven split left one thread idle for a quarter of
   * resnet18's 784-column products). Each row of tiles reads all of B, each column all of A: refined
   * along the smaller operand's side (a 7x7 convolution's 9.4 MB of weights read twice had made it
   * memory-bound) */
  int64_t gm = (pm + 128 / h - 1) / (128 / h), gn = (pn + 7) / 8;
  while (gm * gn < PK_TILES_PER_THREAD * nt && (gm < pm || gn < pn)) {
    if (gn < pn && (M <= N || gm == pm)) gn++;
    else gm++;
  }
  for (int tries = 0; nt > 1 && (gm * gn) % nt && tries < 8; tries++) {
    if (gn < pn) gn++;
    else if (gm < pm) gm++;
  }
  if (K == 0) {   /* no slice of K: the epilogue on zeros */
    static const float zeros[PK_MR * PK_NR];
    for (int64_t ip = 0; ip < pm; ip++)
      for (int64_t jp = 0; jp < pn; jp++) {
        int mr = (int)(M - ip * h < h ? M - ip * h : h), nr = (int)(N - jp * PK_NR < PK_NR ? N - jp * PK_NR : PK_NR);
        pk_fns[h == 14][0](0, zeros, NULL, NULL, zeros, NULL, C + ip * h * ldc + jp * PK_NR, ldc, mr, nr, false, row_bias ? row_bias + ip * h : NULL,
                           col_bias ? col_bias + jp * PK_NR : NULL, NULL, 0);
        if (ty) {
          for (int j = 0; j < nr; j++)
            for (int i = 0; i < mr; i++) ty[(jp * PK_NR + j) * tld + ip * h + i] = C[(ip * h + i) * ldc + jp * PK_NR + j];
          epi_run(ep, ty + jp * PK_NR * tld + ip * h, tld, nr, mr);
        } else epi_run(ep, C + ip * h * ldc + jp * PK_NR, ldc, mr, nr);
      }
    return;
  }
  pk_fn *const *fns = pk_fns[h == 14];   /* [0, 1]: packed B of 32 and 16 columns; [2, 3]: B in place; [4, 5]: A in place */
  int via = ar ? 4 : br ? 2 : 0;
  _Pragma("omp parallel for schedule(dynamic) if(nt > 1)")
  for (int64_t t = 0; t < gm * gn; t++) {
    int64_t r = t / gn, q = t % gn, i0 = r * pm / gm, i1 = (r + 1) * pm / gm, j0 = q * pn / gn, j1 = (q + 1) * pn / gn;
    for (int64_t k0 = 0; k0 < K; k0 += PK_KC) {
      int64_t kc = K - k0 < PK_KC ? K - k0 : PK_KC;
      bool last = k0 + kc == K;
      for (int64_t jp = j0; jp < j1; jp++) {
        int64_t w = pk_width(N, jp);
        int nr = (int)(N - jp * PK_NR < PK_NR ? N - jp * PK_NR : PK_NR);
        const float *bp = br ? br->base + jp * PK_NR : Bp + jp * K * PK_NR + k0 * w, *cb = last && col_bias ? col_bias + jp * PK_NR : NULL;
        for (int64_t ip = i0; ip < i1; ip++) {
          int mr = (int)(M - ip * h < h ? M - ip * h : h);
          const float *ap = ar ? ar->base : Ap + ip * K * h + k0 * h, *rb = last && row_bias ? row_bias + ip * h : NULL;
          float *cc = C + ip * h * ldc + jp * PK_NR;
          bool acc = k0 > 0;
          float *tt = ty && last ? ty + jp * PK_NR * tld + ip * h : NULL;
          fns[via + (w != PK_NR)](kc, ap, ar ? ar->ro + k0 : NULL, ar ? ar->po + ip * h : NULL, bp, br ? br->ro + k0 : NULL, cc, ldc, mr, nr, acc, rb,
                                  cb, tt, tld);
          if (last && tt) epi_run(ep, tt, tld, nr, mr);   /* the finished tile where it is stored, in L1 */
          else if (last) epi_run(ep, cc, ldc, mr, nr);
        }
      }
    }
  }
}

void gg_rt_gemm_packed(int64_t M, int64_t N, int64_t K, const float *Ap, const float *Bp, float *C, int64_t ldc, const float *row_bias,
                       const float *col_bias, const gg_epi *ep) {
  gemm_run(M, N, K, Ap, NULL, Bp, NULL, C, ldc, row_bias, col_bias, ep, NULL, 0);
}
#else
static void gemm_run(int64_t M, int64_t N, int64_t K, const float *Ap, const rows_src *ar, const float *Bp, const rows_src *br, float *C,
                     int64_t ldc, const float *row_bias, const float *col_bias, const gg_epi *ep, float *ty, int64_t tld) {
  (void)M; (void)N; (void)K; (void)Ap; (void)ar; (void)Bp; (void)br; (void)C; (void)ldc; (void)row_bias; (void)col_bias; (void)ep;
  (void)ty; (void)tld;
  abort();   /* nothing is packed where gg_rt_packed_ok() is false */
}
bool gg_rt_packed_ok(void) { return false; }
void gg_rt_gemm_packed(int64_t M, int64_t N, int64_t K, const float *Ap, const float *Bp, float *C, int64_t ldc, const float *row_bias,
                       const float *col_bias, const gg_epi *ep) {
  (void)M; (void)N; (void)K; (void)Ap; (void)Bp; (void)C; (void)ldc; (void)row_bias; (void)col_bias; (void)ep;
  abort();   /* nothing is packed where gg_rt_packed_ok() is false */
}
#endif

/* Any float32 product: on the packed kernel where it runs (both operands packed per call into the
 * calling thread's buffer, kept between calls: no allocation once it is large enough), else BLAS.
 * Products run by several threads at once (a batch of attention heads) each take one thread; under
 * OpenBLAS those calls serialize on its buffer pool. */
static __thread float *pack_buf;
static __thread size_t pack_cap;

void gg_rt_sgemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B, int64_t sbk, int64_t sbn, float *C,
                 const gg_epi *ep) {
  if (M == 0 || N == 0) return;
  size_t na = (size_t)gg_rt_pack_floats(0, M, K), need = na + (size_t)gg_rt_pack_floats(1, K, N);
  if (gg_rt_packed_ok() && need > pack_cap) {
    void *p = NULL;
    if (!posix_memalign(&p, GG_RT_ALIGN, need * sizeof(float))) {
      free(pack_buf);
      pack_buf = p;
      pack_cap = need;
    }
  }
  if (!gg_rt_packed_ok() || need > pack_cap) { blas_sgemm(M, N, K, A, sam, sak, B, sbk, sbn, C, ep); return; }
  gg_rt_pack(0, M, K, A, sam, sak, pack_buf);
  gg_rt_pack(1, K, N, B, sbk, sbn, pack_buf + na);
  gg_rt_gemm_packed(M, N, K, pack_buf, pack_buf + na, C, N, NULL, NULL, ep);
}
