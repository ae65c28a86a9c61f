// What one call on a buffer leaves for the next (history, error-feedback residual, guard), per
// communicator, bounded: past kMaxBufferStates the least recently used buffer's state is dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <utility>

#include "kernels/codec.h"
#include "src/backend/backend.h"
#include "src/backend/memory_type.h"
#include "src/coll/accuracy.h"
#include "src/coll/codec_choice.h"
#include "src/coll/reduction.h"

namespace sketchccl::coll {

// DDP buckets keep their addresses, so a buffer is (address, count, type). `nonzeros` comes from
// the reduced result, identical on all ranks.
struct BufferKey {
  uintptr_t addr;
  size_t count;
  kernels::ElemType type;
  CallKind kind = CallKind::kAllReduce;  // a ReduceScatter's buffer keeps its own memory
  bool operator<(const BufferKey& o) const {
    if (addr != o.addr) return addr < o.addr;
    if (count != o.count) return count < o.count;
    if (type != o.type) return type < o.type;
    return kind < o.kind;
  }
};

// s2: a call's union support per slice, offset -> (slice length, support). Every rank decoded
// the same packets, so it is agreed; the next call sizes each slice's sketch from it.
using S2SliceSupport = std::map<size_t, std::pair<size_t, uint64_t>>;

struct BufferState {
  // Set when the state is made; never reused within a communicator, so a state dropped and made
  // again for the same key (another tensor at a reused address) starts afresh.
  uint64_t generation = 0;
  bool have_history = false;
  uint64_t nonzeros = 0;  // of the previous reduced result

  // Of the previous s2 AllReduce (empty: none yet).
  S2SliceSupport s2_slices;
  // Non-empty 64-element rows of the previous `sparse` call's union support (0: not measured,
  // as after a codec ring): `auto`'s cost model reads it (coll/codec_choice.h).
  uint64_t support_rows = 0;
  // Error feedback: this rank's compression error, per element, in the memory of the backend
  // that runs the buffer's calls (residual_mem). Applied only to the generation that made it.
  std::shared_ptr<backend::F32Array> residual;
  backend::MemoryType residual_mem = backend::MemoryType::kHost;
  uint64_t residual_generation = 0;
  GuardState guard;  // the accuracy guard's rungs (SKETCHCCL_MAX_NMSE)

  // What the previous call left that the cost model reads: agreed numbers only.
  SupportHistory support_history() const {
    SupportHistory h;
    h.known = have_history;
    h.nonzeros = nonzeros;
    h.rows = support_rows;
    return h;
  }
};

class BufferStates {
 public:
  // Buffers remembered per communicator (AllReduce and ReduceScatter together). DDP's buckets
  // number in the tens; a program that reduces many short-lived tensors cycles through these.
  static constexpr size_t kMaxBufferStates = 256;

  explicit BufferStates(size_t cap = kMaxBufferStates) : cap_(cap < 1 ? 1 : cap) {}

  // The state of `key`, made (with a new generation) when absent; the most recently used from
  // now. May drop the least recently used other state. The reference is valid until the next
  // get().
  BufferState& get(const BufferKey& key);
  // Replaces the state of `key` with a fresh one (a new generation): the ranks found that they
  // hold different histories under it (another tensor at a reused address on some rank).
  BufferState& renew(const BufferKey& key);

  size_t size() const { return index_.size(); }
  // Bytes of the error-feedback residuals held in memory `mem`.
  size_t residual_bytes(backend::MemoryType mem) const;
  uint64_t dropped() const { return dropped_; }

 private:
  using Entry = std::pair<BufferKey, BufferState>;
  size_t cap_;
  std::list<Entry> lru_;  // front: the most recently used
  std::map<BufferKey, std::list<Entry>::iterator> index_;
  uint64_t next_generation_ = 1;
  uint64_t dropped_ = 0;
};

}  // namespace sketchccl::coll
