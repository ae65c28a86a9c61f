#include "src/backend/cuda/stream_gate.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "sketchccl_build_config.h"
#include "src/core/log.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda.h>  // driver types only: the functions come from cudaGetDriverEntryPoint
#include <cuda_runtime_api.h>

#include "src/backend/cuda/gate_kernels.h"
#include "src/backend/cuda/kernel_preload.h"
#endif

namespace sketchccl::backend {

const char* CudaStreamGate::mechanism_name() const {
  switch (mech_) {
    case Mechanism::kStreamWaitValue:
      return "cuStreamWaitValue32";
    case Mechanism::kSpinKernel:
      return "spin kernel";
    default:
      return "auto";
  }
}

#if SKETCHCCL_HAVE_CUDA

namespace {

Status cuda_status(cudaError_t e, const char* what) {
  return errorf(Code::kUnhandledCudaError, "%s: %s", what, cudaGetErrorString(e));
}

// Mapped, portable pinned words (one per 64-byte line) shared by every gate of the process and
// never freed: a wait still queued on some stream may read its word after its gate is gone. A slot
// given back keeps its value, and the next gate on it continues from there, so such a late
// wait is never blocked by a reset.
class FlagPool {
 public:
  static constexpr int kSlots = 1024;
  static FlagPool& get() {
    static FlagPool* pool = new FlagPool();  // never destroyed (see above)
    return *pool;
  }
  // `device` must be current: the device address is that device's view of the word.
  Status acquire(int device, int* slot, volatile uint32_t** host, void** dev) {
    std::lock_guard<std::mutex> lock(mu_);
    if (words_ == nullptr) {
      // Our own pages, registered (mapped, portable) rather than cudaHostAlloc'ed: they stay
      // mapped even after the CUDA runtime is torn down at exit, when an aborted communicator
      // may still release its gate.
      void* p = nullptr;
      if (posix_memalign(&p, 4096, kSlots * 64) != 0) {
        return Status(Code::kSystemError, "stream gate: out of memory for the flags");
      }
      std::memset(p, 0, kSlots * 64);
      cudaError_t e =
          cudaHostRegister(p, kSlots * 64, cudaHostRegisterMapped | cudaHostRegisterPortable);
      if (e != cudaSuccess) {
        std::free(p);
        return cuda_status(e, "cudaHostRegister of the stream-gate flags");
      }
      words_ = static_cast<uint32_t*>(p);
      for (int i = kSlots - 1; i >= 0; --i)
        free_.push_back(i);
    }
    // Each device's own address of the words: equal to the host address only where
    // the device can use host pointers for registered memory (UVA), asked per device regardless.
    auto it = dev_.find(device);
    if (it == dev_.end()) {
      void* d = nullptr;
      const cudaError_t e = cudaHostGetDevicePointer(&d, words_, 0);
      if (e != cudaSuccess) {
        cudaGetLastError();
        return cuda_status(e, "cudaHostGetDevicePointer of the gate flags");
      }
      it = dev_.emplace(device, static_cast<uint8_t*>(d)).first;
    }
    if (free_.empty()) {
      return Status(Code::kSystemError, "more than 1024 communicators with device AllReduces");
    }
    *slot = free_.back();
    free_.pop_back();
    // One word per 64-byte line: the host writes it, the GPU polls it.
    *host = words_ + static_cast<size_t>(*slot) * 16;
    *dev = it->second + static_cast<size_t>(*slot) * 64;
    return Status::Ok();
  }
  void give_back(int slot) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(slot);
  }

 private:
  std::mutex mu_;
  uint32_t* words_ = nullptr;
  std::map<int, uint8_t*> dev_;  // device -> its address of words_
  std::vector<int> free_;
};

using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using GetAttrFn = CUresult (*)(int*, CUdevice_attribute, CUdevice);

// A driver function, ABI of CUDA 12.0, without linking libcuda; nullptr when unavailable.
// cudaGetDriverEntryPointByVersion exists from CUDA 12.5 (and is the only form in 13); older
// 12.x toolkits have cudaGetDriverEntryPoint, which returns the 12.0 ABI there.
void* driver_fn(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q);
#else
  const cudaError_t e = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q);
#endif
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return fn;
}

