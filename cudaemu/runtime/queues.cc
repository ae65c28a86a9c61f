// Hardware queues: every stream is mapped onto one of N queue threads; a queue runs its items
// strictly in order, so a head item that waits blocks every stream on that queue, as on a GPU.
#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "cudaemu/introspect.h"
#include "cudaemu/runtime/state.h"
#include "cudaemu/work.h"

namespace cudaemu {
namespace {

struct Queue {
  std::deque<ItemPtr> items;  // the head runs; under mu()
  std::condition_variable cv;
};

struct Device {
  std::vector<Queue*> queues;
  bool by_priority = false;
  int next_rr = 0;
  int next_in_level[6] = {0, 0, 0, 0, 0, 0};
  int next_stream_id = 1;
  bool launch_blocking = false;
  Stream* legacy = nullptr;
  std::vector<Stream*> streams;  // every stream ever created (never freed: items name them)
};

Device* g_dev = nullptr;
std::once_flag g_once;
thread_local Item* t_item = nullptr;
thread_local Stream* t_per_thread = nullptr;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > 128) {
    std::fprintf(stderr, "cudaemu: %s=%s is not a queue count in 1..128\n", name, v);
    std::abort();
  }
  return static_cast<int>(n);
}

void run_item(Item* item) {
  t_item = item;
  try {
    if (item->work) {
      if (item->device_access) {
        DeviceAccess access;
        item->work();
      } else {
        item->work();
      }
    }
  } catch (const DeviceFaultStop&) {
    // The fault is reported and sticky; the queue goes on (its later items are skipped).
  }
  note_host_wait(item, false);
  t_item = nullptr;
}

void queue_main(Queue* q, int index) {
  char name[16];
  std::snprintf(name, sizeof name, "cudaemu-q%d", index);
  pthread_setname_np(pthread_self(), name);
  std::unique_lock<std::mutex> lock(mu());
  for (;;) {
    q->cv.wait(lock, [&] { return !q->items.empty(); });
    ItemPtr item = q->items.front();
    // The head waits for what CUDA orders before it (events, the legacy stream) and holds the
    // queue meanwhile.
    progress().wait(lock, [&] {
      for (const ItemPtr& d : item->deps) {
        if (!d->done.load(std::memory_order_acquire)) return false;
      }
      return true;
    });
    lock.unlock();
    // A faulted context runs nothing more.
    if (sticky_error() == cudaSuccess) run_item(item.get());
    lock.lock();
    item->deps.clear();
    item->done.store(true, std::memory_order_release);
    q->items.pop_front();
    progress().notify_all();
  }
}

int pick_queue_locked(int priority) {
  const int n = static_cast<int>(g_dev->queues.size());
  if (!g_dev->by_priority) return g_dev->next_rr++ % n;
  // Each priority level (0 .. -5) owns its own slice of the queues.
  const int level = -priority;
  const int begin = level * n / 6;
  const int end = std::max(begin + 1, (level + 1) * n / 6);
  const int width = end - begin;
  return begin + (g_dev->next_in_level[level]++ % width);
}

Stream* new_stream_locked(unsigned flags, int priority, bool legacy, bool per_thread) {
  auto* s = new CUstream_st();
  s->id = legacy ? 0 : g_dev->next_stream_id++;
  s->flags = flags;
  s->priority = priority;
  s->legacy = legacy;
  s->per_thread = per_thread;
  s->queue = pick_queue_locked(priority);
  char name[96];
  std::snprintf(name, sizeof name, "%s%d (queue %d, priority %d%s)",
                legacy       ? "legacy stream "
                : per_thread ? "per-thread stream "
                             : "stream ",
                s->id, s->queue, priority, (flags & cudaStreamNonBlocking) ? ", non-blocking" : "");
  s->name = name;
  g_dev->streams.push_back(s);
  return s;
}

void do_init() {
  g_dev = new Device();  // never destroyed: queue threads and late callers outlive statics
  int n = env_int("CUDA_DEVICE_MAX_CONNECTIONS", 8);
  n = env_int("CUDAEMU_HW_QUEUES", n);
  const char* map = std::getenv("CUDAEMU_QUEUE_MAP");
  if (map != nullptr && *map != '\0') {
    if (std::strcmp(map, "priority") == 0) {
      g_dev->by_priority = true;
    } else if (std::strcmp(map, "round-robin") != 0) {
      std::fprintf(stderr, "cudaemu: CUDAEMU_QUEUE_MAP=%s: use round-robin or priority\n", map);
      std::abort();
    }
  }
  const char* lb = std::getenv("CUDA_LAUNCH_BLOCKING");
  g_dev->launch_blocking = lb != nullptr && std::strcmp(lb, "1") == 0;
  install_fault_handler();
  for (int i = 0; i < n; ++i) {
    auto* q = new Queue();
    g_dev->queues.push_back(q);
    std::thread(queue_main, q, i).detach();
  }
  std::lock_guard<std::mutex> lock(mu());
  g_dev->legacy = new_stream_locked(0, 0, true, false);
}

}  // namespace

