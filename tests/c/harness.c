/* C harness for libnccl-tuner-dyncc: drives the plugin the way NCCL does.
 *
 * dlopens the built library with RTLD_NOW|RTLD_LOCAL (NCCL 2.26+), resolves
 * ncclTunerPlugin_v2..v7 and the dyncc_* C API, and checks init /
 * getCollInfo / finalize against the harness table that tests/plugin_c.rs
 * builds (see harness_table() there for the decisions expected below):
 *
 *   allreduce     nodes 1-4, ppn 1-8: <=64 KiB Tree/LL; <=4 MiB Ring/LL128 x4
 *                 channels; larger: default
 *   allreduce     nodes 5-64, ppn 1-8: Tree/Simple for every size
 *   allgather     nodes 1-4, ppn 1-8: PAT/Simple (ignored when numAlgo is 6)
 *   broadcast     nodes 1-4, ppn 1-8: CollNetDirect/Simple x2 channels
 *   reducescatter nodes 1-4, ppn 1-8, numPipeOps <= 1 (any regBuff: no
 *                 answer depends on it): NVLS/Simple x8 channels
 *   reduce        no context: default
 *
 * Environment: DYNCC_HARNESS_LIB (the .so), DYNCC_HARNESS_TABLE (valid),
 * DYNCC_HARNESS_CORRUPT (checksum broken), DYNCC_HARNESS_MISSING (absent),
 * DYNCC_HARNESS_DIGEST (the valid table's digest as 16 hex digits),
 * DYNCC_HARNESS_SCRATCH (an empty directory for FIFOs, sparse files and
 * oddly named links), DYNCC_HARNESS_CHANNELS (rule 0 asks for 200
 * channels), DYNCC_HARNESS_RESERVED (header reserved field 1),
 * DYNCC_HARNESS_VERSIONED (the same decisions, no gpu metadata,
 * nccl_version "2.18.1,2.19.3").
 *
 * The harness defines ncclGetVersion itself and is linked with -rdynamic,
 * so the plugin's dlsym(RTLD_DEFAULT, "ncclGetVersion") finds it as it
 * finds libnccl's in a real job; g_nccl_version_code picks the answer
 * (0: the call fails, as if no NCCL version could be read).
 *
 * Prints "harness: N passed, M failed" and exits 1 on any failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dyncc.h"
#include "nccl_tuner.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_pass, g_fail;

#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (cond) {                                                   \
      pthread_mutex_lock(&g_lock);                                \
      g_pass++;                                                   \
      pthread_mutex_unlock(&g_lock);                              \
    } else {                                                      \
      pthread_mutex_lock(&g_lock);                                \
      g_fail++;                                                   \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, "\n");                                      \
      pthread_mutex_unlock(&g_lock);                              \
    }                                                             \
  } while (0)

/* ---- NCCL's ncclGetVersion, as a test double ----------------------------- */

static int g_nccl_version_code; /* 0: fail */
__attribute__((visibility("default"))) ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetVersion(int *version) {
  if (!g_nccl_version_code || !version) return ncclInternalError;
  *version = g_nccl_version_code;
  return ncclSuccess;
}

/* ---- NCCL's logger, as a test double ---------------------------------- */

static char g_last_warn[2048], g_last_info[2048];
static int g_warns, g_infos, g_bad_fmt, g_loaded_lines;

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...) {
  (void)file;
  (void)line;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&g_lock);
  if (strcmp(fmt, "%s") != 0) g_bad_fmt++;
  if (level == NCCL_LOG_WARN) {
    g_warns++;
    snprintf(g_last_warn, sizeof g_last_warn, "%s", buf);
    if (!(flags & NCCL_INIT)) g_bad_fmt++;
  } else if (level == NCCL_LOG_INFO) {
    g_infos++;
    snprintf(g_last_info, sizeof g_last_info, "%s", buf);
    /* Under INIT and TUNING, as NCCL's own tuner-loading line: plain
     * NCCL_DEBUG=INFO (default subsystems include INIT) must show it. */
    if (!(flags & NCCL_TUNING) || !(flags & NCCL_INIT)) g_bad_fmt++;
    if (strstr(buf, "(loaded)")) g_loaded_lines++;
  }
  pthread_mutex_unlock(&g_lock);
}

static void reset_log(void) {
  pthread_mutex_lock(&g_lock);
  g_last_warn[0] = g_last_info[0] = 0;
  g_warns = g_infos = g_loaded_lines = 0;
  pthread_mutex_unlock(&g_lock);
}

/* ---- the library ------------------------------------------------------- */

static const char *g_lib_path;
static void *g_lib;
static ncclTuner_v2_t *v2;
static ncclTuner_v3_t *v3;
static ncclTuner_v4_t *v4;
static ncclTuner_v5_t *v5;
static ncclTuner_v6_t *v6;
static ncclTuner_v7_t *v7;
static __typeof__(&dyncc_table_open) p_open;
static __typeof__(&dyncc_table_lookup) p_lookup;
static __typeof__(&dyncc_table_close) p_close;
static __typeof__(&dyncc_version) p_version;
static __typeof__(&dyncc_status_str) p_status_str;

static int load_lib(void) {
  g_lib = dlopen(g_lib_path, RTLD_NOW | RTLD_LOCAL);
  CHECK(g_lib != NULL, "dlopen(%s): %s", g_lib_path, dlerror());
  if (!g_lib) return 0;
  v2 = dlsym(g_lib, "ncclTunerPlugin_v2");
  v3 = dlsym(g_lib, "ncclTunerPlugin_v3");
  v4 = dlsym(g_lib, "ncclTunerPlugin_v4");
  v5 = dlsym(g_lib, "ncclTunerPlugin_v5");
  v6 = dlsym(g_lib, "ncclTunerPlugin_v6");
  v7 = dlsym(g_lib, "ncclTunerPlugin_v7");
  *(void **)&p_open = dlsym(g_lib, "dyncc_table_open");
  *(void **)&p_lookup = dlsym(g_lib, "dyncc_table_lookup");
  *(void **)&p_close = dlsym(g_lib, "dyncc_table_close");
  *(void **)&p_version = dlsym(g_lib, "dyncc_version");
  *(void **)&p_status_str = dlsym(g_lib, "dyncc_status_str");
  CHECK(v2 && v3 && v4 && v5 && v6 && v7, "every ncclTunerPlugin_vN resolves");
  CHECK(p_open && p_lookup && p_close && p_version && p_status_str, "dyncc_* resolve");
  if (!(v2 && v3 && v4 && v5 && v6 && v7 && p_open && p_lookup && p_close && p_version &&
        p_status_str))
    return 0;
  CHECK(strcmp(v2->name, "dyncc") == 0 && strcmp(v3->name, "dyncc") == 0 &&
            strcmp(v4->name, "dyncc") == 0 && strcmp(v5->name, "dyncc") == 0 &&
            strcmp(v6->name, "dyncc") == 0 && strcmp(v7->name, "dyncc") == 0,
        "every version is named dyncc");
  CHECK(v2->init && v2->getCollInfo && v2->destroy, "v2 slots");
  CHECK(v3->init && v3->getCollInfo && v3->destroy, "v3 slots");
  CHECK(v4->init && v4->getCollInfo && v4->destroy, "v4 slots");
  CHECK(v5->init && v5->getCollInfo && v5->finalize, "v5 slots");
  CHECK(v6->init && v6->getCollInfo && v6->finalize, "v6 slots");
  CHECK(v6->getChunkSize != NULL, "v6 getChunkSize is set");
  CHECK(v7->init && v7->getCollInfo && v7->finalize, "v7 slots");
  CHECK(v7->getChunkSize != NULL, "v7 getChunkSize is set");
  return 1;
}

