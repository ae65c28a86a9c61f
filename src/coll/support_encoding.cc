#include "src/coll/support_encoding.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "kernels/sparse.h"
#include "src/coll/oom.h"
#include "src/coll/ring_phase.h"

namespace sketchccl::coll {
namespace {

// The element bitmap, built slice by slice from the input by the backend. Elements are 64-bit
// words.
class ElementBitmapSliceOps : public SliceOps {
 public:
  ElementBitmapSliceOps(backend::Backend& be, const SupportArgs& a, uint64_t* union_bits)
      : be_(be),
        x_(static_cast<const uint8_t*>(a.x)),
        type_(a.type),
        esz_(kernels::elem_size(a.type)),
        count_(a.count),
        union_(union_bits) {}

  size_t packet_bytes(size_t, size_t n) const override { return n * sizeof(uint64_t); }
  Status encode(size_t offset, size_t n, int, void* pkt, size_t cap) override {
    return build(offset, n, static_cast<uint64_t*>(pkt), cap);
  }
  Status step(size_t offset, size_t n, int, const void* in, size_t in_bytes, void* out,
              size_t cap) override {
    if (in_bytes != n * sizeof(uint64_t)) {
      return errorf(Code::kInvalidUsage, "sparse bitmap packet of %zu bytes, expected %zu",
                    in_bytes, n * sizeof(uint64_t));
    }
    SCCL_RETURN_IF_ERROR(build(offset, n, static_cast<uint64_t*>(out), cap));
    return be_.bitmap_or(static_cast<uint64_t*>(out), static_cast<const uint64_t*>(in), n * 64);
  }
  Status decode_start(size_t offset, size_t n, const void* pkt, size_t bytes) override {
    if (bytes != n * sizeof(uint64_t)) {
      return Status(Code::kInvalidUsage, "sparse bitmap packet has the wrong size");
    }
    std::memcpy(union_ + offset, pkt, bytes);
    return Status::Ok();
  }

 private:
  // Words [offset, offset + n) cover elements [64 offset, min(count, 64 (offset + n))).
  Status build(size_t offset, size_t n, uint64_t* words, size_t cap) {
    if (cap < n * sizeof(uint64_t)) return Status(Code::kInternalError, "bitmap packet too small");
    const size_t first = offset * 64;
    const size_t elems = std::min(count_ - first, n * 64);
    std::memset(words, 0, n * sizeof(uint64_t));
    return be_.bitmap_build(x_ + first * esz_, type_, elems, words);
  }

  backend::Backend& be_;
  const uint8_t* x_;
  kernels::ElemType type_;
  size_t esz_;
  size_t count_;
  uint64_t* union_;
};

// An OR-allreduce of words this rank already holds (the row bitmap).
class WordOrSliceOps : public SliceOps {
 public:
  WordOrSliceOps(const uint64_t* local, uint64_t* union_words)
      : local_(local), union_(union_words) {}

  size_t packet_bytes(size_t, size_t n) const override { return n * sizeof(uint64_t); }
  Status encode(size_t offset, size_t n, int, void* pkt, size_t cap) override {
    if (cap < n * sizeof(uint64_t)) return Status(Code::kInternalError, "row packet too small");
    std::memcpy(pkt, local_ + offset, n * sizeof(uint64_t));
    return Status::Ok();
  }
  Status step(size_t offset, size_t n, int, const void* in, size_t in_bytes, void* out,
              size_t cap) override {
    if (in_bytes != n * sizeof(uint64_t) || cap < in_bytes) {
      return errorf(Code::kInvalidUsage, "sparse row bitmap packet of %zu bytes, expected %zu",
                    in_bytes, n * sizeof(uint64_t));
    }
    const auto* a = static_cast<const uint64_t*>(in);
    auto* o = static_cast<uint64_t*>(out);
    for (size_t i = 0; i < n; ++i)
      o[i] = a[i] | local_[offset + i];  // in == out is fine: element by element
    return Status::Ok();
  }
  Status decode_start(size_t offset, size_t n, const void* pkt, size_t bytes) override {
    if (bytes != n * sizeof(uint64_t)) {
      return Status(Code::kInvalidUsage, "sparse row bitmap packet has the wrong size");
    }
    std::memcpy(union_ + offset, pkt, bytes);
    return Status::Ok();
  }

 private:
  const uint64_t* local_;
  uint64_t* union_;
};

// Sorted index lists over the element space, merged along the ring.
class IndexListSliceOps : public SliceOps {
 public:
  IndexListSliceOps(const uint64_t* local_bits, size_t count, uint64_t prev_nonzeros,
                    uint64_t* union_bits)
      : local_(local_bits), count_(count), prev_(prev_nonzeros), union_(union_bits) {}

