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
 * tile loads B once per 14 rows instead of 8. No software prefetch: fetching the next slice of B
 * into L2 took products with their weights from memory 8-14% faster on the 2-core VM and halved every
 * product on the 16-core host, where each prefetch instruction costs ~25 cycles, cached or not
 * (session 57, docs/BENCHMARKS.md). The taller tile: on the 16-core Xeon host, products of BERT's shapes ran
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
/* The most rows of a thread's tile: 128, or 64 with PK_MANY_THREADS (8) threads or more, and the most
 * B panels (8, 256 columns). Smaller tiles balance many threads better: on the 16-core host, 64 rows
 * took ResNet-50 b8 from 68 to 62 ms, BERT-base b4 s128 from 88 to 83, GPT-2 b4 s256 from 153 to 146
 * (medians of 3 alternating rounds, session 56); on 1 and 2 threads (the 2-core VM) they cost 13%
 * at BERT's and GPT-2's batch 1, where the second row of tiles reads a 7 MB weight again. */
#ifndef PK_TILE_ROWS
#define PK_TILE_ROWS 128
#endif
#ifndef PK_TILE_ROWS_MANY
#define PK_TILE_ROWS_MANY 64
#endif
#ifndef PK_MANY_THREADS
#define PK_MANY_THREADS 8
#endif
#ifndef PK_TILE_PANELS
#define PK_TILE_PANELS 8
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

static bool pack_fast(int side, int64_t rows, int64_t cols, const float *src, int64_t srow, int64_t scol, float *dst);

/* The packed layout (above): side 0, A (M x K, element (i, k) at src[i * srow + k * scol]) into panels
 * of h rows, element (i, k) at panel i / h, k * h + i % h; side 1, B (K x N) into panels of PK_NR
 * columns (a last one of at most 16: 16 wide), element (k, j) at panel j / PK_NR, k * w + j % PK_NR.
 * Each call packs a product's activations (A, and B for a product of two activations) once per run,
 * so it must go at memory speed: the AVX-512 paths (pack_fast) for operands whose rows or columns lie
 * side by side; element by element otherwise. */
void gg_rt_pack(int side, int64_t rows, int64_t cols, const float *src, int64_t srow, int64_t scol, float *dst) {
  if (pack_fast(side, rows, cols, src, srow, scol, dst)) return;
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

/* The tiles a product's threads share: a grid of gm x gn tiles over pm x pn panels, each at most tm x
 * tn panels, refined until there are PK_TILES_PER_THREAD (2) per thread and a multiple of the nt threads;
 * tile r spans panels [r * pm / gm, (r+1) * pm / gm) so that tiles differ by at most one panel (an
 * uneven split left one thread idle for a quarter of resnet18's 784-column products). Each row of
 * tiles reads all of B, each column all of A: refined along the smaller operand's side (wide: A has
 * no more rows than B columns; a 7x7 convolution's 9.4 MB of weights read twice had made it
 * memory-bound), also when making the count a multiple of the threads (splitting B's columns there
 * had read ResNet-50's images twice and more). */
static void tile_grid(int64_t pm, int64_t pn, int64_t tm, int64_t tn, int nt, bool wide, int64_t *gm_, int64_t *gn_) {
  int64_t gm = (pm + tm - 1) / tm, gn = (pn + tn - 1) / tn;
  while (gm * gn < PK_TILES_PER_THREAD * nt && (gm < pm || gn < pn)) {
    if (gn < pn && (wide || gm == pm)) gn++;
    else gm++;
  }
  for (int tries = 0; nt > 1 && (gm * gn) % nt && tries < 8; tries++) {
    if (gn < pn && (wide || gm == pm)) gn++;
    else if (gm < pm) gm++;
  }
  *gm_ = gm;
  *gn_ = gn;
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

/* r[0..15] transposed: element j of r[i] becomes element i of r[j] (three stages of shuffles) */
static inline __attribute__((always_inline)) GG_X512 void tr16(__m512 *r) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {   /* each 128-bit lane L of r[i + c]: 4 rows' elements 4L + c */
    __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]), c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int c = 0; c < 4; c++) {
    t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
    t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
  }
  for (int c = 0; c < 4; c++) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
    r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xdd);
  }
}

