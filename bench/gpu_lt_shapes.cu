// gpu_lt_shapes.cu: cuBLASLt's candidates at the products of the GPU suite's transformers, as the runtime
// calls cuBLASLt (lib/rt/gg_rt_cuda.cu: row-major operands as column-major transposes, a bias epilogue):
// the heuristic's first, the best of its first 8 (what the runtime times on a shape's first run), the
// best of up to 64, and the split-K variants of each candidate that allows them (2-8 slices, every
// reduction scheme it supports, checked by cublasLtMatmulAlgoCheck). Each is timed as 20 products in a
// CUDA graph (operands hot in L2, filled with a constant: an upper bound on the rate in a model);
// microseconds a product and TFLOP/s; then the best of the 8 timed with a different copy of the weight
// each time (cold in L2, as in a model) and with a residual read as C. LT_ALL=1 instead times every
// algorithm cuBLASLt lists at the bfloat16 shapes (below). docs/BENCHMARKS.md, sessions 52 and 53,
// has runs on the H200.
//   nvcc -arch=sm_90 -O2 bench/gpu_lt_shapes.cu -o gpu_lt_shapes -lcublasLt && ./gpu_lt_shapes
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <algorithm>
#define CK(x) do { if ((x) != 0) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, #x); exit(1); } } while (0)
static cublasLtHandle_t lt;
static cudaStream_t st;
static void *ws; static const size_t WS = 32u << 20;
struct Prob { const char *name; int dt, ta, tb, bias; long M, N, K; };
struct Ctx { cublasLtMatmulDesc_t op; cublasLtMatrixLayout_t a, b, c; void *A, *B, *C, *bias, *R; Prob p; std::vector<void *> Bs; };
// nB > 0: the product's weight (B) is a different one of nB copies each time (nB * its size past the
// L2), as in a model, where a layer's weights come from memory once a run; res: a residual read as C
static float time_algo(Ctx &x, const cublasLtMatmulAlgo_t *algo, int nB = 0, bool res = false) {
  float al = 1, be = res ? 1.0f : 0.0f;
  void *Cin = res ? x.R : x.C;
  int np = nB ? nB : 20;
  cudaGraph_t g; cudaGraphExec_t ge;
  if (cublasLtMatmul(lt, x.op, &al, x.B, x.a, x.A, x.b, &be, Cin, x.c, x.C, x.c, algo, ws, WS, st)) { cudaGetLastError(); return 1e30f; }
  cudaStreamSynchronize(st);
  if (cudaGetLastError()) return 1e30f;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  bool ok = true;
  for (int i = 0; i < np; i++) ok &= cublasLtMatmul(lt, x.op, &al, nB ? x.Bs[i] : x.B, x.a, x.A, x.b, &be, Cin, x.c, x.C, x.c, algo, ws, WS, st) == 0;
  CK(cudaStreamEndCapture(st, &g));
  if (!ok) { cudaGraphDestroy(g); return 1e30f; }
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  float best = 1e30f;
  for (int r = 0; r < 4; r++) {
    cudaEventRecord(e0, st); cudaGraphLaunch(ge, st); cudaEventRecord(e1, st); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1); if (r && ms < best) best = ms;
  }
  cudaEventDestroy(e0); cudaEventDestroy(e1); cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
  return best / np * 1000;  // us per product
}
// LT_ALL=1: every algorithm cuBLASLt lists for the type (cublasLtMatmulAlgoGetIds), each of its tile
// sizes and stage counts (the cluster shape left to cuBLASLt), checked and timed like the heuristic's
// candidates: whether a kernel the heuristic does not offer is faster at the shape
static void exhaustive(Ctx &x, cudaDataType t, float h8) {
  int ids[256], nids = 0;
  if (cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, t, t, t, t, 256, ids, &nids)) return;
  struct R { float us; int id, tile, stages; };
  std::vector<R> res;
  int checked = 0;
  for (int i = 0; i < nids; i++) {
    cublasLtMatmulAlgo_t a;
    if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, t, t, t, t, ids[i], &a)) continue;
    int tiles[256], stages[256];
    size_t st = 0, ss = 0;
    cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, sizeof tiles, &st);
    cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, sizeof stages, &ss);
    int nt = (int)(st / sizeof(int)), ns = (int)(ss / sizeof(int));
    if (!nt) tiles[0] = 0, nt = 1;
    if (!ns) stages[0] = 0, ns = 1;
    for (int ti = 0; ti < nt; ti++)
      for (int si = 0; si < ns; si++) {
        cublasLtMatmulAlgo_t b = a;
        cublasLtMatmulHeuristicResult_t hr;
        cublasLtMatmulAlgoConfigSetAttribute(&b, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[ti], sizeof(int));
        cublasLtMatmulAlgoConfigSetAttribute(&b, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages[si], sizeof(int));
        if (cublasLtMatmulAlgoCheck(lt, x.op, x.a, x.b, x.c, x.c, &b, &hr) || hr.workspaceSize > WS) continue;
        checked++;
        float us = time_algo(x, &b);
        if (us < 1e29f) res.push_back({us, ids[i], tiles[ti], stages[si]});
      }
  }
  std::sort(res.begin(), res.end(), [](const R &a, const R &b) { return a.us < b.us; });
  printf("%-18s every listed algorithm: %d ids, %d configurations accepted, %zu ran; best of 8 heuristic %.2f us; fastest:", x.p.name, nids, checked, res.size(), h8);
  for (size_t i = 0; i < res.size() && i < 5; i++) printf(" %.2f (id %d tile %d stages %d)", res[i].us, res[i].id, res[i].tile, res[i].stages);
  printf("\n");
  fflush(stdout);
}

