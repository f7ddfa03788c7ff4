/* NCCL's profiler-plugin ABI (versions 3-7) as the stand-in NCCL of
 * tests/c/standin.c uses it, written for these tests from the layouts in
 * the project's profiler reference and profiler_v7.h's (NCCL 2.31.2), not
 * NCCL's header. The descriptor unions carry a pad so they are at least as
 * large as NCCL's (v7's largest member, coll, is 112 bytes). */
#ifndef DYNCC_NCCL_PROFILER_H
#define DYNCC_NCCL_PROFILER_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "nccl_tuner.h"

enum {
  PROFILE_GROUP = 1 << 0,
  PROFILE_COLL = 1 << 1,
  PROFILE_P2P = 1 << 2,
  PROFILE_PROXY_OP = 1 << 3,
  PROFILE_PROXY_STEP = 1 << 4,
  PROFILE_KERNEL_CH = 1 << 6,
  PROFILE_NET_PLUGIN = 1 << 7,
  PROFILE_GROUP_API = 1 << 8,     /* 2.28+ */
  PROFILE_COLL_API = 1 << 9,      /* 2.28+ */
  PROFILE_P2P_API = 1 << 10,      /* 2.28+ */
  PROFILE_KERNEL_LAUNCH = 1 << 11, /* 2.28+ */
  PROFILE_CE_COLL = 1 << 12,       /* 2.29+ */
  PROFILE_KERNEL_PHASE = 1 << 15   /* 2.31+: implies KernelCh */
};
enum { PROFILER_KERNEL_CH_STOP = 22, PROFILER_KERNEL_PHASE_STOP = 31 };

typedef struct {
  uint64_t seqNumber;
  const char *func;
  const void *sendBuff;
  void *recvBuff;
  size_t count;
  int root;
  const char *datatype;
  uint8_t nChannels;
  uint8_t nWarps;
  const char *algo;
  const char *proto;
  void *parentGroup; /* v5+ */
  /* v7: a symmetric kernel's variant (algo is its part after "_", proto
   * ""), whether one ran, and the call's ncclCollConfig_t tag. */
  const char *kernelVariant;
  bool isSymColl;
  uint64_t userTag;
} prof_coll_t;

typedef struct {
  uint64_t seqNumber;
  const char *func;
  const void *sendBuff;
  void *recvBuff;
  size_t count;
  int root;
  const char *datatype;
  const char *syncStrategy;
  bool intraBatchSync;
  uint32_t batchSize;
  uint32_t numBatches;
  uint32_t ceSeqNum;
  void *stream;
  uint64_t userTag; /* v7 */
} prof_ce_coll_t;

typedef struct {
  const char *func;
  size_t count;
  const char *datatype;
  int root;
  void *stream;
  bool graphCaptured;
  uint64_t userTag; /* v7 */
} prof_coll_api_t;

typedef struct {
  uint8_t channelId;
  uint8_t phaseId; /* 0 initial_sync, 1 compute, 2 final_sync */
  const char *phaseName;
  uint64_t pTimer;
} prof_kernel_phase_t;

typedef struct {
  uint8_t channelId;
  uint64_t pTimer;
} prof_kernel_ch_t;

typedef union {
  prof_coll_t coll;
  prof_kernel_ch_t kernelCh;
  prof_ce_coll_t ceColl;
  prof_coll_api_t collApi;
  prof_kernel_phase_t kernelPhase;
  char pad[128]; /* v6's copy-engine members are larger than v6's coll */
} prof_descr_union_t;

typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  prof_descr_union_t u;
} prof_descr_v4_t;

typedef struct {
  uint64_t type;
  void *parentObj;
  int rank;
  prof_descr_union_t u;
} prof_descr_v5_t;

typedef union {
  uint64_t pTimer; /* kernelCh */
  size_t transSize;
} prof_state_args_t;

typedef ncclResult_t (*prof_stop_t)(void *h);
typedef ncclResult_t (*prof_record_t)(void *h, int state, prof_state_args_t *args);
typedef ncclResult_t (*prof_finalize_t)(void *ctx);

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, int *mask);
  ncclResult_t (*startEvent)(void *ctx, void **h, void *descr);
  prof_stop_t stopEvent;
  prof_record_t recordEventState;
  prof_finalize_t finalize;
} ncclProfiler_v3_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, int *mask, const char *commName, uint64_t commHash, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void *ctx, void **h, prof_descr_v4_t *descr);
  prof_stop_t stopEvent;
  prof_record_t recordEventState;
  prof_finalize_t finalize;
} ncclProfiler_v4_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, int *mask, const char *commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void *ctx, void **h, prof_descr_v5_t *descr);
  prof_stop_t stopEvent;
  prof_record_t recordEventState;
  prof_finalize_t finalize;
} ncclProfiler_v5_t;
typedef ncclProfiler_v5_t ncclProfiler_v6_t;
/* v7: v5's table and descriptor header; its union is the one above. */
typedef prof_descr_v5_t prof_descr_v7_t;
typedef ncclProfiler_v5_t ncclProfiler_v7_t;

_Static_assert(sizeof(ncclProfiler_v5_t) == 48, "profiler struct is six pointers");
_Static_assert(offsetof(prof_descr_v5_t, u) == 24, "union at 24");
_Static_assert(offsetof(prof_descr_v4_t, u) == 24, "union at 24");
_Static_assert(offsetof(prof_coll_t, nChannels) == 56, "nChannels at 56");
_Static_assert(offsetof(prof_coll_t, proto) == 72, "proto at 72");
_Static_assert(offsetof(prof_coll_t, algo) == 64, "algo at 64");
_Static_assert(offsetof(prof_kernel_ch_t, pTimer) == 8, "pTimer at 8");
_Static_assert(offsetof(prof_descr_v4_t, rank) == 16, "rank at 16");
_Static_assert(offsetof(prof_descr_v5_t, rank) == 16, "rank at 16");
_Static_assert(offsetof(prof_descr_v4_t, parentObj) == 8, "parentObj at 8");
_Static_assert(offsetof(prof_coll_t, kernelVariant) == 88, "v7 kernelVariant at 88");
_Static_assert(offsetof(prof_coll_t, isSymColl) == 96, "v7 isSymColl at 96");
_Static_assert(offsetof(prof_coll_t, userTag) == 104, "v7 coll userTag at 104");
_Static_assert(sizeof(prof_coll_t) == 112, "v7 coll is 112 bytes");
_Static_assert(offsetof(prof_ce_coll_t, userTag) == 88, "v7 ceColl userTag at 88");
_Static_assert(offsetof(prof_coll_api_t, userTag) == 48, "v7 collApi userTag at 48");
_Static_assert(offsetof(prof_kernel_phase_t, pTimer) == 16, "v7 kernelPhase pTimer at 16");

#endif
