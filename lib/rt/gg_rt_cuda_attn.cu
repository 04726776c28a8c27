/* gg_rt_cuda_attn.cu: the fused attention kernels of the CUDA runtime (gg_cu_attention, gg_rt.h),
 * a translation unit of their own so that nvcc builds them beside the rest of the runtime
 * (gg_rt_cuda.cu) rather than after it: a new machine's first CUDA compile waits for the longer of
 * the two. Launched on the stream of the model that runs (gg_cu_stream). */
#include "gg_rt.h"

#include <cuda_runtime.h>
#include <pthread.h>

/* ---------------------------------------------------------------- attention */

/* FlashAttention-2's scheme on mma.sync (m16n8k16, float32 accumulators): a block of four warps takes
 * 64 query rows of one (batch, head), each warp 16 rows, and walks the keys 64 at a time: S = Q K^T
 * from Q's fragments (registers, loaded once: through shared memory and ldmatrix where its rows are
 * aligned, the output leaving the same way) and a K tile in shared memory; the running row maximum
 * and sum rescale the output accumulators (online softmax, in float32, in base 2); P, rounded to the
 * operands' dtype as the accumulators hold it (the m16n8k16 C layout is the A layout of the next
 * product), times a V tile. K and V tiles are stored as they are (16-byte rows) and read as fragments
 * through ldmatrix (V's transposed). Nothing of size L x S reaches memory. A
 * row whose every key is left out gives zeros, as the decomposition (PyTorch's math path) does.
 * Fragment layouts (PTX ISA, mma.m16n8k16): lane = 4 g + t; A regs {A[g][2t..], A[g+8][2t..],
 * A[g][2t+8..], A[g+8][2t+8..]}; B regs {B[2t..][g], B[2t+8..][g]}; C {C[g][2t], C[g][2t+1],
 * C[g+8][2t], C[g+8][2t+1]}. */
#define GG_ATT_BM 64
#define GG_ATT_BN 64

