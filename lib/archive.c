/* archive.c: files: the .pt2 zip archive, safetensors, and mapping.
 * Requires: a path. Guarantees: every entry or tensor handed out lies inside the mapped file (offsets
 * and sizes are checked before use); stored zip entries (what torch.export.save writes) are mapped,
 * not copied; deflated entries, which PyTorch never writes but a re-zipped archive may hold, are read
 * into memory up to a bound. Files are mapped copy-on-write, so the interpreter may mutate buffers. */
#include "gg.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <minizip/unzip.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_INFLATED (UINT64_C(1) << 30)

const uint8_t *map_file(Ctx *c, Graph *g, const char *path, size_t *len) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) { gg_error(c, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    gg_error(c, "%s: not a regular file", path);
    return NULL;
  }
  *len = (size_t)st.st_size;
  if (*len == 0) { close(fd); return (const uint8_t *)""; }
  void *p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) { gg_error(c, "%s: cannot map: %s", path, strerror(errno)); return NULL; }
  Mapping *m = arena_alloc(c->arena, sizeof *m);
  m->base = p;
  m->len = *len;
  m->next = g->mappings;
  g->mappings = m;
  return p;
}

int zip_open(Ctx *c, Graph *g, const char *path, Zip *z) {
  memset(z, 0, sizeof *z);
  size_t len;
  z->base = map_file(c, g, path, &len);
  if (!z->base) return -1;
  z->len = len;
  unzFile uf = unzOpen64(path);
  if (!uf) return gg_error(c, "%s: not a zip archive, or a truncated one (no central directory)", path);
  unz_global_info64 gi;
  if (unzGetGlobalInfo64(uf, &gi) != UNZ_OK || gi.number_entry > 100000) {
    unzClose(uf);
    return gg_error(c, "%s: unreadable zip directory", path);
  }
  z->entries = arena_array(c->arena, (size_t)gi.number_entry + 1, sizeof *z->entries);
  int rc = unzGoToFirstFile(uf);
  while (rc == UNZ_OK) {
    unz_file_info64 fi;
    char name[1024];
    if (unzGetCurrentFileInfo64(uf, &fi, name, sizeof name, NULL, 0, NULL, 0) != UNZ_OK) break;
    if (fi.size_filename >= sizeof name) {   /* minizip leaves a name that fills the buffer unterminated (found by fuzz_pt2) */
      unzClose(uf);
      return gg_error(c, "%s: entry %d: its name is %lu bytes long (at most %zu)", path, z->n, (unsigned long)fi.size_filename, sizeof name - 1);
    }
    if (z->n >= (int)gi.number_entry) break;
    ZipEntry *e = &z->entries[z->n];
    e->name = arena_strdup(c->arena, name);
    e->size = fi.uncompressed_size;
    if (unzOpenCurrentFile(uf) != UNZ_OK) { unzClose(uf); return gg_error(c, "%s: entry %s: cannot open", path, gg_quote(c, name)); }
    if (fi.compression_method == 0) {
      uint64_t off = unzGetCurrentFileZStreamPos64(uf);
      if (fi.compressed_size != fi.uncompressed_size || off > len || fi.uncompressed_size > len - off) {
        unzCloseCurrentFile(uf);
        unzClose(uf);
        return gg_error(c, "%s: entry %s: data runs past the end of the file (truncated archive?)", path, gg_quote(c, name));
      }
      e->data = z->base + off;
    } else {
      if (fi.uncompressed_size > MAX_INFLATED) {
        unzCloseCurrentFile(uf);
        unzClose(uf);
        return gg_error(c, "%s: entry %s: compressed entry too large (%llu bytes); torch.export.save stores entries uncompressed",
                        path, gg_quote(c, name), (unsigned long long)fi.uncompressed_size);
      }
      uint8_t *buf = arena_alloc(c->arena, (size_t)fi.uncompressed_size + 1);
      int got = unzReadCurrentFile(uf, buf, (unsigned)fi.uncompressed_size);
      if (got < 0 || (uint64_t)got != fi.uncompressed_size) {
        unzCloseCurrentFile(uf);
        unzClose(uf);
        return gg_error(c, "%s: entry %s: corrupted compressed data", path, gg_quote(c, name));
      }
      e->data = buf;
    }
    if (unzCloseCurrentFile(uf) == UNZ_CRCERROR) {
      unzClose(uf);
      return gg_error(c, "%s: entry %s: checksum mismatch (corrupted archive)", path, gg_quote(c, name));
    }
    z->n++;
    rc = unzGoToNextFile(uf);
  }
  unzClose(uf);
  if (rc != UNZ_END_OF_LIST_OF_FILE) return gg_error(c, "%s: corrupted zip directory", path);
  return 0;
}

const ZipEntry *zip_find(const Zip *z, const char *name) {
  for (int i = 0; i < z->n; i++)
    if (!strcmp(z->entries[i].name, name)) return &z->entries[i];
  return NULL;
}

/* ---------------------------------------------------------------- safetensors */

static int checked_numel(const int64_t *sizes, int rank, int64_t *numel) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (sizes[i] < 0 || __builtin_mul_overflow(n, sizes[i], &n) || n > GG_MAX_ELEMS) return -1;
  }
  *numel = n;
  return 0;
}