/* n (<= 16) vectors of kw (<= 16) floats, vector i at src + i * ld, transposed: vector c (its n
 * values, zeros past them) stored at d + c * ldd under the mask dm, for c < kw */
static inline __attribute__((always_inline)) GG_X512 void tr_block(const float *src, int64_t ld, int64_t n, int64_t kw, float *d, int64_t ldd, __mmask16 dm) {
  __m512 r[16];
  __mmask16 km = kw >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << kw) - 1);
  for (int i = 0; i < 16; i++) r[i] = i < n ? _mm512_maskz_loadu_ps(km, src + i * ld) : _mm512_setzero_ps();
  tr16(r);
  for (int c = 0; c < kw; c++) _mm512_mask_storeu_ps(d + c * ldd, dm, r[c]);
}

/* panel ip of A (gg_rt_pack side 0, h rows): blocks of h x 16 transposed in registers where the rows
 * lie in memory order (scol 1), else (srow 1: the columns do) h values a step of K */
static GG_X512 void pack_a_panel(int64_t M, int64_t K, const float *src, int64_t srow, int64_t scol, float *dst, int64_t ip) {
  int64_t h = pk_mr(M), n = M - ip * h < h ? M - ip * h : h;
  __mmask16 hm = (__mmask16)((1u << h) - 1);
  float *d = dst + ip * K * h;
  const float *s = src + ip * h * srow;
  if (scol == 1)
    for (int64_t k0 = 0; k0 < K; k0 += 16) tr_block(s + k0, srow, n, K - k0 < 16 ? K - k0 : 16, d + k0 * h, h, hm);
  else {
    __mmask16 nm = (__mmask16)((1u << n) - 1);
    for (int64_t k = 0; k < K; k++) _mm512_mask_storeu_ps(d + k * h, hm, _mm512_maskz_loadu_ps(nm, s + k * scol));
  }
}

/* panel jp of B (side 1) whose columns lie in memory order (srow 1: a matrix read as its
 * transpose): blocks of 16 x 16 transposed */
static GG_X512 void pack_b_panel(int64_t K, int64_t N, const float *src, int64_t scol, float *dst, int64_t jp) {
  int64_t w = pk_width(N, jp);
  for (int64_t half = 0; half < w; half += 16) {   /* columns j0 .. j0 + 15 of the panel */
    int64_t j0 = jp * PK_NR + half, n = N - j0 < 0 ? 0 : N - j0 < 16 ? N - j0 : 16;
    float *d = dst + jp * K * PK_NR + half;
    for (int64_t k0 = 0; k0 < K; k0 += 16) tr_block(src + j0 * scol + k0, scol, n, K - k0 < 16 ? K - k0 : 16, d + k0 * w, w, 0xffff);
  }
}