static __device__ __forceinline__ float att_load(int dt, const uint16_t *p) {
  uint16_t h = *p;
  if (dt == 3) return __uint_as_float((uint32_t)h << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

static __device__ __forceinline__ uint32_t att_pack(int dt, float lo, float hi) {
  uint32_t d = 0;
#if __CUDA_ARCH__ >= 800
  if (dt == 3) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
#endif
  return d;
}

static __device__ __forceinline__ void att_mma(int dt, float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if __CUDA_ARCH__ >= 800
  if (dt == 3)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* four 8x8 matrices of 16-bit elements from shared memory, lanes 8i..8i+7 giving matrix i's rows; as
 * stored (a B operand from rows of B^T) or transposed (.trans: a B operand from rows of B) */
static __device__ __forceinline__ void att_ldsm(uint32_t r[4], const uint16_t *p) {
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
static __device__ __forceinline__ void att_ldsm_t(uint32_t r[4], const uint16_t *p) {
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* 16 bytes from global to shared memory without passing through registers (zeros when !in: no
 * byte is read), completed by att_cp_wait */
static __device__ __forceinline__ void att_cp16(uint16_t *dst, const uint16_t *src, bool in) {
#if __CUDA_ARCH__ >= 800
  const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(in ? 16 : 0));
#endif
}
static __device__ __forceinline__ void att_cp_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;");
#endif
}
template <int N> static __device__ __forceinline__ void att_cp_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
#endif
}

/* two adjacent elements of a row as one register (zeros past the end of the rows) */
static __device__ __forceinline__ uint32_t att_pair(const uint16_t *row, bool in) {
  return in ? (uint32_t)row[0] | (uint32_t)row[1] << 16 : 0u;
}

/* a lane's m16n8k16 operand fragment f[4] for columns 16 c on of rows r0 and r1 (of n) of a matrix at
 * x with rows ld apart, loaded pair by pair from memory (t: the lane's index in its quad). A macro: as
 * a function it compiled the kernels differently (a cubin 15 KB smaller, untimed) */
#define ATT_FRAG(f, x, ld, r0, r1, n, c, t)                                      \
  do {                                                                           \
    (f)[0] = att_pair((x) + (r0) * (ld) + (c) * 16 + 2 * (t), (r0) < (n));       \
    (f)[1] = att_pair((x) + (r1) * (ld) + (c) * 16 + 2 * (t), (r1) < (n));       \
    (f)[2] = att_pair((x) + (r0) * (ld) + (c) * 16 + 8 + 2 * (t), (r0) < (n));   \
    (f)[3] = att_pair((x) + (r1) * (ld) + (c) * 16 + 8 + 2 * (t), (r1) < (n));   \
  } while (0)

/* a barrier of the 128 threads of group g (named barrier 1 + g; 0 is __syncthreads') */
static __device__ __forceinline__ void att_group_sync(int g) {
  if (g) asm volatile("bar.sync 2, 128;" ::: "memory");
  else asm volatile("bar.sync 1, 128;" ::: "memory");
}

/* a barrier of group g's warps: the block's where it is one group */
template <int KS> static __device__ __forceinline__ void att_sync(int g) {
  if (KS == 1) __syncthreads();
  else att_group_sync(g);
}

/* KS groups of four warps a block. KS = 2 where one group per block would leave most of the GPU's
 * warp slots empty (short sequences, few heads: BERT-base at batch 8 has 192 blocks of work for 132
 * SMs): both groups take the block's 64 query rows, group g the key tiles g, g + 2, ..., each with
 * its own K and V buffer (one; the other group's copy overlaps this one's products), and the second
 * group's maxima, sums and output are merged into the first's at the end, as attention_f32's are.
 * KS = 1 double-buffers its K and V tiles instead. */
template <int DT, int D, int KS> __global__ void __launch_bounds__(128 * KS, D <= 64 ? 4 / KS : 1) attention_tc(gg_attn a, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                                                                     const void *mask, uint16_t *y) {
  /* two K/V buffers where they fit the 48 KiB of static shared memory (head sizes up to 64): with one
   * group, the next tile is copied in (cp.async) while the warps compute on this one; with two, a
   * buffer a group. The query tile has a buffer of its own with two groups; with one it uses the
   * second V buffer, which the first key tile does not use. */
  constexpr int NB = D <= 64 ? 2 : 1;
  static_assert(KS == 1 || NB == 2, "two groups need a K and V buffer each");
  __shared__ __align__(16) uint16_t Ks[NB][GG_ATT_BN][D + 8];
  __shared__ __align__(16) uint16_t Vs[NB][GG_ATT_BN][D + 8];
  __shared__ __align__(16) uint16_t Qx[KS == 2 ? GG_ATT_BM : 1][D + 8];
  const int gw = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int grp = gw / 4, warp = gw % 4, lt = threadIdx.x % 128;
  const int64_t bh = blockIdx.x, b = bh / a.H, h = bh % a.H, hk = h / (a.H / a.Hk);
  /* causal: the query blocks with the most key tiles are launched first */
  const int64_t qb = a.causal ? gridDim.y - 1 - blockIdx.y : blockIdx.y;
  const int64_t q0 = qb * GG_ATT_BM, r0 = q0 + warp * 16 + g, r1 = r0 + 8;
  const uint16_t *Q = q + b * a.qs[0] + h * a.qs[1], *K = k + b * a.ks[0] + hk * a.ks[1], *V = v + b * a.vs[0] + hk * a.vs[1];
  /* 16-byte loads of 8 elements where every row start is aligned */
  const bool kvec = ((uintptr_t)K % 16 == 0) && a.ks[2] % 8 == 0, vvec = ((uintptr_t)V % 16 == 0) && a.vs[2] % 8 == 0;
  const bool async = NB == 2 && kvec && vvec;
  /* Q's tile: where its rows are aligned too, copied whole (16-byte copies, every byte of a sector
   * used) while the first key tile is copied, and read as fragments through ldmatrix; else each lane
   * loads its fragments' pairs from memory (4 bytes of each 32-byte sector it reads: ncu's largest
   * stall on the H200) */
  const bool qsm = async && ((uintptr_t)Q % 16 == 0) && a.qs[2] % 8 == 0;
  const int lr = lane & 7, lm = lane >> 3;
  uint16_t(*Qs)[D + 8] = KS == 2 ? Qx : Vs[NB - 1];
  uint32_t qa[D / 16][4];
  if (qsm) {
    for (int i = threadIdx.x; i < GG_ATT_BM * D / 8; i += blockDim.x) {
      const int j = i / (D / 8), e = i % (D / 8) * 8;
      const bool in = q0 + j < a.L;
      att_cp16(&Qs[j][e], in ? Q + (q0 + j) * a.qs[2] + e : Q, in);
    }
    att_cp_commit();
  } else {
#pragma unroll
    for (int c = 0; c < D / 16; c++) ATT_FRAG(qa[c], Q, a.qs[2], r0, r1, a.L, c, t);
  }
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0;
  const float sl = (float)a.scale * 1.4426950408889634f;   /* scale and log2(e): exp2 below */
  const int64_t kend = a.causal && q0 + GG_ATT_BM < a.S ? q0 + GG_ATT_BM : a.S, kfirst = (int64_t)grp * GG_ATT_BN;
  const uint8_t *mb = (const uint8_t *)mask;
  const uint16_t *mh = (const uint16_t *)mask;
  const int64_t moff = b * a.ms[0] + h * a.ms[1];
  auto copy_tile = [&](int buf, int64_t k0) {   /* by the group's 128 threads */
    for (int i = lt; i < GG_ATT_BN * D / 8; i += 128) {
      const int j = i / (D / 8), e = i % (D / 8) * 8;
      const bool in = k0 + j < a.S;
      att_cp16(&Ks[buf][j][e], in ? K + (k0 + j) * a.ks[2] + e : K, in);
      att_cp16(&Vs[buf][j][e], in ? V + (k0 + j) * a.vs[2] + e : V, in);
    }
    att_cp_commit();
  };
  if (async && kfirst < kend) copy_tile(KS == 2 ? grp : 0, kfirst);
  if (qsm) {
    if (kfirst < kend) att_cp_wait<1>();   /* Q's copies, the group before the first tile's, have landed */
    else att_cp_wait<0>();
    __syncthreads();
    /* matrix i: rows 8 (i % 2) on of the warp's 16, columns 8 (i / 2) on of the chunk: A's registers.
     * With one group, the barrier at the top of the first iteration keeps the next tile's copy out of
     * Qs until every warp has read it. */
#pragma unroll
    for (int c = 0; c < D / 16; c++) att_ldsm(qa[c], &Qs[warp * 16 + (lm & 1) * 8 + lr][c * 16 + (lm >> 1) * 8]);
  }
  for (int64_t k0 = kfirst, it = 0; k0 < kend; k0 += KS * GG_ATT_BN, it++) {
    const int cur = KS == 2 ? grp : NB == 2 ? (int)(it & 1) : 0;
    att_sync<KS>(grp);   /* the group's warps are done with the buffer the next copy overwrites */
    if (async) {
      if (KS == 2) {
        if (it > 0) copy_tile(cur, k0);
        att_cp_wait<0>();
      } else if (k0 + GG_ATT_BN < kend) {
        copy_tile(cur ^ 1, k0 + GG_ATT_BN);
        att_cp_wait<1>();   /* this tile's copies (the group before) have landed */
      } else att_cp_wait<0>();
    }
#pragma unroll 1
    for (int i = lt; !async && i < GG_ATT_BN * D / 8; i += 128) {
      const int j = i / (D / 8), e = i % (D / 8) * 8;
      const bool in = k0 + j < a.S;
      uint4 kk = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      const uint16_t *kr = K + (k0 + j) * a.ks[2] + e, *vr = V + (k0 + j) * a.vs[2] + e;
      uint16_t ke[8], ve[8];
      if (in && kvec) kk = *(const uint4 *)kr;
      if (in && vvec) vv = *(const uint4 *)vr;
      memcpy(ke, &kk, 16);
      memcpy(ve, &vv, 16);
#pragma unroll
      for (int u = 0; u < 8; u++) {
        if (in && !kvec) ke[u] = kr[u];
        if (in && !vvec) ve[u] = vr[u];
      }
      memcpy(&Ks[cur][j][e], ke, 16);
      memcpy(&Vs[cur][j][e], ve, 16);
    }
    att_sync<KS>(grp);
    float s[GG_ATT_BN / 8][4];
    /* lanes 8i..8i+7 address matrix i: rows of n-tile n + i / 2, columns 8 (i % 2) on */
#pragma unroll
    for (int n = 0; n < GG_ATT_BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
#pragma unroll
    for (int n = 0; n < GG_ATT_BN / 8; n += 2)
#pragma unroll
      for (int c = 0; c < D / 16; c++) {
        uint32_t kb[4];
        att_ldsm(kb, &Ks[cur][(n + (lm >> 1)) * 8 + lr][c * 16 + (lm & 1) * 8]);
        att_mma(DT, s[n], qa[c], kb[0], kb[1]);
        att_mma(DT, s[n + 1], qa[c], kb[2], kb[3]);
      }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < GG_ATT_BN / 8; n++)
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const int64_t row = u < 2 ? r0 : r1, col = k0 + n * 8 + 2 * t + (u & 1);
        float x = s[n][u] * sl;
        if (col >= a.S || (a.causal && col > row)) x = -INFINITY;
        else if (a.mask && row < a.L) {
          const int64_t mi = moff + row * a.ms[2] + col * a.ms[3];
          if (a.mask == 1) { if (!mb[mi]) x = -INFINITY; }
          else x += att_load(DT, mh + mi) * 1.4426950408889634f;
        }
        s[n][u] = x;
        if (u < 2) mx0 = fmaxf(mx0, x);
        else mx1 = fmaxf(mx1, x);
      }
#pragma unroll
    for (int o2 = 1; o2 < 4; o2 <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
    }
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    const float b0 = n0 == -INFINITY ? 0.f : n0, b1 = n1 == -INFINITY ? 0.f : n1;
    const float al0 = exp2f(m0 - b0), al1 = exp2f(m1 - b1);
    m0 = n0;
    m1 = n1;
    l0 *= al0;
    l1 *= al1;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      o[n][0] *= al0; o[n][1] *= al0;
      o[n][2] *= al1; o[n][3] *= al1;
    }
#pragma unroll
    for (int n = 0; n < GG_ATT_BN / 8; n++) {
      s[n][0] = exp2f(s[n][0] - b0); s[n][1] = exp2f(s[n][1] - b0);
      s[n][2] = exp2f(s[n][2] - b1); s[n][3] = exp2f(s[n][3] - b1);
      l0 += s[n][0] + s[n][1];
      l1 += s[n][2] + s[n][3];
    }
#pragma unroll
    for (int kc = 0; kc < GG_ATT_BN / 16; kc++) {
      const uint32_t pa[4] = {att_pack(DT, s[2 * kc][0], s[2 * kc][1]), att_pack(DT, s[2 * kc][2], s[2 * kc][3]),
                              att_pack(DT, s[2 * kc + 1][0], s[2 * kc + 1][1]), att_pack(DT, s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t vb[4];   /* matrix i: keys 8 (i % 2) on, head columns of n-tile n + i / 2 */
        att_ldsm_t(vb, &Vs[cur][kc * 16 + (lm & 1) * 8 + lr][(n + (lm >> 1)) * 8]);
        att_mma(DT, o[n], pa, vb[0], vb[1]);
        att_mma(DT, o[n + 1], pa, vb[2], vb[3]);
      }
    }
  }
#pragma unroll
  for (int o2 = 1; o2 < 4; o2 <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
  }
  if (KS == 2) {
    /* the second group's rows (the same rows, lane for lane) through the K and V buffers, which
     * both groups are done with, merged into the first's */
    float *X = (float *)&Ks[0][0][0], *XS = (float *)&Vs[0][0][0];
    __syncthreads();
    if (grp == 1) {
#pragma unroll
      for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int u = 0; u < 4; u++) X[(n * 4 + u) * 128 + lt] = o[n][u];
      XS[lt] = m0; XS[128 + lt] = m1; XS[256 + lt] = l0; XS[384 + lt] = l1;
    }
    __syncthreads();
    if (grp == 1) return;
    const float mb0 = XS[lt], mb1 = XS[128 + lt], t0 = fmaxf(m0, mb0), t1 = fmaxf(m1, mb1);
    const float c0 = t0 == -INFINITY ? 0.f : t0, c1 = t1 == -INFINITY ? 0.f : t1;
    const float a0 = exp2f(m0 - c0), a1 = exp2f(m1 - c1), e0 = exp2f(mb0 - c0), e1 = exp2f(mb1 - c1);
    l0 = l0 * a0 + XS[256 + lt] * e0;
    l1 = l1 * a1 + XS[384 + lt] * e1;
    m0 = t0;
    m1 = t1;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      o[n][0] = o[n][0] * a0 + X[(n * 4 + 0) * 128 + lt] * e0;
      o[n][1] = o[n][1] * a0 + X[(n * 4 + 1) * 128 + lt] * e0;
      o[n][2] = o[n][2] * a1 + X[(n * 4 + 2) * 128 + lt] * e1;
      o[n][3] = o[n][3] * a1 + X[(n * 4 + 3) * 128 + lt] * e1;
    }
  }
  const float i0 = l0 > 0 ? 1.f / l0 : 0.f, i1 = l1 > 0 ? 1.f / l1 : 0.f;
  if (a.lse && t == 0) {   /* natural log of the sum, the maximum back from base 2 */
    if (r0 < a.L) a.lse[bh * a.L + r0] = l0 > 0 ? (m0 + log2f(l0)) * 0.6931471805599453f : -INFINITY;
    if (r1 < a.L) a.lse[bh * a.L + r1] = l1 > 0 ? (m1 + log2f(l1)) * 0.6931471805599453f : -INFINITY;
  }
  /* the output tile through shared memory (the query buffer with two groups, the first K buffer
   * with one), then stored in 16-byte pieces (a lane's 4-byte pieces used 4 bytes of each 32-byte
   * sector), where the rows are aligned; else each lane stores its pairs */
  uint16_t *Y = y + b * a.ys[0] + h * a.ys[1];
  const bool ysm = NB == 2 && ((uintptr_t)Y % 16 == 0) && a.ys[2] % 8 == 0;
  if (ysm) {
    uint16_t(*Os)[D + 8] = KS == 2 ? Qx : Ks[0];
    if (KS == 1) att_sync<KS>(0);   /* every warp is done with the last key tile */
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      const uint32_t w0 = att_pack(DT, o[n][0] * i0, o[n][1] * i0), w1 = att_pack(DT, o[n][2] * i1, o[n][3] * i1);
      memcpy(&Os[warp * 16 + g][n * 8 + 2 * t], &w0, 4);
      memcpy(&Os[warp * 16 + g + 8][n * 8 + 2 * t], &w1, 4);
    }
    att_sync<KS>(0);
    for (int i = lt; i < GG_ATT_BM * D / 8; i += 128) {
      const int j = i / (D / 8), e = i % (D / 8) * 8;
      if (q0 + j < a.L) *(uint4 *)(Y + (q0 + j) * a.ys[2] + e) = *(const uint4 *)&Os[j][e];
    }
    return;
  }
