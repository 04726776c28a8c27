/* gg_rt_attn.c: attention on the CPU, part of the runtime (gg_rt.c includes it: one translation unit).
 *
 * scaled_dot_product_attention kept whole (decompose.c keeps it where cpu_attention_fits says so),
 * float32, float16 or bfloat16: y[b, h] = softmax(q k^T * scale + mask) v, with the semantics of the decomposition it
 * replaces and of the interpreter (eval_sdpa): the scores are the float32 products times the scale,
 * the mask added (float) or its false positions and, causal, the keys after each query left out; a
 * row with every key left out gives zeros. Everything is computed in float, as PyTorch's CPU kernels
 * compute it (16-bit operands widened, the output rounded once).
 *
 * A task is a block of up to 32 query rows of one batch and head; the tasks share one parallel
 * region. On AVX-512 a task transposes its queries (Q^T, D x 32, in the thread's scratch), computes
 * the block's scores with the queries along the vector lanes (S^T, keys x 32: 24 sums in registers,
 * 12 keys x 32 queries, the keys' elements broadcast from the key rows as they lie), takes each
 * query's softmax down the lanes (no horizontal sums), then P V with 6 query rows x 64 values in
 * registers over the keys, each row scaled by 1 / its sum at the store. The block's scores (S x 32
 * floats) stay in L1/L2; the head's score matrix is never written. Keys past a causal block's last
 * query are skipped. A 16-bit task first widens its queries, keys, values and mask block into the
 * thread's scratch (a 64th of its arithmetic at 32 queries) and rounds its rows of output last.
 * Elsewhere (no AVX-512, GCC_GRAPH_BLAS_ONLY=1, or no memory for the scratch) a row at a time in two
 * passes over the keys (the maximum, then the exponentials and the sums), recomputing the products:
 * no scratch at all. */

#define ATT_BQ 32   /* query rows of a task */
#define ATT_MAXD 256   /* the largest head size (cpu_attention_fits); the portable path takes any, this many values at a time */

/* A task: query rows [i0, i0 + bq) of one batch and head, its operands at their first rows (dt: 0
 * float32, 2 float16, 3 bfloat16; row strides in elements), the S keys it can see, the mask's block
 * (mtype 0 none, 1 bool, 2 added in mdt) at m[i * mi + j * mj], the output's rows. */
typedef struct att_task {
  int dt, mtype, mdt;
  const void *q, *k, *v, *m;
  void *y;
  int64_t qs, ks, vs, ys, mi, mj, i0, bq, S, D;
  bool causal;
  float scale;
} att_task;

static inline void att_st(int dt, void *p, int64_t i, float v) {
  if (dt == 0) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = dt == 2 ? gg_f2h(v) : gg_f2bf(v);
}

static att_task att_task_of(int dt, const gg_attn *a, const void *q, const void *k, const void *v, const void *mask, void *y, int64_t t, int64_t nb) {
  int64_t i0 = t % nb * ATT_BQ, bh = t / nb, b = bh / a->H, h = bh % a->H, hk = h / (a->H / a->Hk), es = dt ? 2 : 4;
  int64_t bq = a->L - i0 < ATT_BQ ? a->L - i0 : ATT_BQ, S = a->causal && i0 + bq < a->S ? i0 + bq : a->S;   /* causal: no key after the block's last query */
  att_task k_ = {dt, a->mask, dt, (const char *)q + (b * a->qs[0] + h * a->qs[1] + i0 * a->qs[2]) * es, (const char *)k + (b * a->ks[0] + hk * a->ks[1]) * es,
                 (const char *)v + (b * a->vs[0] + hk * a->vs[1]) * es, mask ? (const char *)mask + (b * a->ms[0] + h * a->ms[1] + i0 * a->ms[2]) * (a->mask == 1 ? 1 : es) : NULL,
                 (char *)y + (b * a->ys[0] + h * a->ys[1] + i0 * a->ys[2]) * es, a->qs[2], a->ks[2], a->vs[2], a->ys[2], a->ms[2], a->ms[3], i0, bq, S, a->D,
                 a->causal != 0, (float)a->scale};
  return k_;
}

