/* scalar.h: the scalar function of every pointwise op, on float64 or int64 operands, and in C again on
 * float (the float pass: f_add_f) for the arithmetic of float32 and half tensors, as PyTorch's opmath.
 * One definition serves the reference interpreter (through the op table, in double) and the generated
 * code (gcc-graph embeds this file into every compiled model), so compiled code computes what the oracle
 * computes, in the tensors' own precision (float32 tensors on the CPU take the float32 versions near the
 * end for exp, erf, gelu, sigmoid and silu). Plain C99 with <math.h>, <stdint.h> and <string.h> only;
 * also valid CUDA C++, where the functions are templates. Operands arrive in schema order. */
#if !defined(GG_SCALAR_H) || defined(GG_SCALAR_FLOAT_PASS)   /* entered again for the float pass (below) */
#ifndef GG_SCALAR_H
#define GG_SCALAR_H
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
/* Under nvcc (compile --target cuda) the same functions run on the GPU. */
#ifdef __CUDACC__
#define GG_SCALAR static inline __host__ __device__
#else
#define GG_SCALAR static inline
#endif
/* The float functions: in C on double; under nvcc templates on the operands' type R, so that a kernel
 * over float32, float16 or bfloat16 computes in float (PyTorch's opmath) and one over float64 in
 * double. GG_K makes a constant of R, GG_R names the type. */
#ifdef __CUDACC__
#define GG_FN(name) template <typename GG_R> static inline __host__ __device__ GG_R name(const GG_R *x)
#define GG_TFN(name, v) template <typename GG_R> static inline __host__ __device__ GG_R name(GG_R v)
#define GG_K(c) ((GG_R)(c))
#else
#define GG_FN(name) static inline double name(const double *x)
#define GG_TFN(name, v) static inline double name(double v)
#define GG_K(c) (c)
#define GG_R double
#endif
#endif   /* GG_SCALAR_H: the prelude */

