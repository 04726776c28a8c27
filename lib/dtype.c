/* dtype.c: the dtype table, conversions and type promotion.
 * Codes are the ExportedProgram ScalarType numbers. Conversions to float16/bfloat16 round to nearest
 * even, as PyTorch does; float to integer conversion truncates toward zero, as a C cast does. */
#include "gg.h"

#include <math.h>
#include <string.h>

static const DTypeInfo table[] = {
  {DT_U8, "uint8", "U8", 1, false, false},
  {DT_I8, "int8", "I8", 1, false, true},
  {DT_I16, "int16", "I16", 2, false, true},
  {DT_I32, "int32", "I32", 4, false, true},
  {DT_I64, "int64", "I64", 8, false, true},
  {DT_F16, "float16", "F16", 2, true, true},
  {DT_F32, "float32", "F32", 4, true, true},
  {DT_F64, "float64", "F64", 8, true, true},
  {DT_BOOL, "bool", "BOOL", 1, false, false},
  {DT_BF16, "bfloat16", "BF16", 2, true, true},
};

const DTypeInfo *dtype_info(int code) {
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if ((int)table[i].code == code) return &table[i];
  return NULL;
}

const DTypeInfo *dtype_by_st_name(const char *s) {
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if (!strcmp(table[i].st_name, s)) return &table[i];
  return NULL;
}

const char *dtype_name(DType d) {
  const DTypeInfo *i = dtype_info(d);
  return i ? i->name : "unknown";
}

DType dtype_promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DT_BOOL) return b;
  if (b == DT_BOOL) return a;
  bool fa = dtype_is_float(a), fb = dtype_is_float(b);
  if (fa != fb) return fa ? a : b;
  if (fa) {
    if ((a == DT_F16 && b == DT_BF16) || (a == DT_BF16 && b == DT_F16)) return DT_F32;
    return dtype_info(a)->size >= dtype_info(b)->size ? a : b;
  }
  /* integers: uint8 with a signed type needs a signed type that holds 0..255 */
  if (a == DT_U8 || b == DT_U8) {
    DType s = a == DT_U8 ? b : a;
    return s == DT_I8 ? DT_I16 : s;
  }
  return dtype_info(a)->size >= dtype_info(b)->size ? a : b;
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) bits = sign;
    else { float f = ldexpf((float)man, -24); return sign ? -f : f; }
  } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
  else bits = sign | ((exp + 112) << 23) | (man << 13);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t float_to_half(double d) {
  float f = (float)d;   /* double -> float -> half can double-round; go direct below for accuracy */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  if (isnan(d)) return sign | 0x7e00;
  double a = fabs(d);
  if (a >= 65520.0) return sign | 0x7c00;             /* rounds to infinity */
  if (a < ldexp(1.0, -25)) {
    /* below half the smallest subnormal: zero, except exactly-half ties go to even (zero) */
    return sign;
  }
  int e;
  frexp(a, &e);                                       /* a = m * 2^e, m in [0.5, 1) */
  int exp = e - 1;                                    /* a = 1.x * 2^exp */
  double q = exp < -14 ? ldexp(a, 24) : ldexp(a, 10 - exp);  /* units of the last place */
  double r = nearbyint(q);                            /* round to nearest even (default mode) */
  if (exp < -14) return sign | (uint16_t)r;          /* subnormal (r may reach 1024: smallest normal) */
  uint32_t m = (uint32_t)r;                           /* 1024..2048 */
  if (m == 2048) { m = 1024; exp++; }
  if (exp > 15) return sign | 0x7c00;
  return sign | (uint16_t)((exp + 15) << 10) | (uint16_t)(m - 1024);
}

static float bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t float_to_bf16(double d) {
  float f = (float)d;
  uint32_t x;
  memcpy(&x, &f, 4);
  if (isnan(f)) return (uint16_t)((x >> 16) | 0x40);
  /* round the float to bf16, nearest even (as c10::BFloat16 does from float) */
  uint32_t lsb = (x >> 16) & 1;
  x += 0x7fff + lsb;
  return (uint16_t)(x >> 16);
}

double dtype_load_f64(DType d, const void *p) {
  switch (d) {
  case DT_U8: return *(const uint8_t *)p;
  case DT_I8: return *(const int8_t *)p;
  case DT_I16: { int16_t v; memcpy(&v, p, 2); return v; }
  case DT_I32: { int32_t v; memcpy(&v, p, 4); return v; }
  case DT_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
  case DT_F16: { uint16_t v; memcpy(&v, p, 2); return half_to_float(v); }
  case DT_BF16: { uint16_t v; memcpy(&v, p, 2); return bf16_to_float(v); }
  case DT_F32: { float v; memcpy(&v, p, 4); return v; }
  case DT_F64: { double v; memcpy(&v, p, 8); return v; }
  case DT_BOOL: return *(const uint8_t *)p != 0;
  default: return 0;
  }
}

int64_t dtype_load_i64(DType d, const void *p) {
  switch (d) {
  case DT_I64: { int64_t v; memcpy(&v, p, 8); return v; }
  case DT_F16: case DT_BF16: case DT_F32: case DT_F64: {
    double v = dtype_load_f64(d, p);
    return gg_f64_to_i64(v);   /* out of range: what x86 gives */
  }
  default: return gg_f64_to_i64(dtype_load_f64(d, p));
  }
}

void dtype_store_f64(DType d, void *p, double v) {
  switch (d) {
  case DT_F32: { float f = (float)v; memcpy(p, &f, 4); return; }
  case DT_F64: memcpy(p, &v, 8); return;
  case DT_F16: { uint16_t h = float_to_half(v); memcpy(p, &h, 2); return; }
  case DT_BF16: { uint16_t h = float_to_bf16(v); memcpy(p, &h, 2); return; }
  case DT_BOOL: *(uint8_t *)p = v != 0; return;
  default: {
    int64_t i = gg_f64_to_i64(v);
    dtype_store_i64(d, p, i);
  }
  }
}

void dtype_store_i64(DType d, void *p, int64_t v) {
  switch (d) {
  case DT_U8: *(uint8_t *)p = (uint8_t)v; return;
  case DT_I8: *(int8_t *)p = (int8_t)v; return;
  case DT_I16: { int16_t x = (int16_t)v; memcpy(p, &x, 2); return; }
  case DT_I32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); return; }
  case DT_I64: memcpy(p, &v, 8); return;
  case DT_BOOL: *(uint8_t *)p = v != 0; return;
  default: dtype_store_f64(d, p, (double)v);
  }
}