/* gg_rt_pack's AVX-512 paths; false where none applies (a general stride) */
static bool pack_fast(int side, int64_t rows, int64_t cols, const float *src, int64_t srow, int64_t scol, float *dst) {
  if (!gg_rt_packed_ok() || rows <= 0 || cols <= 0) return false;
  if (side == 0 && (scol == 1 || srow == 1)) {
    int64_t h = pk_mr(rows);
    _Pragma("omp parallel for schedule(static) if(rows * cols > 65536 && !omp_in_parallel())")
    for (int64_t ip = 0; ip < (rows + h - 1) / h; ip++) pack_a_panel(rows, cols, src, srow, scol, dst, ip);
    return true;
  }
  if (side == 1 && srow == 1 && scol != 1) {
    _Pragma("omp parallel for schedule(static) if(rows * cols > 65536 && !omp_in_parallel())")
    for (int64_t jp = 0; jp < (cols + PK_NR - 1) / PK_NR; jp++) pack_b_panel(rows, cols, src, scol, dst, jp);
    return true;
  }
  return false;
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
  /* tiles of at most PK_TILE_ROWS (128) or PK_TILE_ROWS_MANY (64) rows x PK_TILE_PANELS (8) panels (256 columns) */
  int64_t gm, gn;
  tile_grid(pm, pn, (nt >= PK_MANY_THREADS ? PK_TILE_ROWS_MANY : PK_TILE_ROWS) / h, PK_TILE_PANELS, nt, M <= N, &gm, &gn);
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
static bool pack_fast(int side, int64_t rows, int64_t cols, const float *src, int64_t srow, int64_t scol, float *dst) {
  (void)side; (void)rows; (void)cols; (void)src; (void)srow; (void)scol; (void)dst;
  return false;
}
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

/* ---------------------------------------------------------------- float16 and bfloat16 products */

/* An operand's element as float: dt 0 float32, 2 float16, 3 bfloat16 (the codes of gg_rt_hgemm) */
static inline float half_at(int dt, const void *p, int64_t i) {
  return dt == 0 ? ((const float *)p)[i] : dt == 2 ? gg_h2f(((const uint16_t *)p)[i]) : gg_bf2f(((const uint16_t *)p)[i]);
}

/* rows x cols of Y (element (i, j) at y[i * ldy + j]) = alpha * the float32 sums c (at c[i * ldc + j])
 * + beta * bias (at bias[i * sbm + j * sbj], or none), rounded once to dt, in spans of 64 columns the
 * compiler vectorizes (with AVX-512 where AMX's blocks call it) */
static inline __attribute__((always_inline)) void half_finish(int dt, const float *c, int64_t ldc, int64_t rows, int64_t cols, uint16_t *y, int64_t ldy, float alpha, float beta,
                        const void *bias, int bdt, int64_t sbm, int64_t sbj) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j0 = 0; j0 < cols; j0 += 64) {
      int64_t w = cols - j0 < 64 ? cols - j0 : 64;
      const float *ci = c + i * ldc + j0;
      uint16_t *yi = y + i * ldy + j0;
      float v[64];
      for (int64_t j = 0; j < w; j++) v[j] = alpha * ci[j];
      if (bias && beta != 0) {   /* beta 0 ignores the bias, NaN and all, as PyTorch's addmm does */
        int64_t b0 = i * sbm + j0 * sbj;
        if (bdt == 3 && sbj == 1)
          for (int64_t j = 0; j < w; j++) v[j] += beta * gg_bf2f(((const uint16_t *)bias)[b0 + j]);
        else if (bdt == 0 && sbj == 1)
          for (int64_t j = 0; j < w; j++) v[j] += beta * ((const float *)bias)[b0 + j];
        else
          for (int64_t j = 0; j < w; j++) v[j] += beta * half_at(bdt, bias, b0 + j * sbj);
      }
      if (dt == 3)
        for (int64_t j = 0; j < w; j++) yi[j] = gg_f2bf(v[j]);
      else
        for (int64_t j = 0; j < w; j++) yi[j] = gg_f2h(v[j]);
    }
}

static __thread void *half_buf;   /* the calling thread's operands packed or widened, kept between calls */
static __thread size_t half_cap;

static void *half_scratch(size_t bytes) {
  if (bytes > half_cap) {
    void *p = NULL;
    if (posix_memalign(&p, GG_RT_ALIGN, bytes)) return NULL;
    free(half_buf);
    half_buf = p;
    half_cap = bytes;
  }
  return half_buf;
}

