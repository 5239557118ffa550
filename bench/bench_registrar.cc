#include "bench/bench_registrar.h"

#include <infiniband/verbs.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "mrcache/cache.h"
#include "mrcache/errno_status.h"

namespace mrbench {
namespace {

// A PD on RDMA device `index` (in ibv_get_device_list's order).
absl::StatusOr<ibv_pd*> OpenPd(int index) {
  int n = 0;
  ibv_device** devices = ibv_get_device_list(&n);
  if (devices == nullptr || n <= index) {
    if (devices != nullptr) ibv_free_device_list(devices);
    return mrcache::ErrnoStatus(
        ENODEV, absl::StrCat("no RDMA device ", index, " for --registrar verbs (", n,
                             " found; try --registrar uring or sim)"));
  }
  ibv_context* context = ibv_open_device(devices[index]);
  const std::string name = ibv_get_device_name(devices[index]);
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
    static const absl::StatusOr<ibv_pd*>* opened = new absl::StatusOr<ibv_pd*>(OpenPd(0));
    if (!opened->ok()) return opened->status();
    pd = **opened;
  }
  return mrcache::CreateRegistrar(config, pd);
}

absl::StatusOr<std::vector<std::unique_ptr<mrcache::Registrar>>> MakeBenchRailRegistrars(
    const mrcache::Config& config, int n) {
  std::vector<std::unique_ptr<mrcache::Registrar>> rails;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<std::unique_ptr<mrcache::Registrar>> rail;
    if (config.registrar == "verbs" && i > 0) {
      // Rail 0 is the PD MakeBenchRegistrar uses; the others open once each.
      static std::vector<absl::StatusOr<ibv_pd*>>* opened =
          new std::vector<absl::StatusOr<ibv_pd*>>();
      while (static_cast<int>(opened->size()) < i) opened->push_back(OpenPd(opened->size() + 1));
      if (!(*opened)[i - 1].ok()) return (*opened)[i - 1].status();
      rail = mrcache::CreateRegistrar(config, *(*opened)[i - 1]);
    } else {
      rail = MakeBenchRegistrar(config);
    }
    if (!rail.ok()) return rail.status();
    rails.push_back(std::move(*rail));
  }
  return rails;
}

}  // namespace mrbench
