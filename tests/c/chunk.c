/* A stand-in NCCL for chunk sizes (tests/chunk_sweep.rs): loads the plugin
 * in DYNCC_CHUNK_LIB, resolves NCCL's symbol ncclTunerPlugin_vVER (6: NCCL
 * 2.30-2.32.3, 7: 2.32.6+), initialises one communicator (16 ranks on 2
 * nodes unless DYNCC_INIT_RANKS / DYNCC_INIT_NODES say otherwise) with
 * DYNCC_TABLE / DYNCC_SWEEP_CHUNK from the environment, printing every line
 * the plugin logs ("INFO ..." / "WARN ...") and "rc N ctx set|null". Then,
 * per argument COLL:NBYTES:ALGO:PROTO:OWN (NCCL's numbers), it asks as
 * NCCL's enqueue does: getCollInfo on a cost table of 1.0s ("collinfo COLL
 * NBYTES cell C nChannels N", cell -1: NCCL left alone), then getChunkSize
 * for the algorithm and protocol NCCL chose, with NCCL's own chunk OWN in
 * *chunkSize ("chunk COLL NBYTES ALGO PROTO OWN -> ANSWER"); finalizes.
 *
 * usage: chunk VER [COLL:NBYTES:ALGO:PROTO:OWN ...] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "nccl_tuner.h"
#include "print_logger.h"

static PRINT_LOGGER(logger)

int main(int argc, char **argv) {
  if (argc < 2 || (atoi(argv[1]) != 6 && atoi(argv[1]) != 7)) {
    fprintf(stderr, "usage: chunk 6|7 [COLL:NBYTES:ALGO:PROTO:OWN ...]\n");
    return 2;
  }
  int ver = atoi(argv[1]);
  const char *lib = getenv("DYNCC_CHUNK_LIB");
  void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!h) {
    fprintf(stderr, "chunk: cannot dlopen DYNCC_CHUNK_LIB: %s\n", lib ? dlerror() : "unset");
    return 2;
  }
  ncclTuner_v6_t *v6 = NULL;
  ncclTuner_v7_t *v7 = NULL;
  if (ver == 6)
    v6 = dlsym(h, "ncclTunerPlugin_v6");
  else
    v7 = dlsym(h, "ncclTunerPlugin_v7");
  if (!v6 && !v7) {
    fprintf(stderr, "chunk: no ncclTunerPlugin_v%d in %s\n", ver, lib);
    return 2;
  }
  const char *r = getenv("DYNCC_INIT_RANKS"), *n = getenv("DYNCC_INIT_NODES");
  int ranks = r ? atoi(r) : 16, nodes = n ? atoi(n) : 2;
  if (ranks < 1 || nodes < 1) {
    fprintf(stderr, "chunk: DYNCC_INIT_RANKS and DYNCC_INIT_NODES must be positive\n");
    return 2;
  }
  ncclNvlDomainInfo_v5_t nvl = {nodes, ranks / nodes, (ranks + nodes - 1) / nodes};
  void *ctx = NULL;
  ncclResult_t rc;
  if (v6) {
    ncclTunerConstants_v5_t constants = {0};
    rc = v6->init(&ctx, 0x1234abcdULL, (size_t)ranks, (size_t)nodes, logger, &nvl, &constants);
  } else {
    static ncclTunerConstants_v7_t constants;
    rc = v7->init(&ctx, 0x1234abcdULL, (size_t)ranks, (size_t)nodes, logger, &nvl, &constants);
  }
  printf("rc %d ctx %s\n", (int)rc, ctx ? "set" : "null");
  for (int i = 2; i < argc; i++) {
    unsigned coll;
    size_t bytes, own;
    int algo, proto;
    if (sscanf(argv[i], "%u:%zu:%d:%d:%zu", &coll, &bytes, &algo, &proto, &own) != 5) {
      fprintf(stderr, "chunk: bad query %s\n", argv[i]);
      return 2;
    }
    float cost[21];
    for (int k = 0; k < 21; k++) cost[k] = 1.0f;
    int nCh = 0, cell = -1;
    ncclResult_t q = v6 ? v6->getCollInfo(ctx, coll, bytes, 1, (float **)(void *)cost, 7, 3, 0, &nCh)
                        : v7->getCollInfo(ctx, coll, bytes, 1, (float **)(void *)cost, 7, 3, 0, &nCh);
    for (int k = 0; k < 21; k++)
      if (cost[k] == 0.0f) cell = k;
    printf("collinfo %u %zu rc %d cell %d nChannels %d\n", coll, bytes, (int)q, cell, nCh);
    size_t chunk = own;
    q = v6 ? v6->getChunkSize(ctx, coll, bytes, algo, proto, 8, &chunk)
           : v7->getChunkSize(ctx, coll, bytes, algo, proto, 8, &chunk);
    printf("chunk %u %zu %d %d %zu -> %zu rc %d\n", coll, bytes, algo, proto, own, chunk, (int)q);
  }
  if (v6)
    v6->finalize(ctx);
  else
    v7->finalize(ctx);
  dlclose(h);
  return 0;
}
