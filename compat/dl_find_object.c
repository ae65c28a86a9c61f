/* -Dportable: _dl_find_object (glibc 2.35), which the unwinder of a libgcc built on glibc 2.35 or
 * newer calls to find a frame's unwind table, emulated with dl_iterate_phdr (glibc 2.2.5). Hidden
 * inside libsketchccl.so; a build host with an older glibc has nothing to replace. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#ifdef DLFO_STRUCT_HAS_EH_DBASE

struct sccl_find {
  uintptr_t pc;
  struct dl_find_object* result;
  int found;
};

/* Fills the result when the object holds pc: its mapped range and its PT_GNU_EH_FRAME. */
static int sccl_find_in(struct dl_phdr_info* info, size_t size, void* data) {
  struct sccl_find* find = data;
  uintptr_t low = UINTPTR_MAX, high = 0;
  const ElfW(Phdr)* eh_frame = NULL;
  int holds_pc = 0;
  (void)size;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_GNU_EH_FRAME) eh_frame = ph;
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t start = info->dlpi_addr + ph->p_vaddr, end = start + ph->p_memsz;
    if (find->pc >= start && find->pc < end) holds_pc = 1;
    if (start < low) low = start;
    if (end > high) high = end;
  }
  if (!holds_pc) return 0;
  memset(find->result, 0, sizeof(*find->result));
  find->result->dlfo_map_start = (void*)low;
  find->result->dlfo_map_end = (void*)high;
  find->result->dlfo_eh_frame = eh_frame ? (void*)(info->dlpi_addr + eh_frame->p_vaddr) : NULL;
  find->found = 1;
  return 1;
}

__attribute__((visibility("hidden"))) int _dl_find_object(void* pc, struct dl_find_object* result) {
  struct sccl_find find = {(uintptr_t)pc, result, 0};
  dl_iterate_phdr(sccl_find_in, &find);
  return find.found ? 0 : -1;
}

#else
typedef int sccl_no_dl_find_object; /* an empty file is not ISO C */
#endif
