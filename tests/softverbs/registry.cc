// registry.cc: the registry singleton, the counters API and the exit report.
//
// At exit, if SOFTVERBS_COUNTERS_FILE names a file, the counters are written
// to it as one `key=value` line per field of struct softverbs_counters (same
// names, decimal values), replacing the file.
#include "tests/softverbs/registry.h"

#include "tests/softverbs/fork_protection.h"
#include "tests/softverbs/read_only_pins.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace softverbs {

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

void Registry::ForgetMrLocked(Mr* mr) {
  DetachMrLocked(mr);
  if (!mr->slots.empty()) mr->pd->ctx->pins.Unpin(mr->slots);
  if (mr->read_only_pin) UnpinReadOnly(mr->mr.addr, mr->mr.length);
  ReleaseMrLocked(mr);
}

void Registry::DetachMrLocked(Mr* mr) {
  keys[mr->pd->ctx->device].by_key.erase(mr->mr.lkey);
  mrs.erase(&mr->mr);
}

void Registry::ReleaseMrLocked(Mr* mr) {
  counters.bytes_pinned -= mr->pinned_bytes;
  --counters.live_mrs;
  --mr->pd->mrs;
  --mr->pd->ctx->mrs;
  delete mr;
}

uint32_t Registry::NewKeyLocked(unsigned device) {
  DeviceKeys& k = keys[device];
  const uint32_t key = (k.next << 8) | device;
  k.next = (k.next + 1) & 0xffffff;
  if (k.next == 0) k.next = 1;
  return key;
}

Mr* Registry::MrByKeyLocked(unsigned device, uint32_t key) {
  if (device >= kMaxDevices) return nullptr;
  auto it = keys[device].by_key.find(key);
  return it == keys[device].by_key.end() ? nullptr : it->second;
}

Mr* Registry::MrByKeyLocked(uint32_t key) { return MrByKeyLocked(key & 0xff, key); }

OdpLevel OdpLevelFromEnvironment() {
  const char* v = getenv("SOFTVERBS_ODP");
  if (v == nullptr || *v == '\0' || strcmp(v, "none") == 0) return OdpLevel::kNone;
  if (strcmp(v, "explicit") == 0) return OdpLevel::kExplicit;
  if (strcmp(v, "implicit") == 0) return OdpLevel::kImplicit;
  fprintf(stderr, "softverbs: SOFTVERBS_ODP=%s is not none|explicit|implicit; using none\n", v);
  return OdpLevel::kNone;
}

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

namespace {

void WriteCountersFile() {
  const char* path = getenv("SOFTVERBS_COUNTERS_FILE");
  if (path == nullptr || *path == '\0') return;
  softverbs_counters c;
  softverbs_get_counters(&c);
  FILE* f = fopen(path, "w");
  if (f == nullptr) {
    fprintf(stderr, "softverbs: cannot write SOFTVERBS_COUNTERS_FILE=%s\n", path);
    return;
  }
#define SOFTVERBS_PRINT(field) fprintf(f, #field "=%llu\n", (unsigned long long)c.field)
  SOFTVERBS_PRINT(registrations);
  SOFTVERBS_PRINT(failed_registrations);
  SOFTVERBS_PRINT(deregistrations);
  SOFTVERBS_PRINT(rereg_calls);
  SOFTVERBS_PRINT(mrs_released_by_close);
  SOFTVERBS_PRINT(live_mrs);
  SOFTVERBS_PRINT(live_pds);
  SOFTVERBS_PRINT(bytes_pinned);
  SOFTVERBS_PRINT(peak_bytes_pinned);
  SOFTVERBS_PRINT(odp_registrations);
  SOFTVERBS_PRINT(advise_calls);
  SOFTVERBS_PRINT(device_writes);
  SOFTVERBS_PRINT(remote_accesses);
  SOFTVERBS_PRINT(remote_access_errors);
  SOFTVERBS_PRINT(live_cqs);
  SOFTVERBS_PRINT(live_qps);
  SOFTVERBS_PRINT(packets_sent);
#undef SOFTVERBS_PRINT
  fclose(f);
}

// fork() in a multi-threaded process: another thread may hold a softverbs
// lock at that instant, and the child would inherit it locked forever. Every
// lock is taken before the fork (the fork-protection ranges' first, which
// nests with none; then in the order the code nests them: mu, the port's,
// each context's pin table, the read-only pins' page counts) and released in
// both processes.
void PrepareFork() {
  Registry& r = registry();
  LockForkProtectionForFork();  // never nested with the others
  r.mu.lock();
  r.port_mu.lock();
  for (auto& [c, ctx] : r.contexts) ctx->pins.LockForFork();
  LockReadOnlyPinsForFork();
}

void AfterFork() {
  Registry& r = registry();
  UnlockReadOnlyPinsAfterFork();
  for (auto& [c, ctx] : r.contexts) ctx->pins.UnlockAfterFork();
  r.port_mu.unlock();
  r.mu.unlock();
  UnlockForkProtectionAfterFork();
}

__attribute__((constructor)) void InstallForkHandlers() {
  pthread_atfork(PrepareFork, AfterFork, AfterFork);
}

// A destructor of the shared object runs at exit() after the program's own
// atexit handlers, so it sees the final counts.
__attribute__((destructor)) void ReportAtExit() { WriteCountersFile(); }

}  // namespace
}  // namespace softverbs

extern "C" void softverbs_get_counters(softverbs_counters* out) {
  if (out == nullptr) return;
  softverbs::Registry& r = softverbs::registry();
  std::lock_guard<std::mutex> lock(r.mu);
  *out = r.counters;
}