/* bfloat16 on AMX (Intel Sapphire Rapids and later; Linux asks the kernel for the tile state once).
 * A is packed in panels of 32 rows, B in panels of 32 columns, both in steps of 32 of K, zero-padded:
 * a step of a panel is 1024 values, two tiles of 16 x 64 bytes (A: 16 rows of 32 values; B: 16 rows,
 * row r holding 16 columns' values at K rows 2r and 2r+1 side by side, AMX's pairs). A 32 x 32 block
 * of Y is 4 tiles of float32 sums, each step 4 tile products (_tile_dpbf16ps: each pair's products
 * added in float32). */
#if defined(__x86_64__) && defined(__linux__) && ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define GG_XAMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))

static bool amx_on;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static void amx_setup(void) {
  const char *off = getenv("GCC_GRAPH_NO_AMX");
  unsigned a, b, c, d;
  if ((off && *off && strcmp(off, "0")) || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) return;
  amx_on = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
}
static bool amx_ok(void) {
  pthread_once(&amx_once, amx_setup);
  return amx_on;
}

typedef struct amx_cfg { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } amx_cfg;

/* every tile 16 rows of 64 bytes. A constant in memory: GCC does not see _tile_loadconfig read the
 * whole struct, and a local one's unused fields were left as the stack had them (a fault). */
static const amx_cfg amx_config = {.palette = 1, .colsb = {64, 64, 64, 64, 64, 64, 64, 64}, .rows = {16, 16, 16, 16, 16, 16, 16, 16}};
static GG_XAMX void amx_tiles_on(void) { _tile_loadconfig(&amx_config); }

/* c (32 x 32 float32) = nq steps of A's panel ap @ B's panel bp */
static GG_XAMX void amx_block(int64_t nq, const uint16_t *ap, const uint16_t *bp, float *c) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t q = 0; q < nq; q++, ap += 1024, bp += 1024) {
    _tile_loadd(4, ap, 64);
    _tile_loadd(5, ap + 512, 64);
    _tile_loadd(6, bp, 64);
    _tile_loadd(7, bp + 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 128);
  _tile_stored(1, c + 16, 128);
  _tile_stored(2, c + 512, 128);
  _tile_stored(3, c + 528, 128);
}

/* A (M x K, element (i, k) at s[i * si + k * sk]) into panels of 32 rows at d */
static void amx_pack_a(int64_t M, int64_t K, const uint16_t *s, int64_t si, int64_t sk, uint16_t *d, bool par) {
  int64_t pm = (M + 31) / 32, nq = (K + 31) / 32;
  _Pragma("omp parallel for schedule(static) if(par)")
  for (int64_t p = 0; p < pm; p++)
    for (int64_t q = 0; q < nq; q++) {
      uint16_t *t = d + (p * nq + q) * 1024;
      for (int r = 0; r < 32; r++) {
        int64_t i = p * 32 + r, k0 = q * 32, kw = K - k0 < 32 ? K - k0 : 32;
        uint16_t *tr = t + r * 32;
        if (i >= M) { memset(tr, 0, 64); continue; }
        const uint16_t *sr = s + i * si + k0 * sk;
        if (sk == 1) memcpy(tr, sr, (size_t)kw * 2);
        else
          for (int64_t k = 0; k < kw; k++) tr[k] = sr[k * sk];
        if (kw < 32) memset(tr + kw, 0, (size_t)(32 - kw) * 2);
      }
    }
}