/* the mask's value at (i, j) of the task as an addition to the score: -inf where a bool mask is false */
static inline float att_mask(const att_task *t, int64_t i, int64_t j) {
  int64_t o = i * t->mi + j * t->mj;
  if (t->mtype == 1) return ((const uint8_t *)t->m)[o] ? 0.0f : -INFINITY;
  return half_at(t->mdt, t->m, o);
}

/* the score of query i and key j of a task */
static inline float att_score(const att_task *t, int64_t i, int64_t j) {
  float s = 0;
  for (int64_t d = 0; d < t->D; d++) s += half_at(t->dt, t->q, i * t->qs + d) * half_at(t->dt, t->k, j * t->ks + d);
  s *= t->scale;
  return t->mtype ? s + att_mask(t, i, j) : s;
}

/* Row i of a task in two passes over its keys (the portable path: no scratch): the maximum, then the
 * exponentials, their sum and the weighted values, ATT_MAXD of them at a time */
static void att_row(const att_task *t, int64_t i) {
  int64_t D = t->D, S = t->causal && t->i0 + i + 1 < t->S ? t->i0 + i + 1 : t->S;
  float mx = -INFINITY, acc[ATT_MAXD];
  for (int64_t j = 0; j < S; j++) {
    float s = att_score(t, i, j);
    mx = s > mx || s != s ? s : mx;   /* NaN stays NaN: the row's outputs are NaN */
  }
  for (int64_t d0 = 0; d0 < D; d0 += ATT_MAXD) {
    int64_t dn = D - d0 < ATT_MAXD ? D - d0 : ATT_MAXD;
    float sum = 0;
    for (int64_t d = 0; d < dn; d++) acc[d] = 0;
    for (int64_t j = 0; j < S && mx != -INFINITY; j++) {   /* every key left out: zeros */
      float p = expf(att_score(t, i, j) - mx);
      sum += p;
      for (int64_t d = 0; d < dn; d++) acc[d] += p * half_at(t->dt, t->v, j * t->vs + d0 + d);
    }
    float r = sum > 0 ? 1.0f / sum : 0.0f;
    for (int64_t d = 0; d < dn; d++) att_st(t->dt, t->y, i * t->ys + d0 + d, acc[d] * r);
  }
}

#ifdef GG_X512
/* exp on 16 floats: 2^n e^r with n = round(x log2 e) and |r| <= ln2 / 2 (the constant split in two,
 * Cody and Waite), e^r by its Taylor polynomial of degree 7 (relative error < 1e-8 there), n applied
 * by scalef; below -87.3 (a denormal result or -inf) exactly 0. Within 2 ulp of expf. */
static inline __attribute__((always_inline)) GG_X512 __m512 att_exp(__m512 x) {
  __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
  x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps((__mmask16)~tiny, _mm512_scalef_ps(p, n));
}
static GG_X512 __attribute__((unused)) void att_exp16(const float *x, float *y) { _mm512_storeu_ps(y, att_exp(_mm512_loadu_ps(x))); }   /* for tests/kernel.c */

#define ATT_KB 12   /* keys of a block of scores (x 32 queries: 24 sums) */
#define ATT_PR 6    /* query rows of a block of P V (x 64 values: 24 sums) */

