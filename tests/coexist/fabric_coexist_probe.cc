// fabric_coexist_probe: libfabric's registration cache and mrcache in one
// process (tests/coexist/coexist_rounds.h: arguments, rounds, output; the
// other cache's name is `fabric`).
//
// Debian's libfabric 1.17 reaches its MR cache, and with it its memory
// monitor (FI_MR_CACHE_MONITOR: memhooks patches libc's entries, uffd
// watches with userfaultfd), through the verbs provider: here over softverbs,
// on its datagram domain (the connected one needs the kernel's RDMA CM). The
// other providers of that build (tcp, udp, shm, sockets, net, rxm, rxd over
// udp) start no monitor (docs/ARCHITECTURE.md, "Other trackers in the
// process"). libfabric's view: fi_mr_reg of a range its cache holds returns
// the cached registration, whose key is the old one; a range it was told is
// gone gets a new registration, with a new key.
//
// libfabric is loaded with dlopen so that the order is the one asked for.
#include <dlfcn.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "tests/coexist/coexist_rounds.h"

namespace {

using mrcache::testing::CoexistProbeFailed;

class FabricCache {
 public:
  static constexpr const char* kName = "fabric";

  // Loads libfabric and opens the verbs provider's datagram domain, whose
  // registrations go through libfabric's MR cache.
  void Create() {
    void* lib = dlopen("libfabric.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) CoexistProbeFailed(std::string("dlopen libfabric.so.1: ") + dlerror());
    auto sym = [lib](const char* name) {
      void* p = dlsym(lib, name);
      if (p == nullptr) CoexistProbeFailed(std::string("libfabric lacks ") + name);
      return p;
    };
    allocinfo_ = reinterpret_cast<decltype(allocinfo_)>(sym("fi_dupinfo"));
    freeinfo_ = reinterpret_cast<decltype(freeinfo_)>(sym("fi_freeinfo"));
    auto getinfo = reinterpret_cast<decltype(&fi_getinfo)>(sym("fi_getinfo"));
    auto fabric = reinterpret_cast<decltype(&fi_fabric)>(sym("fi_fabric"));
    auto strerror = reinterpret_cast<decltype(&fi_strerror)>(sym("fi_strerror"));
    fi_info* hints = allocinfo_(nullptr);
    if (hints == nullptr) CoexistProbeFailed("fi_allocinfo");
    hints->fabric_attr->prov_name = strdup("verbs");
    hints->caps = FI_MSG;
    hints->mode = ~uint64_t{0};
    hints->ep_attr->type = FI_EP_DGRAM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    int r = getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info_);
    freeinfo_(hints);
    if (r != 0) CoexistProbeFailed(std::string("fi_getinfo(verbs, dgram): ") + strerror(-r));
    r = fabric(info_->fabric_attr, &fabric_, nullptr);
    if (r != 0) CoexistProbeFailed(std::string("fi_fabric: ") + strerror(-r));
    r = fi_domain(fabric_, info_, &domain_, nullptr);
    if (r != 0) CoexistProbeFailed(std::string("fi_domain: ") + strerror(-r));
  }
  // Registers [addr, addr + len) (or finds it cached) and lets go of it;
  // true if that took a new registration (a key other than the last one).
  bool GetPut(void* addr, size_t len) {
    fid_mr* mr = nullptr;
    int r = fi_mr_reg(domain_, addr, len, FI_SEND | FI_RECV, 0, 0, 0, &mr, nullptr);
    if (r != 0) CoexistProbeFailed("fi_mr_reg: error " + std::to_string(-r));
    uint64_t key = fi_mr_key(mr);
    fi_close(&mr->fid);
    bool fresh = !have_key_ || key != last_key_;
    last_key_ = key;
    have_key_ = true;
    return fresh;
  }
  void Destroy() {
    fi_close(&domain_->fid);
    fi_close(&fabric_->fid);
    freeinfo_(info_);
  }

 private:
  fi_info* (*allocinfo_)(const fi_info*) = nullptr;
  void (*freeinfo_)(fi_info*) = nullptr;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  uint64_t last_key_ = 0;
  bool have_key_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  return mrcache::testing::RunCoexistRounds<FabricCache>(argc, argv);
}
