/* A stand-in NCCL for the exploration tests: loads the plugin library
 * (DYNCC_TEST_PLUGIN_LIB), initialises two ranks of one communicator
 * through ncclTunerPlugin_v6 (8 ranks per node on NNODES nodes, NCCL's
 * commHash COMM_ID on both), and has each rank, on its own thread, call
 * getCollInfo for the same sequence of collectives, as every rank of a
 * communicator does. NCCL's cost table marks Tree/LL128 unavailable (-1)
 * everywhere.
 *
 * With EXPLORE_TUNER=v4 in the environment it loads ncclTunerPlugin_v4
 * instead (NCCL 2.27's interface: no commHash, so COMM_ID is not passed).
 *
 * usage: explore NNODES CALLS [COMM_ID [SCENARIO]]
 * SCENARIO is how the two ranks' call sequences differ beyond the common
 * CALLS, as real ranks' do (default "same"):
 *   same            no difference
 *   extra-one       rank 1 makes one extra call (ncclGroupSimulateEnd runs
 *                   the selection on the calling rank alone) a third of the
 *                   way in, at that call's shape
 *   extra-per-size  rank 1 makes one extra call at each shape's first call
 *   late            rank 0 makes 37 calls before rank 1's context exists
 *   state           numPipeOps varies by call (alike on both ranks, as NCCL
 *                   computes it from the group's collective count), regBuff
 *                   differs per rank (NCCL computes it from each rank's own
 *                   registrations), and rank 1 makes extra calls with other
 *                   numPipeOps and regBuff every 100 calls
 *   regbuff         rank 0 registered its buffers and rank 1 did not
 *                   (NCCL_LOCAL_REGISTER differs per process): regBuff 1 on
 *                   every call of rank 0, 0 on every call of rank 1
 *   chunk           as same, but NCCL's own cost table ranks Ring/Simple
 *                   first (so NCCL's choice and a force of Ring/Simple
 *                   chunk alike)
 * Through v6, each rank then asks getChunkSize for every common call, as
 * NCCL 2.30+'s calcCollChunking does, for the cell that runs (the one the
 * plugin set to 0, else NCCL's cheapest), with NCCL's chunk 131072.
 * Prints, for rank 0, "call COLL NBYTES CELL CH" per common call (CELL: the
 * cost cell the plugin set to 0 as algo*3+proto, or -1; CH: the channel
 * count written, 0 if none), and through v6 "chunk COLL NBYTES CELL CH
 * CHUNK" (the chunk the plugin answered for the cell that runs, CELL -1
 * where NCCL chose), then "disagreements N" (common calls where
 * the two ranks' cost tables, channel counts or chunks differ) and
 * "unavailable_written N" (calls where a -1 cell was changed), and the
 * logger's lines. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_tuner.h"
#include "print_logger.h"

PRINT_LOGGER(explore_logger)

/* Found by the plugin through dlsym(RTLD_DEFAULT) (linked -rdynamic). */
ncclResult_t ncclGetVersion(int *version) {
  *version = 23007;
  return ncclSuccess;
}

#define NRANKS_LOCAL 2
#define LATE_CALLS 37

typedef struct {
  float cost[7][3];
  int nch;
  size_t chunk;
} outcome;

/* NCCL's own chunk in the stand-in. */
#define NCCL_CHUNK 131072

static ncclTuner_v6_t *tuner;
static ncclTuner_v4_t *tuner4;
static int calls;
static const char *scenario = "same";
static outcome *out[NRANKS_LOCAL];
static void *ctx[NRANKS_LOCAL];

/* AllGather and ReduceScatter now and then, else AllReduce. */
static int coll_of(int i) { return (i % 7 == 6) ? 2 : (i % 7 == 5) ? 3 : 4; }
static size_t bytes_of(int i) {
  static const size_t sizes[6] = {6, 1024, 4096, 65536, 1 << 20, 64 << 20};
  return sizes[(i / 7) % 6];
}
static int is(const char *s) { return strcmp(scenario, s) == 0; }
/* numPipeOps of common call i: the same on every rank. */
static int pipe_ops_of(int i) { return is("state") ? 1 + (i / 42) % 3 : 1; }
/* regBuff of common call i on rank r: each rank's own. */
static int reg_buff_of(int r, int i) {
  if (is("regbuff")) return r == 0;
  return is("state") && r == 0 ? (i / 3) % 2 : 0;
}

static void fresh(outcome *o) {
  for (int a = 0; a < 7; a++)
    for (int p = 0; p < 3; p++) o->cost[a][p] = (a == 0 && p == 1) ? -1.0f : (float)(100 + a * 3 + p);
  if (is("chunk")) o->cost[1][2] = 90.0f;
  o->nch = 0;
  o->chunk = 0;
}

/* The cell that runs: the one the plugin set to 0, else NCCL's cheapest. */
static int running_cell(const outcome *o) {
  int best = -1;
  for (int a = 0; a < 7; a++)
    for (int p = 0; p < 3; p++) {
      float c = o->cost[a][p];
      if (c == 0.0f) return a * 3 + p;
      if (c > 0.0f && (best < 0 || c < o->cost[best / 3][best % 3])) best = a * 3 + p;
    }
  return best;
}

static ncclResult_t get_coll_info(void *c, ncclFunc_t coll, size_t bytes, int pipe_ops, float **cost, int na, int np,
                                  int reg_buff, int *nch) {
  if (tuner4) return tuner4->getCollInfo(c, coll, bytes, pipe_ops, cost, na, np, reg_buff, nch);
  return tuner->getCollInfo(c, coll, bytes, pipe_ops, cost, na, np, reg_buff, nch);
}