int st_read(Ctx *c, Graph *g, const char *path, SafeTensors *out) {
  memset(out, 0, sizeof *out);
  size_t len;
  const uint8_t *p = map_file(c, g, path, &len);
  if (!p) return -1;
  if (len < 8) return gg_error(c, "%s: not a safetensors file (shorter than its 8-byte header length)", path);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
  if (hlen > len - 8 || hlen > (UINT64_C(100) << 20))
    return gg_error(c, "%s: header length %llu exceeds the file (truncated or not safetensors)", path, (unsigned long long)hlen);
  cJSON *h = cJSON_ParseWithLength((const char *)p + 8, (size_t)hlen);
  if (!h || !cJSON_IsObject(h)) {
    cJSON_Delete(h);
    return gg_error(c, "%s: header is not a JSON object", path);
  }
  const uint8_t *data = p + 8 + hlen;
  size_t dlen = len - 8 - (size_t)hlen;
  int n = cJSON_GetArraySize(h), k = 0;
  out->t = arena_array(c->arena, (size_t)n + 1, sizeof *out->t);
  int rc = 0;
  for (cJSON *e = h->child; e; e = e->next) {
    if (!strcmp(e->string, "__metadata__")) continue;
    const char *nm = gg_quote(c, e->string);
    cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype"), *sh = cJSON_GetObjectItemCaseSensitive(e, "shape"),
          *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    const DTypeInfo *di = cJSON_IsString(dt) ? dtype_by_st_name(dt->valuestring) : NULL;
    if (!di) { rc = gg_error(c, "%s: tensor %s: missing or unsupported dtype", path, nm); break; }
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > GG_MAX_RANK) { rc = gg_error(c, "%s: tensor %s: bad shape", path, nm); break; }
    STensor *t = &out->t[k];
    t->name = arena_strdup(c->arena, e->string);
    t->dtype = di->code;
    t->rank = 0;
    bool bad = false;
    for (cJSON *d = sh->child; d; d = d->next) {
      if (!cJSON_IsNumber(d) || !(d->valuedouble >= 0 && d->valuedouble <= 9e15) || d->valuedouble != (double)(int64_t)d->valuedouble) bad = true;
      else t->sizes[t->rank++] = (int64_t)d->valuedouble;
    }
    int64_t numel;
    if (bad || checked_numel(t->sizes, t->rank, &numel)) { rc = gg_error(c, "%s: tensor %s: negative, fractional or too large size", path, nm); break; }
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !cJSON_IsNumber(off->child) || !cJSON_IsNumber(off->child->next)) {
      rc = gg_error(c, "%s: tensor %s: bad data_offsets", path, nm);
      break;
    }
    double b = off->child->valuedouble, en = off->child->next->valuedouble;
    if (b < 0 || en < b || en > (double)dlen) { rc = gg_error(c, "%s: tensor %s: data_offsets [%.0f, %.0f] outside the file's %zu data bytes", path, nm, b, en, dlen); break; }
    if ((uint64_t)(en - b) != (uint64_t)numel * (uint64_t)di->size) {
      rc = gg_error(c, "%s: tensor %s: %.0f bytes for %lld elements of %s", path, nm, en - b, (long long)numel, di->name);
      break;
    }
    t->data = data + (size_t)b;
    t->nbytes = (size_t)(en - b);
    k++;
  }
  cJSON_Delete(h);
  out->n = k;
  return rc;
}

const STensor *st_find(const SafeTensors *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->t[i].name, name)) return &s->t[i];
  return NULL;
}

/* A tensor named in.N with N beyond the model's n inputs is a mistake worth reporting. */
int st_check_input_names(Ctx *c, const SafeTensors *st, int n) {
  for (int k = 0; k < st->n; k++) {
    int idx;
    char tail;
    if (sscanf(st->t[k].name, "in.%d%c", &idx, &tail) == 1 && (idx < 0 || idx >= n))
      return gg_error(c, "guard failed: expected %d inputs, got a tensor named %s (name them in.0 to in.%d, or by the inputs' names: gcc-graph explain MODEL lists them)",
                      n, gg_quote(c, st->t[k].name), n - 1);
  }
  return 0;
}

int st_write(Ctx *c, const char *path, const STensor *t, int n) {
  cJSON *h = cJSON_CreateObject();
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "dtype", dtype_info(t[i].dtype)->st_name);
    cJSON *sh = cJSON_AddArrayToObject(e, "shape");
    for (int d = 0; d < t[i].rank; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].sizes[d]));
    cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
    cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
    off += t[i].nbytes;
    cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
    cJSON_AddItemToObject(h, t[i].name, e);
  }
  char *js = cJSON_PrintUnformatted(h);
  cJSON_Delete(h);
  size_t jl = strlen(js), padded = (jl + 7) & ~(size_t)7;
  FILE *f = fopen(path, "wb");
  if (!f) { free(js); return gg_error(c, "%s: cannot write: %s", path, strerror(errno)); }
  uint8_t hdr[8];
  for (int i = 0; i < 8; i++) hdr[i] = (uint8_t)(padded >> (8 * i));
  fwrite(hdr, 1, 8, f);
  fwrite(js, 1, jl, f);
  for (size_t i = jl; i < padded; i++) fputc(' ', f);
  free(js);
  for (int i = 0; i < n; i++) if (t[i].nbytes) fwrite(t[i].data, 1, t[i].nbytes, f);
  if (fclose(f)) return gg_error(c, "%s: write failed", path);
  return 0;
}

void graph_release(Graph *g) {
  if (!g) return;
  for (Mapping *m = g->mappings; m; m = m->next) munmap(m->base, m->len);
  g->mappings = NULL;
}
