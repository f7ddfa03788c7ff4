/* Initialises one communicator (v6, 8 ranks on 1 node) with the plugin in
 * DYNCC_INITLOG_LIB and DYNCC_TABLE / DYNCC_STRICT from the environment,
 * prints every line the plugin logs ("INFO ..." / "WARN ...") and the
 * result ("rc N ctx set|null"), asks one AllReduce 1 MiB question when a
 * context exists ("answer cell N nChannels M", cell -1 = NCCL left alone),
 * then finalizes. Used by tests/stress_c.rs to check (and quote, in
 * docs/failure-semantics.md) what a rank sees for each kind of bad table. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "print_logger.h"

static PRINT_LOGGER(logger)

int main(void) {
  const char *lib = getenv("DYNCC_INITLOG_LIB");
  void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!h) {
    fprintf(stderr, "initlog: cannot dlopen DYNCC_INITLOG_LIB: %s\n", lib ? dlerror() : "unset");
    return 2;
  }
  ncclTuner_v6_t *v6 = dlsym(h, "ncclTunerPlugin_v6");
  if (!v6) return 2;
  ncclNvlDomainInfo_v5_t nvl = {1, 8, 8};
  ncclTunerConstants_v5_t constants = {0};
  void *ctx = NULL;
  ncclResult_t rc = v6->init(&ctx, 0x1234abcdULL, 8, 1, logger, &nvl, &constants);
  printf("rc %d ctx %s\n", (int)rc, ctx ? "set" : "null");
  float cost[21];
  for (int i = 0; i < 21; i++) cost[i] = 1.0f;
  int nCh = 0, cell = -1;
  v6->getCollInfo(ctx, ncclFuncAllReduce, 1 << 20, 1, (float **)(void *)cost, 7, 3, 0, &nCh);
  for (int i = 0; i < 21; i++)
    if (cost[i] == 0.0f) cell = i;
  printf("answer cell %d nChannels %d\n", cell, nCh);
  v6->finalize(ctx);
  dlclose(h);
  return 0;
}