/* Version-generic wrappers over the six structs. */
static ncclResult_t t_init(int ver, size_t nRanks, size_t nNodes, void **ctx) {
  ncclNvlDomainInfo_v5_t nvl = {(int)nNodes, (int)(nRanks / (nNodes ? nNodes : 1)),
                                (int)(nRanks / (nNodes ? nNodes : 1))};
  static ncclTunerConstants_v5_t constants; /* zeroes; dyncc must not write it */
  static ncclTunerConstants_v7_t constants7; /* v7's: one compute-capability row more */
  switch (ver) {
    case 2: return v2->init(nRanks, nNodes, logger, ctx);
    case 3: return v3->init(nRanks, nNodes, logger, ctx);
    case 4: return v4->init(nRanks, nNodes, logger, ctx);
    case 5: return v5->init(ctx, 0x1234abcdULL, nRanks, nNodes, logger, &nvl, &constants);
    case 6: return v6->init(ctx, 0x1234abcdULL, nRanks, nNodes, logger, &nvl, &constants);
    default: return v7->init(ctx, 0x1234abcdULL, nRanks, nNodes, logger, &nvl, &constants7);
  }
}

static ncclResult_t t_gci(int ver, void *ctx, int coll, size_t nBytes, int pipeOps,
                          float *table, int numAlgo, int numProto, int regBuff, int *nCh) {
  float **t = (float **)(void *)table; /* NCCL's cast: really float[numAlgo][numProto] */
  switch (ver) {
    case 3: return v3->getCollInfo(ctx, (ncclFunc_t)coll, nBytes, pipeOps, t, numAlgo, numProto, nCh);
    case 4: return v4->getCollInfo(ctx, (ncclFunc_t)coll, nBytes, pipeOps, t, numAlgo, numProto, regBuff, nCh);
    case 5: return v5->getCollInfo(ctx, (ncclFunc_t)coll, nBytes, pipeOps, t, numAlgo, numProto, regBuff, nCh);
    case 6: return v6->getCollInfo(ctx, (ncclFunc_t)coll, nBytes, pipeOps, t, numAlgo, numProto, regBuff, nCh);
    default: return v7->getCollInfo(ctx, (ncclFunc_t)coll, nBytes, pipeOps, t, numAlgo, numProto, regBuff, nCh);
  }
}

static ncclResult_t t_fin(int ver, void *ctx) {
  switch (ver) {
    case 2: return v2->destroy(ctx);
    case 3: return v3->destroy(ctx);
    case 4: return v4->destroy(ctx);
    case 5: return v5->finalize(ctx);
    case 6: return v6->finalize(ctx);
    default: return v7->finalize(ctx);
  }
}

/* ---- cost tables with canaries ----------------------------------------- */

#define CANARY 4242.0f
#define MAXCELLS 21
typedef struct {
  float buf[MAXCELLS + 2]; /* canary, cells..., canary */
  int numAlgo, numProto;
} cost_t;

static void cost_fill(cost_t *c, int numAlgo, int numProto) {
  c->numAlgo = numAlgo;
  c->numProto = numProto;
  for (int i = 0; i < MAXCELLS + 2; i++) c->buf[i] = CANARY;
  for (int i = 0; i < numAlgo * numProto; i++) c->buf[1 + i] = 10.0f + (float)i;
}
static float *cells(cost_t *c) { return c->buf + 1; }

/* Checks that exactly cell (a,p) became 0.0 (a < 0: nothing changed), that
 * every other cell kept its value (including IGNORE cells) and that the
 * canaries around the table are intact. */
static int cost_expect(const cost_t *before, const cost_t *after, int a, int p) {
  int ok = 1;
  int n = before->numAlgo * before->numProto;
  for (int i = 0; i < MAXCELLS + 2; i++) {
    float want = before->buf[i];
    if (a >= 0 && i == 1 + a * before->numProto + p) want = 0.0f;
    if (after->buf[i] != want) {
      fprintf(stderr, "  cell %d (of %d): got %g want %g\n", i - 1, n, after->buf[i], want);
      ok = 0;
    }
  }
  return ok;
}

/* One call, checked: expect cell (a,p) forced (a = -1: untouched) and
 * *nChannels == ch. `ignore` marks a cell (index) as IGNORE beforehand. */
static void expect_call(int ver, void *ctx, int coll, size_t nBytes, int pipeOps, int regBuff,
                        int numAlgo, int numProto, int ignore, int a, int p, int ch,
                        const char *what) {
  cost_t before, after;
  cost_fill(&before, numAlgo, numProto);
  if (ignore >= 0) cells(&before)[ignore] = (float)NCCL_ALGO_PROTO_IGNORE;
  after = before;
  int nCh = 0;
  ncclResult_t rc = t_gci(ver, ctx, coll, nBytes, pipeOps, cells(&after), numAlgo, numProto,
                          regBuff, &nCh);
  CHECK(rc == ncclSuccess, "v%d %s: getCollInfo returned %d", ver, what, rc);
  CHECK(cost_expect(&before, &after, a, p), "v%d %s: cost table (want cell %d,%d)", ver,
        what, a, p);
  CHECK(nCh == ch, "v%d %s: nChannels %d want %d", ver, what, nCh, ch);
}

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)

/* ---- scenarios ---------------------------------------------------------- */

static const char *g_table, *g_corrupt, *g_missing, *g_digest;

/* getChunkSize (v6, v7), as NCCL's calcCollChunking calls it: with NCCL's
 * own chunk in *chunkSize, after getCollInfo chose. The harness table's
 * AllGather PAT/Simple forces 512 KiB (when `chunked`); every other cell,
 * and another algorithm or protocol in that cell, keeps NCCL's. */
