// recorded_layout.h: where a recorded trace's addresses live during replay.
//
// A cache's decisions depend on the relative layout of the memory it is asked
// to register: which requests overlap or touch (merging), which share an
// aligned block (bridging, alignment), and where its hashed tables put an
// address, which they read modulo 2^kHashedAddressBits
// (mrcache/core/hashed_address.h). The replay therefore keeps the
// recording's layout: the page-rounded ranges of all `reg` events are grouped
// into clusters, each the span of whole kBlock-aligned blocks its ranges touch
// (ranges whose spans meet or overlap share a cluster), and each cluster is
// mapped once, anonymous and read-write (MAP_NORESERVE: untouched pages cost
// nothing), at an address congruent to the recorded one modulo kModulus. A
// recorded address then translates by its cluster's constant offset: offsets
// within a cluster, alignment to any power of two up to kModulus, and so every
// hashed table's answers are those of the recording. Each cluster has an
// inaccessible guard of at least one page below it and kBlock above it, so
// clusters never touch nor share a block.
//
// kBlock is 1 GiB, or the recorded bridge_bytes or alignment if larger
// (rounded up to a power of two); kModulus is 2^kHashedAddressBits (64 GiB),
// or kBlock if larger. Only the clusters are read-write: the rest of each
// reservation (up to kModulus + kBlock more) is address space only.
//
// What cannot be reproduced: the live process's other mappings and its
// residency. A cluster is one mapping whose resident pages are those the
// replay touched (each registration touches its pages, a release discards
// them), so bridging -- which widens to the resident memory of a request's
// own mapping -- can differ from the live run; with bridge_bytes=0 nothing
// depends on it.
#ifndef BENCH_RECORDED_LAYOUT_H_
#define BENCH_RECORDED_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/trace.h"
#include "mrcache/core/hashed_address.h"

namespace mrbench {

class RecordedLayout {
 public:
  static constexpr uint64_t kMinBlock = uint64_t{1} << 30;
  static constexpr uint64_t kMinModulus = uint64_t{1} << mrcache::kHashedAddressBits;

  // A translated range.
  struct Piece {
    void* addr;
    size_t length;
  };

  // Maps the clusters of `trace`'s registrations (none for a trace without
  // any). ENOMEM (or mmap's errno) if the address space is short.
  static absl::StatusOr<RecordedLayout> Map(const Trace& trace);
  RecordedLayout(RecordedLayout&& other) noexcept;
  RecordedLayout& operator=(RecordedLayout&&) = delete;
  RecordedLayout(const RecordedLayout&) = delete;
  ~RecordedLayout();  // unmaps every cluster

  // The replay address of a recorded address inside a registration's range
  // (a recorded `reg` address; anything else: nullptr).
  char* Translate(uint64_t recorded) const;
  // The parts of a recorded range that lie in clusters, translated (a
  // release elsewhere concerns no memory the trace registers).
  std::vector<Piece> Clip(uint64_t recorded, uint64_t length) const;
  // Writes one byte in every page of [addr, addr+length), as the application
  // had filled its buffer: registrations pin resident pages.
  void Touch(char* addr, uint64_t length) const;
  // Replaces the whole pages of `piece` by fresh zero pages (MADV_DONTNEED),
  // as the released memory is gone; later registrations there touch new pages.
  void Discard(const Piece& piece) const;
  // kBlock and kModulus for this trace, and how many clusters were mapped.
  uint64_t block() const { return block_; }
  uint64_t modulus() const { return modulus_; }
  size_t clusters() const { return clusters_.size(); }

 private:
  struct Cluster {
    uint64_t lo, hi;  // recorded span, kBlock-aligned
    char* base;       // where lo is mapped
    void* map;        // the whole reservation (guards included)
    size_t map_length;
  };
  RecordedLayout() = default;
  const Cluster* Find(uint64_t recorded) const;

  uint64_t block_ = kMinBlock;
  uint64_t modulus_ = kMinModulus;
  std::vector<Cluster> clusters_;  // sorted by lo, disjoint
};

}  // namespace mrbench

#endif  // BENCH_RECORDED_LAYOUT_H_
