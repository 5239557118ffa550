// patch_monitor.cc: which of glibc 2.36's entries the `patch` monitor
// patches, with which handler, and its installation (patch_monitor.h).
#include "mrcache/monitors/patch_monitor.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "mrcache/errno_status.h"
#include "mrcache/internal/log.h"
#include "mrcache/monitors/patch_handlers.h"

namespace mrcache {
namespace patch_monitor {
namespace {

struct Target {
  const char* name;
  uint8_t expected[8];  // glibc 2.36 x86-64
  void* handler;
  // Patched only where another tracker's jump is there to chain to; glibc's
  // own code is left alone (what it releases reaches another patched entry).
  bool only_over_another_tracker = false;
};

const Target kTargets[] = {
    {"munmap",
     {0xb8, 0x0b, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleMunmap)},
    {"madvise",
     {0xb8, 0x1c, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleMadvise)},
    {"shmdt",
     {0xb8, 0x43, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleShmdt)},
    {"brk", {0xb8, 0x0c, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48}, reinterpret_cast<void*>(&HandleBrk)},
    {"mmap",
     {0x41, 0x89, 0xca, 0x41, 0xf7, 0xc1, 0xff, 0x0f},
     reinterpret_cast<void*>(&HandleMmap)},
    {"mremap",
     {0x48, 0x83, 0xec, 0x58, 0x4c, 0x89, 0x44, 0x24},
     reinterpret_cast<void*>(&HandleMremap)},
    {"shmat",
     {0xb8, 0x1e, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleShmat)},
    {"ftruncate",
     {0xb8, 0x4d, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleFtruncate)},
    {"truncate",
     {0xb8, 0x4c, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleTruncate)},
    // cmpb $0, __libc_single_threaded(%rip): the 4-byte displacement is this
    // build's; another glibc 2.36 build is refused, never mispatched.
    {"fallocate",
     {0x80, 0x3d, 0x21, 0xe8, 0x0d, 0x00, 0x00, 0x49},
     reinterpret_cast<void*>(&HandleFallocate)},
    {"sbrk", {}, reinterpret_cast<void*>(&HandleSbrk), true},
    // mov _rtld_global_ro@GOTPCREL(%rip), %rdx: the displacement is this
    // build's (mrcache_patch_dlclose_original replays the instruction).
    {"dlclose",
     {0x48, 0x8b, 0x15, 0xc1, 0xe1, 0x14, 0x00, 0x48},
     reinterpret_cast<void*>(&HandleDlclose)},
    {"mprotect",
     {0xb8, 0x0a, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleMprotect)},
};
static_assert(sizeof(kTargets) / sizeof(kTargets[0]) == kNumTargets, "one site per target");

// glibc 2.36's syscall(): the whole function (0x00-0x32, ending in `ret`),
// then the first 5 bytes of the nop padding after it. Its first instruction
// (`mov %rdi, %rax`) is 3 bytes, too short for a 5-byte jump that would not
// tear the next one; so the entry gets a 2-byte `jmp rel8` to the padding at
// kSyscallHop, which nothing executes, and the padding gets the `jmp rel32`
// to the trampoline. A thread that has executed the first instruction sees
// unchanged code from offset 3 on. The displacement at 0x25 is this build's
// (errno's TLS offset); another build is refused, never mispatched.
constexpr int kSyscallHop = 0x33;
constexpr uint8_t kSyscallCode[kSyscallHop + 5] = {
    0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x48, 0x89, 0xca, 0x4d, 0x89,
    0xc2, 0x4d, 0x89, 0xc8, 0x4c, 0x8b, 0x4c, 0x24, 0x08, 0x0f, 0x05, 0x48, 0x3d, 0x01,
    0xf0, 0xff, 0xff, 0x73, 0x01, 0xc3, 0x48, 0x8b, 0x0d, 0xa7, 0x15, 0x0d, 0x00, 0xf7,
    0xd8, 0x64, 0x89, 0x01, 0x48, 0x83, 0xc8, 0xff, 0xc3, 0x66, 0x2e, 0x0f, 0x1f, 0x84};
static_assert(kSyscallHop % 8 + 5 <= 8, "the padding jump must fit in one aligned word");
PatchSite g_syscall_site;  // guarded by the installation in monitor.cc
// libc's entry of each target (also of those left unpatched), by
// TargetIndex: stored by Enable before reporting is turned on, read by the
// patched mprotect (RechainPatchedOver) while reporting is on.
void* g_entries[kNumTargets];

// Points mrcache_patch_dlclose_original at glibc's dlclose `entry` when the
// entry holds the code it replays (`expected`); otherwise ApplyPatch either
// refuses the entry or chains to the hook found there, and the replay is
// never used.
void PrepareDlcloseOriginal(void* entry, const uint8_t (&expected)[8]) {
  if (entry == nullptr || reinterpret_cast<uintptr_t>(entry) % 8 != 0) return;
  const uint64_t word = ReadCodeWord(entry);
  if (memcmp(&word, expected, 8) != 0) return;
  int32_t disp;
  memcpy(&disp, expected + 3, 4);
  uint8_t* next = static_cast<uint8_t*>(entry) + 7;
  mrcache_patch_dlclose_got = next + disp;
  mrcache_patch_dlclose_resume = next;
}

// Keeps this library loaded for the life of the process once it has patched
// libc: trampolines and handlers stay where the patched code jumps (a thread
// may still be on its way through one), and a later dlopen of the library
// reuses its trampoline slots instead of mapping new pages near libc.
void PinLibrary() {
  static bool pinned = false;  // under the installation lock of monitor.cc
  if (pinned) return;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&PinLibrary), &info) != 0 && info.dli_fname != nullptr &&
      info.dli_fname[0] != '\0') {
    // NOLOAD: never loads anything; NODELETE: the object is never unloaded.
    // The main executable is not found by name (nothing to pin there).
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  }
  pinned = true;
}

}  // namespace