#pragma unroll
  for (int n = 0; n < D / 8; n++) {
    const uint32_t w0 = att_pack(DT, o[n][0] * i0, o[n][1] * i0), w1 = att_pack(DT, o[n][2] * i1, o[n][3] * i1);
    if (r0 < a.L) memcpy(Y + r0 * a.ys[2] + n * 8 + 2 * t, &w0, 4);
    if (r1 < a.L) memcpy(Y + r1 * a.ys[2] + n * 8 + 2 * t, &w1, 4);
  }
}

/* float32: the same online softmax on the FMA units, in float32 throughout (no tensor cores: float32's
 * accuracy, as PyTorch's memory-efficient kernel keeps it). A block takes 64 query rows of one
 * (batch, head), in shared memory, and two groups of 128 threads walk alternate key tiles of 32 keys,
 * each with its own K, V and P buffers (rows padded by 4 floats: 16-byte reads without bank
 * conflicts), maximum, sum and output; the second group's are merged into the first's at the end. In
 * a group, thread (ty, tx) = (t / 8, t % 8) computes S for query rows ty + 16 i (i < 4) against keys
 * tx + 8 j (j < 4), so that a row's maximum and sum are a shuffle among 8 lanes, and the output's
 * columns 4 tx + 32 c .. + 3 (c < D / 32) of the same rows; P passes through shared memory between
 * the two products. The blocks with the most causal key tiles are launched first. */
#define GG_ATF_BM 64
#define GG_ATF_BN 32
#define GG_ATF_PP (GG_ATF_BN + 8)
#define GG_ATF_GROUP ((size_t)2 * GG_ATF_BN * (D + 4) + (size_t)GG_ATF_BM * GG_ATF_PP)   /* one group's floats: K, V, P */
static constexpr size_t att_f32_smem(int D) { return sizeof(float) * ((size_t)GG_ATF_BM * (D + 4) + 2 * GG_ATF_GROUP); }

static __device__ __forceinline__ float4 att_f4(const float *p, bool vec) {
  return vec ? *(const float4 *)p : make_float4(p[0], p[1], p[2], p[3]);
}

