#include "bench/recorded_layout.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mrcache/errno_status.h"

namespace mrbench {
namespace {

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

uint64_t RoundUpPow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v && p != 0) p <<= 1;
  return p;
}

}  // namespace

absl::StatusOr<RecordedLayout> RecordedLayout::Map(const Trace& trace) {
  RecordedLayout layout;
  const mrcache::Config& config = trace.recorded_config;
  layout.block_ =
      std::max({kMinBlock, RoundUpPow2(config.bridge_bytes), RoundUpPow2(config.alignment)});
  const uint64_t block = layout.block_;
  layout.modulus_ = std::max(kMinModulus, block);
  const uint64_t modulus = layout.modulus_;
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // block-aligned [lo, hi) of every registration
  for (const TraceOp& op : trace.ops) {
    if (op.kind != TraceOp::kReg) continue;
    const uint64_t lo = op.offset & ~(block - 1);
    const uint64_t end = op.offset + op.length;
    const uint64_t hi = end > UINT64_MAX - block ? 0 : (end + block - 1) & ~(block - 1);
    if (hi == 0)
      return mrcache::ErrnoStatus(
          EINVAL, absl::StrCat(trace.name, ": registration at the top of the address space"));
    spans.emplace_back(lo, hi);
  }
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (const auto& span : spans) {
    if (!merged.empty() && span.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, span.second);
    } else {
      merged.push_back(span);
    }
  }
  for (const auto& span : merged) {
    const size_t length = span.second - span.first;
    // Guards: at least a page below (base is the first address congruent
    // to span.first from map + page on), at least `block` above.
    const size_t map_length = PageSize() + modulus + length + block;
    void* map =
        mmap(nullptr, map_length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) {
      return mrcache::ErrnoStatus(
          errno, absl::StrCat("cannot reserve ", length, " bytes to replay ", trace.name));
    }
    layout.clusters_.push_back({span.first, span.second, nullptr, map, map_length});
    const uintptr_t lowest = reinterpret_cast<uintptr_t>(map) + PageSize();
    const uintptr_t base = lowest + ((span.first - lowest) & (modulus - 1));
    if (mprotect(reinterpret_cast<void*>(base), length, PROT_READ | PROT_WRITE) != 0) {
      return mrcache::ErrnoStatus(
          errno, absl::StrCat("cannot map ", length, " bytes to replay ", trace.name));
    }
    layout.clusters_.back().base = reinterpret_cast<char*>(base);
  }
  return layout;
}

RecordedLayout::RecordedLayout(RecordedLayout&& other) noexcept
    : block_(other.block_), modulus_(other.modulus_), clusters_(std::move(other.clusters_)) {
  other.clusters_.clear();
}

RecordedLayout::~RecordedLayout() {
  for (const Cluster& c : clusters_) munmap(c.map, c.map_length);
}

const RecordedLayout::Cluster* RecordedLayout::Find(uint64_t recorded) const {
  auto it = std::upper_bound(clusters_.begin(), clusters_.end(), recorded,
                             [](uint64_t a, const Cluster& c) { return a < c.lo; });
  if (it == clusters_.begin()) return nullptr;
  --it;
  return recorded < it->hi ? &*it : nullptr;
}

char* RecordedLayout::Translate(uint64_t recorded) const {
  const Cluster* c = Find(recorded);
  return c == nullptr ? nullptr : c->base + (recorded - c->lo);
}

std::vector<RecordedLayout::Piece> RecordedLayout::Clip(uint64_t recorded, uint64_t length) const {
  std::vector<Piece> pieces;
  const uint64_t end = recorded + length;
  for (const Cluster& c : clusters_) {
    const uint64_t lo = std::max(recorded, c.lo), hi = std::min(end, c.hi);
    if (lo < hi) pieces.push_back({c.base + (lo - c.lo), static_cast<size_t>(hi - lo)});
  }
  return pieces;
}

void RecordedLayout::Touch(char* addr, uint64_t length) const {
  const uintptr_t page = PageSize();
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  for (uintptr_t p = start & ~(page - 1); p < start + length; p += page) {
    *reinterpret_cast<volatile char*>(std::max(p, start)) = 1;
  }
}

void RecordedLayout::Discard(const Piece& piece) const {
  const uintptr_t page = PageSize();
  const uintptr_t start = (reinterpret_cast<uintptr_t>(piece.addr) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(piece.addr) + piece.length) & ~(page - 1);
  if (start < end) (void)madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED);
}

}  // namespace mrbench
