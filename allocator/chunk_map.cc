#include "allocator/chunk_map.h"

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "mrcache/errno_status.h"

namespace mrcache {

ChunkMap::ChunkMap(int lg_granule)
    : lg_granule_(lg_granule),
      // Split the granule-index bits about evenly between the two levels.
      leaf_bits_((kAddressBits - lg_granule + 1) / 2),
      leaf_mask_((uintptr_t{1} << leaf_bits_) - 1),
      top_entries_(size_t{1} << (kAddressBits - lg_granule - leaf_bits_)),
      top_(new std::atomic<Leaf*>[top_entries_]) {
  for (size_t i = 0; i < top_entries_; ++i) top_[i].store(nullptr, std::memory_order_relaxed);
}

ChunkMap::~ChunkMap() {
  for (size_t i = 0; i < top_entries_; ++i) std::free(top_[i].load(std::memory_order_relaxed));
}

absl::Status ChunkMap::Insert(const PoolChunk* chunk) {
  const uintptr_t granule = uintptr_t{1} << lg_granule_;
  if (chunk->length == 0 || (chunk->start & (granule - 1)) != 0 ||
      chunk->start + chunk->length < chunk->start ||
      ((chunk->start + chunk->length - 1) >> kAddressBits) != 0) {
    return ErrnoStatus(EINVAL, absl::StrCat("chunk [", chunk->start, ", +", chunk->length,
                                            ") is not granule-aligned below 2^48"));
  }
  const uintptr_t first = chunk->start >> lg_granule_;
  const uintptr_t last = (chunk->start + chunk->length - 1) >> lg_granule_;
  // Allocate every missing leaf first, so that a failure publishes nothing.
  for (uintptr_t t = first >> leaf_bits_; t <= last >> leaf_bits_; ++t) {
    if (top_[t].load(std::memory_order_relaxed) != nullptr) continue;
    // calloc: zero bytes are null atomic pointers on every supported target.
    auto* leaf = static_cast<Leaf*>(std::calloc(size_t{1} << leaf_bits_, sizeof(Leaf)));
    if (leaf == nullptr) return ErrnoStatus(ENOMEM, "no memory for a chunk-map leaf");
    top_[t].store(leaf, std::memory_order_release);
  }
  for (uintptr_t i = first; i <= last; ++i) {
    top_[i >> leaf_bits_].load(std::memory_order_relaxed)[i & leaf_mask_].store(
        chunk, std::memory_order_release);
  }
  return absl::OkStatus();
}

void ChunkMap::Erase(const PoolChunk* chunk) {
  const uintptr_t first = chunk->start >> lg_granule_;
  const uintptr_t last = (chunk->start + chunk->length - 1) >> lg_granule_;
  for (uintptr_t i = first; i <= last; ++i) {
    Leaf* leaf = top_[i >> leaf_bits_].load(std::memory_order_relaxed);
    if (leaf != nullptr && leaf[i & leaf_mask_].load(std::memory_order_relaxed) == chunk) {
      leaf[i & leaf_mask_].store(nullptr, std::memory_order_release);
    }
  }
}

}  // namespace mrcache
