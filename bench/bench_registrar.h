// bench_registrar.h: the registrar every configuration of an mrbench run uses.
//
// mrcache::CreateRegistrar builds it from the config; `verbs` needs a protection
// domain, so for it the first RDMA device is opened and a PD allocated once
// per process (kept until exit). ENODEV, with a hint, when there is no RDMA
// device.
#ifndef BENCH_BENCH_REGISTRAR_H_
#define BENCH_BENCH_REGISTRAR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "mrcache/config.h"
#include "mrcache/registrar.h"

namespace mrbench {

absl::StatusOr<std::unique_ptr<mrcache::Registrar>> MakeBenchRegistrar(
    const mrcache::Config& config);

}  // namespace mrbench

#endif  // BENCH_BENCH_REGISTRAR_H_
