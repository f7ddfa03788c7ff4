/* A stand-in NCCL for the exploration tests: loads the plugin library
 * (DYNCC_TEST_PLUGIN_LIB), initialises two ranks of one communicator
 * through ncclTunerPlugin_v6 (8 ranks per node on NNODES nodes), and has
 * each rank, on its own thread, call getCollInfo for the same sequence of
 * collectives, as every rank of a communicator does. NCCL's cost table
 * marks Tree/LL128 unavailable (-1) everywhere.
 *
 * usage: explore NNODES CALLS
 * Prints, for rank 0, "call COLL NBYTES CELL CH" per call (CELL: the cost
 * cell the plugin set to 0 as algo*3+proto, or -1; CH: the channel count
 * written, 0 if none), then "disagreements N" (calls where the two ranks'
 * cost tables or channel counts differ) and "unavailable_written N" (calls
 * where a -1 cell was changed), and the logger's lines. */
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
#define COMM_ID 0xE4910E0011223344ULL

typedef struct {
  float cost[7][3];
  int nch;
} outcome;

static ncclTuner_v6_t *tuner;
static int calls;
static outcome *out[NRANKS_LOCAL];
static void *ctx[NRANKS_LOCAL];

static int coll_of(int i) { return (i % 7 == 6) ? 2 : 4; } /* AllGather now and then */
static size_t bytes_of(int i) {
  static const size_t sizes[6] = {6, 1024, 4096, 65536, 1 << 20, 64 << 20};
  return sizes[(i / 7) % 6];
}

static void *rank_thread(void *arg) {
  int r = (int)(intptr_t)arg;
  for (int i = 0; i < calls; i++) {
    outcome *o = &out[r][i];
    for (int a = 0; a < 7; a++)
      for (int p = 0; p < 3; p++) o->cost[a][p] = (a == 0 && p == 1) ? -1.0f : (float)(100 + a * 3 + p);
    o->nch = 0;
    tuner->getCollInfo(ctx[r], (ncclFunc_t)coll_of(i), bytes_of(i), 1, (float **)o->cost, 7, 3, 0, &o->nch);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: explore NNODES CALLS\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  int nodes = atoi(argv[1]);
  calls = atoi(argv[2]);
  const char *path = getenv("DYNCC_TEST_PLUGIN_LIB");
  void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!lib) {
    fprintf(stderr, "explore: cannot dlopen DYNCC_TEST_PLUGIN_LIB: %s\n", path ? dlerror() : "unset");
    return 2;
  }
  tuner = dlsym(lib, "ncclTunerPlugin_v6");
  if (!tuner) {
    fprintf(stderr, "explore: ncclTunerPlugin_v6 missing\n");
    return 2;
  }
  for (int r = 0; r < NRANKS_LOCAL; r++) {
    out[r] = calloc((size_t)calls, sizeof(outcome));
    ncclNvlDomainInfo_v5_t nvl = {nodes, 8, 8};
    ncclTunerConstants_v5_t constants;
    memset(&constants, 0, sizeof constants);
    if (!out[r] || tuner->init(&ctx[r], COMM_ID, (size_t)nodes * 8, (size_t)nodes,
                               (ncclDebugLogger_t)explore_logger, &nvl, &constants) != ncclSuccess) {
      fprintf(stderr, "explore: init failed\n");
      return 2;
    }
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
  }
  printf("disagreements %d\nunavailable_written %d\n", disagreements, unavailable);
  for (int r = 0; r < NRANKS_LOCAL; r++) {
    tuner->finalize(ctx[r]);
    free(out[r]);
  }
  dlclose(lib);
  return 0;
}
