// hashed_address.h: the part of an address that the cache's hashed
// decisions read.
//
// Some of the cache's decisions look addresses up in fixed-size hashed
// tables: where regions died lately (AddressHeat, which stops merging and
// bridging there) and which page ranges missed lately (the admission filter
// of a full cache). Two addresses that share a slot share the answer, so
// were the whole address hashed, the answers would depend on where the
// process's heap and mappings happen to lie (ASLR), not only on how its
// buffers lie relative to each other. They hash an address modulo
// 2^kHashedAddressBits (64 GiB) instead:
//   two runs whose addresses are congruent modulo 2^kHashedAddressBits get
//   the same answers from every hashed table;
// mrbench replays a recording at such addresses (bench/recorded_layout.h),
// so the replay decides as the recorded process did. Ranges 64 GiB apart
// share slots, as any two colliding ranges do: a collision only makes a
// table answer "seen lately" more often, which never affects correctness.
#ifndef MRCACHE_CORE_HASHED_ADDRESS_H_
#define MRCACHE_CORE_HASHED_ADDRESS_H_

#include <cstdint>

namespace mrcache {

constexpr int kHashedAddressBits = 36;

// `address` modulo 2^kHashedAddressBits, for the hashed tables above.
constexpr uint64_t HashedAddress(uint64_t address) {
  return address & ((uint64_t{1} << kHashedAddressBits) - 1);
}

// The same for a unit number, address >> unit_shift (a 64 KiB granule's,
// say): unit_number modulo 2^(kHashedAddressBits - unit_shift). unit_shift
// is below kHashedAddressBits.
constexpr uint64_t HashedUnit(uint64_t unit_number, int unit_shift) {
  return unit_number & ((uint64_t{1} << (kHashedAddressBits - unit_shift)) - 1);
}

}  // namespace mrcache

#endif  // MRCACHE_CORE_HASHED_ADDRESS_H_