template <int D> __global__ void __launch_bounds__(256, 2) attention_f32(gg_attn a, const float *q, const float *k, const float *v, const void *mask, float *y) {
  constexpr int DP = D + 4, NC = D / 32;
  extern __shared__ float4 att_smem[];
  const int g = threadIdx.x >> 7, lt = threadIdx.x & 127, ty = lt >> 3, tx = lt & 7;
  float *Qs = (float *)att_smem, *Ks = Qs + GG_ATF_BM * DP + g * GG_ATF_GROUP, *Vs = Ks + GG_ATF_BN * DP, *Ps = Vs + GG_ATF_BN * DP;
  const int64_t bh = blockIdx.x, b = bh / a.H, h = bh % a.H, hk = h / (a.H / a.Hk);
  const int64_t q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * GG_ATF_BM;
  const float *Q = q + b * a.qs[0] + h * a.qs[1], *K = k + b * a.ks[0] + hk * a.ks[1], *V = v + b * a.vs[0] + hk * a.vs[1];
  const bool qvec = (uintptr_t)Q % 16 == 0 && a.qs[2] % 4 == 0, kvec = (uintptr_t)K % 16 == 0 && a.ks[2] % 4 == 0,
             vvec = (uintptr_t)V % 16 == 0 && a.vs[2] % 4 == 0;
  for (int i = threadIdx.x; i < GG_ATF_BM * D / 4; i += blockDim.x) {
    const int r = i / (D / 4), e = i % (D / 4) * 4;
    *(float4 *)&Qs[r * DP + e] = q0 + r < a.L ? att_f4(Q + (q0 + r) * a.qs[2] + e, qvec) : make_float4(0, 0, 0, 0);
  }
  __syncthreads();
  float o[4][NC][4], m[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    m[i] = -INFINITY;
    l[i] = 0;
#pragma unroll
    for (int c = 0; c < NC; c++) o[i][c][0] = o[i][c][1] = o[i][c][2] = o[i][c][3] = 0;
  }
  const float sl = (float)a.scale * 1.4426950408889634f;   /* scale and log2(e): exp2 below */
  const int64_t kend = a.causal && q0 + GG_ATF_BM < a.S ? q0 + GG_ATF_BM : a.S;
  const uint8_t *mb = (const uint8_t *)mask;
  const float *mf = (const float *)mask;
  const int64_t moff = b * a.ms[0] + h * a.ms[1];
  for (int64_t k0 = g * GG_ATF_BN; k0 < kend; k0 += 2 * GG_ATF_BN) {
    att_group_sync(g);   /* the group is done with its last tile and P */
    for (int i = lt; i < GG_ATF_BN * D / 4; i += 128) {
      const int j = i / (D / 4), e = i % (D / 4) * 4;
      const bool in = k0 + j < a.S;
      *(float4 *)&Ks[j * DP + e] = in ? att_f4(K + (k0 + j) * a.ks[2] + e, kvec) : make_float4(0, 0, 0, 0);
      *(float4 *)&Vs[j * DP + e] = in ? att_f4(V + (k0 + j) * a.vs[2] + e, vvec) : make_float4(0, 0, 0, 0);
    }
    att_group_sync(g);
    float s[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0;
#pragma unroll 4
    for (int d = 0; d < D; d += 4) {
      float4 qf[4], kf[4];
#pragma unroll
      for (int i = 0; i < 4; i++) qf[i] = *(const float4 *)&Qs[(ty + 16 * i) * DP + d];
#pragma unroll
      for (int j = 0; j < 4; j++) kf[j] = *(const float4 *)&Ks[(tx + 8 * j) * DP + d];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
          s[i][j] = fmaf(qf[i].x, kf[j].x, s[i][j]);
          s[i][j] = fmaf(qf[i].y, kf[j].y, s[i][j]);
          s[i][j] = fmaf(qf[i].z, kf[j].z, s[i][j]);
          s[i][j] = fmaf(qf[i].w, kf[j].w, s[i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int64_t row = q0 + ty + 16 * i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int64_t col = k0 + tx + 8 * j;
        float x = s[i][j] * sl;
        if (col >= a.S || (a.causal && col > row)) x = -INFINITY;
        else if (a.mask && row < a.L) {
          const int64_t mi = moff + row * a.ms[2] + col * a.ms[3];
          if (a.mask == 1) { if (!mb[mi]) x = -INFINITY; }
          else x += mf[mi] * 1.4426950408889634f;
        }
        s[i][j] = x;
        mx = fmaxf(mx, x);
      }
#pragma unroll
      for (int o2 = 1; o2 < 8; o2 <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o2));
      const float n = fmaxf(m[i], mx), base = n == -INFINITY ? 0.f : n, al = exp2f(m[i] - base);
      m[i] = n;
      l[i] *= al;
#pragma unroll
      for (int c = 0; c < NC; c++) { o[i][c][0] *= al; o[i][c][1] *= al; o[i][c][2] *= al; o[i][c][3] *= al; }
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const float p = exp2f(s[i][j] - base);
        l[i] += p;
        Ps[(ty + 16 * i) * GG_ATF_PP + tx + 8 * j] = p;
      }
    }
    att_group_sync(g);
#pragma unroll 2
    for (int j = 0; j < GG_ATF_BN; j += 4) {
      float4 pf[4];
#pragma unroll
      for (int i = 0; i < 4; i++) pf[i] = *(const float4 *)&Ps[(ty + 16 * i) * GG_ATF_PP + j];
#pragma unroll
      for (int jj = 0; jj < 4; jj++)
#pragma unroll
        for (int c = 0; c < NC; c++) {
          const float4 vf = *(const float4 *)&Vs[(j + jj) * DP + 4 * tx + 32 * c];
#pragma unroll
          for (int i = 0; i < 4; i++) {
            const float p = jj == 0 ? pf[i].x : jj == 1 ? pf[i].y : jj == 2 ? pf[i].z : pf[i].w;
            o[i][c][0] = fmaf(p, vf.x, o[i][c][0]);
            o[i][c][1] = fmaf(p, vf.y, o[i][c][1]);
            o[i][c][2] = fmaf(p, vf.z, o[i][c][2]);
            o[i][c][3] = fmaf(p, vf.w, o[i][c][3]);
          }
        }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int o2 = 1; o2 < 8; o2 <<= 1) l[i] += __shfl_xor_sync(0xffffffffu, l[i], o2);
  /* the second group's maximum, sum and output, through its own buffers, merged into the first's */
  __syncthreads();
  float *X = Qs + GG_ATF_BM * DP + GG_ATF_GROUP, *XM = X + GG_ATF_BM * D, *XL = XM + GG_ATF_BM;
  if (g == 1) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      if (tx == 0) { XM[ty + 16 * i] = m[i]; XL[ty + 16 * i] = l[i]; }
#pragma unroll
      for (int c = 0; c < NC; c++) *(float4 *)&X[(i * NC + c) * 512 + lt * 4] = make_float4(o[i][c][0], o[i][c][1], o[i][c][2], o[i][c][3]);
    }
  }
  __syncthreads();
  if (g == 1) return;
  float *Y = y + b * a.ys[0] + h * a.ys[1];
  const bool yvec = (uintptr_t)Y % 16 == 0 && a.ys[2] % 4 == 0;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int64_t row = q0 + ty + 16 * i;
    const float m1 = XM[ty + 16 * i], mt = fmaxf(m[i], m1), base = mt == -INFINITY ? 0.f : mt;
    const float a0 = exp2f(m[i] - base), a1 = exp2f(m1 - base), li = l[i] * a0 + XL[ty + 16 * i] * a1;
    const float inv = li > 0 ? 1.f / li : 0.f;
    if (row >= a.L) continue;
    if (a.lse && tx == 0) a.lse[bh * a.L + row] = li > 0 ? (base + log2f(li)) * 0.6931471805599453f : -INFINITY;
#pragma unroll
    for (int c = 0; c < NC; c++) {
      const float4 x = *(const float4 *)&X[(i * NC + c) * 512 + lt * 4];
      float *p = Y + row * a.ys[2] + 4 * tx + 32 * c;
      const float4 w = make_float4((o[i][c][0] * a0 + x.x * a1) * inv, (o[i][c][1] * a0 + x.y * a1) * inv, (o[i][c][2] * a0 + x.z * a1) * inv,
                                   (o[i][c][3] * a0 + x.w * a1) * inv);
      if (yvec) *(float4 *)p = w;
      else { p[0] = w.x; p[1] = w.y; p[2] = w.z; p[3] = w.w; }
    }
  }
}

/* shared memory past 48 KiB is granted per kernel, once */
static pthread_once_t att_f32_once = PTHREAD_ONCE_INIT;
static void att_f32_init(void) {
  cudaFuncSetAttribute(attention_f32<32>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)att_f32_smem(32));
  cudaFuncSetAttribute(attention_f32<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)att_f32_smem(64));
  cudaFuncSetAttribute(attention_f32<96>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)att_f32_smem(96));
  cudaFuncSetAttribute(attention_f32<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)att_f32_smem(128));
}

/* two groups of warps a block (attention_tc's KS = 2) where the grid of one-group blocks would not
 * fill the GPU's slots for them once (4 a multiprocessor at 128 registers): on the H200, GPT-2's 384
 * blocks (b4 s512) ran 4% faster split, BERT-base's 192 (b8 s128) 1.5%, Llama's 512 1%, and ViT-B/16's
 * 768 1% slower. GCC_GRAPH_ATTENTION_SPLIT=0 never, =1 wherever the head size allows (up to 64), for
 * measuring either. */
static int att_sms, att_split_env = -1;
static pthread_once_t att_split_once = PTHREAD_ONCE_INIT;
static void att_split_init(void) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&att_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) att_sms = 0;
  const char *e = getenv("GCC_GRAPH_ATTENTION_SPLIT");
  if (e && *e) att_split_env = strcmp(e, "0") != 0;
}

template <int D> static void att_tc_launch(int dt, bool split, dim3 grid, cudaStream_t st, const gg_attn &a, const uint16_t *Q, const uint16_t *K,
                                           const uint16_t *V, const void *mask, uint16_t *Y) {
  if constexpr (D <= 64) {
    if (split) {
      if (dt == 3) attention_tc<3, D, 2><<<grid, 256, 0, st>>>(a, Q, K, V, mask, Y);
      else attention_tc<2, D, 2><<<grid, 256, 0, st>>>(a, Q, K, V, mask, Y);
      return;
    }
  }
  if (dt == 3) attention_tc<3, D, 1><<<grid, 128, 0, st>>>(a, Q, K, V, mask, Y);
  else attention_tc<2, D, 1><<<grid, 128, 0, st>>>(a, Q, K, V, mask, Y);
}