GG_FN(f_abs) { return fabs(x[0]); }
GG_FN(f_neg) { return -x[0]; }
GG_FN(f_exp) { return exp(x[0]); }
GG_FN(f_log) { return log(x[0]); }
GG_FN(f_sin) { return sin(x[0]); }
GG_FN(f_cos) { return cos(x[0]); }
GG_FN(f_tanh) { return tanh(x[0]); }
GG_FN(f_sigmoid) { return GG_K(1.0) / (GG_K(1.0) + exp(-x[0])); }
GG_FN(f_erf) { return erf(x[0]); }
GG_FN(f_sqrt) { return sqrt(x[0]); }
GG_FN(f_rsqrt) { return GG_K(1.0) / sqrt(x[0]); }
GG_FN(f_reciprocal) { return GG_K(1.0) / x[0]; }
GG_FN(f_relu) { return isnan(x[0]) ? x[0] : x[0] > 0 ? x[0] : GG_K(0.0); }
GG_FN(f_silu) { return x[0] / (GG_K(1.0) + exp(-x[0])); }
GG_TFN(relu6, v) { return v < 0 ? 0 : v > 6 ? 6 : v; }
GG_FN(f_hardswish) { return x[0] * relu6(x[0] + 3) / 6; }
GG_FN(f_hardsigmoid) { return relu6(x[0] + 3) / 6; }
GG_FN(f_leaky_relu) { return x[0] > 0 ? x[0] : x[0] * x[1]; }
GG_FN(f_sign) { return isnan(x[0]) ? 0 : (x[0] > 0) - (x[0] < 0); }
GG_FN(f_floor) { return floor(x[0]); }
GG_FN(f_ceil) { return ceil(x[0]); }
GG_FN(f_round) { return nearbyint(x[0]); }
GG_FN(f_trunc) { return trunc(x[0]); }
GG_FN(f_not) { return x[0] == 0; }
GG_FN(f_isnan) { return isnan(x[0]); }
GG_FN(f_ident) { return x[0]; }
GG_FN(f_test_miscompile) { return x[0] + GG_K(1.0); }   /* GCC_GRAPH_TEST_MISCOMPILE */
GG_FN(f_asin) { return asin(x[0]); }
GG_FN(f_acos) { return acos(x[0]); }
GG_FN(f_asinh) { return asinh(x[0]); }
GG_FN(f_acosh) { return acosh(x[0]); }
GG_FN(f_atanh) { return atanh(x[0]); }
GG_FN(f_isinf) { return isinf(x[0]); }
GG_FN(f_atan) { return atan(x[0]); }
GG_FN(f_tan) { return tan(x[0]); }
GG_FN(f_cosh) { return cosh(x[0]); }
GG_FN(f_sinh) { return sinh(x[0]); }
GG_FN(f_expm1) { return expm1(x[0]); }
GG_FN(f_log1p) { return log1p(x[0]); }
GG_FN(f_log2) { return log2(x[0]); }
GG_FN(f_log10) { return log10(x[0]); }
GG_FN(f_exp2) { return exp2(x[0]); }
GG_FN(f_frac) { return x[0] - trunc(x[0]); }
GG_FN(f_square) { return x[0] * x[0]; }
/* erfinv by Newton steps on erf from a closed-form first guess: exact to double rounding */
GG_FN(f_erfinv) {
  GG_R y = x[0];
  if (y <= -1) return y == -1 ? -INFINITY : NAN;
  if (y >= 1) return y == 1 ? INFINITY : NAN;
  /* Winitzki's approximation: t = 2/(pi a) - w/2 with w = -log(1 - y^2), a = 0.147 */
  GG_R w = -log((1 - y) * (1 + y)), t = 2 / (GG_K(M_PI) * GG_K(0.147)) - w / 2;
  GG_R r = copysign(sqrt(sqrt(t * t + w / GG_K(0.147)) - t), y);
  for (int i = 0; i < 4; i++) r -= (erf(r) - y) / (2 / sqrt(GG_K(M_PI)) * exp(-r * r));
  return r;
}
GG_FN(f_relu6) { return isnan(x[0]) ? x[0] : relu6(x[0]); }
GG_FN(f_softplus) { return x[0] * x[1] > x[2] ? x[0] : log1p(exp(x[0] * x[1])) / x[1]; }
GG_FN(f_elu) { return x[0] > 0 ? x[2] * x[0] : x[2] * x[1] * expm1(x[0] * x[3]); }
GG_FN(f_celu) { return x[0] > 0 ? x[0] : x[1] * expm1(x[0] / x[1]); }
GG_FN(f_selu) {
  const GG_R alpha = GG_K(1.6732632423543772848170429916717), scale = GG_K(1.0507009873554804934193349852946);
  return x[0] > 0 ? scale * x[0] : scale * alpha * expm1(x[0]);
}
GG_FN(f_mish) { return x[0] * tanh(log1p(exp(x[0]))); }
GG_FN(f_log_sigmoid) { return x[0] < 0 ? x[0] - log1p(exp(x[0])) : -log1p(exp(-x[0])); }
GG_FN(f_atan2) { return atan2(x[0], x[1]); }
GG_FN(f_lxor) { return (x[0] != 0) != (x[1] != 0); }
/* clamp: a None bound arrives as NaN (interp.c), and means no bound */
GG_FN(f_clamp) {
  GG_R v = x[0];
  if (isnan(v)) return v;
  if (!isnan(x[1]) && v < x[1]) v = x[1];
  if (!isnan(x[2]) && v > x[2]) v = x[2];
  return v;
}
GG_FN(f_clamp_min) { return isnan(x[0]) ? x[0] : x[0] < x[1] ? x[1] : x[0]; }
GG_FN(f_clamp_max) { return isnan(x[0]) ? x[0] : x[0] > x[1] ? x[1] : x[0]; }
GG_FN(f_add) { return x[0] + x[2] * x[1]; }
GG_FN(f_sub) { return x[0] - x[2] * x[1]; }
GG_FN(f_rsub) { return x[1] - x[2] * x[0]; }
GG_FN(f_mul) { return x[0] * x[1]; }
GG_FN(f_div) { return x[0] / x[1]; }
GG_FN(f_floordiv) {
  /* Python semantics, as torch.floor_divide and div(rounding_mode='floor') on floats */
  if (x[1] == 0) return x[0] / x[1];
  GG_R m = fmod(x[0], x[1]), d = (x[0] - m) / x[1];
  if (m != 0 && ((x[1] < 0) != (m < 0))) d -= 1;
  GG_R fd = floor(d);
  if (d - fd > GG_K(0.5)) fd += 1;
  return d == 0 ? copysign(GG_K(0.0), x[0] / x[1]) : fd;
}
GG_FN(f_remainder) {
  GG_R m = fmod(x[0], x[1]);
  if (m != 0 && ((x[1] < 0) != (m < 0))) m += x[1];
  return m;
}
GG_FN(f_fmod) { return fmod(x[0], x[1]); }
GG_FN(f_pow) { return pow(x[0], x[1]); }
GG_FN(f_pow2) { return x[0] * x[0]; }   /* pow by a constant 2 or 3 (ops.c's pw_plan): products in the compute type */
GG_FN(f_pow3) { return x[0] * x[0] * x[0]; }
GG_FN(f_maximum) { return isnan(x[0]) || isnan(x[1]) ? NAN : x[0] > x[1] ? x[0] : x[1]; }
GG_FN(f_minimum) { return isnan(x[0]) || isnan(x[1]) ? NAN : x[0] < x[1] ? x[0] : x[1]; }
GG_FN(f_eq) { return x[0] == x[1]; }
GG_FN(f_ne) { return x[0] != x[1]; }
GG_FN(f_lt) { return x[0] < x[1]; }
GG_FN(f_le) { return x[0] <= x[1]; }
GG_FN(f_gt) { return x[0] > x[1]; }
GG_FN(f_ge) { return x[0] >= x[1]; }
GG_FN(f_land) { return x[0] != 0 && x[1] != 0; }
GG_FN(f_lor) { return x[0] != 0 || x[1] != 0; }
GG_FN(f_where) { return x[0] != 0 ? x[1] : x[2]; }
GG_FN(f_addcmul) { return x[0] + x[3] * (x[1] * x[2]); }
GG_FN(f_addcdiv) { return x[0] + x[3] * (x[1] / x[2]); }
GG_FN(f_masked_fill) { return x[1] != 0 ? x[2] : x[0]; }
GG_FN(f_logical_not) { return x[0] == 0; }
/* Variants that an op picks by an argument (gelu's approximation, division's rounding mode). */
GG_FN(f_gelu_erf) { return GG_K(0.5) * x[0] * (1 + erf(x[0] * GG_K(0.70710678118654752440))); }
GG_FN(f_gelu_tanh) {
  const GG_R k = GG_K(0.79788456080286535588);  /* sqrt(2/pi) */
  return GG_K(0.5) * x[0] * (1 + tanh(k * (x[0] + GG_K(0.044715) * x[0] * x[0] * x[0])));
}
GG_FN(f_div_trunc) { return trunc(x[0] / x[1]); }