/* One float32 task (t->dt 0). qt: D x 32 floats, st: (S + ATT_KB) x 32 + 32. */
static GG_X512 void att_block(const att_task *t, float *qt, float *st) {
  int64_t D = t->D, S = t->S, bq = t->bq, i0 = t->i0;
  const float *qb = t->q, *kb = t->k, *vb = t->v;
  float *yb = t->y;
  for (int64_t d = 0; d < D; d++)   /* Q^T, zeros past the block's rows */
    for (int64_t i = 0; i < ATT_BQ; i++) qt[d * ATT_BQ + i] = i < bq ? qb[i * t->qs + d] : 0.0f;
  const __m512 scale = _mm512_set1_ps(t->scale), ninf = _mm512_set1_ps(-INFINITY);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  /* a float32 mask's rows gathered: offsets i * mi (within int32) */
  bool mgather = t->mtype == 2 && t->mdt == 0 && t->mi >= 0 && t->mi < INT32_MAX / 32;
  const __m512i mrow = _mm512_mullo_epi32(lane, _mm512_set1_epi32(mgather ? (int)t->mi : 0));
  const __mmask16 bq0 = bq >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << bq) - 1), bq1 = bq >= 32 ? (__mmask16)0xffff : bq > 16 ? (__mmask16)((1u << (bq - 16)) - 1) : 0;
  /* S^T: row j holds key j's scores against the 32 queries */
  for (int64_t j0 = 0; j0 < S; j0 += ATT_KB) {
    const float *kr[ATT_KB];
    for (int u = 0; u < ATT_KB; u++) kr[u] = kb + (j0 + u < S ? j0 + u : j0) * t->ks;   /* past the last key: the first again, not stored */
    __m512 c0[ATT_KB], c1[ATT_KB];
    for (int u = 0; u < ATT_KB; u++) c0[u] = c1[u] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d++) {
      __m512 q0 = _mm512_load_ps(qt + d * ATT_BQ), q1 = _mm512_load_ps(qt + d * ATT_BQ + 16);
      for (int u = 0; u < ATT_KB; u++) {
        __m512 kv = _mm512_set1_ps(kr[u][d]);
        c0[u] = _mm512_fmadd_ps(kv, q0, c0[u]);
        c1[u] = _mm512_fmadd_ps(kv, q1, c1[u]);
      }
    }
    for (int u = 0; u < ATT_KB && j0 + u < S; u++) {
      int64_t j = j0 + u;
      __m512 s0 = _mm512_mul_ps(c0[u], scale), s1 = _mm512_mul_ps(c1[u], scale);
      float *sj = st + j * ATT_BQ;
      _mm512_store_ps(sj, s0);
      _mm512_store_ps(sj + 16, s1);
      if (mgather) {   /* a float32 mask: its column j for the block's queries, 16 at a time */
        const float *mj = (const float *)t->m + j * t->mj;
        _mm512_store_ps(sj, _mm512_add_ps(s0, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), bq0, mrow, mj, 4)));
        if (bq > 16) _mm512_store_ps(sj + 16, _mm512_add_ps(s1, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), bq1, mrow, mj + 16 * t->mi, 4)));
      } else if (t->mtype)
        for (int64_t i = 0; i < bq; i++) sj[i] += att_mask(t, i, j);
      if (t->causal && j > i0) {   /* query i0 + i sees key j where j <= i0 + i */
        __m512i rel = _mm512_set1_epi32((int)(j - i0));
        _mm512_mask_store_ps(sj, _mm512_cmplt_epi32_mask(lane, rel), ninf);
        _mm512_mask_store_ps(sj + 16, _mm512_cmplt_epi32_mask(_mm512_add_epi32(lane, _mm512_set1_epi32(16)), rel), ninf);
      }
    }
  }
  /* each query's softmax down its lane: the maximum, the exponentials in place, the sum */
  __m512 m0 = ninf, m1 = ninf, z0 = _mm512_setzero_ps(), z1 = z0;
  for (int64_t j = 0; j < S; j++) {
    m0 = _mm512_max_ps(m0, _mm512_load_ps(st + j * ATT_BQ));
    m1 = _mm512_max_ps(m1, _mm512_load_ps(st + j * ATT_BQ + 16));
  }
  __mmask16 e0 = _mm512_cmp_ps_mask(m0, ninf, _CMP_EQ_OQ), e1 = _mm512_cmp_ps_mask(m1, ninf, _CMP_EQ_OQ);   /* every key left out */
  m0 = _mm512_mask_mov_ps(m0, e0, _mm512_setzero_ps());
  m1 = _mm512_mask_mov_ps(m1, e1, _mm512_setzero_ps());
  for (int64_t j = 0; j < S; j++) {
    __m512 p0 = att_exp(_mm512_sub_ps(_mm512_load_ps(st + j * ATT_BQ), m0)), p1 = att_exp(_mm512_sub_ps(_mm512_load_ps(st + j * ATT_BQ + 16), m1));
    _mm512_store_ps(st + j * ATT_BQ, p0);
    _mm512_store_ps(st + j * ATT_BQ + 16, p1);
    z0 = _mm512_add_ps(z0, p0);
    z1 = _mm512_add_ps(z1, p1);
  }
  float rs[ATT_BQ];   /* 1 / each row's sum; 0 for a row with every key left out */
  __mmask16 g0 = _mm512_cmp_ps_mask(z0, _mm512_setzero_ps(), _CMP_GT_OQ), g1 = _mm512_cmp_ps_mask(z1, _mm512_setzero_ps(), _CMP_GT_OQ);
  _mm512_storeu_ps(rs, _mm512_maskz_div_ps(g0 & (__mmask16)~e0, _mm512_set1_ps(1.0f), z0));
  _mm512_storeu_ps(rs + 16, _mm512_maskz_div_ps(g1 & (__mmask16)~e1, _mm512_set1_ps(1.0f), z1));
  /* P V: ATT_PR rows x 64 values in registers over the keys */
  for (int64_t d0 = 0; d0 < D; d0 += 64) {
    int64_t dn = D - d0 < 64 ? D - d0 : 64;
    __mmask16 dm[4];
    for (int u = 0; u < 4; u++) {
      int64_t w = dn - 16 * u;
      dm[u] = w >= 16 ? (__mmask16)0xffff : w > 0 ? (__mmask16)((1u << w) - 1) : 0;
    }
    for (int64_t r0 = 0; r0 < bq; r0 += ATT_PR) {
      __m512 acc[ATT_PR][4];
      for (int r = 0; r < ATT_PR; r++)
        for (int u = 0; u < 4; u++) acc[r][u] = _mm512_setzero_ps();
      for (int64_t j = 0; j < S; j++) {
        const float *vj = vb + j * t->vs + d0, *pj = st + j * ATT_BQ + r0;
        __m512 v0 = _mm512_maskz_loadu_ps(dm[0], vj), v1 = _mm512_maskz_loadu_ps(dm[1], vj + 16), v2 = _mm512_maskz_loadu_ps(dm[2], vj + 32),
               v3 = _mm512_maskz_loadu_ps(dm[3], vj + 48);
        for (int r = 0; r < ATT_PR; r++) {   /* rows past the block read lanes of zeros' neighbours: not stored */
          __m512 p = _mm512_set1_ps(pj[r]);
          acc[r][0] = _mm512_fmadd_ps(p, v0, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(p, v1, acc[r][1]);
          acc[r][2] = _mm512_fmadd_ps(p, v2, acc[r][2]);
          acc[r][3] = _mm512_fmadd_ps(p, v3, acc[r][3]);
        }
      }
      for (int r = 0; r < ATT_PR && r0 + r < bq; r++) {
        __m512 rr = _mm512_set1_ps(rs[r0 + r]);
        float *yr = yb + (r0 + r) * t->ys + d0;
        for (int u = 0; u < 4; u++)
          if (dm[u]) _mm512_mask_storeu_ps(yr + 16 * u, dm[u], _mm512_mul_ps(acc[r][u], rr));
      }
    }
  }
}