int main() {
  bool all = getenv("LT_ALL") != NULL;
  CK(cublasLtCreate(&lt)); CK(cudaStreamCreate(&st)); CK(cudaMalloc(&ws, WS));
  std::vector<Prob> P = {
    {"bert qkv", 3, 0, 1, 1, 1024, 2304, 768}, {"bert out", 3, 0, 1, 1, 1024, 768, 768},
    {"bert up", 3, 0, 1, 1, 1024, 3072, 768}, {"bert down", 3, 0, 1, 1, 1024, 768, 3072},
    {"gpt2 qkv", 3, 0, 0, 1, 2048, 2304, 768}, {"gpt2 out", 3, 0, 0, 1, 2048, 768, 768},
    {"gpt2 up", 3, 0, 0, 1, 2048, 3072, 768}, {"gpt2 down", 3, 0, 0, 1, 2048, 768, 3072},
    {"f32 gpt2 dW out", 0, 1, 0, 0, 768, 768, 2048}, {"f32 gpt2 dW up", 0, 1, 0, 0, 768, 3072, 2048},
    {"f32 gpt2 dW down", 0, 1, 0, 0, 3072, 768, 2048}, {"f32 bert dW out", 0, 1, 0, 0, 768, 768, 1024},
    {"f32 gpt2 out", 0, 0, 0, 1, 2048, 768, 768}, {"f32 bert out", 0, 0, 1, 1, 1024, 768, 768},
    {"bf16 big", 3, 0, 1, 0, 8192, 8192, 8192},
  };
  if (all) P.resize(8);   // the transformers' bfloat16 shapes only
  for (auto &p : P) {
    Ctx x; x.p = p;
    cudaDataType t = p.dt == 0 ? CUDA_R_32F : CUDA_R_16BF; size_t es = p.dt == 0 ? 4 : 2;
    CK(cudaMalloc(&x.A, p.M * p.K * es)); CK(cudaMalloc(&x.B, p.K * p.N * es)); CK(cudaMalloc(&x.C, p.M * p.N * es)); CK(cudaMalloc(&x.bias, p.N * es));
    CK(cudaMalloc(&x.R, p.M * p.N * es)); cudaMemset(x.R, 0, p.M * p.N * es);
    int nB = (int)std::max<long>(20, (300l << 20) / (p.K * p.N * (long)es));
    x.Bs.resize(nB);
    for (auto &b : x.Bs) { CK(cudaMalloc(&b, p.K * p.N * es)); cudaMemset(b, 0x3c, p.K * p.N * es); }
    cudaMemset(x.A, 0x3c, p.M * p.K * es); cudaMemset(x.B, 0x3c, p.K * p.N * es); cudaMemset(x.bias, 0, p.N * es);
    cublasOperation_t opa = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = p.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    long lda = p.ta ? p.M : p.K, ldb = p.tb ? p.K : p.N;
    CK(cublasLtMatmulDescCreate(&x.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CK(cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    CK(cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (p.bias) CK(cublasLtMatmulDescSetAttribute(x.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x.bias, sizeof x.bias));
    CK(cublasLtMatrixLayoutCreate(&x.a, t, p.tb ? p.K : p.N, p.tb ? p.N : p.K, ldb));
    CK(cublasLtMatrixLayoutCreate(&x.b, t, p.ta ? p.M : p.K, p.ta ? p.K : p.M, lda));
    CK(cublasLtMatrixLayoutCreate(&x.c, t, p.N, p.M, p.N));
    cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
    size_t w = WS; CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof w));
    cublasLtMatmulHeuristicResult_t r[64]; int found = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, x.op, x.a, x.b, x.c, x.c, pref, 64, r, &found));
    double fl = 2.0 * p.M * p.N * p.K;
    if (all) {
      float h8 = 1e30f;
      for (int i = 0; i < found && i < 8; i++) h8 = std::min(h8, time_algo(x, &r[i].algo));
      exhaustive(x, t, h8);
      for (auto b : x.Bs) cudaFree(b);
      cudaFree(x.A); cudaFree(x.B); cudaFree(x.C); cudaFree(x.R); cudaFree(x.bias);
      continue;
    }
    float h1 = time_algo(x, &r[0].algo), h8 = 1e30f, h64 = 1e30f, sk = 1e30f, c8 = 1e30f;
    int ntimed = 0, hsk = 0, b8 = 0, bc = 0;
    for (int i = 0; i < found; i++) { float u = time_algo(x, &r[i].algo); if (i < 8 && u < h8) h8 = u, b8 = i; h64 = std::min(h64, u);
      if (i < 8) { float c = time_algo(x, &r[i].algo, nB); if (c < c8) c8 = c, bc = i; }
      int v = 0; cublasLtMatmulAlgoConfigGetAttribute(&r[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &v, sizeof v, NULL); if (v > 1) hsk++; }
    // split-K variants of the heuristic's candidates
    for (int i = 0; i < found; i++) {
      int sup = 0; uint32_t mask = 0;
      cublasLtMatmulAlgoCapGetAttribute(&r[i].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &sup, sizeof sup, NULL);
      cublasLtMatmulAlgoCapGetAttribute(&r[i].algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &mask, sizeof mask, NULL);
      if (!sup) continue;
      for (int s : {2, 3, 4, 6, 8}) for (uint32_t sch : {1u, 2u, 4u}) {
        if (!(mask & sch)) continue;
        cublasLtMatmulAlgo_t a = r[i].algo;
        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &s, sizeof s);
        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &sch, sizeof sch);
        cublasLtMatmulHeuristicResult_t hr;
        if (cublasLtMatmulAlgoCheck(lt, x.op, x.a, x.b, x.c, x.c, &a, &hr) || hr.workspaceSize > WS) continue;
        sk = std::min(sk, time_algo(x, &a)); ntimed++;
      }
    }
    auto tf = [&](float us) { return us > 1e29f ? 0.0 : fl / (us * 1e-6) / 1e12; };
    float cold = time_algo(x, &r[b8].algo, nB), hres = time_algo(x, &r[b8].algo, 0, true), cres = time_algo(x, &r[b8].algo, nB, true);
    int tile = 0, stages = 0, cl = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&r[b8].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, NULL);
    cublasLtMatmulAlgoConfigGetAttribute(&r[b8].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, NULL);
    cublasLtMatmulAlgoConfigGetAttribute(&r[b8].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof cl, NULL);
    printf("%-18s weights cold (%d copies): best of 8's %7.2f us %4.0f TFLOP/s, best of 8 cold (#%d) %7.2f %4.0f | residual as C hot %7.2f cold %7.2f | tile %d stages %d cluster %d\n",
           p.name, nB, cold, tf(cold), bc, c8, tf(c8), hres, cres, tile, stages, cl);
    printf("%-18s %5ld x %5ld x %5ld  first %7.2f us %4.0f TFLOP/s | best of 8 %7.2f %4.0f | best of %d (%d split-K) %7.2f %4.0f | split-K variants (%d) %7.2f %4.0f\n",
           p.name, p.M, p.N, p.K, h1, tf(h1), h8, tf(h8), found, hsk, h64, tf(h64), ntimed, sk, tf(sk));
    fflush(stdout);
    for (auto b : x.Bs) cudaFree(b);
    cudaFree(x.A); cudaFree(x.B); cudaFree(x.C); cudaFree(x.R); cudaFree(x.bias);
  }
  return 0;
}
