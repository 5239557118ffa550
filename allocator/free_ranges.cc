#include "allocator/free_ranges.h"

namespace mrcache {

void FreeRanges::Insert(uintptr_t start, size_t length, const void* owner) {
  by_start_.emplace(start, Range{length, owner});
  by_size_.emplace(length, start);
  free_bytes_ += length;
}

void FreeRanges::Erase(std::map<uintptr_t, Range>::iterator it) {
  by_size_.erase({it->second.length, it->first});
  free_bytes_ -= it->second.length;
  by_start_.erase(it);
}

void FreeRanges::Add(uintptr_t start, size_t length, const void* owner) {
  auto next = by_start_.lower_bound(start);
  if (next != by_start_.end() && next->second.owner == owner && next->first == start + length) {
    length += next->second.length;
    auto after = std::next(next);
    Erase(next);
    next = after;
  }
  if (next != by_start_.begin()) {
    auto prev = std::prev(next);
    if (prev->second.owner == owner && prev->first + prev->second.length == start) {
      start = prev->first;
      length += prev->second.length;
      Erase(prev);
    }
  }
  Insert(start, length, owner);
}

FreeRanges::Taken FreeRanges::Take(size_t length, size_t alignment) {
  for (auto it = by_size_.lower_bound({length, 0}); it != by_size_.end(); ++it) {
    const uintptr_t start = it->second;
    const size_t range_length = it->first;
    const uintptr_t aligned = (start + alignment - 1) & ~(uintptr_t{alignment} - 1);
    if (aligned - start > range_length - length) continue;
    auto range = by_start_.find(start);
    const void* owner = range->second.owner;
    Erase(range);
    if (aligned > start) Insert(start, aligned - start, owner);
    const uintptr_t end = start + range_length;
    if (aligned + length < end) Insert(aligned + length, end - aligned - length, owner);
    return Taken{aligned, owner};
  }
  return Taken{};
}

bool FreeRanges::Remove(uintptr_t start, size_t length) {
  auto it = by_start_.find(start);
  if (it == by_start_.end() || it->second.length != length) return false;
  Erase(it);
  return true;
}

}  // namespace mrcache
