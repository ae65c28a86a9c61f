/* -Dportable: binds the glibc symbols that SketchCCL and the static libstdc++ use, and that newer
 * glibc releases gave a new version, to the versions glibc 2.17 already had. Each is a hidden
 * definition inside libsketchccl.so (never exported), so every reference in the library, the
 * libstdc++ members linked in included, resolves here instead of to the build host's newest
 * version. No glibc header declares these names here, so the hidden definitions cannot clash.
 * Only what works the same on old and new glibc is bound; the rest is emulated (see each one). */
#include <stddef.h>
#include <sys/syscall.h>

#if defined(__x86_64__)
#define SCCL_GLIBC_BASE "GLIBC_2.2.5"
#define SCCL_GLIBC_DLINFO "GLIBC_2.3.3"
#define SCCL_GLIBC_DLMOPEN "GLIBC_2.3.4"
#define SCCL_STAT_VER 1
#elif defined(__aarch64__)
#define SCCL_GLIBC_BASE "GLIBC_2.17"
#define SCCL_GLIBC_DLINFO "GLIBC_2.17"
#define SCCL_GLIBC_DLMOPEN "GLIBC_2.17"
#define SCCL_STAT_VER 0
#else
#error "-Dportable supports x86_64 and aarch64"
#endif

#define SCCL_HIDDEN __attribute__((visibility("hidden")))