/* B (K x N, element (k, j) at s[k * sk + j * sj]) into panels of 32 columns at d, the pairs of K rows side by side */
static void amx_pack_b(int64_t K, int64_t N, const uint16_t *s, int64_t sk, int64_t sj, uint16_t *d, bool par) {
  int64_t pn = (N + 31) / 32, nq = (K + 31) / 32;
  _Pragma("omp parallel for schedule(static) if(par)")
  for (int64_t p = 0; p < pn; p++)
    for (int64_t q = 0; q < nq; q++) {
      uint16_t *t = d + (p * nq + q) * 1024;
      if ((p + 1) * 32 <= N && (q + 1) * 32 <= K && (sk == 1 || sj == 1)) {   /* a whole step, from rows or columns in memory */
        const uint16_t *s0 = s + q * 32 * sk + p * 32 * sj;
        if (sk == 1)   /* a weight [N, K] read as its transpose: each pair is 4 bytes of a row of it */
          for (int c = 0; c < 32; c++)
            for (int r = 0; r < 16; r++) memcpy(t + (c / 16) * 512 + r * 32 + (c % 16) * 2, s0 + c * sj + 2 * r, 4);
        else
          for (int r = 0; r < 16; r++)
            for (int c = 0; c < 32; c++) {
              t[(c / 16) * 512 + r * 32 + (c % 16) * 2] = s0[2 * r * sk + c];
              t[(c / 16) * 512 + r * 32 + (c % 16) * 2 + 1] = s0[(2 * r + 1) * sk + c];
            }
        continue;
      }
      for (int c = 0; c < 32; c++) {   /* column c of the panel: tile c / 16, position c % 16 of each row */
        int64_t j = p * 32 + c;
        uint16_t *tc = t + (c / 16) * 512 + (c % 16) * 2;
        for (int k = 0; k < 32; k++) {
          int64_t kk = q * 32 + k;
          tc[(k / 2) * 32 + k % 2] = j < N && kk < K ? s[kk * sk + j * sj] : 0;
        }
      }
    }
}

/* one thread's tile of the grid: blocks of Y from panels [i0, i1) of A and [j0, j1) of B, each finished while it is in L1 */
static GG_XAMX void amx_tile(int64_t M, int64_t N, int64_t nq, const uint16_t *ap, const uint16_t *bp, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                             uint16_t *Y, int64_t ldy, float alpha, float beta, const void *bias, int bdt, int64_t sbm, int64_t sbj) {
  float c[1024] __attribute__((aligned(64)));
  amx_tiles_on();
  for (int64_t jp = j0; jp < j1; jp++)
    for (int64_t ip = i0; ip < i1; ip++) {
      amx_block(nq, ap + ip * nq * 1024, bp + jp * nq * 1024, c);
      int64_t rows = M - ip * 32 < 32 ? M - ip * 32 : 32, cols = N - jp * 32 < 32 ? N - jp * 32 : 32;
      half_finish(3, c, 32, rows, cols, Y + ip * 32 * ldy + jp * 32, ldy, alpha, beta,
                  bias ? (const char *)bias + (ip * 32 * sbm + jp * 32 * sbj) * (bdt ? 2 : 4) : NULL, bdt, sbm, sbj);
    }
  _tile_release();
}

/* bfloat16 Y = alpha * A @ B + beta * bias on AMX, B packed at gg_open (bpk) or here; false when out of memory */
static bool amx_gemm(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t sam, int64_t sak, const uint16_t *B, int64_t sbk, int64_t sbn,
                     const uint16_t *bpk, uint16_t *Y, int64_t ldy, float alpha, float beta, const void *bias, int bdt, int64_t sbm, int64_t sbj) {
  int64_t pm = (M + 31) / 32, pn = (N + 31) / 32, nq = (K + 31) / 32;
  uint16_t *ap = half_scratch(sizeof(uint16_t) * 1024 * (size_t)(nq * (pm + (bpk ? 0 : pn))));
  if (!ap) return false;
  int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  if ((double)M * (double)N * (double)K < 4e6 && (double)(M + N) * (double)K < 65536) nt = 1;
  amx_pack_a(M, K, A, sam, sak, ap, nt > 1);
  const uint16_t *bp = bpk;
  if (!bp) {
    amx_pack_b(K, N, B, sbk, sbn, ap + pm * nq * 1024, nt > 1);
    bp = ap + pm * nq * 1024;
  }
  /* a tile's panels of A stay in L2 (at most 1 MB of them) while each panel of B, read once from
   * memory, meets every one of them from L1 */
  int64_t gm, gn, tm = ((int64_t)1 << 20) / (64 * nq * 32);
  tile_grid(pm, pn, tm < 1 ? 1 : tm, pn, nt, M <= N, &gm, &gn);
  _Pragma("omp parallel for schedule(dynamic) if(nt > 1)")
  for (int64_t t = 0; t < gm * gn; t++) {
    int64_t r = t / gn, q = t % gn;
    amx_tile(M, N, nq, ap, bp, r * pm / gm, (r + 1) * pm / gm, q * pn / gn, (q + 1) * pn / gn, Y, ldy, alpha, beta, bias, bdt, sbm, sbj);
  }
  return true;
}
/* A bfloat16 channels-last convolution's product (gg_rt_conv_nhwc_bf16): A read in place from the
 * bfloat16 image, row i at k the element base[ro[k] + po[i]]. Each thread packs its panels of A, 32
 * rows at a time (each run of K that lies side by side in the image a copy: 32 channels of one tap,
 * or a stem's taps along a row with their 3 channels), once for all of its panels of B (bp: the
 * weight packed at gg_open, side 2); each finished block gets the column bias in float32 and is
 * rounded once to bfloat16 into y (M x N), as PyTorch's convolution is, then the epilogue. */
