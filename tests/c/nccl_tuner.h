/* NCCL's tuner-plugin ABI, v2 to v7, as the C harness needs it.
 *
 * Written from shared/reference/nccl-tuner-abi.md sections 1-2 (NCCL's
 * tuner_v2.h .. tuner_v6.h) and the layout of tuner_v7.h (NCCL 2.32.6: v6's
 * functions, constants with a fifth compute-capability row); sizes are pinned with _Static_assert so a
 * mistake here fails the build instead of passing silently. */
#ifndef DYNCC_TEST_NCCL_TUNER_H
#define DYNCC_TEST_NCCL_TUNER_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7
} ncclResult_t;

typedef enum {
  ncclFuncBroadcast = 0,
  ncclFuncReduce = 1,
  ncclFuncAllGather = 2,
  ncclFuncReduceScatter = 3,
  ncclFuncAllReduce = 4,
  ncclFuncSendRecv = 5
} ncclFunc_t;

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

#define NCCL_INIT 0x1UL
#define NCCL_TUNING 0x40UL

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags,
                                  const char *file, int line, const char *fmt, ...);

#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2
#define NCCL_ALGO_PROTO_IGNORE -1.0

typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} ncclNvlDomainInfo_v5_t;

typedef struct {
  double baseLatencies[7][3];
  double hwLatencies[3][7][3];
  double llMaxBws[4][3];
  double perChMaxRingLL128Bws[4][3];
  double perChMaxTreeLL128Bws[4][3];
  double perChMaxTreeBws[4][3];
  double perChMaxNVLSTreeBws[4][3];
} ncclTunerConstants_v5_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       void **context);
  ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                              int collNetSupport, int nvlsSupport, int numPipeOps,
                              int *algorithm, int *protocol, int *nChannels);
  ncclResult_t (*destroy)(void *context);
} ncclTuner_v2_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       void **context);
  ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                              int numPipeOps, float **collCostTable, int numAlgo,
                              int numProto, int *nChannels);
  ncclResult_t (*destroy)(void *context);
} ncclTuner_v3_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       void **context);
  ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                              int numPipeOps, float **collCostTable, int numAlgo,
                              int numProto, int regBuff, int *nChannels);
  ncclResult_t (*destroy)(void *context);
} ncclTuner_v4_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                       ncclDebugLogger_t logFunction,
                       ncclNvlDomainInfo_v5_t *nvlDomainInfo,
                       ncclTunerConstants_v5_t *constants);
  ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                              int numPipeOps, float **collCostTable, int numAlgo,
                              int numProto, int regBuff, int *nChannels);
  ncclResult_t (*finalize)(void *context);
} ncclTuner_v5_t;

typedef ncclNvlDomainInfo_v5_t ncclNvlDomainInfo_v6_t;
typedef ncclTunerConstants_v5_t ncclTunerConstants_v6_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                       ncclDebugLogger_t logFunction,
                       ncclNvlDomainInfo_v6_t *nvlDomainInfo,
                       ncclTunerConstants_v6_t *constants);
  ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                              int numPipeOps, float **collCostTable, int numAlgo,
                              int numProto, int regBuff, int *nChannels);
  ncclResult_t (*finalize)(void *context);
  ncclResult_t (*getChunkSize)(void *context, ncclFunc_t collType, size_t nBytes,
                               int algo, int proto, int nChannels, size_t *chunkSize);
} ncclTuner_v6_t;

/* v7 (2.32.6): compute capability index 4 (Rubin) added to the bandwidth
 * arrays; the function table is v6's. */
typedef ncclNvlDomainInfo_v5_t ncclNvlDomainInfo_v7_t;
typedef struct {
  double baseLatencies[7][3];
  double hwLatencies[3][7][3];
  double llMaxBws[5][3];
  double perChMaxRingLL128Bws[5][3];
  double perChMaxTreeLL128Bws[5][3];
  double perChMaxTreeBws[5][3];
  double perChMaxNVLSTreeBws[5][3];
} ncclTunerConstants_v7_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                       ncclDebugLogger_t logFunction,
                       ncclNvlDomainInfo_v7_t *nvlDomainInfo,
                       ncclTunerConstants_v7_t *constants);
  ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                              int numPipeOps, float **collCostTable, int numAlgo,
                              int numProto, int regBuff, int *nChannels);
  ncclResult_t (*finalize)(void *context);
  ncclResult_t (*getChunkSize)(void *context, ncclFunc_t collType, size_t nBytes,
                               int algo, int proto, int nChannels, size_t *chunkSize);
} ncclTuner_v7_t;

_Static_assert(sizeof(ncclTuner_v7_t) == 40, "ncclTuner_v7_t is 40 bytes");
_Static_assert(sizeof(ncclTunerConstants_v7_t) == 1272, "ncclTunerConstants_v7_t is 1272 bytes");
_Static_assert(offsetof(ncclTunerConstants_v7_t, perChMaxNVLSTreeBws) == 1152,
               "v7's last array at 1152");

_Static_assert(sizeof(ncclTuner_v2_t) == 32, "ncclTuner_v2_t is 32 bytes");
_Static_assert(sizeof(ncclTuner_v3_t) == 32, "ncclTuner_v3_t is 32 bytes");
_Static_assert(sizeof(ncclTuner_v4_t) == 32, "ncclTuner_v4_t is 32 bytes");
_Static_assert(sizeof(ncclTuner_v5_t) == 32, "ncclTuner_v5_t is 32 bytes");
_Static_assert(sizeof(ncclTuner_v6_t) == 40, "ncclTuner_v6_t is 40 bytes");
_Static_assert(sizeof(ncclNvlDomainInfo_v5_t) == 12, "ncclNvlDomainInfo_v5_t is 12 bytes");
_Static_assert(sizeof(ncclTunerConstants_v5_t) == 1152, "ncclTunerConstants_v5_t is 1152 bytes");

#endif
