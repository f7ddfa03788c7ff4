/* Stress harness for libnccl-tuner-dyncc: the plugin as a large job uses it.
 *
 * Scenarios (each checked, counted, and summarised on stdout):
 *   1. init_all: THREADS threads released by one barrier each create COMMS
 *      communicators (as ncclCommInitAll does, one thread per GPU), so
 *      THREADS*COMMS communicators are alive at once; exactly one of them
 *      may read the file ("(loaded)"), all report the same digest.
 *   2. race: query threads call getCollInfo on those live communicators
 *      and check every answer, while churn threads init and finalize other
 *      communicators (other shapes, every ABI version) at the same time.
 *   3. file_changes: with communicators alive, the table file is deleted,
 *      then replaced (rename) by a different table: running communicators
 *      keep their decisions, and new communicators in this process keep
 *      getting the table already loaded (same digest, "(shared)"). After the
 *      last finalize the next init reads the file again and gets the new
 *      table; a deleted file then fails init (strict) or leaves NCCL alone
 *      (DYNCC_STRICT=0).
 *   4. no_holder: threads create, use and finalize communicators with no
 *      long-lived one, so the shared table is freed and reloaded while
 *      other threads use theirs.
 *   5. reload: dlclose/dlopen cycles, each with concurrent inits.
 *
 * Environment: DYNCC_STRESS_LIB (the .so), DYNCC_STRESS_TABLE (a scratch
 * path holding the harness table; this program deletes and replaces it),
 * DYNCC_STRESS_TABLE_B (the second table, see tests/stress_c.rs),
 * DYNCC_STRESS_SCALE (divides the iteration counts; 1 = full).
 * Prints "stress: N passed, M failed" and exits 1 on any failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_tuner.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static long g_pass, g_fail;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (cond) {                                                       \
      pthread_mutex_lock(&g_lock);                                    \
      g_pass++;                                                       \
      pthread_mutex_unlock(&g_lock);                                  \
    } else {                                                          \
      pthread_mutex_lock(&g_lock);                                    \
      g_fail++;                                                       \
      if (g_fail < 50) {                                              \
        fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
        fprintf(stderr, __VA_ARGS__);                                 \
        fprintf(stderr, "\n");                                        \
      }                                                               \
      pthread_mutex_unlock(&g_lock);                                  \
    }                                                                 \
  } while (0)

/* ---- NCCL's logger: counts lines and collects the digests -------------- */

static int g_infos, g_warns, g_loaded, g_shared, g_digest_mismatch;
static char g_digest[17], g_last_warn[1200], g_first_info[1200];

static void reset_log(void) {
  pthread_mutex_lock(&g_lock);
  g_infos = g_warns = g_loaded = g_shared = g_digest_mismatch = 0;
  g_digest[0] = g_last_warn[0] = g_first_info[0] = 0;
  pthread_mutex_unlock(&g_lock);
}

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  char buf[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&g_lock);
  if (level == NCCL_LOG_WARN) {
    g_warns++;
    snprintf(g_last_warn, sizeof g_last_warn, "%s", buf);
  } else if (level == NCCL_LOG_INFO) {
    g_infos++;
    if (!g_first_info[0]) snprintf(g_first_info, sizeof g_first_info, "%s", buf);
    if (strstr(buf, "(loaded)")) g_loaded++;
    if (strstr(buf, "(shared)")) g_shared++;
    const char *d = strstr(buf, " digest ");
    if (d) {
      char dig[17] = {0};
      memcpy(dig, d + 8, 16);
      if (!g_digest[0]) memcpy(g_digest, dig, 17);
      else if (strcmp(g_digest, dig) != 0) g_digest_mismatch++;
    }
  }
  pthread_mutex_unlock(&g_lock);
}

/* ---- the library ------------------------------------------------------- */

static const char *g_lib_path, *g_table, *g_table_b;
static void *g_lib;
static ncclTuner_v3_t *v3;
static ncclTuner_v4_t *v4;
static ncclTuner_v5_t *v5;
static ncclTuner_v6_t *v6;