void gg_cu_attention(int dt, const gg_attn *a, const void *q, const void *k, const void *v, const void *mask, void *y) {
  if (a->B * a->H == 0 || a->L == 0) return;
  cudaStream_t st = (cudaStream_t)gg_cu_stream();
  if (dt == 0 || dt == 4) {   /* float32 (TF32 allowed or not: the FMA units either way) */
    dim3 g32((unsigned)(a->B * a->H), (unsigned)((a->L + GG_ATF_BM - 1) / GG_ATF_BM));   /* as attention_tc's grid */
    const float *Q = (const float *)q, *K = (const float *)k, *V = (const float *)v;
    float *Y = (float *)y;
    pthread_once(&att_f32_once, att_f32_init);
    switch (a->D) {
      case 32: attention_f32<32><<<g32, 256, att_f32_smem(32), st>>>(*a, Q, K, V, mask, Y); break;
      case 64: attention_f32<64><<<g32, 256, att_f32_smem(64), st>>>(*a, Q, K, V, mask, Y); break;
      case 96: attention_f32<96><<<g32, 256, att_f32_smem(96), st>>>(*a, Q, K, V, mask, Y); break;
      case 128: attention_f32<128><<<g32, 256, att_f32_smem(128), st>>>(*a, Q, K, V, mask, Y); break;
    }
    return;
  }
  const uint16_t *Q = (const uint16_t *)q, *K = (const uint16_t *)k, *V = (const uint16_t *)v;
  uint16_t *Y = (uint16_t *)y;
  /* the (batch, head) pairs along x: a causal grid's heaviest query blocks (y reversed in the
   * kernel) are then the first to launch, for every head */
  dim3 grid((unsigned)(a->B * a->H), (unsigned)((a->L + GG_ATT_BM - 1) / GG_ATT_BM));
  pthread_once(&att_split_once, att_split_init);
  const bool split = a->D <= 64 && (att_split_env == 1 || (att_split_env < 0 && (int64_t)grid.x * grid.y <= 4 * (int64_t)att_sms));
  switch (a->D) {
    case 32: att_tc_launch<32>(dt, split, grid, st, *a, Q, K, V, mask, Y); break;
    case 64: att_tc_launch<64>(dt, split, grid, st, *a, Q, K, V, mask, Y); break;
    case 96: att_tc_launch<96>(dt, split, grid, st, *a, Q, K, V, mask, Y); break;
    case 128: att_tc_launch<128>(dt, split, grid, st, *a, Q, K, V, mask, Y); break;
  }
}

/* ---------------------------------------------------------------- attention's backward (--train) */

/* FlashAttention-2's backward on mma.sync, for 16-bit operands (the forward above saved each query
 * row's log-sum-exp): a block of four warps owns 64 keys of one (batch, head), each warp 16 of them,
 * with their K and V fragments in registers and their dK, dV accumulators (float32), and walks the
 * query tiles of 64 (causal: from its own diagonal on). Per tile, transposed so that keys are the rows:
 * S^T = K Q^T, P^T = exp(S^T - lse) from the saved log-sum-exp, dV += P^T dO, dP^T = V dO^T,
 * dS^T = P^T (dP^T - Dr) with Dr = rowsum(dO o) (att_bwd_rows, before), dK += dS^T Q; dS^T goes
 * through shared memory so that each warp adds 16 query rows of dQ = dS K into a float32 accumulator
 * (atomic adds: every key block adds to every query row), rounded by att_bwd_dq after. P and dS are
 * rounded to the operands' dtype for the products, as the forward's P is; the scale is applied to
 * dK and dQ at the end. Instantiated for the head sizes a GPU test runs (32 and 64; the template
 * takes 96 and 128, which spill registers, once a case exercises them: cuda_attention_backward_fits). */
#define GG_ATB_BM 64
#define GG_ATB_BN 64
static constexpr size_t att_bwd_smem(int D) { return sizeof(uint16_t) * (3 * (size_t)GG_ATB_BN * (D + 8) + (size_t)GG_ATB_BN * (GG_ATB_BM + 8)) + 2 * GG_ATB_BM * sizeof(float); }

static __device__ __forceinline__ float att_ld(int dt, const uint16_t *p) { return att_load(dt, p); }
static __device__ __forceinline__ float att_ld(int, const float *p) { return *p; }
static __device__ __forceinline__ void att_st(int dt, uint16_t *p, float x) { *p = (uint16_t)(att_pack(dt, x, 0.f) & 0xffffu); }
static __device__ __forceinline__ void att_st(int, float *p, float x) { *p = x; }

/* Dr[row] = sum_d gy[row][d] y[row][d] in float32, a warp per row; dq's accumulator zeroed */
template <int DT, typename T> __global__ void att_bwd_rows(gg_attn a, const T *y, const T *gy, float *dr, float *dqa) {
  const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32, rows = a.B * a.H * a.L;
  const int lane = threadIdx.x % 32;
  if (w >= rows) return;
  const int64_t bh = w / a.L, i = w % a.L, b = bh / a.H, h = bh % a.H;
  const T *Y = y + b * a.ys[0] + h * a.ys[1] + i * a.ys[2], *G = gy + b * a.gs[0] + h * a.gs[1] + i * a.gs[2];
  float s = 0;
  for (int d = lane; d < a.D; d += 32) {
    s += att_ld(DT, Y + d) * att_ld(DT, G + d);
    dqa[w * a.D + d] = 0;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) dr[w] = s;
}

/* dq = its accumulator times the scale, rounded */
template <int DT, typename T> __global__ void att_bwd_dq(int64_t n, const float *dqa, float scale, T *dq) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) att_st(DT, dq + i, dqa[i] * scale);
}

