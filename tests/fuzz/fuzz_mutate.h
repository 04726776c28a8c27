/* fuzz_mutate.h: a structure-aware mutator for ExportedProgram JSON (LLVMFuzzerCustomMutator).
 * The input is parsed with cJSON, one to three random nodes of the tree are changed the way a
 * hostile or broken exporter would change them, and the tree is printed back. Mutations: a value
 * of another JSON kind; numbers made huge, negative, fractional, 2^62, dims like 16 or 65535; an
 * Argument union's kind swapped (as_tensor -> as_int, as_ints -> as_none ...); lists lengthened
 * (an element repeated up to 40 times), truncated or emptied; op targets swapped for other ops
 * of the op table; tensor names swapped for other names of the file; dtypes, sizes and strides
 * changed; size expressions made symbolic, nested or unbalanced. Input that does not parse is
 * left to libFuzzer's byte mutations. */
#ifndef FUZZ_MUTATE_H
#define FUZZ_MUTATE_H
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

static uint64_t fm_state;
static uint64_t fm_rand(void) {   /* splitmix64: the seed libFuzzer gives makes a run repeatable */
  uint64_t z = (fm_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int fm_pick(int n) { return n > 0 ? (int)(fm_rand() % (uint64_t)n) : 0; }

/* every node of the tree, in order */
static int fm_collect(cJSON *j, cJSON **out, int n, int cap) {
  if (n < cap) out[n++] = j;
  for (cJSON *c = j->child; c; c = c->next) n = fm_collect(c, out, n, cap);
  return n;
}

static const char *const fm_kinds[] = {
  "as_tensor", "as_tensors", "as_optional_tensor", "as_optional_tensors", "as_int", "as_ints", "as_float", "as_floats",
  "as_bool", "as_bools", "as_none", "as_string", "as_sym_int", "as_sym_ints", "as_scalar_type", "as_memory_format",
  "as_layout", "as_device", "as_sym_float", "as_sym_bool", "as_graph", "as_expr", "as_name",
};
static const double fm_numbers[] = {
  0, 1, -1, 2, 3, 7, 12, 13, 16, 17, 32, 64, 65535, 65536, -65536, 2147483647, 2147483648.0, -2147483649.0, 4294967296.0,
  1099511627776.0, 4611686018427387904.0, 9223372036854775807.0, -9223372036854775808.0, 1e19, -1e19, 1e300, -1e300, 0.5, -0.5,
  1e-300, 99, 127, 255, 536870912,
};
static const char *const fm_exprs[] = {
  "s0", "s77", "2*s0", "s0 + 1", "s0*s1", "s0//2", "Max(s0, 1)", "Min(s0, s1)", "s0 % 3", "(s0", "s0)", "Pow(s0, 8)",
  "Pow(Pow(Pow(s0, 8), 8), 8)", "Symbol('s0', positive=True)", "Mul(Integer(2), Symbol('s0'))", "FloorDiv(s0, 0)", "-s0",
  "99999999999999999999", "s0*s0*s0*s0*s0*s0*s0*s0*s0*s0", "", "((((((((((s0))))))))))", "Add(s0, ", "Symbol('",
};

static void fm_set_number(cJSON *j, double v) { cJSON_SetNumberValue(j, v); }

/* a JSON value of a random kind, small */
static cJSON *fm_random_value(cJSON *names) {
  switch (fm_pick(7)) {
  case 0: return cJSON_CreateNumber(fm_numbers[fm_pick((int)(sizeof fm_numbers / sizeof *fm_numbers))]);
  case 1: return cJSON_CreateString(fm_exprs[fm_pick((int)(sizeof fm_exprs / sizeof *fm_exprs))]);
  case 2: return cJSON_CreateNull();
  case 3: return cJSON_CreateBool(fm_pick(2));
  case 4: { cJSON *a = cJSON_CreateArray(); int n = fm_pick(4); for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(fm_pick(40) - 4)); return a; }
  case 5: {   /* an Argument union of a random kind */
    cJSON *o = cJSON_CreateObject();
    const char *k = fm_kinds[fm_pick((int)(sizeof fm_kinds / sizeof *fm_kinds))];
    if (!strcmp(k, "as_tensor") && names && cJSON_GetArraySize(names)) {
      cJSON *t = cJSON_CreateObject();
      cJSON_AddStringToObject(t, "name", cJSON_GetArrayItem(names, fm_pick(cJSON_GetArraySize(names)))->valuestring);
      cJSON_AddItemToObject(o, k, t);
    } else cJSON_AddItemToObject(o, k, fm_random_value(NULL));
    return o;
  }
  default: return cJSON_CreateObject();
  }
}

/* replace j (in its parent) by r */
static void fm_replace(cJSON *parent, cJSON *j, cJSON *r) {
  if (parent) cJSON_ReplaceItemViaPointer(parent, j, r);
  else cJSON_Delete(r);
}

static cJSON *fm_parent(cJSON *root, cJSON *j) {
  if (root == j) return NULL;
  for (cJSON *c = root->child; c; c = c->next) {
    if (c == j) return root;
    cJSON *p = fm_parent(c, j);
    if (p) return p;
  }
  return NULL;
}

static void fm_mutate_one(cJSON *root, cJSON **all, int n, cJSON *names, cJSON *targets) {
  cJSON *j = all[fm_pick(n)];
  cJSON *parent = fm_parent(root, j);
  const char *key = j->string;
  int what = fm_pick(10);
  if (cJSON_IsNumber(j)) {
    if (key && !strcmp(key, "dtype")) { fm_set_number(j, fm_pick(16)); return; }
    if (what < 6) fm_set_number(j, fm_numbers[fm_pick((int)(sizeof fm_numbers / sizeof *fm_numbers))]);
    else if (what < 8) fm_set_number(j, -j->valuedouble - 1);
    else if (what < 9) fm_set_number(j, j->valuedouble * 1e6);
    else fm_replace(parent, j, fm_random_value(names));
    return;
  }
  if (cJSON_IsString(j)) {
    const char *s = j->valuestring;
    if (key && !strcmp(key, "target") && targets && cJSON_GetArraySize(targets) && what < 8) {
      cJSON_SetValuestring(j, cJSON_GetArrayItem(targets, fm_pick(cJSON_GetArraySize(targets)))->valuestring);
    } else if (key && !strcmp(key, "name") && names && cJSON_GetArraySize(names) && what < 7) {
      cJSON_SetValuestring(j, cJSON_GetArrayItem(names, fm_pick(cJSON_GetArraySize(names)))->valuestring);
    } else if (key && !strcmp(key, "expr_str")) {
      cJSON_SetValuestring(j, fm_exprs[fm_pick((int)(sizeof fm_exprs / sizeof *fm_exprs))]);
    } else if (what < 3 && strlen(s) > 1) {   /* truncated */
      char buf[256];
      size_t l = strlen(s) / 2;
      if (l >= sizeof buf) l = sizeof buf - 1;
      memcpy(buf, s, l);
      buf[l] = 0;
      cJSON_SetValuestring(j, buf);
    } else fm_replace(parent, j, fm_random_value(names));
    return;
  }
  if (cJSON_IsArray(j)) {
    int len = cJSON_GetArraySize(j);
    if (what < 3 && len) {   /* lengthened: one element repeated */
      cJSON *e = cJSON_GetArrayItem(j, fm_pick(len));
      int k = 1 + fm_pick(fm_pick(2) ? 40 : 3);
      for (int i = 0; i < k && cJSON_GetArraySize(j) < 64; i++) cJSON_AddItemToArray(j, cJSON_Duplicate(e, 1));
    } else if (what < 5 && len) cJSON_DeleteItemFromArray(j, fm_pick(len));
    else if (what < 6) { while (j->child) cJSON_DeleteItemFromArray(j, 0); }
    else if (what < 8 && len > 1) {   /* two elements swapped */
      int a = fm_pick(len), b = fm_pick(len);
      cJSON *x = cJSON_Duplicate(cJSON_GetArrayItem(j, a), 1), *y = cJSON_Duplicate(cJSON_GetArrayItem(j, b), 1);
      cJSON_ReplaceItemInArray(j, a, y);
      cJSON_ReplaceItemInArray(j, b, x);
    } else cJSON_AddItemToArray(j, fm_random_value(names));
    return;
  }
  if (cJSON_IsObject(j)) {
    /* an Argument union: its kind swapped, its value kept */
    if (j->child && !j->child->next && j->child->string && !strncmp(j->child->string, "as_", 3) && what < 6) {
      const char *k = fm_kinds[fm_pick((int)(sizeof fm_kinds / sizeof *fm_kinds))];
      cJSON *v = cJSON_DetachItemViaPointer(j, j->child);
      cJSON_AddItemToObject(j, k, v);
      return;
    }
    if (what < 3 && j->child) {   /* a member dropped */
      int len = cJSON_GetArraySize(j);
      cJSON_Delete(cJSON_DetachItemViaPointer(j, cJSON_GetArrayItem(j, fm_pick(len))));
      return;
    }
    if (what < 5 && j->child) {   /* a member duplicated under another member's name: names collide */
      int len = cJSON_GetArraySize(j);
      cJSON *a = cJSON_GetArrayItem(j, fm_pick(len)), *b = cJSON_GetArrayItem(j, fm_pick(len));
      if (a != b && b->string) cJSON_ReplaceItemViaPointer(j, b, cJSON_Duplicate(a, 1)), (void)0;
      return;
    }
    fm_replace(parent, j, fm_random_value(names));
    return;
  }
  fm_replace(parent, j, fm_random_value(names));
}

/* tensor names and op targets of the file, to swap among */
static void fm_gather(cJSON *j, cJSON *names, cJSON *targets) {
  if (cJSON_IsString(j) && j->string) {
    if (!strcmp(j->string, "name") && cJSON_GetArraySize(names) < 256) cJSON_AddItemToArray(names, cJSON_CreateString(j->valuestring));
    if (!strcmp(j->string, "target") && cJSON_GetArraySize(targets) < 256) cJSON_AddItemToArray(targets, cJSON_CreateString(j->valuestring));
  }
  for (cJSON *c = j->child; c; c = c->next) fm_gather(c, names, targets);
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
  fm_state = seed;
  if (fm_pick(8) == 0) return LLVMFuzzerMutate(data, size, max_size);   /* bytes too: the JSON syntax itself */
  cJSON *root = cJSON_ParseWithLength((const char *)data, size);
  if (!root) return LLVMFuzzerMutate(data, size, max_size);
  enum { CAP = 1 << 16 };
  static cJSON *all[CAP];
  cJSON *names = cJSON_CreateArray(), *targets = cJSON_CreateArray();
  fm_gather(root, names, targets);
  /* other ops of the op table as targets too */
  static Ctx *oc;
  if (!oc) { oc = ctx_new(); ops_init(oc); }
  for (int i = 0; i < 4 && ops_count() > 0; i++) {
    char t[160];
    const char *nm = ops_at(fm_pick(ops_count()))->name;
    if (!nm) break;
    snprintf(t, sizeof t, "torch.ops.aten.%s%s", nm, strchr(nm, '.') ? "" : ".default");
    cJSON_AddItemToArray(targets, cJSON_CreateString(t));
  }
  int rounds = 1 + fm_pick(3);
  for (int r = 0; r < rounds; r++) {
    int n = fm_collect(root, all, 0, CAP);
    if (n > 1) fm_mutate_one(root, all + 1, n - 1, names, targets);
  }
  char *out = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  cJSON_Delete(names);
  cJSON_Delete(targets);
  size_t len = out ? strlen(out) : 0;
  if (!out || len > max_size) { free(out); return LLVMFuzzerMutate(data, size, max_size); }
  memcpy(data, out, len);
  free(out);
  return len;
}
#endif