static size_t t_chunk(int ver, void *ctx, ncclFunc_t f, size_t n, int a, int p, size_t nccl) {
  size_t c = nccl;
  ncclResult_t rc = ver == 6 ? v6->getChunkSize(ctx, f, n, a, p, 4, &c)
                             : v7->getChunkSize(ctx, f, n, a, p, 4, &c);
  CHECK(rc == ncclSuccess, "v%d getChunkSize returned %d", ver, rc);
  return c;
}

static void check_chunks(int ver, void *ctx, int chunked) {
  size_t want = chunked ? 512 * 1024 : 131072;
  size_t got = t_chunk(ver, ctx, ncclFuncAllGather, 1 << 20, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE, 131072);
  CHECK(got == want, "v%d allgather PAT/Simple chunk %zu want %zu", ver, got, want);
  got = t_chunk(ver, ctx, ncclFuncAllGather, 1 << 20, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, 131072);
  CHECK(got == 131072, "v%d allgather Ring/Simple keeps NCCL's chunk (%zu)", ver, got);
  got = t_chunk(ver, ctx, ncclFuncAllGather, 1 << 20, NCCL_ALGO_PAT, NCCL_PROTO_LL, 4096);
  CHECK(got == 4096, "v%d allgather PAT/LL keeps NCCL's chunk (%zu)", ver, got);
  got = t_chunk(ver, ctx, ncclFuncAllReduce, 1024, NCCL_ALGO_TREE, NCCL_PROTO_LL, 4096);
  CHECK(got == 4096, "v%d allreduce Tree/LL (no chunk in the table) keeps NCCL's (%zu)", ver, got);
  got = t_chunk(ver, ctx, ncclFuncReduce, 1 << 20, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, 65536);
  CHECK(got == 65536, "v%d reduce (no context) keeps NCCL's (%zu)", ver, got);
  got = t_chunk(ver, NULL, ncclFuncAllGather, 1 << 20, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE, 7);
  CHECK(got == 7, "v%d NULL context keeps NCCL's (%zu)", ver, got);
  ncclResult_t rc = ver == 6 ? v6->getChunkSize(ctx, ncclFuncAllGather, 1 << 20, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE, 4, NULL)
                             : v7->getChunkSize(ctx, ncclFuncAllGather, 1 << 20, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE, 4, NULL);
  CHECK(rc == ncclSuccess, "v%d NULL chunkSize: success", ver);
}

static void check_table_versions(void) {
  setenv("DYNCC_TABLE", g_table, 1);
  unsetenv("DYNCC_STRICT");
  for (int ver = 3; ver <= 7; ver++) {
    void *ctx = (void *)0x1;
    reset_log();
    ncclResult_t rc = t_init(ver, 8, 1, &ctx);
    CHECK(rc == ncclSuccess && ctx != NULL, "v%d init with a valid table: rc %d", ver, rc);
    CHECK(g_infos == 1 && g_warns == 0, "v%d: one INFO line, no WARN (%d, %d)", ver, g_infos,
          g_warns);
    CHECK(strstr(g_last_info, g_table) && strstr(g_last_info, "digest ") &&
              strstr(g_last_info, "platform harness-sim") && strstr(g_last_info, "gpu H100") &&
              strstr(g_last_info, "coverage ") && strstr(g_last_info, "nRanks 8 nNodes 1") &&
              strstr(g_last_info, "allreduce=#0") && strstr(g_last_info, "reduce=default"),
          "v%d INFO line: %s", ver, g_last_info);
    if (ver >= 5) CHECK(strstr(g_last_info, "0x000000001234abcd") != NULL, "commId in %s", g_last_info);
    CHECK(strstr(g_last_info, g_digest) != NULL, "digest %s in %s", g_digest, g_last_info);
    if (ver == 6) printf("harness: v6 init logged: %s\n", g_last_info);
    if (ver >= 6) check_chunks(ver, ctx, 1);

    expect_call(ver, ctx, ncclFuncAllReduce, 1 * KiB, 1, 0, 7, 3, -1, NCCL_ALGO_TREE, NCCL_PROTO_LL, 0, "allreduce 1K");
    expect_call(ver, ctx, ncclFuncAllReduce, 1 * MiB, 1, 0, 7, 3, -1, NCCL_ALGO_RING, NCCL_PROTO_LL128, 4, "allreduce 1M");
    expect_call(ver, ctx, ncclFuncAllReduce, 64 * MiB, 1, 0, 7, 3, -1, -1, -1, 0, "allreduce 64M default");
    expect_call(ver, ctx, ncclFuncReduce, 1 * MiB, 1, 0, 7, 3, -1, -1, -1, 0, "reduce has no context");
    /* PAT exists only when numAlgo is 7 (NCCL 2.23+). */
    expect_call(ver, ctx, ncclFuncAllGather, 1 * MiB, 1, 0, 7, 3, -1, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE, 0, "allgather PAT numAlgo 7");
    expect_call(ver, ctx, ncclFuncAllGather, 1 * MiB, 1, 0, 6, 3, -1, -1, -1, 0, "allgather PAT numAlgo 6 (NCCL 2.22)");
    expect_call(ver, ctx, ncclFuncAllReduce, 1 * MiB, 1, 0, 6, 3, -1, NCCL_ALGO_RING, NCCL_PROTO_LL128, 4, "allreduce numAlgo 6");
    /* An IGNORE cell is never written, and no channel count goes with it. */
    expect_call(ver, ctx, ncclFuncBroadcast, 1 * MiB, 1, 0, 7, 3, -1, NCCL_ALGO_COLLNET_DIRECT, NCCL_PROTO_SIMPLE, 2, "broadcast collnet");
    expect_call(ver, ctx, ncclFuncBroadcast, 1 * MiB, 1, 0, 7, 3, 2 * 3 + 2, -1, -1, 0, "broadcast collnet IGNORE");
    expect_call(ver, ctx, ncclFuncAllReduce, 1 * KiB, 1, 0, 7, 3, 0, -1, -1, 0, "allreduce Tree/LL IGNORE");
    /* numPipeOps limit of the reducescatter context; regBuff (each rank's
     * own in NCCL; v3 has none) never changes an answer. */
    expect_call(ver, ctx, ncclFuncReduceScatter, 1 * MiB, 1, 0, 7, 3, -1, NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE, 8, "reducescatter");
    expect_call(ver, ctx, ncclFuncReduceScatter, 1 * MiB, 2, 0, 7, 3, -1, -1, -1, 0, "reducescatter numPipeOps 2");
    expect_call(ver, ctx, ncclFuncReduceScatter, 1 * MiB, 1, 1, 7, 3, -1, NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE, 8, "reducescatter regBuff 1");
    /* Odd dimensions: index is a*numProto+p, only inside the table. */
    expect_call(ver, ctx, ncclFuncAllReduce, 1 * MiB, 1, 0, 7, 2, -1, NCCL_ALGO_RING, NCCL_PROTO_LL128, 4, "numProto 2");
    expect_call(ver, ctx, ncclFuncReduceScatter, 1 * MiB, 1, 0, 7, 2, -1, -1, -1, 0, "Simple outside numProto 2");
    expect_call(ver, ctx, ncclFuncAllReduce, 1 * MiB, 1, 0, 1, 3, -1, -1, -1, 0, "Ring outside numAlgo 1");
    expect_call(ver, ctx, ncclFuncAllReduce, 1 * MiB, 1, 0, 0, 3, -1, -1, -1, 0, "numAlgo 0");
    expect_call(ver, ctx, ncclFuncAllReduce, 1 * MiB, 1, 0, -7, 3, -1, -1, -1, 0, "numAlgo negative");
    expect_call(ver, ctx, ncclFuncAllReduce, 1 * MiB, 1, 0, 7, -3, -1, -1, -1, 0, "numProto negative");
    /* Collectives and sizes a tuner never decides. */
    expect_call(ver, ctx, ncclFuncSendRecv, 1 * MiB, 1, 0, 7, 3, -1, -1, -1, 0, "sendrecv");
    expect_call(ver, ctx, -1, 1 * MiB, 1, 0, 7, 3, -1, -1, -1, 0, "coll -1");
    expect_call(ver, ctx, 1000, 1 * MiB, 1, 0, 7, 3, -1, -1, -1, 0, "coll 1000");
    expect_call(ver, ctx, ncclFuncAllReduce, 0, 1, 0, 7, 3, -1, NCCL_ALGO_TREE, NCCL_PROTO_LL, 0, "nBytes 0");
    expect_call(ver, ctx, ncclFuncAllReduce, SIZE_MAX, 1, 0, 7, 3, -1, -1, -1, 0, "nBytes SIZE_MAX");
    /* NULL pointers never crash. */
    int nCh = 0;
    CHECK(t_gci(ver, ctx, ncclFuncAllReduce, MiB, 1, NULL, 7, 3, 0, &nCh) == ncclSuccess && nCh == 0, "NULL table");
    cost_t c;
    cost_fill(&c, 7, 3);
    CHECK(t_gci(ver, ctx, ncclFuncAllReduce, MiB, 1, cells(&c), 7, 3, 0, NULL) == ncclSuccess &&
              cells(&c)[4] == 0.0f, "NULL nChannels still forces the cell");
    cost_fill(&c, 7, 3);
    CHECK(t_gci(ver, NULL, ncclFuncAllReduce, MiB, 1, cells(&c), 7, 3, 0, &nCh) == ncclSuccess &&
              cells(&c)[4] == 14.0f && nCh == 0, "NULL context leaves NCCL alone");
    CHECK(t_fin(ver, ctx) == ncclSuccess, "v%d finalize", ver);
    CHECK(t_fin(ver, NULL) == ncclSuccess, "v%d finalize(NULL)", ver);

    /* Other communicator shapes get their own context. */
    ctx = NULL;
    CHECK(t_init(ver, 64, 8, &ctx) == ncclSuccess && ctx, "v%d init 64x8", ver);
    expect_call(ver, ctx, ncclFuncAllReduce, 1 * KiB, 1, 0, 7, 3, -1, NCCL_ALGO_TREE, NCCL_PROTO_SIMPLE, 0, "64 ranks 8 nodes");
    expect_call(ver, ctx, ncclFuncAllGather, 1 * MiB, 1, 0, 7, 3, -1, -1, -1, 0, "allgather outside 1-4 nodes");
    CHECK(t_fin(ver, ctx) == ncclSuccess, "finalize");
    ctx = NULL;
    CHECK(t_init(ver, 16, 1, &ctx) == ncclSuccess && ctx, "v%d init 16x1", ver);
    expect_call(ver, ctx, ncclFuncAllReduce, 1 * KiB, 1, 0, 7, 3, -1, -1, -1, 0, "16 ranks per node is outside ppn 1-8");
    CHECK(t_fin(ver, ctx) == ncclSuccess, "finalize");
  }
  CHECK(g_bad_fmt == 0, "every log call used the format \"%%s\" and the right subsystem");
}

