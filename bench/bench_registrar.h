// bench_registrar.h: the registrar every configuration of an mrbench run uses.
//
// mrcache::CreateRegistrar builds it from the config; `verbs` needs a protection
// domain, so for it the first RDMA device is opened and a PD allocated once
// per process (kept until exit). ENODEV, with a hint, when there is no RDMA
// device.
#ifndef BENCH_BENCH_REGISTRAR_H_
#define BENCH_BENCH_REGISTRAR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "mrcache/config.h"
#include "mrcache/registrar.h"

namespace mrbench {

absl::StatusOr<std::unique_ptr<mrcache::Registrar>> MakeBenchRegistrar(
    const mrcache::Config& config);

// One registrar per rail 0..n-1: for verbs each on a PD of its own of RDMA
// device i (opened once per process; ENODEV with a hint when there are
// fewer than n devices), else n registrars of config.registrar's kind.
absl::StatusOr<std::vector<std::unique_ptr<mrcache::Registrar>>> MakeBenchRailRegistrars(
    const mrcache::Config& config, int n);

}  // namespace mrbench

#endif  // BENCH_BENCH_REGISTRAR_H_