/* Declares sccl_old_NAME as NAME@VERSION of glibc and defines a hidden NAME that calls it. */
#define SCCL_BIND(ret, name, params, args, version)         \
  ret sccl_old_##name params;                               \
  __asm__(".symver sccl_old_" #name "," #name "@" version); \
  SCCL_HIDDEN ret name params;                              \
  ret name params {                                         \
    return sccl_old_##name args;                            \
  }

/* Moved from libdl to libc in 2.34 (libdl.so.2 is linked, and holds them before 2.34). */
SCCL_BIND(void*, dlopen, (const char* file, int mode), (file, mode), SCCL_GLIBC_BASE)
SCCL_BIND(void*, dlsym, (void* handle, const char* name), (handle, name), SCCL_GLIBC_BASE)
SCCL_BIND(int, dlclose, (void* handle), (handle), SCCL_GLIBC_BASE)
SCCL_BIND(char*, dlerror, (void), (), SCCL_GLIBC_BASE)
SCCL_BIND(int, dlinfo, (void* handle, int request, void* arg), (handle, request, arg),
          SCCL_GLIBC_DLINFO)
SCCL_BIND(int, dladdr, (const void* address, void* info), (address, info), SCCL_GLIBC_BASE)
SCCL_BIND(void*, dlmopen, (long namespace_id, const char* file, int mode),
          (namespace_id, file, mode), SCCL_GLIBC_DLMOPEN)
SCCL_BIND(void*, dlvsym, (void* handle, const char* name, const char* version),
          (handle, name, version), SCCL_GLIBC_BASE)

/* Moved from libpthread to libc in 2.34 (libpthread.so.0 is linked, and holds them before). */
SCCL_BIND(int, pthread_create, (void* thread, const void* attr, void* (*start)(void*), void* arg),
          (thread, attr, start, arg), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_join, (unsigned long thread, void** result), (thread, result),
          SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_detach, (unsigned long thread), (thread), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_once, (int* once, void (*init)(void)), (once, init), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_key_create, (unsigned* key, void (*destructor)(void*)), (key, destructor),
          SCCL_GLIBC_BASE)
SCCL_BIND(int, __pthread_key_create, (unsigned* key, void (*destructor)(void*)), (key, destructor),
          SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_key_delete, (unsigned key), (key), SCCL_GLIBC_BASE)
SCCL_BIND(void*, pthread_getspecific, (unsigned key), (key), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_setspecific, (unsigned key, const void* value), (key, value),
          SCCL_GLIBC_BASE)

/* The rest of what moved in 2.34 that the static CUDA runtime (-Dcuda) uses; shm_* from librt. */
SCCL_BIND(int, pthread_kill, (unsigned long thread, int signal), (thread, signal), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_condattr_setpshared, (void* attr, int shared), (attr, shared),
          SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_mutex_trylock, (void* mutex), (mutex), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_mutexattr_init, (void* attr), (attr), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_mutexattr_destroy, (void* attr), (attr), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_mutexattr_setpshared, (void* attr, int shared), (attr, shared),
          SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_mutexattr_settype, (void* attr, int type), (attr, type), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_rwlock_init, (void* lock, const void* attr), (lock, attr), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_rwlock_destroy, (void* lock), (lock), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_rwlock_rdlock, (void* lock), (lock), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_rwlock_wrlock, (void* lock), (lock), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_rwlock_tryrdlock, (void* lock), (lock), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_rwlock_trywrlock, (void* lock), (lock), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_rwlock_timedrdlock, (void* lock, const void* deadline), (lock, deadline),
          SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_rwlock_timedwrlock, (void* lock, const void* deadline), (lock, deadline),
          SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_rwlock_unlock, (void* lock), (lock), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_rwlockattr_init, (void* attr), (attr), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_rwlockattr_destroy, (void* attr), (attr), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_rwlockattr_setpshared, (void* attr, int shared), (attr, shared),
          SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_spin_init, (void* lock, int shared), (lock, shared), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_spin_destroy, (void* lock), (lock), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_spin_lock, (void* lock), (lock), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_spin_trylock, (void* lock), (lock), SCCL_GLIBC_BASE)
SCCL_BIND(int, pthread_spin_unlock, (void* lock), (lock), SCCL_GLIBC_BASE)
SCCL_BIND(int, sem_init, (void* sem, int shared, unsigned value), (sem, shared, value),
          SCCL_GLIBC_BASE)
SCCL_BIND(int, sem_destroy, (void* sem), (sem), SCCL_GLIBC_BASE)
SCCL_BIND(int, sem_post, (void* sem), (sem), SCCL_GLIBC_BASE)
SCCL_BIND(int, sem_wait, (void* sem), (sem), SCCL_GLIBC_BASE)
SCCL_BIND(int, sem_trywait, (void* sem), (sem), SCCL_GLIBC_BASE)
SCCL_BIND(int, sem_timedwait, (void* sem, const void* deadline), (sem, deadline), SCCL_GLIBC_BASE)
SCCL_BIND(int, shm_open, (const char* name, int flags, unsigned mode), (name, flags, mode),
          SCCL_GLIBC_BASE)
SCCL_BIND(int, shm_unlink, (const char* name), (name), SCCL_GLIBC_BASE)

/* fstat64 (2.33) was the inline __fxstat64(_STAT_VER, ...) before. */
int sccl_old_fxstat64(int version, int fd, void* buf);
__asm__(".symver sccl_old_fxstat64,__fxstat64@" SCCL_GLIBC_BASE);
SCCL_HIDDEN int fstat64(int fd, void* buf);
int fstat64(int fd, void* buf) {
  return sccl_old_fxstat64(SCCL_STAT_VER, fd, buf);
}

/* glob64 got a new version in 2.27 for GLOB_ALTDIRFUNC's callbacks, which nothing here uses. */
SCCL_BIND(int, glob64,
          (const char* pattern, int flags, int (*errfunc)(const char*, int), void* pglob),
          (pattern, flags, errfunc, pglob), SCCL_GLIBC_BASE)

/* pow got a new version in 2.29 (no SVID error handling); the old one gives the same values. */
SCCL_BIND(double, pow, (double x, double y), (x, y), SCCL_GLIBC_BASE)

/* fcntl64 (2.28) is fcntl on 64-bit targets; every command's argument fits a pointer. */
int sccl_old_fcntl(int fd, int cmd, ...);
__asm__(".symver sccl_old_fcntl,fcntl@" SCCL_GLIBC_BASE);
SCCL_HIDDEN int fcntl64(int fd, int cmd, ...);
int fcntl64(int fd, int cmd, ...) {
  __builtin_va_list ap;
  __builtin_va_start(ap, cmd);
  void* arg = __builtin_va_arg(ap, void*);
  __builtin_va_end(ap);
  return sccl_old_fcntl(fd, cmd, arg);
}

/* getrandom (2.25): the system call itself (Linux 3.17); libstdc++ falls back when it fails. */
long syscall(long number, ...);
SCCL_HIDDEN long getrandom(void* buffer, size_t length, unsigned int flags);
long getrandom(void* buffer, size_t length, unsigned int flags) {
  return syscall(SYS_getrandom, buffer, length, flags);
}

/* getentropy (2.25) and arc4random (2.36), which std::random_device may use: the same system
 * call; arc4random cannot fail, so it aborts as glibc's does when there is no entropy at all. */
int* __errno_location(void);
void abort(void);
SCCL_HIDDEN int getentropy(void* buffer, size_t length);
int getentropy(void* buffer, size_t length) {
  enum { kEintr = 4, kEio = 5 };
  if (length > 256) {
    *__errno_location() = kEio;
    return -1;
  }
  char* at = buffer;
  while (length > 0) {
    long got = syscall(SYS_getrandom, at, length, 0);
    if (got < 0) {
      if (*__errno_location() == kEintr) continue;
      return -1;
    }
    at += got;
    length -= (size_t)got;
  }
  return 0;
}
SCCL_HIDDEN unsigned arc4random(void);
unsigned arc4random(void) {
  unsigned value;
  if (getentropy(&value, sizeof value) != 0) abort();
  return value;
}

/* __libc_single_threaded (2.32): 0 means "maybe threaded", so libstdc++ always uses atomics. */
SCCL_HIDDEN char __libc_single_threaded;
char __libc_single_threaded = 0;

/* pthread_cond_clockwait (2.30): a wait on another clock's deadline becomes a wait on the same
 * point in CLOCK_REALTIME (the condition's clock). Callers re-check their clock and predicate, so
 * a wake-up early after a clock step only costs a loop; a wait ends at most one step late. */
struct sccl_timespec {
  long tv_sec;
  long tv_nsec;
};
int clock_gettime(int clock, struct sccl_timespec* now);
int pthread_cond_timedwait(void* cond, void* mutex, const struct sccl_timespec* deadline);
SCCL_HIDDEN int pthread_cond_clockwait(void* cond, void* mutex, int clock,
                                       const struct sccl_timespec* deadline);
int pthread_cond_clockwait(void* cond, void* mutex, int clock,
                           const struct sccl_timespec* deadline) {
  enum { kRealtime = 0 };
  if (clock == kRealtime) return pthread_cond_timedwait(cond, mutex, deadline);
  struct sccl_timespec now_clock, now_real;
  clock_gettime(clock, &now_clock);
  clock_gettime(kRealtime, &now_real);
  long nsec = now_real.tv_nsec + (deadline->tv_nsec - now_clock.tv_nsec);
  struct sccl_timespec real = {now_real.tv_sec + (deadline->tv_sec - now_clock.tv_sec), nsec};
  while (real.tv_nsec < 0) {
    real.tv_nsec += 1000000000L;
    --real.tv_sec;
  }
  while (real.tv_nsec >= 1000000000L) {
    real.tv_nsec -= 1000000000L;
    ++real.tv_sec;
  }
  return pthread_cond_timedwait(cond, mutex, &real);
}