static int load_lib(void) {
  g_lib = dlopen(g_lib_path, RTLD_NOW | RTLD_LOCAL);
  CHECK(g_lib != NULL, "dlopen(%s): %s", g_lib_path, dlerror());
  if (!g_lib) return 0;
  v3 = dlsym(g_lib, "ncclTunerPlugin_v3");
  v4 = dlsym(g_lib, "ncclTunerPlugin_v4");
  v5 = dlsym(g_lib, "ncclTunerPlugin_v5");
  v6 = dlsym(g_lib, "ncclTunerPlugin_v6");
  CHECK(v3 && v4 && v5 && v6, "ncclTunerPlugin_v3..v6 resolve");
  return v3 && v4 && v5 && v6;
}

static ncclResult_t t_init(int ver, size_t nRanks, size_t nNodes, void **ctx) {
  ncclNvlDomainInfo_v5_t nvl = {(int)nNodes, (int)(nRanks / nNodes), (int)(nRanks / nNodes)};
  ncclTunerConstants_v5_t constants;
  memset(&constants, 0, sizeof constants);
  switch (ver) {
    case 3: return v3->init(nRanks, nNodes, logger, ctx);
    case 4: return v4->init(nRanks, nNodes, logger, ctx);
    case 5: return v5->init(ctx, (uint64_t)(uintptr_t)ctx, nRanks, nNodes, logger, &nvl, &constants);
    default: return v6->init(ctx, (uint64_t)(uintptr_t)ctx, nRanks, nNodes, logger, &nvl, &constants);
  }
}

static ncclResult_t t_gci(int ver, void *ctx, int coll, size_t nBytes, float *table, int *nCh) {
  float **t = (float **)(void *)table; /* NCCL's cast: really float[7][3] */
  switch (ver) {
    case 3: return v3->getCollInfo(ctx, (ncclFunc_t)coll, nBytes, 1, t, 7, 3, nCh);
    case 4: return v4->getCollInfo(ctx, (ncclFunc_t)coll, nBytes, 1, t, 7, 3, 0, nCh);
    case 5: return v5->getCollInfo(ctx, (ncclFunc_t)coll, nBytes, 1, t, 7, 3, 0, nCh);
    default: return v6->getCollInfo(ctx, (ncclFunc_t)coll, nBytes, 1, t, 7, 3, 0, nCh);
  }
}

static ncclResult_t t_fin(int ver, void *ctx) {
  switch (ver) {
    case 3: return v3->destroy(ctx);
    case 4: return v4->destroy(ctx);
    case 5: return v5->finalize(ctx);
    default: return v6->finalize(ctx);
  }
}

/* ---- expected decisions --------------------------------------------------
 * Table A (tests/c/harness_table.rs): allreduce nodes 1-4, ppn 1-8:
 * <=64 KiB Tree/LL (cell 0), <=4 MiB Ring/LL128 (cell 4) x4 channels, larger
 * default; nodes 5-64: Tree/Simple (cell 2). broadcast nodes 1-4:
 * CollNetDirect/Simple (cell 8) x2. Table B (tests/stress_c.rs): allreduce
 * nodes 1-4, ppn 1-8: Ring/Simple (cell 5) for every size; nothing else. */

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)

typedef struct {
  int coll;
  size_t bytes;
} query_t;
static const query_t QUERIES[] = {
    {ncclFuncAllReduce, KiB}, {ncclFuncAllReduce, MiB}, {ncclFuncAllReduce, 64 * MiB},
    {ncclFuncBroadcast, MiB}, {ncclFuncReduce, MiB},
};
#define NQ ((int)(sizeof QUERIES / sizeof QUERIES[0]))