absl::Status Enable() {
#if defined(__SANITIZE_THREAD__)
  // glibc calls madvise(MADV_DONTNEED) on a thread's stack after the thread
  // has finished (nptl advise_stack_range); through the patched entry that
  // runs instrumented code after ThreadSanitizer tore the thread's state down.
  return ErrnoStatus(ENOTSUP,
                     "patch monitor: not available under ThreadSanitizer (glibc "
                     "releases exiting threads' stacks after TSan's thread teardown)");
#endif
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (libc == nullptr) return ErrnoStatus(ENOTSUP, "patch monitor: libc.so.6 is not loaded");
  absl::Status status;
  int applied = 0;
  for (; applied < kNumTargets; ++applied) {
    const Target& t = kTargets[applied];
    void* entry = dlsym(libc, t.name);
    __atomic_store_n(&g_entries[applied], entry, __ATOMIC_RELEASE);
    if (t.only_over_another_tracker && !HoldsAnotherTrackersJump(entry)) continue;
    if (applied == kDlclose) PrepareDlcloseOriginal(entry, t.expected);
    status = ApplyPatch(t.name, entry, t.expected, t.handler, &g_sites[applied]);
    if (!status.ok()) break;
  }
  if (status.ok()) {
    void* entry = dlsym(libc, "syscall");
    mrcache_patch_syscall_resume = entry == nullptr ? nullptr : static_cast<uint8_t*>(entry) + 3;
    status = ApplyHopPatch("syscall", entry, kSyscallCode, kSyscallHop,
                           reinterpret_cast<void*>(&mrcache_patch_syscall_entry), &g_syscall_site);
  }
  dlclose(libc);
  if (!status.ok()) {
    while (applied-- > 0) RemovePatch(&g_sites[applied]).IgnoreError();
    return status;
  }
  PinLibrary();
  SetReporting(true);
  return absl::OkStatus();
}

void Disable() {
  SetReporting(false);
  auto remove = [](PatchSite* site) {
    absl::Status s = RemovePatch(site);
    if (!s.ok()) Log(LogLevel::kError, s.message());
  };
  remove(&g_syscall_site);
  for (PatchSite& site : g_sites) remove(&site);
}

bool Enabled() { return Reporting(); }

void RechainPatchedOver(const void* start, size_t length) noexcept {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(start);
  for (int i = 0; i < kNumTargets; ++i) {
    void* entry = __atomic_load_n(&g_entries[i], __ATOMIC_ACQUIRE);
    const uintptr_t at = reinterpret_cast<uintptr_t>(entry);
    if (entry == nullptr || at < begin || at - begin >= length) continue;
    if (!Reporting() || !HoldsAnotherTrackersJump(entry)) continue;
    const Target& t = kTargets[i];
    absl::Status s = Rechain(t.name, entry, t.handler, &g_sites[i], &Reporting);
    if (s.ok()) {
      Log(LogLevel::kInfo, std::string("patch monitor: ") + t.name +
                               " was patched over by another tracker; chained to its hook");
    } else {
      Log(LogLevel::kError, s.message());
    }
  }
}

}  // namespace patch_monitor
}  // namespace mrcache