static GG_XAMX void amx_rows_tile(int64_t M, int64_t N, int64_t K, const uint16_t *base, const int64_t *ro, const int64_t *run, const int64_t *po,
                                  const uint16_t *bp, uint16_t *ap, int64_t i0, int64_t i1, int64_t j0, int64_t j1, uint16_t *y, const uint16_t *bias, const gg_epi *ep) {
  int64_t nq = (K + 31) / 32;
  float c[1024] __attribute__((aligned(64)));
  amx_tiles_on();
  for (int64_t ip = i0; ip < i1; ip++) {
    int64_t rows = M - ip * 32 < 32 ? M - ip * 32 : 32;
    for (int64_t r = 0; r < 32; r++) {   /* the panel: step q, row r at ap + q * 1024 + r * 32 */
      if (r >= rows) {
        for (int64_t q = 0; q < nq; q++) memset(ap + q * 1024 + r * 32, 0, 64);
        continue;
      }
      const uint16_t *xr = base + po[ip * 32 + r];
      for (int64_t q = 0; q < nq; q++) {
        uint16_t *d = ap + q * 1024 + r * 32;
        int64_t k0 = q * 32, kw = K - k0 < 32 ? K - k0 : 32;
        if (run[k0] == 32) {   /* 32 channels of one tap, side by side */
          memcpy(d, xr + ro[k0], 64);
          continue;
        }
        if (kw < 32) memset(d + kw, 0, sizeof(uint16_t) * (size_t)(32 - kw));
        for (int64_t j = 0; j < kw; j += run[k0 + j]) {   /* a masked copy of the run (the bytes past it neither read nor written) */
          __mmask32 m = (__mmask32)((1ull << run[k0 + j]) - 1);
          _mm512_mask_storeu_epi16(d + j, m, _mm512_maskz_loadu_epi16(m, xr + ro[k0 + j]));
        }
      }
    }
    for (int64_t jp = j0; jp < j1; jp++) {
      amx_block(nq, ap, bp + jp * nq * 1024, c);
      int64_t cols = N - jp * 32 < 32 ? N - jp * 32 : 32;
      uint16_t *yb = y + ip * 32 * N + jp * 32;
      if (bias) {
        float bj[32];
        for (int64_t j = 0; j < cols; j++) bj[j] = gg_bf2f(bias[jp * 32 + j]);
        for (int64_t i = 0; i < rows; i++)
          for (int64_t j = 0; j < cols; j++) yb[i * N + j] = gg_f2bf(c[i * 32 + j] + bj[j]);
      } else
        for (int64_t i = 0; i < rows; i++)
          for (int64_t j = 0; j < cols; j++) yb[i * N + j] = gg_f2bf(c[i * 32 + j]);
    }
    /* the epilogue on the panel's rows of this tile's columns at once: whole rows in memory order (a
     * block at a time, its operands' rows were 64-byte pieces 2N bytes apart: 9 of 12 ms of a
     * 64 -> 256 channel 1x1 convolution with a residual, on one core) */
    int64_t c0 = j0 * 32, c1 = j1 * 32 < N ? j1 * 32 : N;
    epi_run(ep, y + ip * 32 * N + c0, N, rows, c1 - c0);
  }
  _tile_release();
}