static void expected(char table, size_t nodes, int q, int *cell, int *ch) {
  int coll = QUERIES[q].coll;
  size_t bytes = QUERIES[q].bytes;
  *cell = -1;
  *ch = 0;
  if (table == 'B') {
    if (coll == ncclFuncAllReduce && nodes <= 4) *cell = 5;
    return;
  }
  if (coll == ncclFuncAllReduce) {
    if (nodes > 4) *cell = 2;
    else if (bytes <= 64 * KiB) *cell = 0;
    else if (bytes <= 4 * MiB) {
      *cell = 4;
      *ch = 4;
    }
  } else if (coll == ncclFuncBroadcast && nodes <= 4) {
    *cell = 8;
    *ch = 2;
  }
}

/* One checked call; returns 1 when the answer is what `table` says. */
static int ask(int ver, void *ctx, char table, size_t nodes, int q) {
  float cost[1 + 21 + 1];
  for (int i = 0; i < 23; i++) cost[i] = 10.0f + (float)i;
  int nCh = 0, want, wch;
  ncclResult_t rc = t_gci(ver, ctx, QUERIES[q].coll, QUERIES[q].bytes, cost + 1, &nCh);
  expected(table, nodes, q, &want, &wch);
  int ok = rc == ncclSuccess && nCh == wch && cost[0] == 10.0f && cost[22] == 32.0f;
  for (int i = 0; i < 21; i++) ok &= cost[1 + i] == (i == want ? 0.0f : 11.0f + (float)i);
  return ok;
}

static long g_calls, g_comms_created;
static int g_scale = 1;

/* ---- 1 + 2: init_all and race ------------------------------------------ */

#define THREADS 16
#define COMMS 32 /* per thread: THREADS*COMMS alive at once */
static pthread_barrier_t g_barrier;
static void *g_ctx[THREADS][COMMS];
static int g_ver[THREADS][COMMS];
static size_t g_nodes[THREADS][COMMS];

static void *init_all_thread(void *arg) {
  int t = (int)(intptr_t)arg;
  pthread_barrier_wait(&g_barrier);
  for (int c = 0; c < COMMS; c++) {
    int ver = 3 + (t + c) % 4;
    size_t nodes = (c % 2) ? 1 : 8;
    void *ctx = NULL;
    ncclResult_t rc = t_init(ver, nodes * 8, nodes, &ctx);
    CHECK(rc == ncclSuccess && ctx, "thread %d comm %d v%d: init rc %d", t, c, ver, rc);
    g_ctx[t][c] = ctx;
    g_ver[t][c] = ver;
    g_nodes[t][c] = nodes;
  }
  return NULL;
}

typedef struct {
  int id;
  char table;
  long iters;
  long calls, bad;
} query_arg;

static void *query_thread(void *p) {
  query_arg *a = p;
  unsigned seed = (unsigned)a->id * 2654435761u + 1;
  for (long i = 0; i < a->iters; i++) {
    seed = seed * 1103515245u + 12345u;
    int t = (int)((seed >> 8) % THREADS), c = (int)((seed >> 16) % COMMS), q = (int)(i % NQ);
    if (!ask(g_ver[t][c], g_ctx[t][c], a->table, g_nodes[t][c], q)) a->bad++;
    a->calls++;
  }
  return NULL;
}

typedef struct {
  int id;
  long comms, calls, bad;
} churn_arg;

static void *churn_thread(void *p) {
  churn_arg *a = p;
  int n = 400 / g_scale;
  for (int i = 0; i < n; i++) {
    int ver = 3 + (a->id + i) % 4;
    size_t nodes = 1 + (size_t)(i % 8), ranks = nodes * (size_t)(1 + i % 8);
    void *ctx = NULL;
    if (t_init(ver, ranks, nodes, &ctx) != ncclSuccess || !ctx) {
      a->bad++;
      continue;
    }
    a->comms++;
    for (int q = 0; q < NQ; q++) {
      /* Shapes with more than 8 ranks per node fall outside every context. */
      if (ranks / nodes <= 8) {
        if (!ask(ver, ctx, 'A', nodes, q)) a->bad++;
      }
      a->calls++;
    }
    if (t_fin(ver, ctx) != ncclSuccess) a->bad++;
  }
  return NULL;
}

