/* SketchCCL public API: what a program may ask of the library beyond nccl.h. Plain C. */
#ifndef SKETCHCCL_SKETCHCCL_H_
#define SKETCHCCL_SKETCHCCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SKETCHCCL_EXPORT __attribute__((visibility("default")))

/* nccl.h's ncclComm_t is a pointer to this; declared here so that nccl.h is not needed. */
struct ncclComm;

/* Version as major*10000 + minor*100 + patch. */
SKETCHCCL_EXPORT int sketchcclGetVersion(void);
/* Version as "major.minor.patch". */
SKETCHCCL_EXPORT const char* sketchcclGetVersionString(void);

/* The most codecs one query reports (SketchCCL has 11). */
#define SKETCHCCL_STATS_MAX_CODECS 16

/* One codec's share of the calls SketchCCL ran on a communicator: AllReduces and
 * ReduceScatters alike (a ReduceScatter's bytes_in is its send buffer, recvcount * nranks
 * elements). */
typedef struct {
  char name[16];           /* as SKETCHCCL_CODEC spells it: "none", "q8", "s2", ... */
  uint64_t calls;          /* AllReduces and ReduceScatters, failed ones included */
  uint64_t bytes_in;       /* user bytes reduced (count * element size) */
  uint64_t bytes_sent;     /* bytes this rank put on the wire */
  uint64_t bytes_received; /* bytes this rank took off the wire */
  double seconds;          /* time the proxy spent in these calls */
  uint64_t s2_nonzeros;    /* s2: positions set in the merged bitmaps, */
  uint64_t s2_peeled;      /*     recovered exactly by peeling, */
  uint64_t s2_estimated;   /*     left to the median estimate */
  double ef_input_sq;      /* error feedback: sum of squares of what was compressed, */
  double ef_residual_sq;   /*     and of the residuals kept (their ratio: the codec's NMSE) */
} sketchcclCodecStats;

/* The accuracy guard's view of one codec (docs/engine.md): the estimate every lossy call makes
 * of its own error from a sample of positions, identical on every rank. */
typedef struct {
  uint64_t estimated_calls;      /* calls that made an estimate */
  double estimated_nmse_mean;    /* sum (y - x)^2 / sum x^2 over the sample: mean over calls, */
  double estimated_nmse_worst;   /*     and the largest */
  double estimated_maxrel_mean;  /* max |y - x| / max |x| over the sample: mean over calls, */
  double estimated_maxrel_worst; /*     and the largest */
  uint64_t sample_bytes_sent;    /* bytes this rank sent for the estimates (not in bytes_sent) */
  uint64_t guard_steps;          /* buffers SKETCHCCL_MAX_NMSE moved to a safer codec */
} sketchcclCodecAccuracy;

/* A communicator's statistics, this rank's view. Fields are only ever appended: a program set
 * `size` to the sizeof it was built with, and gets that much filled in. */