template <int DT, int D> __global__ void __launch_bounds__(128) attention_bwd_tc(gg_attn a, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                                                                 const void *mask, const uint16_t *gy, const float *dr, float *dqa,
                                                                                 uint16_t *dk, uint16_t *dv) {
  constexpr int DP = D + 8, SP = GG_ATB_BM + 8;
  extern __shared__ float4 atb_smem[];
  uint16_t *Ks = (uint16_t *)atb_smem, *Qs = Ks + GG_ATB_BN * DP, *Gs = Qs + GG_ATB_BM * DP, *Ss = Gs + GG_ATB_BM * DP;
  float *Ls = (float *)(Ss + GG_ATB_BN * SP), *Dl = Ls + GG_ATB_BM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3, lr = lane & 7, lm = lane >> 3;
  const int64_t bh = blockIdx.x, b = bh / a.H, h = bh % a.H;
  const int64_t k0 = (int64_t)blockIdx.y * GG_ATB_BN, c0 = k0 + warp * 16 + g, c1 = c0 + 8;   /* this thread's key rows */
  const uint16_t *Q = q + b * a.qs[0] + h * a.qs[1], *K = k + b * a.ks[0] + h * a.ks[1], *V = v + b * a.vs[0] + h * a.vs[1];
  const uint16_t *G = gy + b * a.gs[0] + h * a.gs[1];
  /* K and V rows of this warp as A fragments; the block's K tile in shared memory (dQ's operand).
   * Where their rows are 16-byte aligned, K's tile is copied into Ks and V's into Qs (which the first
   * query tile overwrites after the loop's first barrier) in 16-byte pieces and the fragments read
   * through ldmatrix; else each lane loads its pairs (4 bytes of each 32-byte sector) */
  uint32_t ka[D / 16][4], va[D / 16][4];
  if ((uintptr_t)K % 16 == 0 && a.ks[2] % 8 == 0 && (uintptr_t)V % 16 == 0 && a.vs[2] % 8 == 0) {
    for (int i = threadIdx.x; i < GG_ATB_BN * D / 8; i += blockDim.x) {
      const int j = i / (D / 8), e = i % (D / 8) * 8;
      const bool in = k0 + j < a.S;
      att_cp16(&Ks[j * DP + e], in ? K + (k0 + j) * a.ks[2] + e : K, in);
      att_cp16(&Qs[j * DP + e], in ? V + (k0 + j) * a.vs[2] + e : V, in);
    }
    att_cp_commit();
    att_cp_wait<0>();
    __syncthreads();
#pragma unroll
    for (int c = 0; c < D / 16; c++) {   /* matrix i: rows 8 (i % 2) on of the warp's 16, columns 8 (i / 2) on */
      att_ldsm(ka[c], &Ks[(warp * 16 + (lm & 1) * 8 + lr) * DP + c * 16 + (lm >> 1) * 8]);
      att_ldsm(va[c], &Qs[(warp * 16 + (lm & 1) * 8 + lr) * DP + c * 16 + (lm >> 1) * 8]);
    }
  } else {
#pragma unroll
    for (int c = 0; c < D / 16; c++) {
      ATT_FRAG(ka[c], K, a.ks[2], c0, c1, a.S, c, t);
      ATT_FRAG(va[c], V, a.vs[2], c0, c1, a.S, c, t);
    }
    for (int i = threadIdx.x; i < GG_ATB_BN * D; i += blockDim.x) {
      const int j = i / D, e = i % D;
      Ks[j * DP + e] = k0 + j < a.S ? K[(k0 + j) * a.ks[2] + e] : (uint16_t)0;
    }
  }
  float dkc[D / 8][4], dvc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++) dkc[n][0] = dkc[n][1] = dkc[n][2] = dkc[n][3] = dvc[n][0] = dvc[n][1] = dvc[n][2] = dvc[n][3] = 0;
  const float sl = (float)a.scale * 1.4426950408889634f;
  const uint8_t *mb = (const uint8_t *)mask;
  const uint16_t *mh = (const uint16_t *)mask;
  const int64_t moff = b * a.ms[0] + h * a.ms[1];
  const bool qvec = (uintptr_t)Q % 16 == 0 && a.qs[2] % 8 == 0, gvec = (uintptr_t)G % 16 == 0 && a.gs[2] % 8 == 0;
  for (int64_t q0 = a.causal ? k0 / GG_ATB_BM * GG_ATB_BM : 0; q0 < a.L; q0 += GG_ATB_BM) {
    __syncthreads();   /* every warp is done with the last tile's Q, dO and dS */
    for (int i = threadIdx.x; i < GG_ATB_BM * D / 8; i += blockDim.x) {
      const int j = i / (D / 8), e = i % (D / 8) * 8;
      const bool in = q0 + j < a.L;
      const uint16_t *qr = Q + (q0 + j) * a.qs[2] + e, *gr = G + (q0 + j) * a.gs[2] + e;
      if (qvec) att_cp16(&Qs[j * DP + e], in ? qr : Q, in);
      else for (int u = 0; u < 8; u++) Qs[j * DP + e + u] = in ? qr[u] : (uint16_t)0;
      if (gvec) att_cp16(&Gs[j * DP + e], in ? gr : G, in);
      else for (int u = 0; u < 8; u++) Gs[j * DP + e + u] = in ? gr[u] : (uint16_t)0;
    }
    att_cp_commit();
    for (int j = threadIdx.x; j < GG_ATB_BM; j += blockDim.x) {   /* base 2; +inf leaves the row out (past L, or every key left out) */
      const float l = q0 + j < a.L ? a.lse[bh * a.L + q0 + j] : -INFINITY;
      Ls[j] = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
      Dl[j] = q0 + j < a.L ? dr[bh * a.L + q0 + j] : 0.f;
    }
    att_cp_wait<0>();
    __syncthreads();
    float s[GG_ATB_BM / 8][4], p[GG_ATB_BM / 8][4];
#pragma unroll
    for (int n = 0; n < GG_ATB_BM / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = p[n][0] = p[n][1] = p[n][2] = p[n][3] = 0;
    /* S^T = K Q^T and dP^T = V dO^T: B fragments from Q and dO rows as stored */
#pragma unroll
    for (int n = 0; n < GG_ATB_BM / 8; n += 2)
#pragma unroll
      for (int c = 0; c < D / 16; c++) {
        uint32_t qb[4], gb[4];
        att_ldsm(qb, &Qs[((n + (lm >> 1)) * 8 + lr) * DP + c * 16 + (lm & 1) * 8]);
        att_ldsm(gb, &Gs[((n + (lm >> 1)) * 8 + lr) * DP + c * 16 + (lm & 1) * 8]);
        att_mma(DT, s[n], ka[c], qb[0], qb[1]);
        att_mma(DT, s[n + 1], ka[c], qb[2], qb[3]);
        att_mma(DT, p[n], va[c], gb[0], gb[1]);
        att_mma(DT, p[n + 1], va[c], gb[2], gb[3]);
      }
    /* P^T in s, dS^T in p (keys are rows: c0 for u < 2, c1 after; queries the columns) */
#pragma unroll
    for (int n = 0; n < GG_ATB_BM / 8; n++)
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const int col = n * 8 + 2 * t + (u & 1);
        const int64_t key = u < 2 ? c0 : c1, row = q0 + col;
        float x = s[n][u] * sl;
        if (key >= a.S || (a.causal && key > row)) x = -INFINITY;
        else if (a.mask && row < a.L) {
          const int64_t mi = moff + row * a.ms[2] + key * a.ms[3];
          if (a.mask == 1) { if (!mb[mi]) x = -INFINITY; }
          else x += att_load(DT, mh + mi) * 1.4426950408889634f;
        }
        const float pr = exp2f(x - Ls[col]);
        s[n][u] = pr;
        p[n][u] = pr * (p[n][u] - Dl[col]);
      }
    /* dV += P^T dO, dK += dS^T Q: A fragments from the accumulators, B from dO and Q transposed */
#pragma unroll
    for (int kc = 0; kc < GG_ATB_BM / 16; kc++) {
      const uint32_t pa[4] = {att_pack(DT, s[2 * kc][0], s[2 * kc][1]), att_pack(DT, s[2 * kc][2], s[2 * kc][3]),
                              att_pack(DT, s[2 * kc + 1][0], s[2 * kc + 1][1]), att_pack(DT, s[2 * kc + 1][2], s[2 * kc + 1][3])};
      const uint32_t da[4] = {att_pack(DT, p[2 * kc][0], p[2 * kc][1]), att_pack(DT, p[2 * kc][2], p[2 * kc][3]),
                              att_pack(DT, p[2 * kc + 1][0], p[2 * kc + 1][1]), att_pack(DT, p[2 * kc + 1][2], p[2 * kc + 1][3])};
      /* dS^T rounded into shared memory, for dQ */
      const int sr = warp * 16 + g;
      memcpy(&Ss[sr * SP + kc * 16 + 2 * t], &da[0], 4);
      memcpy(&Ss[(sr + 8) * SP + kc * 16 + 2 * t], &da[1], 4);
      memcpy(&Ss[sr * SP + kc * 16 + 8 + 2 * t], &da[2], 4);
      memcpy(&Ss[(sr + 8) * SP + kc * 16 + 8 + 2 * t], &da[3], 4);
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t gb[4], qb[4];
        att_ldsm_t(gb, &Gs[(kc * 16 + (lm & 1) * 8 + lr) * DP + (n + (lm >> 1)) * 8]);
        att_ldsm_t(qb, &Qs[(kc * 16 + (lm & 1) * 8 + lr) * DP + (n + (lm >> 1)) * 8]);
        att_mma(DT, dvc[n], pa, gb[0], gb[1]);
        att_mma(DT, dvc[n + 1], pa, gb[2], gb[3]);
        att_mma(DT, dkc[n], da, qb[0], qb[1]);
        att_mma(DT, dkc[n + 1], da, qb[2], qb[3]);
      }
    }
    __syncthreads();   /* dS^T of all 64 keys stored */
    /* dQ rows q0 + 16 warp .. + 15 += dS K: A from dS^T transposed, B from K's tile transposed */
    const int64_t r0 = q0 + warp * 16 + g, r1 = r0 + 8;
    float *DQ = dqa + bh * a.L * D;
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
      float acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
      for (int kc = 0; kc < GG_ATB_BN / 16; kc++) {
        uint32_t sa[4], kb[4];
        att_ldsm_t(sa, &Ss[(kc * 16 + (lm >> 1) * 8 + lr) * SP + warp * 16 + (lm & 1) * 8]);
        att_ldsm_t(kb, &Ks[(kc * 16 + (lm & 1) * 8 + lr) * DP + (n + (lm >> 1)) * 8]);
        att_mma(DT, acc[0], sa, kb[0], kb[1]);
        att_mma(DT, acc[1], sa, kb[2], kb[3]);
      }
#pragma unroll
      for (int j = 0; j < 2; j++) {
        const int col = (n + j) * 8 + 2 * t;
        if (r0 < a.L) { atomicAdd(&DQ[r0 * D + col], acc[j][0]); atomicAdd(&DQ[r0 * D + col + 1], acc[j][1]); }
        if (r1 < a.L) { atomicAdd(&DQ[r1 * D + col], acc[j][2]); atomicAdd(&DQ[r1 * D + col + 1], acc[j][3]); }
      }
    }
  }
  /* dK (times the scale) and dV, rounded, contiguous [B H, S, D] */
  uint16_t *DK = dk + bh * a.S * D, *DV = dv + bh * a.S * D;
  const float sc = (float)a.scale;