static void check_v2(void) {
  setenv("DYNCC_TABLE", g_table, 1);
  void *ctx = NULL;
  CHECK(v2->init(8, 1, logger, &ctx) == ncclSuccess && ctx, "v2 init");
  struct {
    int coll;
    size_t bytes;
    int collNet, nvls, pipe, a, p, ch;
    const char *what;
  } cases[] = {
      {ncclFuncAllReduce, 1 * KiB, 0, 0, 1, NCCL_ALGO_TREE, NCCL_PROTO_LL, 0, "allreduce 1K"},
      {ncclFuncAllReduce, 1 * MiB, 0, 0, 1, NCCL_ALGO_RING, NCCL_PROTO_LL128, 4, "allreduce 1M"},
      {ncclFuncAllReduce, 64 * MiB, 0, 0, 1, -1, -1, 0, "allreduce 64M"},
      {ncclFuncAllGather, 1 * MiB, 1, 1, 1, -1, -1, 0, "PAT does not exist in NCCL 2.21"},
      {ncclFuncBroadcast, 1 * MiB, 0, 1, 1, -1, -1, 0, "collnet without collNetSupport"},
      {ncclFuncBroadcast, 1 * MiB, 1, 0, 1, -1, -1, 0, "collnet supported, but broadcast runs Ring only"},
      {ncclFuncReduceScatter, 1 * MiB, 1, 0, 1, -1, -1, 0, "nvls without nvlsSupport"},
      {ncclFuncReduceScatter, 1 * MiB, 0, 1, 1, NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE, 8, "nvls supported"},
      {ncclFuncReduceScatter, 1 * MiB, 0, 1, 3, -1, -1, 0, "numPipeOps 3"},
      {ncclFuncReduce, 1 * MiB, 1, 1, 1, -1, -1, 0, "reduce"},
      {7, 1 * MiB, 1, 1, 1, -1, -1, 0, "recv"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int a = -1, p = -1, ch = 0; /* NCCL presets -1, -1, 0 */
    ncclResult_t rc = v2->getCollInfo(ctx, (ncclFunc_t)cases[i].coll, cases[i].bytes,
                                      cases[i].collNet, cases[i].nvls, cases[i].pipe, &a, &p, &ch);
    CHECK(rc == ncclSuccess && a == cases[i].a && p == cases[i].p && ch == cases[i].ch,
          "v2 %s: rc %d algo %d proto %d ch %d, want %d %d %d", cases[i].what, rc, a, p, ch,
          cases[i].a, cases[i].p, cases[i].ch);
  }
  int a = -1, p = -1, ch = 0;
  CHECK(v2->getCollInfo(ctx, ncclFuncAllReduce, KiB, 0, 0, 1, NULL, NULL, NULL) == ncclSuccess, "v2 NULL outs");
  CHECK(v2->getCollInfo(NULL, ncclFuncAllReduce, KiB, 0, 0, 1, &a, &p, &ch) == ncclSuccess &&
            a == -1 && p == -1 && ch == 0, "v2 NULL context");
  CHECK(v2->destroy(ctx) == ncclSuccess, "v2 destroy");
}

static unsigned char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)n);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* The plugin (Specialised::decide per communicator) agrees with the C API
 * (Table::lookup) on a sweep of shapes, collectives, sizes and flags. */