  size_t packet_bytes(size_t, size_t n) const override {
    return index_list_packet_bytes(capacity(n));
  }
  Status encode(size_t offset, size_t n, int, void* pkt, size_t cap) override {
    local_list(offset, n);
    return write(local_list_, n, false, pkt, cap);
  }
  Status step(size_t offset, size_t n, int, const void* in, size_t in_bytes, void* out,
              size_t cap) override {
    bool overflowed = false;
    SCCL_RETURN_IF_ERROR(read(offset, n, in, in_bytes, &in_list_, &overflowed));
    if (overflowed) return write({}, n, true, out, cap);
    local_list(offset, n);
    merge_indices(in_list_, local_list_, &merged_);
    return write(merged_, n, false, out, cap);
  }
  Status decode_start(size_t offset, size_t n, const void* pkt, size_t bytes) override {
    bool overflowed = false;
    SCCL_RETURN_IF_ERROR(read(offset, n, pkt, bytes, &in_list_, &overflowed));
    if (overflowed) {
      overflow_ = true;
      return Status::Ok();
    }
    for (uint32_t i : in_list_)
      union_[i / 64] |= uint64_t(1) << (i % 64);
    return Status::Ok();
  }

  bool overflow() const { return overflow_; }

 private:
  size_t capacity(size_t n) const { return index_list_capacity(prev_, count_, n); }
  void local_list(size_t offset, size_t n) {
    local_list_.clear();
    indices_in(local_, offset, n, &local_list_);
  }
  // A list longer than the capacity travels as the overflow flag alone.
  Status write(const std::vector<uint32_t>& list, size_t n, bool overflowed, void* pkt,
               size_t cap) {
    const size_t bytes = index_list_packet_bytes(capacity(n));
    if (cap < bytes) return Status(Code::kInternalError, "index list packet too small");
    auto* w = static_cast<uint32_t*>(pkt);
    std::memset(pkt, 0, bytes);
    if (overflowed || list.size() > capacity(n)) {
      w[1] = 1;
      return Status::Ok();
    }
    w[0] = static_cast<uint32_t>(list.size());
    if (!list.empty()) std::memcpy(w + 2, list.data(), list.size() * sizeof(uint32_t));
    return Status::Ok();
  }
  // A peer's packet, validated: its size, length, and ascending indices inside the slice.
  Status read(size_t offset, size_t n, const void* pkt, size_t bytes, std::vector<uint32_t>* list,
              bool* overflowed) {
    if (bytes != index_list_packet_bytes(capacity(n))) {
      return errorf(Code::kInvalidUsage, "sparse index list packet of %zu bytes, expected %zu",
                    bytes, index_list_packet_bytes(capacity(n)));
    }
    const auto* w = static_cast<const uint32_t*>(pkt);
    *overflowed = w[1] != 0;
    list->clear();
    if (*overflowed) return Status::Ok();
    if (w[0] > capacity(n)) {
      return errorf(Code::kInvalidUsage, "sparse index list of %u entries, capacity %zu", w[0],
                    capacity(n));
    }
    list->assign(w + 2, w + 2 + w[0]);
    for (size_t k = 0; k < list->size(); ++k) {
      const uint32_t i = (*list)[k];
      if (i < offset || i >= offset + n || (k > 0 && i <= (*list)[k - 1])) {
        return errorf(Code::kInvalidUsage,
                      "sparse index list: index %u out of order or outside [%zu, %zu)", i, offset,
                      offset + n);
      }
    }
    return Status::Ok();
  }