/* n elements of dt at src as float32 at dst */
static GG_X512 void att_widen(int dt, const void *src, int64_t n, float *dst) {
  const uint16_t *h = src;
  int64_t i = 0;
  if (dt == 3)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(h + i))), 16)));
  else if (dt == 2)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))));
  for (; i < n; i++) dst[i] = half_at(dt, src, i);
}

/* A 16-bit task: its queries, keys, values and mask block widened into f (bq D + 2 S D + bq S floats,
 * then bq D for the output), the float32 task run on them, its output rounded once into its rows. */
static GG_X512 void att_block16(const att_task *t, float *qt, float *st, float *f) {
  int64_t D = t->D, S = t->S, bq = t->bq;
  float *qf = f, *kf = qf + bq * D, *vf = kf + S * D, *mf = vf + S * D, *yf = mf + bq * S;
  for (int64_t i = 0; i < bq; i++) att_widen(t->dt, (const uint16_t *)t->q + i * t->qs, D, qf + i * D);
  for (int64_t j = 0; j < S; j++) {
    att_widen(t->dt, (const uint16_t *)t->k + j * t->ks, D, kf + j * D);
    att_widen(t->dt, (const uint16_t *)t->v + j * t->vs, D, vf + j * D);
  }
  att_task w = *t;
  w.dt = 0, w.q = qf, w.k = kf, w.v = vf, w.y = yf, w.qs = w.ks = w.vs = w.ys = D;
  if (t->mtype == 2) {   /* the mask's block in float32, rows of S */
    for (int64_t i = 0; i < bq; i++)
      for (int64_t j = 0; j < S; j++) mf[i * S + j] = att_mask(t, i, j);
    w.m = mf, w.mdt = 0, w.mi = S, w.mj = 1;
  }
  att_block(&w, qt, st);
  for (int64_t i = 0; i < bq; i++)
    for (int64_t d = 0; d < D; d++) att_st(t->dt, t->y, i * t->ys + d, yf[i * D + d]);
}
#endif

