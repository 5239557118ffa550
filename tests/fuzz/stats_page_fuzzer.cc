// stats_page_fuzzer.cc: libFuzzer target over the live statistics page
// reader (mrcache/stats_page.h), which must refuse any page it cannot trust
// with an error and never read outside what it was given. Each input is
// parsed as it is, laid over a valid page (so that mutations reach the
// slots, not only the size check), and laid over it again with the header
// kept valid (so that they reach the slots, rails included, whatever the
// input's header says).
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "mrcache/stats_page.h"

namespace {

constexpr pid_t kPid = 4242;

// A valid header for this process and user.
mrcache::StatsPageHeader ValidHeader() {
  mrcache::StatsPageHeader h{};
  std::memcpy(h.magic, mrcache::kStatsPageMagic, sizeof h.magic);
  h.version = mrcache::kStatsPageVersion;
  h.header_bytes = sizeof(mrcache::StatsPageHeader);
  h.slot_bytes = sizeof(mrcache::StatsSlot);
  h.slot_count = mrcache::kStatsSlots;
  h.pid = kPid;
  h.uid = getuid();
  return h;
}

std::string ValidPage() {
  std::string page(mrcache::kStatsPageBytes, '\0');
  const mrcache::StatsPageHeader h = ValidHeader();
  std::memcpy(&page[0], &h, sizeof h);
  return page;
}

void Check(const absl::StatusOr<mrcache::ProcessSnapshot>& s) {
  if (!s.ok()) return;
  // A page that parses holds only what the reader promises.
  for (const mrcache::CacheSnapshot& c : s->caches) {
    if (c.registrar.size() >= sizeof(mrcache::StatsSlot::registrar)) __builtin_trap();
    if (c.rails.size() > mrcache::kStatsRails) __builtin_trap();
    // A rails cache is named by its rails' names joined, any other by its slot.
    std::string joined;
    for (size_t i = 0; i < c.rails.size(); ++i) {
      if (c.rails[i].name.size() >= sizeof(mrcache::StatsRail::name)) __builtin_trap();
      joined += (i ? "+" : "") + c.rails[i].name;
    }
    if (c.rails.empty() ? c.rail.size() >= sizeof(mrcache::StatsSlot::rail) : c.rail != joined)
      __builtin_trap();
  }
  if (s->caches.size() > mrcache::kStatsSlots) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uid_t uid = getuid();
  const std::string raw(reinterpret_cast<const char*>(data), size);
  Check(mrcache::ParseStatsPage(raw, kPid, uid));
  std::string page = ValidPage();
  std::memcpy(&page[0], data, size < page.size() ? size : page.size());
  Check(mrcache::ParseStatsPage(page, kPid, uid));
  const mrcache::StatsPageHeader h = ValidHeader();
  std::memcpy(&page[0], &h, sizeof h);
  Check(mrcache::ParseStatsPage(page, kPid, uid));
  return 0;
}