static void check_init_all_and_race(void) {
  setenv("DYNCC_TABLE", g_table, 1);
  unsetenv("DYNCC_STRICT");
  reset_log();
  pthread_t th[THREADS];
  pthread_barrier_init(&g_barrier, NULL, THREADS);
  for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, init_all_thread, (void *)(intptr_t)t);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&g_barrier);
  g_comms_created += THREADS * COMMS;
  CHECK(g_infos == THREADS * COMMS && g_warns == 0, "init_all: %d INFO lines, %d WARN", g_infos, g_warns);
  CHECK(g_loaded == 1 && g_shared == THREADS * COMMS - 1,
        "init_all: the table was read once and shared (%d loaded, %d shared)", g_loaded, g_shared);
  CHECK(g_digest[0] && g_digest_mismatch == 0, "init_all: every communicator logs digest %s (%d differ)",
        g_digest, g_digest_mismatch);
  printf("stress: init_all: %d threads x %d communicators alive at once, %d file read(s); %s\n", THREADS,
         COMMS, g_loaded, g_first_info);

  /* 2. race: 4 query threads over the live communicators, 4 churn threads. */
  enum { NQT = 4, NCT = 4 };
  query_arg qa[NQT];
  churn_arg ca[NCT];
  pthread_t qt[NQT], ct[NCT];
  for (int i = 0; i < NQT; i++) {
    qa[i] = (query_arg){i, 'A', 200000 / g_scale, 0, 0};
    pthread_create(&qt[i], NULL, query_thread, &qa[i]);
  }
  for (int i = 0; i < NCT; i++) {
    ca[i] = (churn_arg){i, 0, 0, 0};
    pthread_create(&ct[i], NULL, churn_thread, &ca[i]);
  }
  long calls = 0, comms = 0;
  for (int i = 0; i < NQT; i++) {
    pthread_join(qt[i], NULL);
    CHECK(qa[i].bad == 0, "race: query thread %d: %ld of %ld answers wrong", i, qa[i].bad, qa[i].calls);
    calls += qa[i].calls;
  }
  for (int i = 0; i < NCT; i++) {
    pthread_join(ct[i], NULL);
    CHECK(ca[i].bad == 0, "race: churn thread %d: %ld failures", i, ca[i].bad);
    calls += ca[i].calls;
    comms += ca[i].comms;
  }
  g_calls += calls;
  g_comms_created += comms;
  printf("stress: race: %d query threads + %d churn threads: %ld getCollInfo calls, %ld communicators "
         "created and finalized meanwhile\n", NQT, NCT, calls, comms);
}

/* ---- 3: file deleted / replaced while communicators run ----------------- */

static void init_some(int n, const char *what, char table, ncclResult_t want_rc, int want_ctx) {
  for (int i = 0; i < n; i++) {
    void *ctx = NULL;
    ncclResult_t rc = t_init(6, 8, 1, &ctx);
    CHECK(rc == want_rc && (ctx != NULL) == want_ctx, "%s: init rc %d ctx %p", what, rc, ctx);
    if (ctx) {
      for (int q = 0; q < NQ; q++) CHECK(ask(6, ctx, table, 1, q), "%s: query %d answers table %c", what, q, table);
      g_calls += NQ;
      g_comms_created++;
    }
    CHECK(t_fin(6, ctx) == ncclSuccess, "finalize");
  }
}

static int copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  int ok = in && out;
  char buf[4096];
  size_t n;
  while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
  if (in) fclose(in);
  if (out) ok &= fclose(out) == 0;
  return ok;
}