/* A call this rank alone makes (its answer is not compared). */
static void extra_call(int r, int coll, size_t bytes, int pipe_ops, int reg_buff) {
  outcome scratch;
  fresh(&scratch);
  get_coll_info(ctx[r], (ncclFunc_t)coll, bytes, pipe_ops, (float **)scratch.cost, 7, 3, reg_buff, &scratch.nch);
}

static void *rank_thread(void *arg) {
  int r = (int)(intptr_t)arg;
  for (int i = 0; i < calls; i++) {
    if (r == 1 && ((is("extra-one") && i == calls / 3) || (is("extra-per-size") && i < 42)))
      extra_call(r, coll_of(i), bytes_of(i), pipe_ops_of(i), reg_buff_of(r, i));
    if (r == 1 && is("state") && i % 100 == 50) extra_call(r, coll_of(i), bytes_of(i), 8, 1);
    outcome *o = &out[r][i];
    fresh(o);
    get_coll_info(ctx[r], (ncclFunc_t)coll_of(i), bytes_of(i), pipe_ops_of(i), (float **)o->cost, 7, 3,
                       reg_buff_of(r, i), &o->nch);
    if (!tuner4) {
      int cell = running_cell(o);
      o->chunk = NCCL_CHUNK;
      tuner->getChunkSize(ctx[r], (ncclFunc_t)coll_of(i), bytes_of(i), cell / 3, cell % 3, o->nch ? o->nch : 4,
                          &o->chunk);
    }
  }
  return NULL;
}

static int init_rank(int r, unsigned long long comm_id, int nodes) {
  if (tuner4) return tuner4->init((size_t)nodes * 8, (size_t)nodes, (ncclDebugLogger_t)explore_logger, &ctx[r]) == ncclSuccess;
  ncclNvlDomainInfo_v5_t nvl = {nodes, 8, 8};
  ncclTunerConstants_v5_t constants;
  memset(&constants, 0, sizeof constants);
  return tuner->init(&ctx[r], comm_id, (size_t)nodes * 8, (size_t)nodes, (ncclDebugLogger_t)explore_logger, &nvl,
                     &constants) == ncclSuccess;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 5) {
    fprintf(stderr, "usage: explore NNODES CALLS [COMM_ID [SCENARIO]]\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  int nodes = atoi(argv[1]);
  calls = atoi(argv[2]);
  unsigned long long comm_id = argc > 3 ? strtoull(argv[3], NULL, 0) : 0xE4910E0011223344ULL;
  if (argc > 4) scenario = argv[4];
  if (!is("same") && !is("extra-one") && !is("extra-per-size") && !is("late") && !is("state") &&
      !is("regbuff") && !is("chunk")) {
    fprintf(stderr, "explore: unknown scenario %s\n", scenario);
    return 2;
  }
  const char *path = getenv("DYNCC_TEST_PLUGIN_LIB");
  void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!lib) {
    fprintf(stderr, "explore: cannot dlopen DYNCC_TEST_PLUGIN_LIB: %s\n", path ? dlerror() : "unset");
    return 2;
  }
  const char *which = getenv("EXPLORE_TUNER");
  if (which && strcmp(which, "v4") == 0) {
    tuner4 = dlsym(lib, "ncclTunerPlugin_v4");
    if (!tuner4) {
      fprintf(stderr, "explore: ncclTunerPlugin_v4 missing\n");
      return 2;
    }
  } else {
    tuner = dlsym(lib, "ncclTunerPlugin_v6");
    if (!tuner) {
      fprintf(stderr, "explore: ncclTunerPlugin_v6 missing\n");
      return 2;
    }
  }
  for (int r = 0; r < NRANKS_LOCAL; r++) {
    out[r] = calloc((size_t)calls, sizeof(outcome));
    if (!out[r] || !init_rank(r, comm_id, nodes)) {
      fprintf(stderr, "explore: init failed\n");
      return 2;
    }
    /* Late: rank 0 has made calls before rank 1's context exists. */
    if (r == 0 && is("late"))
      for (int i = 0; i < LATE_CALLS; i++) extra_call(0, coll_of(i), bytes_of(i), 1, 0);
  }
  pthread_t t[NRANKS_LOCAL];
  for (int r = 0; r < NRANKS_LOCAL; r++) pthread_create(&t[r], NULL, rank_thread, (void *)(intptr_t)r);
  for (int r = 0; r < NRANKS_LOCAL; r++) pthread_join(t[r], NULL);
  int disagreements = 0, unavailable = 0;
  for (int i = 0; i < calls; i++) {
    if (memcmp(&out[0][i], &out[1][i], sizeof(outcome)) != 0) disagreements++;
    int cell = -1;
    for (int r = 0; r < NRANKS_LOCAL; r++)
      if (out[r][i].cost[0][1] != -1.0f) unavailable++;
    for (int a = 0; a < 7; a++)
      for (int p = 0; p < 3; p++)
        if (out[0][i].cost[a][p] == 0.0f) cell = a * 3 + p;
    printf("call %d %zu %d %d\n", coll_of(i), bytes_of(i), cell, out[0][i].nch);
    if (!tuner4) printf("chunk %d %zu %d %d %zu\n", coll_of(i), bytes_of(i), cell, out[0][i].nch, out[0][i].chunk);
  }
  printf("disagreements %d\nunavailable_written %d\n", disagreements, unavailable);
  for (int r = 0; r < NRANKS_LOCAL; r++) {
    if (tuner4)
      tuner4->destroy(ctx[r]);
    else
      tuner->finalize(ctx[r]);
    free(out[r]);
  }
  dlclose(lib);
  return 0;
}
