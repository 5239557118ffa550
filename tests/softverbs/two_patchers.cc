// two_patchers: UCX's memory hooks (UCM) and mrcache's `patch` monitor in
// one process, over softverbs. UCX registers a buffer (ucp_mem_map, which
// reaches ibv_reg_mr and so the shim's cache), releases it, and the buffer
// is unmapped and mapped again at the same address; UCX registers the new
// mapping. UCX's own cache drops its registration of the old pages lazily
// (at its next lookup, here the second ucp_mem_map), so the checks come
// after that: the new mapping got a device registration of its own (no
// cache served the old pages' MR), and no device MR of the old pages is
// left (softverbs' live MRs and pinned bytes are what one mapping takes).
// Run under mrcache-run --monitor patch --remote-keys shared (so the shim
// caches UCX's registrations); prints "ok" and exits 0, or names the failed
// check and exits 1.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include "tests/softverbs/softverbs_client.h"

namespace {

constexpr size_t kBytes = 1 << 20;

bool Check(bool ok, const char* what) {
  if (!ok) fprintf(stderr, "FAIL: %s\n", what);
  return ok;
}

void Show(const char* when, const softverbs_counters& c) {
  printf("%-34s live MRs %llu, pinned %llu bytes, registrations %llu, deregistrations %llu\n", when,
         static_cast<unsigned long long>(c.live_mrs),
         static_cast<unsigned long long>(c.bytes_pinned),
         static_cast<unsigned long long>(c.registrations),
         static_cast<unsigned long long>(c.deregistrations));
}

ucp_mem_h Map(ucp_context_h context, void* address) {
  ucp_mem_map_params_t params;
  memset(&params, 0, sizeof params);
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = address;
  params.length = kBytes;
  ucp_mem_h memh = nullptr;
  ucs_status_t status = ucp_mem_map(context, &params, &memh);
  if (status != UCS_OK) {
    fprintf(stderr, "ucp_mem_map: %s\n", ucs_status_string(status));
    return nullptr;
  }
  return memh;
}

}  // namespace

int main() {
  // UCX loads libibverbs privately (dlopen of its transports): load it
  // globally first, so softverbs' test entry points can be looked up.
  if (!Check(dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL) != nullptr, dlerror())) return 1;
  softverbs::Client client;
  if (!Check(client.loaded(), "libibverbs.so.1 is not softverbs")) return 1;
  ucp_config_t* config = nullptr;
  if (!Check(ucp_config_read(nullptr, nullptr, &config) == UCS_OK, "ucp_config_read")) return 1;
  ucp_params_t params;
  memset(&params, 0, sizeof params);
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA;
  ucp_context_h context = nullptr;
  ucs_status_t status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (!Check(status == UCS_OK, "ucp_init")) return 1;

  bool ok = true;
  const softverbs_counters before = client.Counters();
  Show("before:", before);
  void* buf = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (!Check(buf != MAP_FAILED, "mmap")) return 1;
  memset(buf, 0x11, kBytes);
  ucp_mem_h memh = Map(context, buf);
  if (!Check(memh != nullptr, "ucp_mem_map of the first mapping")) return 1;
  const softverbs_counters mapped = client.Counters();
  Show("registered by UCX:", mapped);
  ok &= Check(mapped.bytes_pinned >= before.bytes_pinned + kBytes,
              "UCX's registration did not pin the buffer");
  ucp_mem_unmap(context, memh);

  // The old pages go back to the kernel: both patchers' munmap hooks run.
  ok &= Check(munmap(buf, kBytes) == 0, "munmap");
  const softverbs_counters unmapped = client.Counters();
  Show("after munmap:", unmapped);

  // New pages at the same address: registering them pins them afresh.
  void* again =
      mmap(buf, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (!Check(again == buf, "mmap at the old address")) return 1;
  memset(again, 0x22, kBytes);
  memh = Map(context, again);
  if (!Check(memh != nullptr, "ucp_mem_map of the new mapping")) return 1;
  softverbs_counters remapped = client.Counters();
  Show("new mapping registered by UCX:", remapped);
  ok &= Check(remapped.registrations > unmapped.registrations,
              "the new mapping was served without a device registration (a stale MR)");
  // The cache may hand the old pages' deregistration to its background
  // thread (async_dereg, README): it is due at once, but may finish after
  // this get returned. Waits for it for 10 s at most.
  for (int i = 0; i < 1000 && (remapped.bytes_pinned != mapped.bytes_pinned ||
                               remapped.live_mrs != mapped.live_mrs);
       ++i) {
    usleep(10000);
    remapped = client.Counters();
  }
  Show("old pages deregistered:", remapped);
  ok &= Check(remapped.bytes_pinned == mapped.bytes_pinned,
              "the old pages are still pinned beside the new mapping's");
  ok &= Check(remapped.live_mrs == mapped.live_mrs,
              "a device MR of the old pages is still registered");
  ucp_mem_unmap(context, memh);
  ok &= Check(munmap(again, kBytes) == 0, "munmap of the new mapping");
  ucp_cleanup(context);
  if (ok) printf("ok\n");
  return ok ? 0 : 1;
}
