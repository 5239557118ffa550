#include "tests/softverbs/page_refs.h"

#include <iterator>

#include "tests/softverbs/registry.h"

namespace softverbs {
namespace {

struct Span {
  uintptr_t start, end;
};

// The page-rounded [start, end) that [addr, addr+len) touches.
Span Pages(uintptr_t addr, size_t len) {
  const uintptr_t page = PageSize();
  return {addr & ~(page - 1), (addr + len + page - 1) & ~(page - 1)};
}

}  // namespace

void PageRefs::SplitLocked(uintptr_t at) {
  auto it = runs_.upper_bound(at);
  if (it == runs_.begin()) return;
  --it;
  if (it->first < at && at < it->second.end) {
    runs_[at] = Run{it->second.end, it->second.count};
    it->second.end = at;
  }
}

void PageRefs::MergeLocked(uintptr_t start, uintptr_t end) {
  auto it = runs_.lower_bound(start);
  if (it != runs_.begin()) --it;
  while (it != runs_.end() && it->first <= end) {
    auto next = std::next(it);
    if (next != runs_.end() && next->first == it->second.end &&
        next->second.count == it->second.count) {
      it->second.end = next->second.end;
      runs_.erase(next);
    } else {
      it = next;
    }
  }
}

int PageRefs::Acquire(uintptr_t addr, size_t len) {
  if (len == 0) return 0;
  const Span s = Pages(addr, len);
  std::lock_guard<std::mutex> lock(mu_);
  // The gaps (count 0) inside the span are the runs that gain a first reference.
  std::vector<Span> gaps;
  uintptr_t cursor = s.start;
  auto it = runs_.upper_bound(s.start);
  if (it != runs_.begin() && std::prev(it)->second.end > s.start) --it;
  for (; it != runs_.end() && it->first < s.end; ++it) {
    if (it->first > cursor) gaps.push_back({cursor, it->first});
    cursor = it->second.end;
  }
  if (cursor < s.end) gaps.push_back({cursor, s.end});
  for (size_t i = 0; i < gaps.size(); ++i) {
    const int err = first_(gaps[i].start, gaps[i].end - gaps[i].start);
    if (err != 0) {
      for (size_t j = 0; j < i; ++j) last_(gaps[j].start, gaps[j].end - gaps[j].start);
      return err;
    }
  }
  SplitLocked(s.start);
  SplitLocked(s.end);
  for (auto r = runs_.lower_bound(s.start); r != runs_.end() && r->first < s.end; ++r) {
    ++r->second.count;
  }
  for (const Span& g : gaps) runs_[g.start] = Run{g.end, 1};
  MergeLocked(s.start, s.end);
  return 0;
}

int PageRefs::Release(uintptr_t addr, size_t len) {
  if (len == 0) return 0;
  const Span s = Pages(addr, len);
  std::lock_guard<std::mutex> lock(mu_);
  SplitLocked(s.start);
  SplitLocked(s.end);
  std::vector<Span> freed;  // maximal runs reaching 0, in address order
  for (auto r = runs_.lower_bound(s.start); r != runs_.end() && r->first < s.end;) {
    if (--r->second.count != 0) {
      ++r;
      continue;
    }
    if (!freed.empty() && freed.back().end == r->first) {
      freed.back().end = r->second.end;
    } else {
      freed.push_back({r->first, r->second.end});
    }
    r = runs_.erase(r);
  }
  MergeLocked(s.start, s.end);
  int result = 0;
  for (const Span& f : freed) {
    const int err = last_(f.start, f.end - f.start);
    if (result == 0) result = err;
  }
  return result;
}

}  // namespace softverbs