#ifndef GG_SCALAR_FLOAT_PASS
#ifndef __CUDACC__
/* C has no templates: the functions above again on float, each name suffixed _f (f_add_f), for the
 * pointwise arithmetic of float32, float16 and bfloat16 tensors on the CPU, in float as PyTorch's
 * CPU kernels compute it (the GPU's templates give it there); the math library's functions in them
 * still run on double, rounded to float once. The interpreter, the oracle, keeps double. */
#define GG_SCALAR_FLOAT_PASS
#undef GG_FN
#undef GG_TFN
#undef GG_K
#undef GG_R
#define GG_FN(name) static inline float name##_f(const float *x)
#define GG_TFN(name, v) static inline float name##_f(float v)
#define GG_K(c) ((float)(c))
#define GG_R float
#define relu6(v) relu6_f(v)
#include "scalar.h"
#undef relu6
#undef GG_FN
#undef GG_TFN
#undef GG_K
#undef GG_R
#define GG_FN(name) static inline double name(const double *x)
#define GG_TFN(name, v) static inline double name(double v)
#define GG_K(c) (c)
#define GG_R double
#undef GG_SCALAR_FLOAT_PASS
#endif

/* Integer versions use unsigned arithmetic where C would overflow: PyTorch wraps around. */
#define WRAP(expr) ((int64_t)(expr))
GG_SCALAR int64_t i_abs(const int64_t *x) { return x[0] < 0 ? WRAP(0 - (uint64_t)x[0]) : x[0]; }
GG_SCALAR int64_t i_neg(const int64_t *x) { return WRAP(0 - (uint64_t)x[0]); }
GG_SCALAR int64_t i_relu(const int64_t *x) { return x[0] > 0 ? x[0] : 0; }
GG_SCALAR int64_t i_sign(const int64_t *x) { return (x[0] > 0) - (x[0] < 0); }
GG_SCALAR int64_t i_ident(const int64_t *x) { return x[0]; }
GG_SCALAR int64_t i_zero(const int64_t *x) { (void)x; return 0; }
GG_SCALAR int64_t i_not(const int64_t *x) { return x[0] == 0; }
GG_SCALAR int64_t i_bitnot(const int64_t *x) { return ~x[0]; }
/* clamp: a None bound arrives as INT64_MIN (min) or INT64_MAX (max) */
GG_SCALAR int64_t i_clamp(const int64_t *x) { int64_t v = x[0] < x[1] ? x[1] : x[0]; return v > x[2] ? x[2] : v; }
GG_SCALAR int64_t i_clamp_min(const int64_t *x) { return x[0] < x[1] ? x[1] : x[0]; }
GG_SCALAR int64_t i_clamp_max(const int64_t *x) { return x[0] > x[1] ? x[1] : x[0]; }
GG_SCALAR int64_t i_add(const int64_t *x) { return WRAP((uint64_t)x[0] + (uint64_t)x[2] * (uint64_t)x[1]); }
GG_SCALAR int64_t i_sub(const int64_t *x) { return WRAP((uint64_t)x[0] - (uint64_t)x[2] * (uint64_t)x[1]); }
GG_SCALAR int64_t i_rsub(const int64_t *x) { return WRAP((uint64_t)x[1] - (uint64_t)x[2] * (uint64_t)x[0]); }
GG_SCALAR int64_t i_mul(const int64_t *x) { return WRAP((uint64_t)x[0] * (uint64_t)x[1]); }
GG_SCALAR int64_t i_addcmul(const int64_t *x) { return WRAP((uint64_t)x[0] + (uint64_t)x[3] * ((uint64_t)x[1] * (uint64_t)x[2])); }
GG_SCALAR int64_t i_floordiv(const int64_t *x) {
  if (x[1] == 0) return 0;      /* PyTorch raises; an oracle must not trap */
  if (x[0] == INT64_MIN && x[1] == -1) return INT64_MIN;
  int64_t q = x[0] / x[1];
  if ((x[0] % x[1] != 0) && ((x[0] < 0) != (x[1] < 0))) q--;
  return q;
}
GG_SCALAR int64_t i_remainder(const int64_t *x) {
  if (x[1] == 0 || (x[0] == INT64_MIN && x[1] == -1)) return 0;
  int64_t m = x[0] % x[1];
  if (m != 0 && ((m < 0) != (x[1] < 0))) m += x[1];
  return m;
}
GG_SCALAR int64_t i_fmod(const int64_t *x) { return x[1] == 0 || x[1] == -1 ? 0 : x[0] % x[1]; }
GG_SCALAR int64_t i_pow(const int64_t *x) {
  int64_t b = x[0], e = x[1];
  if (e < 0) return b == 1 ? 1 : b == -1 ? (e % 2 ? -1 : 1) : 0;
  uint64_t r = 1, ub = (uint64_t)b;
  while (e) { if (e & 1) r *= ub; ub *= ub; e >>= 1; }
  return WRAP(r);
}
GG_SCALAR int64_t i_max(const int64_t *x) { return x[0] > x[1] ? x[0] : x[1]; }
GG_SCALAR int64_t i_min(const int64_t *x) { return x[0] < x[1] ? x[0] : x[1]; }
GG_SCALAR int64_t i_eq(const int64_t *x) { return x[0] == x[1]; }
GG_SCALAR int64_t i_ne(const int64_t *x) { return x[0] != x[1]; }
GG_SCALAR int64_t i_lt(const int64_t *x) { return x[0] < x[1]; }
GG_SCALAR int64_t i_le(const int64_t *x) { return x[0] <= x[1]; }
GG_SCALAR int64_t i_gt(const int64_t *x) { return x[0] > x[1]; }
GG_SCALAR int64_t i_ge(const int64_t *x) { return x[0] >= x[1]; }
GG_SCALAR int64_t i_and(const int64_t *x) { return x[0] & x[1]; }
GG_SCALAR int64_t i_xor(const int64_t *x) { return x[0] ^ x[1]; }
GG_SCALAR int64_t i_lxor(const int64_t *x) { return (x[0] != 0) != (x[1] != 0); }
GG_SCALAR int64_t i_square(const int64_t *x) { return WRAP((uint64_t)x[0] * (uint64_t)x[0]); }
GG_SCALAR int64_t i_relu6(const int64_t *x) { return x[0] < 0 ? 0 : x[0] > 6 ? 6 : x[0]; }
GG_SCALAR int64_t i_or(const int64_t *x) { return x[0] | x[1]; }
GG_SCALAR int64_t i_land(const int64_t *x) { return x[0] != 0 && x[1] != 0; }
GG_SCALAR int64_t i_lor(const int64_t *x) { return x[0] != 0 || x[1] != 0; }
GG_SCALAR int64_t i_where(const int64_t *x) { return x[0] != 0 ? x[1] : x[2]; }
GG_SCALAR int64_t i_masked_fill(const int64_t *x) { return x[1] != 0 ? x[2] : x[0]; }