static void check_capi_oracle(void) {
  CHECK(p_version() && strlen(p_version()) > 0, "dyncc_version");
  CHECK(strcmp(p_status_str(DYNCC_OK), "ok") == 0, "status_str(OK)");
  CHECK(strstr(p_status_str(DYNCC_ERR_INVALID_TABLE), "valid") != NULL, "status_str(invalid)");
  CHECK(p_status_str(-12345) != NULL, "status_str(unknown)");
  size_t len = 0;
  unsigned char *bytes = read_file(g_table, &len);
  CHECK(bytes != NULL, "read %s", g_table);
  if (!bytes) return;
  dyncc_table *t = (dyncc_table *)0x1;
  CHECK(p_open(NULL, len, &t) == DYNCC_ERR_NULL_ARGUMENT && t == NULL, "open(NULL)");
  CHECK(p_open(bytes, len, NULL) == DYNCC_ERR_NULL_ARGUMENT, "open(out NULL)");
  CHECK(p_open(bytes, len / 2, &t) == DYNCC_ERR_INVALID_TABLE && t == NULL, "open(truncated)");
  CHECK(p_open(bytes, len, &t) == DYNCC_OK && t != NULL, "open");
  memset(bytes, 0, len); /* the table keeps its own copy */
  free(bytes);
  int a, p, ch;
  CHECK(p_lookup(NULL, 4, 8, 1, KiB, 1, 0, &a, &p, &ch) == DYNCC_ERR_NULL_ARGUMENT, "lookup(NULL)");
  CHECK(p_lookup(t, 4, 8, 1, KiB, 1, 0, NULL, &p, &ch) == DYNCC_ERR_NULL_ARGUMENT, "lookup(NULL out)");
  CHECK(p_lookup(t, 4, 8, 1, KiB, 1, 0, &a, &p, &ch) == DYNCC_OK && a == NCCL_ALGO_TREE &&
            p == NCCL_PROTO_LL && ch == 0, "lookup allreduce 1K");
  CHECK(p_lookup(t, 4, 8, 1, 64 * MiB, 1, 0, &a, &p, &ch) == DYNCC_OK && a == -1 && p == -1 &&
            ch == 0, "lookup allreduce 64M = leave alone");

  static const size_t shapes[][2] = {{8, 1}, {2, 1}, {16, 2}, {32, 4}, {64, 8}, {16, 1}, {1, 1}, {40, 5}};
  int compared = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    void *ctx = NULL;
    CHECK(t_init(6, shapes[s][0], shapes[s][1], &ctx) == ncclSuccess && ctx, "init");
    for (int coll = -1; coll <= 6; coll++)
      for (int k = 0; k < 64; k++)
        for (int pipe = 0; pipe <= 2; pipe++)
          for (int reg = 0; reg <= 1; reg++) {
            size_t nBytes = k == 63 ? SIZE_MAX : ((size_t)1 << k) + (size_t)(k % 3) * ((size_t)1 << k) / 4;
            int ea, ep, ech;
            int st = p_lookup(t, coll, shapes[s][0], shapes[s][1], nBytes, pipe, reg, &ea, &ep, &ech);
            cost_t c;
            cost_fill(&c, 7, 3);
            int nCh = 0;
            t_gci(6, ctx, coll, nBytes, pipe, cells(&c), 7, 3, reg, &nCh);
            int ga = -1, gp = -1;
            for (int i = 0; i < 21; i++)
              if (cells(&c)[i] == 0.0f) {
                ga = i / 3;
                gp = i % 3;
              }
            if (st != DYNCC_OK || ga != ea || gp != ep || nCh != (ea < 0 ? 0 : ech)) {
              CHECK(0, "oracle: shape %zux%zu coll %d bytes %zu pipe %d reg %d: plugin %d/%d/%d, lookup %d/%d/%d",
                    shapes[s][0], shapes[s][1], coll, nBytes, pipe, reg, ga, gp, nCh, ea, ep, ech);
            }
            compared++;
          }
    CHECK(t_fin(6, ctx) == ncclSuccess, "finalize");
  }
  CHECK(compared == 8 * 8 * 64 * 3 * 2, "compared %d calls with the C API", compared);
  p_close(t);
  p_close(NULL);
}

static void check_no_table(void) {
  const char *values[] = {NULL, ""};
  for (int i = 0; i < 2; i++) {
    if (values[i]) setenv("DYNCC_TABLE", values[i], 1); else unsetenv("DYNCC_TABLE");
    for (int ver = 2; ver <= 7; ver++) {
      reset_log();
      void *ctx = (void *)0x1;
      CHECK(t_init(ver, 8, 1, &ctx) == ncclSuccess, "v%d init without a table", ver);
      CHECK(g_infos == 1 && g_warns == 0 && strstr(g_last_info, "DYNCC_TABLE is not set"),
            "v%d: one INFO line saying no table: %s", ver, g_last_info);
      if (ver >= 3) expect_call(ver, ctx, ncclFuncAllReduce, KiB, 1, 0, 7, 3, -1, -1, -1, 0, "no table");
      CHECK(t_fin(ver, ctx) == ncclSuccess, "finalize");
    }
  }
}

