#include "bench/belady.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "bench/none_driver.h"
#include "bench/private_remote_keys.h"

namespace mrbench {
namespace {

constexpr size_t kNever = std::numeric_limits<size_t>::max();

// A region's identity, ordered by start so overlap queries can stop early.
using Key = std::tuple<uintptr_t, uintptr_t, int>;  // start, end, access

// Erases from `m` every key overlapping [start, end); calls `on_erase` on each.
template <typename Map, typename F>
void EraseOverlapping(Map& m, uintptr_t start, uintptr_t end, F&& on_erase) {
  for (auto it = m.begin(); it != m.end() && std::get<0>(it->first) < end;) {
    if (std::get<1>(it->first) > start) {
      on_erase(*it);
      it = m.erase(it);
    } else {
      ++it;
    }
  }
}

bool Contains(const Key& outer, const CacheEvent& e) {
  return std::get<2>(outer) == e.access && std::get<0>(outer) <= e.start &&
         e.end <= std::get<1>(outer);
}

// The index of the first access after `from` that `key` contains, or kNever
// if none comes before a release overlapping it.
size_t NextUse(const std::vector<CacheEvent>& events, size_t from, const Key& key) {
  for (size_t i = from + 1; i < events.size(); ++i) {
    const CacheEvent& e = events[i];
    if (e.kind == CacheEvent::kRelease) {
      if (e.start < std::get<1>(key) && std::get<0>(key) < e.end) return kNever;
    } else if (!e.private_registration && Contains(key, e)) {
      return i;
    }
  }
  return kNever;
}

}  // namespace

OptimalResult OptimalHits(const std::vector<CacheEvent>& events, size_t max_regions,
                          size_t max_bytes) {
  OptimalResult r;
  std::map<Key, size_t> cached;              // key -> next use
  std::set<std::pair<size_t, Key>> by_next;  // (next use, key), furthest last
  uint64_t pinned = 0;
  auto drop = [&](const std::pair<const Key, size_t>& item) {
    by_next.erase({item.second, item.first});
    pinned -= std::get<1>(item.first) - std::get<0>(item.first);
  };
  for (size_t i = 0; i < events.size(); ++i) {
    const CacheEvent& e = events[i];
    if (e.kind == CacheEvent::kRelease) {
      EraseOverlapping(cached, e.start, e.end, drop);
      continue;
    }
    ++r.accesses;
    if (e.private_registration) {
      // Its own registration for the time of the transfer, never cached.
      const uint64_t size = e.end - e.start;
      ++r.registrations;
      r.registered_bytes += size;
      r.peak_pinned_bytes = std::max(r.peak_pinned_bytes, pinned + size);
      continue;
    }
    // Every cached region containing this transfer has it as its next use.
    bool hit = false;
    while (!by_next.empty() && by_next.begin()->first == i) {
      const Key key = by_next.begin()->second;
      by_next.erase(by_next.begin());
      const size_t next = NextUse(events, i, key);
      cached[key] = next;
      by_next.insert({next, key});
      hit = true;
    }
    if (hit) {
      ++r.hits;
      continue;
    }
    const Key key{e.start, e.end, e.access};
    const uint64_t size = e.end - e.start;
    ++r.registrations;
    r.registered_bytes += size;
    const size_t next = NextUse(events, i, key);
    if (max_bytes != 0 && size <= max_bytes) {
      // Registering it at all must fit the byte capacity, as it must for a
      // real cache: the regions needed furthest in the future go first.
      while (pinned + size > max_bytes) {
        auto victim = cached.find(std::prev(by_next.end())->second);
        drop(*victim);
        cached.erase(victim);
      }
    }
    r.peak_pinned_bytes = std::max(r.peak_pinned_bytes, pinned + size);  // registered while in use
    if (next == kNever) continue;                                        // not worth keeping
    if (max_bytes != 0 && size > max_bytes) continue;                    // can never be kept
    if (max_regions != 0 && cached.size() >= max_regions) {
      auto furthest = std::prev(by_next.end());
      if (furthest->first <= next) continue;  // everything cached is needed sooner
      auto victim = cached.find(furthest->second);
      drop(*victim);
      cached.erase(victim);
    }
    cached.emplace(key, next);
    by_next.insert({next, key});
    pinned += size;
  }
  return r;
}

std::vector<CacheEvent> TraceEvents(const Trace& trace) {
  std::vector<CacheEvent> events;
  events.reserve(trace.ops.size());
  absl::flat_hash_map<uint32_t, std::pair<char*, uint64_t>> buffers;
  const bool private_remote = RecordedWithPrivateRemoteKeys(trace);
  for (const TraceOp& op : trace.ops) {
    CacheEvent e;
    switch (op.kind) {
      case TraceOp::kAlloc:
        buffers[op.id] = {static_cast<char*>(std::malloc(op.length)), op.length};
        continue;
      case TraceOp::kFree: {
        auto& buffer = buffers[op.id];
        e.kind = CacheEvent::kRelease;
        e.start = reinterpret_cast<uintptr_t>(buffer.first);
        e.end = e.start + buffer.second;
        std::free(buffer.first);
        buffers.erase(op.id);
        break;
      }
      case TraceOp::kXfer:
        PageAlign(buffers[op.id].first + op.offset, op.length, &e.start, &e.end);
        e.access = op.access;
        break;
      case TraceOp::kReg:  // recorded: the recorded addresses are the layout
        PageAlign(reinterpret_cast<void*>(static_cast<uintptr_t>(op.offset)), op.length, &e.start,
                  &e.end);
        e.access = op.access;
        e.private_registration = private_remote && TakesPrivateRegistration(op.access);
        break;
      case TraceOp::kDereg:  // the model holds nothing between accesses
        continue;
      case TraceOp::kRelease:
        e.kind = CacheEvent::kRelease;
        e.start = static_cast<uintptr_t>(op.offset);
        e.end = e.start + op.length;
        break;
    }
    events.push_back(e);
  }
  for (auto& entry : buffers) std::free(entry.second.first);
  return events;
}

}  // namespace mrbench