#pragma unroll
  for (int n = 0; n < D / 8; n++) {
    const int col = n * 8 + 2 * t;
    const uint32_t k0w = att_pack(DT, dkc[n][0] * sc, dkc[n][1] * sc), k1w = att_pack(DT, dkc[n][2] * sc, dkc[n][3] * sc);
    const uint32_t v0w = att_pack(DT, dvc[n][0], dvc[n][1]), v1w = att_pack(DT, dvc[n][2], dvc[n][3]);
    if (c0 < a.S) { memcpy(DK + c0 * D + col, &k0w, 4); memcpy(DV + c0 * D + col, &v0w, 4); }
    if (c1 < a.S) { memcpy(DK + c1 * D + col, &k1w, 4); memcpy(DV + c1 * D + col, &v1w, 4); }
  }
}

/* float32's backward on the FMA units (float32 throughout, as the forward): a block of 256 threads owns
 * 64 keys of one (batch, head), its K and V tiles in shared memory, and walks the query tiles of 64 as
 * the kernel above does. Thread (ty, tx) = (t / 16, t % 16) computes S^T and dP^T for keys ty + 16 i
 * and queries tx + 16 j (i, j < 4), P^T and dS^T go to shared memory, then the same thread accumulates
 * dV and dK for keys ty + 16 i, head columns 4 tx + 64 c .. + 3, and adds dQ for queries ty + 16 i,
 * the same columns (atomically, 16 bytes at a time on sm_90). Head size 64 (two blocks an SM: 128
 * registers, 105 KiB of shared memory each; the template takes 128 too, untested yet). */
#define GG_ATG_PP (GG_ATB_BM + 4)
static constexpr size_t att_bwd_f32_smem(int D) { return sizeof(float) * (4 * (size_t)GG_ATB_BN * (D + 4) + 2 * (size_t)GG_ATB_BN * GG_ATG_PP + 2 * GG_ATB_BM); }

static __device__ __forceinline__ void att_red4(float *p, float4 x, bool vec) {
#if __CUDA_ARCH__ >= 900
  if (vec) { atomicAdd((float4 *)p, x); return; }
#endif
  (void)vec;
  atomicAdd(p, x.x); atomicAdd(p + 1, x.y); atomicAdd(p + 2, x.z); atomicAdd(p + 3, x.w);
}

template <int D> __global__ void __launch_bounds__(256, D == 64 ? 2 : 1) attention_bwd_f32(gg_attn a, const float *q, const float *k, const float *v, const void *mask,
                                                                          const float *gy, const float *dr, float *dqa, float *dk, float *dv) {
  constexpr int DP = D + 4, PP = GG_ATG_PP, NC = D / 64;
  extern __shared__ float4 atg_smem[];
  float *Ks = (float *)atg_smem, *Vs = Ks + GG_ATB_BN * DP, *Qs = Vs + GG_ATB_BN * DP, *Gs = Qs + GG_ATB_BM * DP, *Ps = Gs + GG_ATB_BM * DP;
  float *Ss = Ps + GG_ATB_BN * PP, *Ls = Ss + GG_ATB_BN * PP, *Dl = Ls + GG_ATB_BM;
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
  const int64_t bh = blockIdx.x, b = bh / a.H, h = bh % a.H, k0 = (int64_t)blockIdx.y * GG_ATB_BN;
  const float *Q = q + b * a.qs[0] + h * a.qs[1], *K = k + b * a.ks[0] + h * a.ks[1], *V = v + b * a.vs[0] + h * a.vs[1];
  const float *G = gy + b * a.gs[0] + h * a.gs[1];
  const bool qvec = (uintptr_t)Q % 16 == 0 && a.qs[2] % 4 == 0, kvec = (uintptr_t)K % 16 == 0 && a.ks[2] % 4 == 0,
             vvec = (uintptr_t)V % 16 == 0 && a.vs[2] % 4 == 0, gvec = (uintptr_t)G % 16 == 0 && a.gs[2] % 4 == 0;
  for (int i = threadIdx.x; i < GG_ATB_BN * D / 4; i += blockDim.x) {
    const int j = i / (D / 4), e = i % (D / 4) * 4;
    const bool in = k0 + j < a.S;
    *(float4 *)&Ks[j * DP + e] = in ? att_f4(K + (k0 + j) * a.ks[2] + e, kvec) : make_float4(0, 0, 0, 0);
    *(float4 *)&Vs[j * DP + e] = in ? att_f4(V + (k0 + j) * a.vs[2] + e, vvec) : make_float4(0, 0, 0, 0);
  }
  float dkc[4][NC][4], dvc[4][NC][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int c = 0; c < NC; c++)
#pragma unroll
      for (int e = 0; e < 4; e++) dkc[i][c][e] = dvc[i][c][e] = 0;
  const float sl = (float)a.scale * 1.4426950408889634f;
  const uint8_t *mb = (const uint8_t *)mask;
  const float *mf = (const float *)mask;
  const int64_t moff = b * a.ms[0] + h * a.ms[1];
  const bool qavec = (uintptr_t)dqa % 16 == 0;
  for (int64_t q0 = a.causal ? k0 / GG_ATB_BM * GG_ATB_BM : 0; q0 < a.L; q0 += GG_ATB_BM) {
    __syncthreads();   /* every thread is done with the last tile */
    for (int i = threadIdx.x; i < GG_ATB_BM * D / 4; i += blockDim.x) {
      const int j = i / (D / 4), e = i % (D / 4) * 4;
      const bool in = q0 + j < a.L;
      *(float4 *)&Qs[j * DP + e] = in ? att_f4(Q + (q0 + j) * a.qs[2] + e, qvec) : make_float4(0, 0, 0, 0);
      *(float4 *)&Gs[j * DP + e] = in ? att_f4(G + (q0 + j) * a.gs[2] + e, gvec) : make_float4(0, 0, 0, 0);
    }
    for (int j = threadIdx.x; j < GG_ATB_BM; j += blockDim.x) {
      const float l = q0 + j < a.L ? a.lse[bh * a.L + q0 + j] : -INFINITY;
      Ls[j] = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
      Dl[j] = q0 + j < a.L ? dr[bh * a.L + q0 + j] : 0.f;
    }
    __syncthreads();
    float s[4][4], p[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) s[i][j] = p[i][j] = 0;
#pragma unroll 2
    for (int d = 0; d < D; d += 4) {
      float4 kf[4], vf[4], qf[4], gf[4];
#pragma unroll
      for (int i = 0; i < 4; i++) kf[i] = *(const float4 *)&Ks[(ty + 16 * i) * DP + d], vf[i] = *(const float4 *)&Vs[(ty + 16 * i) * DP + d];
#pragma unroll
      for (int j = 0; j < 4; j++) qf[j] = *(const float4 *)&Qs[(tx + 16 * j) * DP + d], gf[j] = *(const float4 *)&Gs[(tx + 16 * j) * DP + d];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
          s[i][j] = fmaf(kf[i].x, qf[j].x, fmaf(kf[i].y, qf[j].y, fmaf(kf[i].z, qf[j].z, fmaf(kf[i].w, qf[j].w, s[i][j]))));
          p[i][j] = fmaf(vf[i].x, gf[j].x, fmaf(vf[i].y, gf[j].y, fmaf(vf[i].z, gf[j].z, fmaf(vf[i].w, gf[j].w, p[i][j]))));
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int col = tx + 16 * j;
        const int64_t key = k0 + ty + 16 * i, row = q0 + col;
        float x = s[i][j] * sl;
        if (key >= a.S || (a.causal && key > row)) x = -INFINITY;
        else if (a.mask && row < a.L) {
          const int64_t mi = moff + row * a.ms[2] + key * a.ms[3];
          if (a.mask == 1) { if (!mb[mi]) x = -INFINITY; }
          else x += mf[mi] * 1.4426950408889634f;
        }
        const float pr = exp2f(x - Ls[col]);
        Ps[(ty + 16 * i) * PP + col] = pr;
        Ss[(ty + 16 * i) * PP + col] = pr * (p[i][j] - Dl[col]);
      }
    __syncthreads();
    /* dV += P^T dO and dK += dS^T Q for keys ty + 16 i */
#pragma unroll 2
    for (int j = 0; j < GG_ATB_BM; j += 4) {
      float4 pf[4], sf[4];
#pragma unroll
      for (int i = 0; i < 4; i++) pf[i] = *(const float4 *)&Ps[(ty + 16 * i) * PP + j], sf[i] = *(const float4 *)&Ss[(ty + 16 * i) * PP + j];
#pragma unroll
      for (int jj = 0; jj < 4; jj++)
#pragma unroll
        for (int c = 0; c < NC; c++) {
          const float4 gf = *(const float4 *)&Gs[(j + jj) * DP + 4 * tx + 64 * c], qf = *(const float4 *)&Qs[(j + jj) * DP + 4 * tx + 64 * c];
#pragma unroll
          for (int i = 0; i < 4; i++) {
            const float pv = jj == 0 ? pf[i].x : jj == 1 ? pf[i].y : jj == 2 ? pf[i].z : pf[i].w;
            const float sv = jj == 0 ? sf[i].x : jj == 1 ? sf[i].y : jj == 2 ? sf[i].z : sf[i].w;
            dvc[i][c][0] = fmaf(pv, gf.x, dvc[i][c][0]); dvc[i][c][1] = fmaf(pv, gf.y, dvc[i][c][1]);
            dvc[i][c][2] = fmaf(pv, gf.z, dvc[i][c][2]); dvc[i][c][3] = fmaf(pv, gf.w, dvc[i][c][3]);
            dkc[i][c][0] = fmaf(sv, qf.x, dkc[i][c][0]); dkc[i][c][1] = fmaf(sv, qf.y, dkc[i][c][1]);
            dkc[i][c][2] = fmaf(sv, qf.z, dkc[i][c][2]); dkc[i][c][3] = fmaf(sv, qf.w, dkc[i][c][3]);
          }
        }
    }
    /* dQ for queries ty + 16 i: dS (the transpose of what is stored) times K */
    float dqc[4][NC][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int c = 0; c < NC; c++) dqc[i][c][0] = dqc[i][c][1] = dqc[i][c][2] = dqc[i][c][3] = 0;
#pragma unroll 4
    for (int kk = 0; kk < GG_ATB_BN; kk++) {
      float sv[4];
#pragma unroll
      for (int i = 0; i < 4; i++) sv[i] = Ss[kk * PP + ty + 16 * i];
#pragma unroll
      for (int c = 0; c < NC; c++) {
        const float4 kf = *(const float4 *)&Ks[kk * DP + 4 * tx + 64 * c];
#pragma unroll
        for (int i = 0; i < 4; i++) {
          dqc[i][c][0] = fmaf(sv[i], kf.x, dqc[i][c][0]); dqc[i][c][1] = fmaf(sv[i], kf.y, dqc[i][c][1]);
          dqc[i][c][2] = fmaf(sv[i], kf.z, dqc[i][c][2]); dqc[i][c][3] = fmaf(sv[i], kf.w, dqc[i][c][3]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int64_t row = q0 + ty + 16 * i;
      if (row >= a.L) continue;
#pragma unroll
      for (int c = 0; c < NC; c++)
        att_red4(dqa + (bh * a.L + row) * D + 4 * tx + 64 * c, make_float4(dqc[i][c][0], dqc[i][c][1], dqc[i][c][2], dqc[i][c][3]), qavec);
    }
  }
  const float sc = (float)a.scale;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int64_t key = k0 + ty + 16 * i;
    if (key >= a.S) continue;
#pragma unroll
    for (int c = 0; c < NC; c++) {
      float *pk = dk + (bh * a.S + key) * D + 4 * tx + 64 * c, *pv = dv + (bh * a.S + key) * D + 4 * tx + 64 * c;
      pk[0] = dkc[i][c][0] * sc; pk[1] = dkc[i][c][1] * sc; pk[2] = dkc[i][c][2] * sc; pk[3] = dkc[i][c][3] * sc;
      pv[0] = dvc[i][c][0]; pv[1] = dvc[i][c][1]; pv[2] = dvc[i][c][2]; pv[3] = dvc[i][c][3];
    }
  }
}

static pthread_once_t att_bwd_once = PTHREAD_ONCE_INIT;
static void att_bwd_init(void) {
#define GG_ATB_ATTR(DD)                                                                                                   \
  cudaFuncSetAttribute(attention_bwd_tc<2, DD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)att_bwd_smem(DD)); \
  cudaFuncSetAttribute(attention_bwd_tc<3, DD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)att_bwd_smem(DD));
  GG_ATB_ATTR(32)
  GG_ATB_ATTR(64)
#undef GG_ATB_ATTR
  cudaFuncSetAttribute(attention_bwd_f32<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)att_bwd_f32_smem(64));
}