/* float32 versions of the costly functions, which compiled float32 kernels use on the CPU (PyTorch
 * computes these in float32 with vectorized approximations too). Straight-line code, no calls, so
 * that GCC vectorizes the loops around them (with -fno-trapping-math for the selects). gg_expf:
 * Cody-Waite reduction by ln 2 and Cephes' polynomial (within 2 ulp; 0 below -87.6, where the result
 * is under FLT_MIN). gg_erff: its series below |x| = 0.5, Abramowitz-Stegun 7.1.26 above (1.5e-7
 * absolute). The interpreter, the oracle, keeps float64. Not under nvcc (the GPU has its own). */
#ifndef __CUDACC__
static inline float gg_expf(float x) {
  float big = x > 88.0f ? 1.0f : 0.0f;   /* scaled by 2^(n-1) * 2 near the top, so that 2^(n-1) fits */
  float xc = x < -87.6f ? -87.6f : x > 88.75f ? 88.75f : x == x ? x : 0.0f;   /* NaN: any value, replaced below */
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   /* round to nearest */
  float r = xc - n * 0.693145751953125f - n * 1.428606820309417232e-6f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  uint32_t bits = (uint32_t)((int32_t)(n - big) + 127) << 23;
  float s;
  memcpy(&s, &bits, sizeof s);
  float y = p * s * (1.0f + big);
  return x != x ? x : x > 88.72283905f ? INFINITY : x < -87.6f ? 0.0f : y;
}
static inline float gg_erff(float x) {
  float a = fabsf(x), z = x * x;
  float s = x * (1.1283791671f + z * (-0.37612638903f + z * (0.11283791671f + z * (-0.026866170645f +
            z * (0.0052239776254f + z * (-0.00085483270234f + z * 0.00012055332981f))))));
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float q = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
  float l = copysignf(1.0f - q * gg_expf(-z), x);
  return a < 0.5f ? s : l;
}
/* gg_tanhf: Cephes' odd polynomial below |x| = 0.625, 1 - 2 / (e^2|x| + 1) above (its sign restored),
 * 1 past 9.02 (within 3 ulp) */