  const uint64_t* local_;
  size_t count_;
  uint64_t prev_;
  uint64_t* union_;
  bool overflow_ = false;
  std::vector<uint32_t> local_list_, in_list_, merged_;
};

Status element_bitmap_union(const CommLink& link, backend::Backend& be, const SupportArgs& a,
                            uint64_t* union_bits, RingStats* rs) {
  const size_t words = kernels::bitmap_bytes(a.count) / sizeof(uint64_t);
  ElementBitmapSliceOps ops(be, a, union_bits);
  const size_t word_slice = std::max<size_t>(1, a.slice_elems / 2);
  return ring_allreduce(link, words, word_slice, a.depth, ops, rs);
}

}  // namespace

const char* support_encoding_name(SupportEncoding e) {
  switch (e) {
    case SupportEncoding::kElementBitmap:
      return "element_bitmap";
    case SupportEncoding::kRowBitmap:
      return "row_bitmap";
    case SupportEncoding::kIndexList:
      return "index_list";
  }
  return "?";
}

size_t row_bitmap_words(size_t count) {
  const size_t rows = (count + kRowElems - 1) / kRowElems;
  return (rows + 63) / 64;
}

void rows_of_bitmap(const uint64_t* bits, size_t count, uint64_t* rows) {
  const size_t nrows = (count + kRowElems - 1) / kRowElems;
  std::memset(rows, 0, row_bitmap_words(count) * sizeof(uint64_t));
  for (size_t r = 0; r < nrows; ++r) {
    if (bits[r] != 0) rows[r / 64] |= uint64_t(1) << (r % 64);
  }
}

void bitmap_of_rows(const uint64_t* rows, size_t count, uint64_t* bits) {
  const size_t nrows = (count + kRowElems - 1) / kRowElems;
  for (size_t r = 0; r < nrows; ++r) {
    const bool set = (rows[r / 64] >> (r % 64)) & 1u;
    uint64_t w = set ? ~uint64_t(0) : 0;
    // Bits at and above count in the last word stay clear (kernels/sparse.h).
    if (set && r == nrows - 1 && count % 64 != 0) w = (uint64_t(1) << (count % 64)) - 1;
    bits[r] = w;
  }
}

size_t index_list_capacity(uint64_t prev_nonzeros, size_t count, size_t n) {
  if (count == 0) return std::min<size_t>(n, 64);
  const double share =
      static_cast<double>(prev_nonzeros) * static_cast<double>(n) / static_cast<double>(count);
  const auto cap = static_cast<size_t>(2.0 * share) + 64;
  return std::min(cap, n);
}

size_t index_list_packet_bytes(size_t capacity) {
  return (2 * sizeof(uint32_t) + capacity * sizeof(uint32_t) + 7) / 8 * 8;
}

void indices_in(const uint64_t* bits, size_t offset, size_t n, std::vector<uint32_t>* out) {
  const size_t end = offset + n;
  for (size_t w = offset / 64; w * 64 < end; ++w) {
    uint64_t word = bits[w];
    while (word != 0) {
      const size_t i = w * 64 + static_cast<size_t>(__builtin_ctzll(word));
      word &= word - 1;
      if (i >= offset && i < end) out->push_back(static_cast<uint32_t>(i));
    }
  }
}

void merge_indices(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b,
                   std::vector<uint32_t>* out) {
  out->clear();
  out->reserve(a.size() + b.size());
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(*out));
}

Status agree_union_support(const CommLink& link, backend::Backend& be, const SupportArgs& a,
                           uint64_t* union_bits, SupportOutcome* out) {
  *out = SupportOutcome{};
  out->used = a.encoding;
  const size_t words = kernels::bitmap_bytes(a.count) / sizeof(uint64_t);
  RingStats rs;
  Status st;
  // An index list's entries are u32: a larger buffer agrees on its element bitmap.
  const bool list_fits = a.count <= (size_t(1) << 32);
  if (a.encoding == SupportEncoding::kElementBitmap ||
      (a.encoding == SupportEncoding::kIndexList && !list_fits)) {
    out->used = SupportEncoding::kElementBitmap;
    st = element_bitmap_union(link, be, a, union_bits, &rs);
  } else {
    // This rank's whole element bitmap, once (host memory, count / 8 bytes).
    std::vector<uint64_t> local;
    SCCL_RETURN_IF_ERROR(alloc_vector<uint64_t>(&local, words, "sparse local bitmap", 0));
    SCCL_RETURN_IF_ERROR(be.bitmap_build(a.x, a.type, a.count, local.data()));
    if (a.encoding == SupportEncoding::kRowBitmap) {
      const size_t rwords = row_bitmap_words(a.count);
      std::vector<uint64_t> rows, union_rows;
      SCCL_RETURN_IF_ERROR(alloc_vector<uint64_t>(&rows, rwords, "sparse row bitmap", 0));
      SCCL_RETURN_IF_ERROR(alloc_vector<uint64_t>(&union_rows, rwords, "sparse row union", 0));
      rows_of_bitmap(local.data(), a.count, rows.data());
      WordOrSliceOps ops(rows.data(), union_rows.data());
      const size_t word_slice = std::max<size_t>(1, a.slice_elems / 2);
      st = ring_allreduce(link, rwords, word_slice, a.depth, ops, &rs);
      if (st.ok()) bitmap_of_rows(union_rows.data(), a.count, union_bits);
    } else {
      IndexListSliceOps ops(local.data(), a.count, a.prev_nonzeros, union_bits);
      CommLink l = link;
      l.phase = kPhaseSparseIndices;
      st = ring_allreduce(l, a.count, a.slice_elems, a.depth, ops, &rs);
      // Every rank decoded the same final packets, so every rank sees the same overflow.
      if (st.ok() && ops.overflow()) {
        out->index_overflow = true;
        out->used = SupportEncoding::kElementBitmap;
        std::memset(union_bits, 0, words * sizeof(uint64_t));
        st = element_bitmap_union(link, be, a, union_bits, &rs);
      }
    }
  }
  out->bytes_sent = rs.bytes_sent;
  out->bytes_received = rs.bytes_received;
  if (!st.ok()) return st;
  for (size_t w = 0; w < words; ++w)
    out->rows += union_bits[w] != 0;
  return Status::Ok();
}

}  // namespace sketchccl::coll