static void check_bad_tables(void) {
  struct {
    const char *path;
    ncclResult_t strict_rc;
    const char *what;
  } bad[] = {{g_missing, ncclSystemError, "missing"}, {g_corrupt, ncclInvalidUsage, "corrupt"}};
  for (int b = 0; b < 2; b++) {
    setenv("DYNCC_TABLE", bad[b].path, 1);
    for (int strict = 1; strict >= 0; strict--) {
      if (strict) unsetenv("DYNCC_STRICT"); else setenv("DYNCC_STRICT", "0", 1);
      for (int ver = 2; ver <= 7; ver++) {
        reset_log();
        void *ctx = (void *)0x1;
        ncclResult_t rc = t_init(ver, 8, 1, &ctx);
        if (strict) {
          CHECK(rc == bad[b].strict_rc, "v%d %s table, strict: rc %d want %d", ver, bad[b].what, rc, bad[b].strict_rc);
          CHECK(strstr(g_last_warn, "DYNCC_STRICT=0") != NULL, "WARN says how to run anyway: %s", g_last_warn);
        } else {
          CHECK(rc == ncclSuccess, "v%d %s table, DYNCC_STRICT=0: rc %d", ver, bad[b].what, rc);
          CHECK(strstr(g_last_warn, "leaving NCCL") != NULL, "WARN says NCCL is left alone: %s", g_last_warn);
        }
        CHECK(ctx == NULL, "no context after a failed load");
        CHECK(g_warns == 1 && strstr(g_last_warn, bad[b].path) != NULL, "v%d: one WARN naming the path: %s", ver, g_last_warn);
        if (ver >= 3) expect_call(ver, ctx, ncclFuncAllReduce, KiB, 1, 0, 7, 3, -1, -1, -1, 0, "bad table");
        CHECK(t_fin(ver, ctx) == ncclSuccess, "finalize");
      }
    }
  }
  unsetenv("DYNCC_STRICT");
  setenv("DYNCC_STRICT", "1", 1);
  setenv("DYNCC_TABLE", g_missing, 1);
  void *ctx = NULL;
  CHECK(t_init(6, 8, 1, &ctx) == ncclSystemError, "DYNCC_STRICT=1 is strict");
  unsetenv("DYNCC_STRICT");
  /* A NULL context out-pointer is refused, not written through. */
  setenv("DYNCC_TABLE", g_table, 1);
  CHECK(v6->init(NULL, 1, 8, 1, logger, NULL, NULL) == ncclInvalidArgument, "init(NULL ctx)");
  CHECK(v4->init(8, 1, NULL, &ctx) == ncclSuccess && ctx, "init with a NULL logger");
  CHECK(v4->destroy(ctx) == ncclSuccess, "destroy");
}

/* Many communicators on many threads: concurrent init, getCollInfo and
 * finalize, all versions, while one long-lived communicator holds the
 * table (so nobody re-reads the file). */
#define NTHREADS 8
#define NCOMMS 40
static void *comm_thread(void *arg) {
  int id = (int)(intptr_t)arg;
  for (int i = 0; i < NCOMMS; i++) {
    int ver = 2 + (id + i) % 6;
    size_t nodes = (i % 2) ? 1 : 8, ranks = nodes * 8;
    void *ctx = NULL;
    ncclResult_t rc = t_init(ver, ranks, nodes, &ctx);
    CHECK(rc == ncclSuccess && ctx, "thread %d comm %d v%d init rc %d", id, i, ver, rc);
    for (int k = 0; k < 50; k++) {
      if (ver == 2) {
        int a = -1, p = -1, ch = 0;
        v2->getCollInfo(ctx, ncclFuncAllReduce, KiB, 0, 0, 1, &a, &p, &ch);
        int wa = nodes == 1 ? NCCL_ALGO_TREE : NCCL_ALGO_TREE, wp = nodes == 1 ? NCCL_PROTO_LL : NCCL_PROTO_SIMPLE;
        if (a != wa || p != wp || ch != 0) CHECK(0, "thread v2 %d/%d/%d", a, p, ch);
      } else {
        cost_t c;
        cost_fill(&c, 7, 3);
        int nCh = 0;
        t_gci(ver, ctx, ncclFuncAllReduce, MiB, 1, cells(&c), 7, 3, 0, &nCh);
        int want = nodes == 1 ? 1 * 3 + 1 : 0 * 3 + 2, wch = nodes == 1 ? 4 : 0;
        if (cells(&c)[want] != 0.0f || nCh != wch) CHECK(0, "thread v%d cell %d ch %d", ver, want, nCh);
      }
    }
    CHECK(t_fin(ver, ctx) == ncclSuccess, "finalize");
  }
  return NULL;
}

static void check_threads(void) {
  setenv("DYNCC_TABLE", g_table, 1);
  unsetenv("DYNCC_STRICT");
  void *holder = NULL;
  CHECK(t_init(6, 8, 1, &holder) == ncclSuccess && holder, "holder init");
  reset_log();
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) pthread_create(&th[i], NULL, comm_thread, (void *)(intptr_t)i);
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  CHECK(g_infos == NTHREADS * NCOMMS, "one INFO line per communicator (%d)", g_infos);
  CHECK(g_loaded_lines == 0, "no communicator re-read the table while one held it (%d loads)", g_loaded_lines);
  CHECK(t_fin(6, holder) == ncclSuccess, "holder finalize");
  /* Without a holder, every communicator may find the cache empty (the
   * last one freed it): still correct, loads are just not shared. */
  reset_log();
  for (int i = 0; i < NTHREADS; i++) pthread_create(&th[i], NULL, comm_thread, (void *)(intptr_t)i);
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  CHECK(g_loaded_lines >= 1 && g_loaded_lines <= NTHREADS * NCOMMS, "loads %d", g_loaded_lines);
  CHECK(g_infos == NTHREADS * NCOMMS, "one INFO line per communicator (%d)", g_infos);
}

/* NCCL dlcloses the plugin when the last communicator goes and dlopens it
 * again for the next one: the library must really unload (no threads, no
 * TLS destructors pinning it) and work again after reloading. */