static inline float gg_tanhf(float x) {
  float a = fabsf(x), z = x * x;
  float p = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  float l = copysignf(1.0f - 2.0f / (gg_expf(2.0f * (a < 9.02f ? a : 9.02f)) + 1.0f), x);
  return x != x ? x : a < 0.625f ? p : a >= 9.02f ? copysignf(1.0f, x) : l;
}
/* each on float operands (the float pass's names, f32_exp_f) and on double ones rounded to float */
#define GG_F32(name, body)                                                  \
  static inline float name##_f(const float *x) { float v = x[0]; body }      \
  static inline double name(const double *x) { float v = (float)x[0]; body }
GG_F32(f32_exp, return gg_expf(v);)
GG_F32(f32_sigmoid, return 1.0f / (1.0f + gg_expf(-v));)
GG_F32(f32_silu, return v / (1.0f + gg_expf(-v));)
GG_F32(f32_erf, return gg_erff(v);)
GG_F32(f32_gelu_erf, return 0.5f * v * (1.0f + gg_erff(v * 0.70710678118654752440f));)
GG_F32(f32_tanh, return gg_tanhf(v);)
GG_F32(f32_gelu_tanh, return 0.5f * v * (1.0f + gg_tanhf(0.79788456080286535588f * (v + 0.044715f * v * v * v)));)
/* pow with a constant exponent of 2 or 3 (GPT-2's GELU): products, as PyTorch's pow kernel computes them */
GG_F32(f32_pow2, return v * v;)
GG_F32(f32_pow3, return v * v * v;)
#endif
GG_SCALAR int64_t i_div_trunc(const int64_t *x) { return x[1] == 0 ? 0 : (x[0] == INT64_MIN && x[1] == -1) ? INT64_MIN : x[0] / x[1]; }