std::mutex& mu() {
  static auto* m = new std::mutex();
  return *m;
}
std::condition_variable& progress() {
  static auto* cv = new std::condition_variable();
  return *cv;
}

void init() {
  std::call_once(g_once, do_init);
}

bool launch_blocking() {
  return g_dev->launch_blocking;
}
int queue_count() {
  return static_cast<int>(g_dev->queues.size());
}
Item* current_item() {
  return t_item;
}
std::vector<Stream*>& all_streams() {
  return g_dev->streams;
}

Stream* create_stream(unsigned flags, int priority) {
  std::lock_guard<std::mutex> lock(mu());
  return new_stream_locked(flags, priority, false, false);
}

Stream* resolve(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy) return g_dev->legacy;
  if (s == cudaStreamPerThread) {
    if (t_per_thread == nullptr) {
      std::lock_guard<std::mutex> lock(mu());
      // Not a non-blocking stream: it synchronizes with the legacy stream (CUDA's rule).
      t_per_thread = new_stream_locked(0, 0, false, true);
    }
    return t_per_thread;
  }
  Stream* st = static_cast<CUstream_st*>(s);
  std::lock_guard<std::mutex> lock(mu());
  return st->destroyed ? nullptr : st;
}

std::vector<ItemPtr> legacy_fence_locked() {
  std::vector<ItemPtr> deps;
  for (Stream* o : g_dev->streams) {
    if ((o->legacy || o->blocking()) && o->last && !o->last->done.load()) deps.push_back(o->last);
  }
  return deps;
}

ItemPtr push_locked(Stream* s, ItemPtr item) {
  item->queue = s->queue;
  item->stream_name = s->name;
  // The legacy stream waits for every blocking stream's prior work, and they for its.
  if (s->legacy) {
    for (ItemPtr& d : legacy_fence_locked())
      item->deps.push_back(std::move(d));
  } else if (s->blocking()) {
    const ItemPtr& l = g_dev->legacy->last;
    if (l && !l->done.load()) item->deps.push_back(l);
  }
  s->last = item;
  Queue* q = g_dev->queues[static_cast<size_t>(s->queue)];
  q->items.push_back(item);
  q->cv.notify_one();
  return item;
}

cudaError_t submit(cudaStream_t stream, const char* what, std::function<void()> work,
                   bool device_access, ItemPtr* out) {
  Stream* s = resolve(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  ItemPtr item;
  {
    std::lock_guard<std::mutex> lock(mu());
    const cudaError_t c = capture_conflict_locked(s, false);
    if (c != cudaSuccess) return ret(c);
    if (s->capture != nullptr) {
      capture_record_locked(s, what, std::move(work), device_access);
      return cudaSuccess;
    }
    item = std::make_shared<Item>();
    item->what = what;
    item->work = std::move(work);
    item->device_access = device_access;
    push_locked(s, item);
  }
  if (out != nullptr) *out = item;
  // CUDA_LAUNCH_BLOCKING: every asynchronous operation returns once it is done.
  if (g_dev->launch_blocking) wait_done(item);
  return cudaSuccess;
}

void wait_done(const ItemPtr& item) {
  if (!item) return;
  std::unique_lock<std::mutex> lock(mu());
  progress().wait(lock, [&] { return item->done.load(std::memory_order_acquire); });
}

void device_sync() {
  std::vector<ItemPtr> tails;
  {
    std::lock_guard<std::mutex> lock(mu());
    for (Queue* q : g_dev->queues) {
      if (!q->items.empty()) tails.push_back(q->items.back());
    }
  }
  for (const ItemPtr& t : tails)
    wait_done(t);
}

cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work) {
  const cudaError_t e = api_enter(what);
  if (e != cudaSuccess) return e;
  return submit(stream, what, std::move(work), true);
}

}  // namespace cudaemu

namespace cudaemu {

int stream_queue(cudaStream_t stream) {
  init();
  Stream* s = resolve(stream);
  return s == nullptr ? -1 : s->queue;
}

}  // namespace cudaemu