static void check_file_changes(void) {
  char digest_a[17];
  memcpy(digest_a, g_digest, 17);
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.new", g_table);

  /* Deleted while the job runs. */
  CHECK(unlink(g_table) == 0, "unlink %s", g_table);
  reset_log();
  init_some(64, "after delete", 'A', ncclSuccess, 1);
  CHECK(g_loaded == 0 && g_shared == 64 && g_warns == 0 && strcmp(g_digest, digest_a) == 0,
        "after delete: new communicators share the loaded table (%d loaded, %d shared, digest %s)",
        g_loaded, g_shared, g_digest);
  printf("stress: file deleted: 64 new communicators still init with digest %s (shared)\n", g_digest);

  /* Replaced (atomically, as dyncc compile writes) by table B. */
  CHECK(copy_file(g_table_b, tmp) && rename(tmp, g_table) == 0, "replace %s with table B", g_table);
  reset_log();
  init_some(64, "after replace", 'A', ncclSuccess, 1);
  CHECK(g_loaded == 0 && strcmp(g_digest, digest_a) == 0,
        "after replace: this process keeps table A for new communicators (%d loaded, digest %s)", g_loaded,
        g_digest);
  int bad = 0;
  for (int t = 0; t < THREADS; t++)
    for (int c = 0; c < COMMS; c++)
      for (int q = 0; q < NQ; q++) bad += !ask(g_ver[t][c], g_ctx[t][c], 'A', g_nodes[t][c], q);
  g_calls += THREADS * COMMS * NQ;
  CHECK(bad == 0, "running communicators keep table A's decisions after the file changed (%d wrong)", bad);
  printf("stress: file replaced: running communicators keep their decisions; new ones in this process "
         "still get digest %s\n", g_digest);

  /* The last communicator goes: the next init reads the file again. */
  for (int t = 0; t < THREADS; t++)
    for (int c = 0; c < COMMS; c++) CHECK(t_fin(g_ver[t][c], g_ctx[t][c]) == ncclSuccess, "finalize");
  reset_log();
  init_some(1, "after the last finalize", 'B', ncclSuccess, 1);
  CHECK(g_loaded == 1 && g_digest[0] && strcmp(g_digest, digest_a) != 0,
        "after the last finalize, init reads the new table (%d loaded, digest %s)", g_loaded, g_digest);
  printf("stress: after the last finalize: the next init loads the new file, digest %s\n", g_digest);

  /* Deleted with nothing loaded: strict init fails, DYNCC_STRICT=0 runs. */
  CHECK(unlink(g_table) == 0, "unlink %s", g_table);
  reset_log();
  init_some(1, "deleted, strict", 'A', ncclSystemError, 0);
  CHECK(g_warns == 1 && strstr(g_last_warn, "cannot read"), "strict: one WARN: %s", g_last_warn);
  printf("stress: deleted, strict: %s\n", g_last_warn);
  setenv("DYNCC_STRICT", "0", 1);
  reset_log();
  init_some(1, "deleted, DYNCC_STRICT=0", 'A', ncclSuccess, 0);
  CHECK(g_warns == 1 && strstr(g_last_warn, "leaving NCCL"), "lenient: one WARN: %s", g_last_warn);
  printf("stress: deleted, DYNCC_STRICT=0: %s\n", g_last_warn);
  unsetenv("DYNCC_STRICT");
  CHECK(copy_file(g_table_b, g_table), "restore a table at %s", g_table);
}

/* ---- 4: no long-lived communicator ---------------------------------------- */

static void *no_holder_thread(void *p) {
  churn_arg *a = p;
  int n = 200 / g_scale;
  for (int i = 0; i < n; i++) {
    void *ctx = NULL;
    if (t_init(6, 8, 1, &ctx) != ncclSuccess || !ctx) {
      a->bad++;
      continue;
    }
    a->comms++;
    for (int k = 0; k < 20; k++) {
      if (!ask(6, ctx, 'B', 1, k % NQ)) a->bad++;
      a->calls++;
    }
    if (t_fin(6, ctx) != ncclSuccess) a->bad++;
  }
  return NULL;
}

