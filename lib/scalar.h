/* scalar.h: the scalar function of every pointwise op, on float64 or int64 operands.
 * One definition serves the reference interpreter (through the op table) and the generated C code
 * (gcc-graph embeds this file into every compiled model), so compiled code computes what the oracle
 * computes (float32 tensors on the CPU take the float32 versions near the end for exp, erf, gelu,
 * sigmoid and silu). Plain C99 with <math.h>, <stdint.h> and <string.h> only; also valid CUDA C++.
 * Operands arrive in schema order. */
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

GG_SCALAR double f_abs(const double *x) { return fabs(x[0]); }
GG_SCALAR double f_neg(const double *x) { return -x[0]; }
GG_SCALAR double f_exp(const double *x) { return exp(x[0]); }
GG_SCALAR double f_log(const double *x) { return log(x[0]); }
GG_SCALAR double f_sin(const double *x) { return sin(x[0]); }
GG_SCALAR double f_cos(const double *x) { return cos(x[0]); }
GG_SCALAR double f_tanh(const double *x) { return tanh(x[0]); }
GG_SCALAR double f_sigmoid(const double *x) { return 1.0 / (1.0 + exp(-x[0])); }
GG_SCALAR double f_erf(const double *x) { return erf(x[0]); }
GG_SCALAR double f_sqrt(const double *x) { return sqrt(x[0]); }
GG_SCALAR double f_rsqrt(const double *x) { return 1.0 / sqrt(x[0]); }
GG_SCALAR double f_reciprocal(const double *x) { return 1.0 / x[0]; }
GG_SCALAR double f_relu(const double *x) { return isnan(x[0]) ? x[0] : x[0] > 0 ? x[0] : 0.0; }
GG_SCALAR double f_silu(const double *x) { return x[0] / (1.0 + exp(-x[0])); }
GG_SCALAR double relu6(double v) { return v < 0 ? 0 : v > 6 ? 6 : v; }
GG_SCALAR double f_hardswish(const double *x) { return x[0] * relu6(x[0] + 3) / 6; }
GG_SCALAR double f_hardsigmoid(const double *x) { return relu6(x[0] + 3) / 6; }
GG_SCALAR double f_leaky_relu(const double *x) { return x[0] > 0 ? x[0] : x[0] * x[1]; }
GG_SCALAR double f_sign(const double *x) { return isnan(x[0]) ? 0 : (x[0] > 0) - (x[0] < 0); }
GG_SCALAR double f_floor(const double *x) { return floor(x[0]); }
GG_SCALAR double f_ceil(const double *x) { return ceil(x[0]); }
GG_SCALAR double f_round(const double *x) { return nearbyint(x[0]); }
GG_SCALAR double f_trunc(const double *x) { return trunc(x[0]); }
GG_SCALAR double f_not(const double *x) { return x[0] == 0; }
GG_SCALAR double f_isnan(const double *x) { return isnan(x[0]); }
GG_SCALAR double f_ident(const double *x) { return x[0]; }
GG_SCALAR double f_test_miscompile(const double *x) { return x[0] + 1.0; }   /* GCC_GRAPH_TEST_MISCOMPILE */
GG_SCALAR double f_asin(const double *x) { return asin(x[0]); }
GG_SCALAR double f_atan(const double *x) { return atan(x[0]); }
GG_SCALAR double f_tan(const double *x) { return tan(x[0]); }
GG_SCALAR double f_cosh(const double *x) { return cosh(x[0]); }
GG_SCALAR double f_sinh(const double *x) { return sinh(x[0]); }
GG_SCALAR double f_expm1(const double *x) { return expm1(x[0]); }
GG_SCALAR double f_log1p(const double *x) { return log1p(x[0]); }
GG_SCALAR double f_log2(const double *x) { return log2(x[0]); }
GG_SCALAR double f_log10(const double *x) { return log10(x[0]); }
GG_SCALAR double f_exp2(const double *x) { return exp2(x[0]); }
GG_SCALAR double f_frac(const double *x) { return x[0] - trunc(x[0]); }
GG_SCALAR double f_square(const double *x) { return x[0] * x[0]; }
/* erfinv by Newton steps on erf from a closed-form first guess: exact to double rounding */
GG_SCALAR double f_erfinv(const double *x) {
  double y = x[0];
  if (y <= -1) return y == -1 ? -INFINITY : NAN;
  if (y >= 1) return y == 1 ? INFINITY : NAN;
  /* Winitzki's approximation: t = 2/(pi a) - w/2 with w = -log(1 - y^2), a = 0.147 */
  double w = -log((1 - y) * (1 + y)), t = 2 / (M_PI * 0.147) - w / 2;
  double r = copysign(sqrt(sqrt(t * t + w / 0.147) - t), y);
  for (int i = 0; i < 4; i++) r -= (erf(r) - y) / (2 / sqrt(M_PI) * exp(-r * r));
  return r;
}
GG_SCALAR double f_relu6(const double *x) { return isnan(x[0]) ? x[0] : relu6(x[0]); }
GG_SCALAR double f_softplus(const double *x) { return x[0] * x[1] > x[2] ? x[0] : log1p(exp(x[0] * x[1])) / x[1]; }
GG_SCALAR double f_elu(const double *x) { return x[0] > 0 ? x[2] * x[0] : x[2] * x[1] * expm1(x[0] * x[3]); }
GG_SCALAR double f_celu(const double *x) { return x[0] > 0 ? x[0] : x[1] * expm1(x[0] / x[1]); }
GG_SCALAR double f_selu(const double *x) {
  const double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
  return x[0] > 0 ? scale * x[0] : scale * alpha * expm1(x[0]);
}
GG_SCALAR double f_mish(const double *x) { return x[0] * tanh(log1p(exp(x[0]))); }
GG_SCALAR double f_log_sigmoid(const double *x) { return x[0] < 0 ? x[0] - log1p(exp(x[0])) : -log1p(exp(-x[0])); }
GG_SCALAR double f_atan2(const double *x) { return atan2(x[0], x[1]); }
GG_SCALAR double f_lxor(const double *x) { return (x[0] != 0) != (x[1] != 0); }
/* clamp: a None bound arrives as NaN (interp.c), and means no bound */
GG_SCALAR double f_clamp(const double *x) {
  double v = x[0];
  if (isnan(v)) return v;
  if (!isnan(x[1]) && v < x[1]) v = x[1];
  if (!isnan(x[2]) && v > x[2]) v = x[2];
  return v;
}
GG_SCALAR double f_clamp_min(const double *x) { return isnan(x[0]) ? x[0] : x[0] < x[1] ? x[1] : x[0]; }
GG_SCALAR double f_clamp_max(const double *x) { return isnan(x[0]) ? x[0] : x[0] > x[1] ? x[1] : x[0]; }
GG_SCALAR double f_add(const double *x) { return x[0] + x[2] * x[1]; }
GG_SCALAR double f_sub(const double *x) { return x[0] - x[2] * x[1]; }
GG_SCALAR double f_rsub(const double *x) { return x[1] - x[2] * x[0]; }
GG_SCALAR double f_mul(const double *x) { return x[0] * x[1]; }
GG_SCALAR double f_div(const double *x) { return x[0] / x[1]; }
GG_SCALAR double f_floordiv(const double *x) {
  /* Python semantics, as torch.floor_divide and div(rounding_mode='floor') on floats */
  if (x[1] == 0) return x[0] / x[1];
  double m = fmod(x[0], x[1]), d = (x[0] - m) / x[1];
  if (m != 0 && ((x[1] < 0) != (m < 0))) d -= 1;
  double fd = floor(d);
  if (d - fd > 0.5) fd += 1;
  return d == 0 ? copysign(0.0, x[0] / x[1]) : fd;
}
GG_SCALAR double f_remainder(const double *x) {
  double m = fmod(x[0], x[1]);
  if (m != 0 && ((x[1] < 0) != (m < 0))) m += x[1];
  return m;
}
GG_SCALAR double f_fmod(const double *x) { return fmod(x[0], x[1]); }
GG_SCALAR double f_pow(const double *x) { return pow(x[0], x[1]); }
GG_SCALAR double f_maximum(const double *x) { return isnan(x[0]) || isnan(x[1]) ? NAN : x[0] > x[1] ? x[0] : x[1]; }
GG_SCALAR double f_minimum(const double *x) { return isnan(x[0]) || isnan(x[1]) ? NAN : x[0] < x[1] ? x[0] : x[1]; }
GG_SCALAR double f_eq(const double *x) { return x[0] == x[1]; }
GG_SCALAR double f_ne(const double *x) { return x[0] != x[1]; }
GG_SCALAR double f_lt(const double *x) { return x[0] < x[1]; }
GG_SCALAR double f_le(const double *x) { return x[0] <= x[1]; }
GG_SCALAR double f_gt(const double *x) { return x[0] > x[1]; }
GG_SCALAR double f_ge(const double *x) { return x[0] >= x[1]; }
GG_SCALAR double f_land(const double *x) { return x[0] != 0 && x[1] != 0; }
GG_SCALAR double f_lor(const double *x) { return x[0] != 0 || x[1] != 0; }
GG_SCALAR double f_where(const double *x) { return x[0] != 0 ? x[1] : x[2]; }
GG_SCALAR double f_masked_fill(const double *x) { return x[1] != 0 ? x[2] : x[0]; }

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