typedef struct {
  size_t size; /* in: sizeof(sketchcclCommStats); out: the bytes filled in */
  int rank;
  int nranks;
  uint64_t calls_taken;     /* AllReduces and ReduceScatters SketchCCL ran and that succeeded */
  uint64_t calls_forwarded; /* calls passed to the real NCCL */
  uint64_t calls_failed;    /* AllReduces and ReduceScatters SketchCCL ran that failed */
  uint64_t bytes_in;        /* totals over the codecs below */
  uint64_t bytes_sent;
  uint64_t bytes_received;
  double seconds;
  int num_codecs; /* entries used in codecs[], in name order */
  sketchcclCodecStats codecs[SKETCHCCL_STATS_MAX_CODECS];
  /* Appended: accuracy[i] belongs to codecs[i]. */
  sketchcclCodecAccuracy accuracy[SKETCHCCL_STATS_MAX_CODECS];
  /* Appended: s2_repaired[i] belongs to codecs[i]: s2 positions left to the median estimate
   * and then reduced exactly (SKETCHCCL_S2_REPAIR=1, the default); its bytes are in bytes_sent. */
  uint64_t s2_repaired[SKETCHCCL_STATS_MAX_CODECS];
  /* Appended: SKETCHCCL_CODEC=auto's verdicts from the measured network (docs/scale.md): calls
   * forwarded to NCCL (also in calls_forwarded), and calls run exact standalone, because no codec
   * was predicted faster on this communicator's links; the link figures the ranks agreed on at
   * init (0 where nothing was measured: a forced codec). */
  uint64_t calls_forwarded_no_gain;
  uint64_t calls_exact_no_gain;
  double link_gbps;
  double link_latency_us;
  /* Appended: memory SketchCCL holds for this communicator now: device bytes (0: nothing is
   * kept in device memory, a device call is staged in pinned host memory) and pinned host bytes
   * (the staging blocks of its device calls not yet given back to the pool); 1 while suspended
   * (ncclCommSuspend). */
  uint64_t device_bytes;
  uint64_t pinned_bytes;
  int suspended;
  /* Appended: packet and staging memory (docs/memory.md). A process's communicators share one
   * pool of host packet memory and, per device, one of pinned staging memory (the
   * process_pinned_* fields: device calls' staging blocks); a call leases blocks from them while
   * it runs, so communicators whose calls follow one another use the same memory. This
   * communicator: the packet memory it leases now (0 between its calls) and the most it leased
   * at once (what it would keep without the pools). The process: what the pools hold (leased or
   * kept for the next call; pinned: of this communicator's device), the most they ever held, and
   * the leases handed out, of which `reuses` took a kept block. */
  uint64_t packet_leased_bytes;
  uint64_t packet_peak_bytes;
  uint64_t process_host_packet_bytes;
  uint64_t process_host_packet_peak_bytes;
  uint64_t process_pinned_packet_bytes;
  uint64_t process_pinned_packet_peak_bytes;
  uint64_t process_packet_leases;
  uint64_t process_packet_reuses;
  /* Always 0 (packet memory is plain host memory); kept for the struct's layout. */
  uint64_t packet_misses;
  /* Appended: device runtime calls made on a communicator's proxy thread in this process: 0 by
   * design, since the proxy and a caller's stream meet only through flags in pinned memory
   * (docs/cuda.md). */
  uint64_t proxy_cuda_calls;
  /* Appended: the compressed AllGathers (SKETCHCCL_ALLGATHER_CODEC, docs/allgather.md), not in
   * the totals above: calls (failed ones included), of those failed, this rank's shard bytes
   * (sendcount * element size: an exact ring sends nranks - 1 times as much), the bytes this rank
   * put on and took off the wire, of those sent the bytes to ranks of other nodes (on several
   * nodes of several ranks only the compressed exchange along the rail's), and the proxy's time
   * in them. Exact AllGathers count nowhere. */
  uint64_t allgather_calls;
  uint64_t allgather_failed;
  uint64_t allgather_bytes_in;
  uint64_t allgather_bytes_sent;
  uint64_t allgather_bytes_received;
  uint64_t allgather_inter_node_bytes_sent;
  double allgather_seconds;
  /* Appended: device calls whose codecs ran as kernels on the caller's stream
   * (SKETCHCCL_DEVICE_CODECS, docs/cuda.md); the others ran them on the host. */
  uint64_t device_codec_calls;
} sketchcclCommStats;

/* Fills *out with the statistics of `comm` (an ncclComm_t) so far: the AllReduces and
 * ReduceScatters whose work finished (for a stream-ordered one, synchronize the stream first).
 * Returns 0 (ncclSuccess), 4 (ncclInvalidArgument) when `comm` is not a communicator of
 * SketchCCL's, `out` is NULL or out->size is smaller than a size_t, 3 (ncclInternalError) on an
 * internal failure. Thread-safe; does not wait for the communicator. */
SKETCHCCL_EXPORT int sketchcclCommGetStats(struct ncclComm* comm, sketchcclCommStats* out);

#ifdef __cplusplus
}
#endif

#endif /* SKETCHCCL_SKETCHCCL_H_ */
