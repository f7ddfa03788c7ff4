/* Initialises one communicator (v6, 8 ranks on 1 node unless
 * DYNCC_INIT_RANKS / DYNCC_INIT_NODES say otherwise) with the plugin in
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

#include "init_plugin.h"
#include "print_logger.h"

static PRINT_LOGGER(logger)

int main(void) {
  ncclTuner_v6_t *v6;
  void *ctx;
  void *h = init_plugin("DYNCC_INITLOG_LIB", "initlog", logger, &v6, &ctx);
  if (!h) return 2;
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