/* Variants that an op picks by an argument (gelu's approximation, division's rounding mode). */
GG_SCALAR double f_gelu_erf(const double *x) { return 0.5 * x[0] * (1 + erf(x[0] * 0.70710678118654752440)); }
GG_SCALAR double f_gelu_tanh(const double *x) {
  const double k = 0.79788456080286535588;  /* sqrt(2/pi) */
  return 0.5 * x[0] * (1 + tanh(k * (x[0] + 0.044715 * x[0] * x[0] * x[0])));
}
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
static inline double f32_exp(const double *x) { return gg_expf((float)x[0]); }
static inline double f32_sigmoid(const double *x) { return 1.0f / (1.0f + gg_expf(-(float)x[0])); }
static inline double f32_silu(const double *x) { return (float)x[0] / (1.0f + gg_expf(-(float)x[0])); }
static inline double f32_erf(const double *x) { return gg_erff((float)x[0]); }
static inline double f32_gelu_erf(const double *x) { float v = (float)x[0]; return 0.5f * v * (1.0f + gg_erff(v * 0.70710678118654752440f)); }
#endif
GG_SCALAR double f_div_trunc(const double *x) { return trunc(x[0] / x[1]); }
GG_SCALAR int64_t i_div_trunc(const int64_t *x) { return x[1] == 0 ? 0 : (x[0] == INT64_MIN && x[1] == -1) ? INT64_MIN : x[0] / x[1]; }
GG_SCALAR double f_logical_not(const double *x) { return x[0] == 0; }

#endif
