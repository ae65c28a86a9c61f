// Out of memory is an error, never an abort: what runs on a proxy thread allocates through these,
// so that an allocation failure becomes ncclSystemError naming what could not be allocated and
// no exception leaves the thread.
#pragma once

#include <cstddef>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/core/status.h"

namespace sketchccl::coll {

// "out of memory allocating the <what> (<bytes> bytes)".
inline Status out_of_memory(const char* what, size_t bytes) {
  return errorf(Code::kSystemError, "out of memory allocating the %s (%zu bytes)", what, bytes);
}

// v->assign(n, fill), or the out-of-memory error for `what`.
template <typename T>
Status alloc_vector(std::vector<T>* v, size_t n, const char* what, const T& fill = T()) {
  try {
    v->assign(n, fill);
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return out_of_memory(what, n * sizeof(T));
  } catch (const std::length_error&) {
    return out_of_memory(what, n * sizeof(T));
  }
}

// errorf(fmt, a, b), or a message-less ncclSystemError where even that cannot be allocated.
inline Status system_error(const char* fmt, const char* a, const char* b) noexcept {
  try {
    return errorf(Code::kSystemError, fmt, a, b);
  } catch (...) {
    return Status(Code::kSystemError, std::string());
  }
}

// Runs body() (returning Status); an exception becomes ncclSystemError naming `what` (an
// operation, e.g. "the sparse AllReduce of 268435456 bytes").
template <typename Body>
Status run_caught(const char* what, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return system_error("out of memory during %s%s", what, "");
  } catch (const std::exception& e) {
    return system_error("%s failed: %s", what, e.what());
  } catch (...) {
    return system_error("%s failed: %s", what, "unknown exception");
  }
}

}  // namespace sketchccl::coll