// cuStreamWaitValue32 from the driver; nullptr when unavailable.
WaitValueFn wait_value_fn(int device) {
  void* fn = driver_fn("cuStreamWaitValue32");
  if (fn == nullptr) return nullptr;
  // A driver that knows the v2 memory-operation attributes supports the v2 memops API. The
  // attribute itself is about CU_STREAM_WAIT_VALUE_NOR, which the gate does not use (it waits
  // with GEQ); a driver that still refuses the call makes enqueue fall back to the spin kernel.
  void* attr_fn = driver_fn("cuDeviceGetAttribute");
  if (attr_fn == nullptr) return nullptr;
  int nor = -1;
  if (reinterpret_cast<GetAttrFn>(attr_fn)(&nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR,
                                           static_cast<CUdevice>(device)) != CUDA_SUCCESS) {
    return nullptr;
  }
  SCCL_INFO(kLogInit, "device %d: stream memory operations available (WAIT_VALUE_NOR %d)", device,
            nor);
  return reinterpret_cast<WaitValueFn>(fn);
}

void CUDART_CB marker_fn(void* arg) {
  // A host function must not call CUDA: it only signals the proxy.
  auto* m = static_cast<std::shared_ptr<GateMarker>*>(arg);
  (*m)->fire();
  delete m;
}

// Makes `device` current on this thread for the scope, then restores the caller's device.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) {
      cudaGetLastError();
      prev_ = -1;
    }
    if (prev_ != device) {
      err_ = cudaSetDevice(device);
      switched_ = err_ == cudaSuccess;
    }
  }
  ~DeviceScope() {
    if (switched_ && prev_ >= 0) cudaSetDevice(prev_);
  }
  cudaError_t error() const { return err_; }

 private:
  int prev_ = -1;
  bool switched_ = false;
  cudaError_t err_ = cudaSuccess;
};

std::atomic<WaitValueFn> g_wait_value{nullptr};

}  // namespace

namespace {
// Every live gate, for any_holding().
std::mutex& gates_mu() {
  static std::mutex mu;
  return mu;
}
std::set<const CudaStreamGate*>& gates() {
  static auto* g = new std::set<const CudaStreamGate*>();  // never destroyed: gates outlive statics
  return *g;
}
}  // namespace

Status CudaStreamGate::create(int device, Mechanism want, std::unique_ptr<CudaStreamGate>* out) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return cuda_status(e, "stream gate: cudaGetDeviceCount");
  }
  if (device < 0 || device >= count) {
    return errorf(Code::kInvalidUsage, "stream gate: device %d of %d", device, count);
  }
  std::unique_ptr<CudaStreamGate> g(new CudaStreamGate());
  g->device_ = device;
  {
    DeviceScope scope(device);
    if (scope.error() != cudaSuccess) return cuda_status(scope.error(), "cudaSetDevice");
    // Every kernel loaded now, before this gate ever holds a stream: a module load or a stack
    // resize at a first launch may synchronize the context and wait for the held stream.
    SCCL_RETURN_IF_ERROR(preload_kernels(device));
    SCCL_RETURN_IF_ERROR(FlagPool::get().acquire(device, &g->slot_, &g->flag_, &g->flag_dev_));
  }
  // Continue from the slot's current value (see FlagPool).
  g->next_seq_.store(*g->flag_);
  // The spin kernel unless cuStreamWaitValue32 is asked for: a stream memory wait is invisible
  // to CUDA's scheduler and can block the backend's own work queued behind it on a shared
  // hardware queue (docs/cuda.md, "The stream gate"); a spinning kernel is an ordinary kernel.
  WaitValueFn fn = want == Mechanism::kStreamWaitValue ? wait_value_fn(device) : nullptr;
  if (want == Mechanism::kStreamWaitValue && fn == nullptr) {
    return Status(Code::kUnhandledCudaError,
                  "stream gate: cuStreamWaitValue32 is not available from this driver");
  }
  if (fn != nullptr) {
    g_wait_value = fn;
    g->mech_ = Mechanism::kStreamWaitValue;
  } else {
    g->mech_ = Mechanism::kSpinKernel;
  }
  SCCL_INFO(kLogInit, "device %d: AllReduces on device buffers wait on the caller's stream with %s",
            device, g->mechanism_name());
  {
    std::lock_guard<std::mutex> lock(gates_mu());
    gates().insert(g.get());
  }
  *out = std::move(g);
  return Status::Ok();
}

CudaStreamGate::~CudaStreamGate() {
  if (slot_ < 0) return;
  {
    std::lock_guard<std::mutex> lock(gates_mu());
    gates().erase(this);
  }
  release_all();
  FlagPool::get().give_back(slot_);
}