static void check_no_holder(void) {
  setenv("DYNCC_TABLE", g_table, 1);
  reset_log();
  enum { N = 8 };
  pthread_t th[N];
  churn_arg a[N];
  for (int i = 0; i < N; i++) {
    a[i] = (churn_arg){i, 0, 0, 0};
    pthread_create(&th[i], NULL, no_holder_thread, &a[i]);
  }
  long calls = 0, comms = 0;
  for (int i = 0; i < N; i++) {
    pthread_join(th[i], NULL);
    CHECK(a[i].bad == 0, "no_holder thread %d: %ld failures", i, a[i].bad);
    calls += a[i].calls;
    comms += a[i].comms;
  }
  CHECK(g_loaded >= 1 && g_loaded + g_shared == comms && g_digest_mismatch == 0,
        "no_holder: %d loads + %d shared for %ld communicators", g_loaded, g_shared, comms);
  g_calls += calls;
  g_comms_created += comms;
  printf("stress: no_holder: %d threads, %ld communicators, %ld calls, table read %d times\n", N, comms,
         calls, g_loaded);
}

/* ---- 5: dlclose / dlopen cycles ------------------------------------------- */

static void *reload_thread(void *p) {
  churn_arg *a = p;
  void *ctx[8];
  for (int i = 0; i < 8; i++) {
    ctx[i] = NULL;
    if (t_init(3 + (a->id + i) % 4, 8, 1, &ctx[i]) != ncclSuccess || !ctx[i]) a->bad++;
    else a->comms++;
  }
  for (int i = 0; i < 8; i++) {
    for (int q = 0; q < NQ; q++) {
      if (ctx[i] && !ask(3 + (a->id + i) % 4, ctx[i], 'B', 1, q)) a->bad++;
      a->calls++;
    }
  }
  for (int i = 0; i < 8; i++)
    if (t_fin(3 + (a->id + i) % 4, ctx[i]) != ncclSuccess) a->bad++;
  return NULL;
}

static int check_reload(void) {
  int cycles = 50 / g_scale;
  if (cycles < 2) cycles = 2;
  for (int r = 0; r < cycles; r++) {
    CHECK(dlclose(g_lib) == 0, "dlclose: %s", dlerror());
    g_lib = NULL;
    void *still = dlopen(g_lib_path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    CHECK(still == NULL, "cycle %d: the library is unloaded after dlclose", r);
    if (still) dlclose(still);
    if (!load_lib()) return r;
    enum { N = 4 };
    pthread_t th[N];
    churn_arg a[N];
    for (int i = 0; i < N; i++) {
      a[i] = (churn_arg){i, 0, 0, 0};
      pthread_create(&th[i], NULL, reload_thread, &a[i]);
    }
    for (int i = 0; i < N; i++) {
      pthread_join(th[i], NULL);
      CHECK(a[i].bad == 0, "cycle %d thread %d: %ld failures", r, i, a[i].bad);
      g_calls += a[i].calls;
      g_comms_created += a[i].comms;
    }
  }
  printf("stress: reload: %d dlclose/dlopen cycles, each with 4 threads x 8 communicators\n", cycles);
  return cycles;
}

int main(void) {
  g_lib_path = getenv("DYNCC_STRESS_LIB");
  g_table = getenv("DYNCC_STRESS_TABLE");
  g_table_b = getenv("DYNCC_STRESS_TABLE_B");
  const char *scale = getenv("DYNCC_STRESS_SCALE");
  if (scale && atoi(scale) > 0) g_scale = atoi(scale);
  if (!g_lib_path || !g_table || !g_table_b) {
    fprintf(stderr, "stress: set DYNCC_STRESS_LIB, DYNCC_STRESS_TABLE and DYNCC_STRESS_TABLE_B\n");
    return 2;
  }
  int cycles = 0;
  if (load_lib()) {
    check_init_all_and_race();
    check_file_changes();
    check_no_holder();
    cycles = check_reload();
    if (g_lib) dlclose(g_lib);
  }
  printf("stress figures: %d threads x %d communicators alive at once; %ld communicators created; "
         "%ld getCollInfo calls checked; %d dlclose/dlopen cycles\n",
         THREADS, COMMS, g_comms_created, g_calls, cycles);
  printf("stress: %ld passed, %ld failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
