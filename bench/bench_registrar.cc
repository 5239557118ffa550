#include "bench/bench_registrar.h"

#include <infiniband/verbs.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "mrcache/cache.h"
#include "mrcache/errno_status.h"

namespace mrbench {
namespace {

absl::StatusOr<ibv_pd*> OpenFirstPd() {
  int n = 0;
  ibv_device** devices = ibv_get_device_list(&n);
  if (devices == nullptr || n == 0) {
    if (devices != nullptr) ibv_free_device_list(devices);
    return mrcache::ErrnoStatus(
        ENODEV, "no RDMA device for --registrar verbs (try --registrar uring or sim)");
  }
  ibv_context* context = ibv_open_device(devices[0]);
  const std::string name = ibv_get_device_name(devices[0]);
  ibv_free_device_list(devices);
  if (context == nullptr)
    return mrcache::ErrnoStatus(errno ? errno : ENODEV,
                                absl::StrCat("ibv_open_device(", name, ")"));
  ibv_pd* pd = ibv_alloc_pd(context);
  if (pd == nullptr) {
    const int err = errno ? errno : ENOMEM;
    ibv_close_device(context);
    return mrcache::ErrnoStatus(err, absl::StrCat("ibv_alloc_pd on ", name));
  }
  return pd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<mrcache::Registrar>> MakeBenchRegistrar(
    const mrcache::Config& config) {
  ibv_pd* pd = nullptr;
  if (config.registrar == "verbs") {
    static const absl::StatusOr<ibv_pd*>* opened = new absl::StatusOr<ibv_pd*>(OpenFirstPd());
    if (!opened->ok()) return opened->status();
    pd = **opened;
  }
  return mrcache::CreateRegistrar(config, pd);
}

}  // namespace mrbench