bool CudaStreamGate::holding() const {
  const uint32_t flag = __atomic_load_n(const_cast<const uint32_t*>(flag_), __ATOMIC_ACQUIRE);
  return static_cast<int32_t>(next_seq_.load() - flag) > 0;
}

bool CudaStreamGate::any_holding() {
  std::lock_guard<std::mutex> lock(gates_mu());
  for (const CudaStreamGate* g : gates()) {
    if (g->holding()) return true;
  }
  return false;
}

void CudaStreamGate::reserve(GateTicket* ticket) {
  // From here holding() is true until the release: nothing allocates pinned memory meanwhile.
  ticket->seq = next_seq_.fetch_add(1) + 1;
  ticket->marker = std::make_shared<GateMarker>();
}

Status CudaStreamGate::enqueue(void* stream, const GateTicket& ticket) {
  const uint32_t seq = ticket.seq;
  // Nothing holds the stream on a failure below: the operation must not run (the stream would
  // race with it), and the sequence number is released so the slot stays consistent. A marker
  // that already fired may have let the proxy start; the caller has the error either way.
  auto fail = [&](const Status& st) {
    ticket.marker->cancel(st);
    release(seq);
    return st;
  };
  DeviceScope scope(device_);
  if (scope.error() != cudaSuccess) return fail(cuda_status(scope.error(), "cudaSetDevice"));
  auto s = static_cast<cudaStream_t>(stream);
  auto* arg = new std::shared_ptr<GateMarker>(ticket.marker);
  cudaError_t e = cudaLaunchHostFunc(s, marker_fn, arg);
  if (e != cudaSuccess) {
    delete arg;
    cudaGetLastError();
    return fail(cuda_status(e, "cudaLaunchHostFunc (stream-gate marker)"));
  }
  bool waiting = false;
  if (mech_ == Mechanism::kStreamWaitValue) {
    CUresult r =
        g_wait_value.load()(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(flag_dev_),
                            seq, CU_STREAM_WAIT_VALUE_GEQ);
    if (r == CUDA_SUCCESS) {
      waiting = true;
    } else {
      SCCL_WARN(kLogInit,
                "device %d: cuStreamWaitValue32 failed (CUresult %d); using the spin kernel from "
                "now on",
                device_, static_cast<int>(r));
      mech_ = Mechanism::kSpinKernel;
    }
  }
  if (!waiting) {
    // Under CUDA_LAUNCH_BLOCKING this returns only once the proxy released `seq`: the operation
    // is already queued (reserve, stream_gate.h).
    e = cuda_detail::launch_gate_spin(static_cast<const volatile uint32_t*>(flag_dev_), seq, s);
    if (e != cudaSuccess) return fail(cuda_status(e, "stream-gate wait kernel launch"));
  }
  return Status::Ok();
}

void CudaStreamGate::release(uint32_t seq) {
  // Monotone in the cyclic order the wait uses; the host store is seen by the GPU over PCIe.
  uint32_t cur = __atomic_load_n(const_cast<uint32_t*>(flag_), __ATOMIC_ACQUIRE);
  while (static_cast<int32_t>(seq - cur) > 0) {
    if (__atomic_compare_exchange_n(const_cast<uint32_t*>(flag_), &cur, seq, false,
                                    __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
      break;
    }
  }
}

void CudaStreamGate::release_all() {
  release(next_seq_.load());
}

#else  // !SKETCHCCL_HAVE_CUDA

Status CudaStreamGate::create(int, Mechanism, std::unique_ptr<CudaStreamGate>*) {
  return Status(Code::kUnhandledCudaError, "built without CUDA: no stream gate");
}
CudaStreamGate::~CudaStreamGate() {
  // Never constructed without CUDA; the fields are named so that no compiler calls them unused.
  (void)slot_;
  (void)flag_;
  (void)flag_dev_;
  (void)next_seq_;
}
void CudaStreamGate::reserve(GateTicket* ticket) {
  ticket->seq = 0;
  ticket->marker = std::make_shared<GateMarker>();
}
Status CudaStreamGate::enqueue(void*, const GateTicket& ticket) {
  Status st(Code::kUnhandledCudaError, "built without CUDA: no stream gate");
  ticket.marker->cancel(st);
  return st;
}
void CudaStreamGate::release(uint32_t) {}
void CudaStreamGate::release_all() {}
bool CudaStreamGate::holding() const {
  return false;
}
bool CudaStreamGate::any_holding() {
  return false;
}

#endif

}  // namespace sketchccl::backend