/* sort and topk: a stable bottom-up merge sort of a row's indices ix[0..n) by their keys, ascending or
 * descending, NaN above every number (PyTorch's order); tmp holds n more. Shared by the interpreter
 * and compiled code (a thread per row, on the GPU too). */
#define GG_SORT_ROW(NAME, KEY)                                                                          \
  GG_SCALAR void NAME(const KEY *key, int64_t *ix, int64_t *tmp, int64_t n, int desc) {                 \
    int64_t *a = ix, *b = tmp;                                                                          \
    for (int64_t w = 1; w < n; w *= 2) {                                                                \
      for (int64_t lo = 0; lo < n; lo += 2 * w) {                                                       \
        int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, o = lo; \
        while (i < mid && j < hi) {                                                                     \
          KEY p = key[a[j]], q = key[a[i]];                                                             \
          int right = desc ? (p != p && q == q) || p > q : p == p && (q != q || p < q);                 \
          b[o++] = right ? a[j++] : a[i++];                                                             \
        }                                                                                               \
        while (i < mid) b[o++] = a[i++];                                                                \
        while (j < hi) b[o++] = a[j++];                                                                 \
      }                                                                                                 \
      int64_t *t = a;                                                                                   \
      a = b;                                                                                            \
      b = t;                                                                                            \
    }                                                                                                   \
    if (a != ix)                                                                                        \
      for (int64_t k = 0; k < n; k++) ix[k] = a[k];                                                     \
  }
GG_SORT_ROW(gg_sort_f64, double)
GG_SORT_ROW(gg_sort_i64, int64_t)

/* Random numbers (rand, randn, randperm, dropout in training): Philox4x32-10 (Salmon et al., "Parallel
 * random numbers: as easy as 1, 2, 3", 2011), a counter-based generator: element i of a random op's
 * draw d is a function of (seed, d, i) alone, so every thread, CPU or GPU, computes its own, and the
 * interpreter and compiled code give the same bits. Not PyTorch's numbers: the same distributions. */
GG_SCALAR void gg_philox(uint64_t seed, uint64_t draw, uint64_t i, uint32_t *w) {
  uint32_t c0 = (uint32_t)i, c1 = (uint32_t)(i >> 32), c2 = (uint32_t)draw, c3 = (uint32_t)(draw >> 32), k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
  }
  w[0] = c0, w[1] = c1, w[2] = c2, w[3] = c3;
}
/* uniform in [0, 1) with `bits` random bits (the dtype's significand: 53, 24, 11 or 8), so that
 * rounding to the dtype never gives 1 */
GG_SCALAR double gg_rand_u01(uint64_t seed, uint64_t draw, uint64_t i, int bits) {
  uint32_t w[4];
  gg_philox(seed, draw, i, w);
  if (bits > 32) return (double)(((uint64_t)(w[0] >> 5) << 26) | (w[1] >> 6)) * 0x1p-53;
  return (double)(w[0] >> (32 - bits)) * ldexp(1.0, -bits);
}
/* standard normal: Box-Muller on two 53-bit uniforms, the first in (0, 1] */
GG_SCALAR double gg_rand_n01(uint64_t seed, uint64_t draw, uint64_t i) {
  uint32_t w[4];
  gg_philox(seed, draw, i, w);
  double u1 = ((double)(((uint64_t)(w[0] >> 5) << 26) | (w[1] >> 6)) + 1) * 0x1p-53, u2 = (double)(((uint64_t)(w[2] >> 5) << 26) | (w[3] >> 6)) * 0x1p-53;
  return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}
/* random bits for a dtype's uniform: its significand's precision */
GG_SCALAR int gg_rand_bits(int dtype_bits, int is_bf16) { return dtype_bits == 64 ? 53 : dtype_bits == 32 ? 24 : is_bf16 ? 8 : 11; }

#endif   /* GG_SCALAR_FLOAT_PASS */
#endif
