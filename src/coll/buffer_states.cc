#include "src/coll/buffer_states.h"

namespace sketchccl::coll {

BufferState& BufferStates::get(const BufferKey& key) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);  // most recently used; iterators stay valid
    return it->second->second;
  }
  if (index_.size() >= cap_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
    dropped_++;
  }
  lru_.emplace_front(key, BufferState{});
  lru_.front().second.generation = next_generation_++;
  index_.emplace(key, lru_.begin());
  return lru_.front().second;
}

BufferState& BufferStates::renew(const BufferKey& key) {
  BufferState& s = get(key);
  s = BufferState{};
  s.generation = next_generation_++;
  return s;
}

size_t BufferStates::residual_bytes(backend::MemoryType mem) const {
  size_t bytes = 0;
  for (const Entry& e : lru_) {
    const BufferState& b = e.second;
    if (b.residual && b.residual_mem == mem) bytes += b.residual->size() * sizeof(float);
  }
  return bytes;
}

}  // namespace sketchccl::coll