void gg_rt_attention(int dt, const gg_attn *a, const void *q, const void *k, const void *v, const void *mask, void *y) {
  int64_t nb = (a->L + ATT_BQ - 1) / ATT_BQ, tasks = a->B * a->H * nb;
  if (tasks <= 0 || a->D <= 0) return;
  if (a->S <= 0) {   /* no keys: every row left out */
    for (int64_t t = 0; t < a->B * a->H * a->L; t++)
      for (int64_t d = 0; d < a->D; d++) att_st(dt, y, t / (a->H * a->L) * a->ys[0] + t / a->L % a->H * a->ys[1] + t % a->L * a->ys[2] + d, 0.0f);
    return;
  }
  bool par = (double)a->B * (double)a->H * (double)a->L * (double)a->S * (double)a->D > 65536 && !omp_in_parallel();
#ifdef GG_X512
  size_t floats = (size_t)(a->D * ATT_BQ + (a->S + ATT_KB) * ATT_BQ + ATT_BQ) + (dt ? (size_t)(2 * ATT_BQ * a->D + 2 * a->S * a->D + ATT_BQ * a->S) : 0);
  if (gg_rt_packed_ok()) {
    bool ok = true;
    _Pragma("omp parallel if(par)")
    {
      float *qt = half_scratch(sizeof(float) * floats);
      if (!qt) {
        _Pragma("omp atomic write")
        ok = false;
      }
      _Pragma("omp barrier")
      if (ok) {
        float *st = qt + a->D * ATT_BQ, *f = st + (a->S + ATT_KB) * ATT_BQ + ATT_BQ;
        _Pragma("omp for schedule(dynamic)")
        for (int64_t t = 0; t < tasks; t++) {
          att_task k_ = att_task_of(dt, a, q, k, v, mask, y, t, nb);
          if (dt) att_block16(&k_, qt, st, f);
          else att_block(&k_, qt, st);
        }
      }
    }
    if (ok) return;
  }
#endif
  _Pragma("omp parallel for schedule(dynamic) if(par)")
  for (int64_t t = 0; t < tasks; t++) {
    att_task k_ = att_task_of(dt, a, q, k, v, mask, y, t, nb);
    for (int64_t i = 0; i < k_.bq; i++) att_row(&k_, i);
  }
}