static bool amx_rows_gemm(int64_t M, int64_t N, int64_t K, const uint16_t *base, const int64_t *ro, const int64_t *po, const uint16_t *bp, uint16_t *y,
                          const uint16_t *bias, const gg_epi *ep) {
  int64_t pm = (M + 31) / 32, pn = (N + 31) / 32, nq = (K + 31) / 32;
  int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  if ((double)M * (double)N * (double)K < 4e6) nt = 1;
  int64_t gm, gn, *run = malloc(sizeof(int64_t) * (size_t)K + 1);
  if (!run) return false;
  for (int64_t k = K - 1; k >= 0; k--)   /* the run of K from k lying side by side in the image, within k's step of 32 */
    run[k] = k + 1 < K && (k + 1) % 32 && ro[k + 1] == ro[k] + 1 ? run[k + 1] + 1 : 1;
  tile_grid(pm, pn, 4, pn, nt, false, &gm, &gn);   /* all of B for a tile's rows: each panel of A packed once */
  bool ok = true;
  _Pragma("omp parallel if(nt > 1)")
  {
    uint16_t *ap = half_scratch(sizeof(uint16_t) * 1024 * (size_t)nq);   /* each thread's panel */
    if (!ap) ok = false;
    _Pragma("omp for schedule(dynamic)")
    for (int64_t t = 0; t < gm * gn; t++) {
      int64_t r = t / gn, q = t % gn;
      if (ap) amx_rows_tile(M, N, K, base, ro, run, po, bp, ap, r * pm / gm, (r + 1) * pm / gm, q * pn / gn, (q + 1) * pn / gn, y, bias, ep);
    }
  }
  free(run);
  return ok;
}
#else
static bool amx_ok(void) { return false; }
static bool amx_rows_gemm(int64_t M, int64_t N, int64_t K, const uint16_t *base, const int64_t *ro, const int64_t *po, const uint16_t *bp, uint16_t *y,
                          const uint16_t *bias, const gg_epi *ep) {
  (void)M; (void)N; (void)K; (void)base; (void)ro; (void)po; (void)bp; (void)y; (void)bias; (void)ep;
  return false;
}
static bool amx_gemm(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t sam, int64_t sak, const uint16_t *B, int64_t sbk, int64_t sbn,
                     const uint16_t *bpk, uint16_t *Y, int64_t ldy, float alpha, float beta, const void *bias, int bdt, int64_t sbm, int64_t sbj) {
  (void)M; (void)N; (void)K; (void)A; (void)sam; (void)sak; (void)B; (void)sbk; (void)sbn; (void)bpk; (void)Y; (void)ldy; (void)alpha; (void)beta;
  (void)bias; (void)bdt; (void)sbm; (void)sbj;
  return false;
}
#endif

bool gg_rt_amx_ok(void) { return amx_ok(); }

/* A weight packed at gg_open (gg_pack_desc): sides 0 and 1 the float32 panels of the packed kernel;
 * side 2 (bfloat16) and 3 (float16) the right operand of gg_rt_hgemm or of a 16-bit channels-last
 * convolution: AMX's panels for bfloat16 where it runs, else widened to float32 in the packed
 * kernel's panels (side 1's). *out NULL where this machine runs neither; -1 when out of memory. */