void gg_cu_attention_backward(int dt, const gg_attn *a, const void *q, const void *k, const void *v, const void *mask, const void *y, const void *gy, void *dq,
                              void *dk, void *dv, float *work) {
  const int64_t rows = a->B * a->H * a->L, keys = a->B * a->H * a->S;
  const bool f32 = dt == 0 || dt == 4;
  const size_t es = f32 ? sizeof(float) : sizeof(uint16_t);
  cudaStream_t st = (cudaStream_t)gg_cu_stream();
  if (keys > 0 && rows == 0) {   /* no queries: nothing reaches the keys and values */
    cudaMemsetAsync(dk, 0, es * (size_t)(keys * a->D), st);
    cudaMemsetAsync(dv, 0, es * (size_t)(keys * a->D), st);
  }
  if (rows == 0 || keys == 0) return;
  float *dqa = work, *dr = work + rows * a->D;
  const unsigned rb = (unsigned)((rows * 32 + 255) / 256);
  if (f32) att_bwd_rows<0><<<rb, 256, 0, st>>>(*a, (const float *)y, (const float *)gy, dr, dqa);
  else if (dt == 3) att_bwd_rows<3><<<rb, 256, 0, st>>>(*a, (const uint16_t *)y, (const uint16_t *)gy, dr, dqa);
  else att_bwd_rows<2><<<rb, 256, 0, st>>>(*a, (const uint16_t *)y, (const uint16_t *)gy, dr, dqa);
  pthread_once(&att_bwd_once, att_bwd_init);
  /* (batch x heads, key blocks): the causal key blocks with the most query tiles (the first) launch
   * first, every head's at once, as the forward's grid */
  dim3 grid((unsigned)(a->B * a->H), (unsigned)((a->S + GG_ATB_BN - 1) / GG_ATB_BN));
  if (f32) {
    const float *Q = (const float *)q, *K = (const float *)k, *V = (const float *)v, *GY = (const float *)gy;
    float *DK = (float *)dk, *DV = (float *)dv;
    if (a->D == 64) attention_bwd_f32<64><<<grid, 256, att_bwd_f32_smem(64), st>>>(*a, Q, K, V, mask, GY, dr, dqa, DK, DV);
  } else {
    const uint16_t *Q = (const uint16_t *)q, *K = (const uint16_t *)k, *V = (const uint16_t *)v, *GY = (const uint16_t *)gy;
    uint16_t *DK = (uint16_t *)dk, *DV = (uint16_t *)dv;
#define GG_ATB_CASE(DD)                                                                                                  \
  case DD:                                                                                                               \
    if (dt == 3) attention_bwd_tc<3, DD><<<grid, 128, att_bwd_smem(DD), st>>>(*a, Q, K, V, mask, GY, dr, dqa, DK, DV);   \
    else attention_bwd_tc<2, DD><<<grid, 128, att_bwd_smem(DD), st>>>(*a, Q, K, V, mask, GY, dr, dqa, DK, DV);           \
    break;
    switch (a->D) {
      GG_ATB_CASE(32)
      GG_ATB_CASE(64)
    }
#undef GG_ATB_CASE
  }
  const int64_t n = rows * a->D;
  const unsigned nb = (unsigned)((n + 255) / 256);
  if (f32) att_bwd_dq<0><<<nb, 256, 0, st>>>(n, dqa, (float)a->scale, (float *)dq);
  else if (dt == 3) att_bwd_dq<3><<<nb, 256, 0, st>>>(n, dqa, (float)a->scale, (uint16_t *)dq);
  else att_bwd_dq<2><<<nb, 256, 0, st>>>(n, dqa, (float)a->scale, (uint16_t *)dq);
}