static void check_reload(void) {
  for (int round = 0; round < 4; round++) {
    CHECK(dlclose(g_lib) == 0, "dlclose: %s", dlerror());
    void *still = dlopen(g_lib_path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    CHECK(still == NULL, "round %d: the library is unloaded after dlclose", round);
    if (still) dlclose(still);
    if (!load_lib()) return;
    setenv("DYNCC_TABLE", g_table, 1);
    void *ctx = NULL;
    CHECK(t_init(6, 8, 1, &ctx) == ncclSuccess && ctx, "init after reload");
    expect_call(6, ctx, ncclFuncAllReduce, MiB, 1, 0, 7, 3, -1, NCCL_ALGO_RING, NCCL_PROTO_LL128, 4, "after reload");
    CHECK(t_fin(6, ctx) == ncclSuccess, "finalize");
  }
}

/* ---- issue 12: bounded init, what the init line says, NCCL versions ---- */

static const char *g_scratch, *g_channels, *g_reserved, *g_versioned;

static void scratch_path(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", g_scratch, name);
}

/* One v6 init of nRanks x nNodes on DYNCC_TABLE=path; returns rc, leaves
 * the context in *ctx. */
static ncclResult_t init_on(const char *path, size_t nRanks, size_t nNodes, void **ctx) {
  setenv("DYNCC_TABLE", path, 1);
  reset_log();
  *ctx = (void *)0x1;
  return t_init(6, nRanks, nNodes, ctx);
}

/* DYNCC_TABLE naming a FIFO, /dev/zero, a directory or a 10 GB sparse file:
 * init returns at once (before the fix: the FIFO hung init forever,
 * /dev/zero read until memory ran out, the sparse file took ~50 s and
 * 10 GB). alarm() turns a hang into a failed run. */
static void check_init_is_bounded_on_fifo_devzero_sparse_and_directory(void) {
  char fifo[4096], sparse[4096];
  scratch_path(fifo, sizeof fifo, "table.fifo");
  scratch_path(sparse, sizeof sparse, "sparse-10G.tbl");
  unlink(fifo);
  CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
  int fd = open(sparse, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  CHECK(fd >= 0 && ftruncate(fd, (off_t)10 * 1000 * 1000 * 1000) == 0, "10 GB sparse file %s", sparse);
  if (fd >= 0) close(fd);
  struct {
    const char *path, *cause;
  } cases[] = {
      {fifo, "it is a FIFO (named pipe), not a regular file"},
      {"/dev/zero", "it is a character device, not a regular file"},
      {g_scratch, "it is a directory, not a regular file"},
      {sparse, "it is 10000000000 bytes, larger than any dyncc table can be"},
  };
  alarm(60);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    for (int strict = 1; strict >= 0; strict--) {
      if (strict) unsetenv("DYNCC_STRICT"); else setenv("DYNCC_STRICT", "0", 1);
      void *ctx;
      ncclResult_t rc = init_on(cases[i].path, 8, 1, &ctx);
      CHECK(rc == (strict ? ncclInvalidUsage : ncclSuccess) && ctx == NULL,
            "%s (strict %d): rc %d ctx %p", cases[i].path, strict, rc, ctx);
      CHECK(g_warns == 1 && strstr(g_last_warn, cases[i].cause) && strstr(g_last_warn, "refusing to read"),
            "%s: WARN says why: %s", cases[i].path, g_last_warn);
      CHECK(t_fin(6, ctx) == ncclSuccess, "finalize");
    }
  }
  alarm(0);
  unsetenv("DYNCC_STRICT");
  unlink(fifo);
  unlink(sparse);
}

/* A 64-node communicator on a table covering 1-4 / 1-64 nodes said
 * "allreduce=default", exactly like a table that decides nothing. */
static void check_init_line_says_not_covered_and_what_the_table_covers(void) {
  void *ctx;
  CHECK(init_on(g_table, 1024, 128, &ctx) == ncclSuccess && ctx, "init 1024x128");
  CHECK(strstr(g_last_info, "allreduce=not-covered(table covers nodes 1-64 ppn 1-8)") &&
            strstr(g_last_info, "allgather=not-covered(table covers nodes 1-4 ppn 1-8)") &&
            strstr(g_last_info, "broadcast=not-covered(table covers nodes 1-4 ppn 1-8)") &&
            strstr(g_last_info, " reduce=default"),
        "not covered vs default: %s", g_last_info);
  printf("harness: 1024x128 init logged: %s\n", g_last_info);
  CHECK(t_fin(6, ctx) == ncclSuccess, "finalize");
  CHECK(init_on(g_versioned, 8, 1, &ctx) == ncclSuccess && ctx, "init on the versioned table");
  CHECK(strstr(g_last_info, " gpu unknown ") != NULL, "a table without gpu says unknown: %s", g_last_info);
  /* A 1.0 table (no chunk anywhere) leaves every chunk to NCCL. */
  check_chunks(6, ctx, 0);
  check_chunks(7, ctx, 0);
  CHECK(t_fin(6, ctx) == ncclSuccess, "finalize");
}

/* Control characters in DYNCC_TABLE went raw into NCCL's log (a newline
 * forges a second log line, an escape sequence recolours the terminal). */
static void check_control_characters_in_paths_are_escaped(void) {
  char evil[4096], evil_missing[4096];
  scratch_path(evil, sizeof evil, "evil\nWARN forged\x1b[31m.tbl");
  scratch_path(evil_missing, sizeof evil_missing, "gone\t\x01.tbl");
  unlink(evil);
  CHECK(symlink(g_table, evil) == 0, "symlink with control characters");
  void *ctx;
  CHECK(init_on(evil, 8, 1, &ctx) == ncclSuccess && ctx, "init through the odd name");
  CHECK(!strchr(g_last_info, '\n') && !strchr(g_last_info, '\x1b') &&
            strstr(g_last_info, "evil\\nWARN forged\\x1b[31m.tbl"),
        "INFO escapes the path: %s", g_last_info);
  CHECK(t_fin(6, ctx) == ncclSuccess, "finalize");
  CHECK(init_on(evil_missing, 8, 1, &ctx) == ncclSystemError, "missing odd name fails");
  CHECK(!strchr(g_last_warn, '\t') && !strchr(g_last_warn, '\x01') && strstr(g_last_warn, "gone\\t\\x01.tbl"),
        "WARN escapes the path: %s", g_last_warn);
  unlink(evil);
}

/* A table asking for 200 channels loaded and the plugin handed NCCL 200
 * (NCCL has at most 64, MAXCHANNELS); a nonzero header reserved field
 * loaded although FORMAT.md says it must be zero. Both now fail init. */
static void check_channels_over_64_and_nonzero_reserved_are_refused(void) {
  struct {
    const char *path, *cause;
  } cases[] = {{g_channels, "channel count is above 64, NCCL's MAXCHANNELS"},
               {g_reserved, "reserved field (bytes 36..40) is not zero"}};
  for (int i = 0; i < 2; i++) {
    void *ctx;
    ncclResult_t rc = init_on(cases[i].path, 8, 1, &ctx);
    CHECK(rc == ncclInvalidUsage && ctx == NULL, "%s: rc %d", cases[i].cause, rc);
    CHECK(g_warns == 1 && strstr(g_last_warn, cases[i].cause), "WARN: %s", g_last_warn);
    int nCh = 0;
    cost_t c;
    cost_fill(&c, 7, 3);
    t_gci(6, ctx, ncclFuncAllReduce, KiB, 1, cells(&c), 7, 3, 0, &nCh);
    CHECK(nCh >= 0 && nCh <= 64, "nChannels %d within NCCL's 64", nCh);
    t_fin(6, ctx);
  }
}

/* The table was swept on NCCL 2.18.1 and 2.19.3; the harness's
 * ncclGetVersion says what runs. */
static void check_nccl_version_mismatch_warns_once_and_off_turns_tuning_off(void) {
  void *a, *b;
  unsetenv("DYNCC_NCCL_MISMATCH");
  /* Unknown running version: no WARN, the line says unknown. */
  g_nccl_version_code = 0;
  CHECK(init_on(g_versioned, 8, 1, &a) == ncclSuccess && a, "init");
  CHECK(g_warns == 0 && strstr(g_last_info, "nccl unknown (table swept on 2.18.1,2.19.3)"),
        "unknown NCCL: %s / %s", g_last_info, g_last_warn);
  t_fin(6, a);
  /* Same major.minor as one of the sweep's: quiet. */
  g_nccl_version_code = 21905;
  CHECK(init_on(g_versioned, 8, 1, &a) == ncclSuccess && a, "init");
  CHECK(g_warns == 0 && strstr(g_last_info, "nccl 2.19.5 (table swept on 2.18.1,2.19.3)"),
        "matching NCCL: %s / %s", g_last_info, g_last_warn);
  t_fin(6, a);
  /* 2.21 (default policy warn): one WARN for the load, none for a second
   * communicator sharing it; tuning stays on. */
  g_nccl_version_code = 22103;
  CHECK(init_on(g_versioned, 8, 1, &a) == ncclSuccess && a, "init");
  CHECK(g_warns == 1 && strstr(g_last_warn, "swept on NCCL 2.18.1,2.19.3 but this process runs NCCL 2.21.3") &&
            strstr(g_last_warn, "re-sweep"),
        "mismatch WARN: %s", g_last_warn);
  printf("harness: mismatch WARN: %s\n", g_last_warn);
  CHECK(init_on(g_versioned, 8, 1, &b) == ncclSuccess && b, "second init");
  CHECK(g_warns == 0, "one WARN per loaded table, not per communicator (%d)", g_warns);
  expect_call(6, b, ncclFuncAllReduce, 1 * MiB, 1, 0, 7, 3, -1, NCCL_ALGO_RING, NCCL_PROTO_LL128, 4, "warn keeps tuning");
  t_fin(6, a);
  t_fin(6, b);
  /* DYNCC_NCCL_MISMATCH=off: WARN, and NCCL's own tuning for every comm. */
  setenv("DYNCC_NCCL_MISMATCH", "off", 1);
  CHECK(init_on(g_versioned, 8, 1, &a) == ncclSuccess && a, "init (off)");
  CHECK(g_warns == 1 && strstr(g_last_warn, "DYNCC_NCCL_MISMATCH=off: leaving NCCL's own tuning alone"),
        "off WARN: %s", g_last_warn);
  CHECK(strstr(g_last_info, "tuning off") != NULL, "off INFO: %s", g_last_info);
  printf("harness: DYNCC_NCCL_MISMATCH=off WARN: %s\nharness: DYNCC_NCCL_MISMATCH=off INFO: %s\n", g_last_warn,
         g_last_info);
  expect_call(6, a, ncclFuncAllReduce, 1 * MiB, 1, 0, 7, 3, -1, -1, -1, 0, "off leaves NCCL alone");
  CHECK(init_on(g_versioned, 8, 1, &b) == ncclSuccess && b, "second init (off)");
  CHECK(g_warns == 0, "off: still one WARN per load (%d)", g_warns);
  expect_call(6, b, ncclFuncAllReduce, 1 * KiB, 1, 0, 7, 3, -1, -1, -1, 0, "off leaves NCCL alone (2)");
  t_fin(6, a);
  t_fin(6, b);
  /* A matching version with =off: tuning on. */
  g_nccl_version_code = 21803;
  CHECK(init_on(g_versioned, 8, 1, &a) == ncclSuccess && a && g_warns == 0, "off but matching");
  expect_call(6, a, ncclFuncAllReduce, 1 * MiB, 1, 0, 7, 3, -1, NCCL_ALGO_RING, NCCL_PROTO_LL128, 4, "off, matching: tuned");
  t_fin(6, a);
  /* =ignore: no WARN, tuning on. */
  g_nccl_version_code = 22103;
  setenv("DYNCC_NCCL_MISMATCH", "ignore", 1);
  CHECK(init_on(g_versioned, 8, 1, &a) == ncclSuccess && a && g_warns == 0, "ignore: no WARN (%s)", g_last_warn);
  expect_call(6, a, ncclFuncAllReduce, 1 * MiB, 1, 0, 7, 3, -1, NCCL_ALGO_RING, NCCL_PROTO_LL128, 4, "ignore: tuned");
  t_fin(6, a);
  /* A value that is none of those is said, not silently guessed. */
  setenv("DYNCC_NCCL_MISMATCH", "of", 1);
  CHECK(init_on(g_versioned, 8, 1, &a) == ncclSuccess && a, "bad value");
  CHECK(g_warns == 2 && strstr(g_last_warn, "re-sweep"), "bad value + mismatch: %d WARNs, %s", g_warns, g_last_warn);
  t_fin(6, a);
  /* A table without nccl_version: never a mismatch. */
  setenv("DYNCC_NCCL_MISMATCH", "off", 1);
  CHECK(init_on(g_table, 8, 1, &a) == ncclSuccess && a && g_warns == 0 &&
            strstr(g_last_info, "nccl 2.21.3 (table swept on unknown)"),
        "no nccl_version: %s", g_last_info);
  expect_call(6, a, ncclFuncAllReduce, 1 * MiB, 1, 0, 7, 3, -1, NCCL_ALGO_RING, NCCL_PROTO_LL128, 4, "unknown sweep: tuned");
  t_fin(6, a);
  unsetenv("DYNCC_NCCL_MISMATCH");
  g_nccl_version_code = 0;
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  g_lib_path = getenv("DYNCC_HARNESS_LIB");
  g_table = getenv("DYNCC_HARNESS_TABLE");
  g_corrupt = getenv("DYNCC_HARNESS_CORRUPT");
  g_missing = getenv("DYNCC_HARNESS_MISSING");
  g_digest = getenv("DYNCC_HARNESS_DIGEST");
  g_scratch = getenv("DYNCC_HARNESS_SCRATCH");
  g_channels = getenv("DYNCC_HARNESS_CHANNELS");
  g_reserved = getenv("DYNCC_HARNESS_RESERVED");
  g_versioned = getenv("DYNCC_HARNESS_VERSIONED");
  if (!g_lib_path || !g_table || !g_corrupt || !g_missing || !g_digest || !g_scratch || !g_channels ||
      !g_reserved || !g_versioned) {
    fprintf(stderr, "harness: set DYNCC_HARNESS_LIB, _TABLE, _CORRUPT, _MISSING, _DIGEST, _SCRATCH, "
                    "_CHANNELS, _RESERVED and _VERSIONED\n");
    return 2;
  }
  if (load_lib()) {
    check_table_versions();
    check_v2();
    check_capi_oracle();
    check_no_table();
    check_bad_tables();
    check_init_is_bounded_on_fifo_devzero_sparse_and_directory();
    check_init_line_says_not_covered_and_what_the_table_covers();
    check_control_characters_in_paths_are_escaped();
    check_channels_over_64_and_nonzero_reserved_are_refused();
    check_nccl_version_mismatch_warns_once_and_off_turns_tuning_off();
    check_threads();
    check_reload();
    if (g_lib) dlclose(g_lib);
  }
  printf("harness: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