int gg_rt_pack_weight(int side, int64_t rows, int64_t cols, const void *src, int64_t srow, int64_t scol, void **out) {
  *out = NULL;
  if (side == 2 && amx_ok()) {
    if (posix_memalign(out, GG_RT_ALIGN, sizeof(uint16_t) * 1024 * (size_t)(((rows + 31) / 32) * ((cols + 31) / 32)) + 1)) return *out = NULL, -1;
    amx_pack_b(rows, cols, src, srow, scol, *out, !omp_in_parallel());
    return 0;
  }
  if (!gg_rt_packed_ok()) return 0;
  if (posix_memalign(out, GG_RT_ALIGN, sizeof(float) * (size_t)gg_rt_pack_floats(side >= 2 ? 1 : side, rows, cols) + 1)) return *out = NULL, -1;
  if (side < 2) {
    gg_rt_pack(side, rows, cols, src, srow, scol, *out);
    return 0;
  }
  float *w = malloc(sizeof(float) * (size_t)(rows * cols) + 1);
  if (!w) {
    free(*out);
    return *out = NULL, -1;
  }
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) w[r * cols + c] = half_at(side == 2 ? 3 : 2, src, r * srow + c * scol);
  gg_rt_pack(1, rows, cols, w, cols, 1, *out);
  free(w);
  return 0;
}

void gg_rt_hgemm(int dt, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t sam, int64_t sak, const uint16_t *B, int64_t sbk,
                 int64_t sbn, const void *pk, uint16_t *Y, int64_t ldy, float alpha, float beta, const void *bias, int bdt, int64_t sbm, int64_t sbj) {
  if (M <= 0 || N <= 0) return;
  if (dt == 3 && K > 0 && amx_ok() && amx_gemm(M, N, K, A, sam, sak, B, sbk, sbn, pk, Y, ldy, alpha, beta, bias, bdt, sbm, sbj)) return;
  /* both operands widened to float32 (exactly) and multiplied there: the same float32 sums; B's
   * float32 panels made at gg_open where pk is given */
  size_t na = (size_t)(pk ? gg_rt_pack_floats(0, M, K) : 0);
  float *af = half_scratch(sizeof(float) * ((size_t)(M * K + M * N) + na + (size_t)(pk ? 0 : K * N)));
  if (!af) {   /* no memory for the float32 copies: one output at a time */
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        float acc = 0;
        for (int64_t k = 0; k < K; k++) acc += half_at(dt, A, i * sam + k * sak) * half_at(dt, B, k * sbk + j * sbn);
        half_finish(dt, &acc, 1, 1, 1, Y + i * ldy + j, 1, alpha, beta, bias ? (const char *)bias + (i * sbm + j * sbj) * (bdt ? 2 : 4) : NULL, bdt,
                    sbm, sbj);
      }
    return;
  }
  float *cf = af + M * K, *bf = cf + M * N;
  bool par = !omp_in_parallel() && (M + N) * K > 65536;
  _Pragma("omp parallel for schedule(static) if(par)")
  for (int64_t i = 0; i < M; i++)
    for (int64_t k = 0; k < K; k++) af[i * K + k] = half_at(dt, A, i * sam + k * sak);
  if (K == 0) memset(cf, 0, sizeof(float) * (size_t)(M * N));
  else if (pk) {
    gg_rt_pack(0, M, K, af, K, 1, bf);
    gg_rt_gemm_packed(M, N, K, bf, pk, cf, N, NULL, NULL, NULL);
  } else {
    _Pragma("omp parallel for schedule(static) if(par)")
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < N; j++) bf[k * N + j] = half_at(dt, B, k * sbk + j * sbn);
    gg_rt_sgemm(M, N, K, af, K, 1, bf, N, 1, cf, NULL);
  }
  _Pragma("omp parallel for schedule(static) if(!omp_in_parallel() && M * N > 65536)")
  for (int64_t i = 0; i < M; i++)
    half_finish(dt, cf + i * N, N, 1, N, Y + i * ldy, ldy, alpha, beta, bias ? (const char *)bias + i * sbm * (bdt ? 2 : 4) : NULL, bdt, sbm, sbj);
}
