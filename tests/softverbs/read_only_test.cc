// Read-only memory: an MR that grants no write right (no LOCAL_WRITE,
// REMOTE_WRITE, REMOTE_ATOMIC or MW_BIND) is pinned without write access, as
// the kernel pins it, so REMOTE_READ works on PROT_READ pages (a read-only
// file mapping, mprotect'ed memory) and a peer reads their bytes; a write
// right there fails with EFAULT.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <linux/capability.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tests/softverbs/fixture.h"
#include "tests/softverbs/rc_end.h"

namespace softverbs {
namespace {

constexpr size_t kBytes = 64 * 1024;

// The process's locked memory (VmLck in /proc/self/status), in KiB.
long LockedKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmLck:", 0) == 0) return strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

bool HasCapIpcLock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32));
}

class ReadOnly : public SoftverbsTest {
 protected:
  void SetUp() override {
    SoftverbsTest::SetUp();
    if (HasFatalFailure()) return;
    // A file of known bytes, mapped read-only.
    char path[] = "/tmp/softverbs-read-only-XXXXXX";
    fd_ = mkstemp(path);
    ASSERT_GE(fd_, 0);
    unlink(path);
    std::vector<char> bytes(kBytes);
    for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<char>(i * 13 + 5);
    ASSERT_EQ(write(fd_, bytes.data(), kBytes), static_cast<ssize_t>(kBytes));
    void* p = mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, fd_, 0);
    ASSERT_NE(p, MAP_FAILED);
    file_ = static_cast<char*>(p);
  }

  void TearDown() override {
    for (ibv_mr* mr : mrs_) EXPECT_EQ(ibv_dereg_mr(mr), 0);
    if (file_ != nullptr) munmap(file_, kBytes);
    if (fd_ >= 0) close(fd_);
    SoftverbsTest::TearDown();
  }

  ibv_mr* Register(void* at, size_t length, int access) {
    ibv_mr* mr = ibv_reg_mr(pd_, at, length, access);
    if (mr != nullptr) mrs_.push_back(mr);
    return mr;
  }

  int fd_ = -1;
  char* file_ = nullptr;
  std::vector<ibv_mr*> mrs_;
};

TEST_F(ReadOnly, RemoteReadOnAReadOnlyFileMappingRegisters) {
  ibv_mr* mr = Register(file_, kBytes, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  std::vector<char> out(kBytes);
  EXPECT_EQ(client_.remote_read(mr->rkey, reinterpret_cast<uintptr_t>(file_), out.data(), kBytes),
            IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(out.data(), file_, kBytes), 0);
}

TEST_F(ReadOnly, APeerRdmaReadsTheFilesBytes) {
  ibv_mr* mr = Register(file_, kBytes, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  // The requester: another context of the device, as a peer process would be.
  RcEnd requester, responder;
  ASSERT_TRUE(requester.Open(list_[0]));
  responder.pd = pd_;  // the MR's PD; the QP below is created on it
  responder.ctx = ctx_;
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(ctx_, 1, &port), 0);
  responder.lid = port.lid;
  responder.cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
  ASSERT_NE(responder.cq, nullptr);
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = responder.cq;
  a.cap.max_send_wr = a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  a.qp_type = IBV_QPT_RC;
  responder.qp = ibv_create_qp(pd_, &a);
  ASSERT_NE(responder.qp, nullptr);
  ASSERT_EQ(requester.ConnectTo(responder), 0);
  ASSERT_EQ(responder.ConnectTo(requester), 0);
  std::vector<char> sink(kBytes, 0);
  ibv_mr* sink_mr = ibv_reg_mr(requester.pd, sink.data(), kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(sink_mr, nullptr);
  EXPECT_EQ(requester.Rdma(IBV_WR_RDMA_READ, sink.data(), kBytes, sink_mr->lkey,
                           reinterpret_cast<uintptr_t>(file_), mr->rkey),
            IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(sink.data(), file_, kBytes), 0);
  EXPECT_EQ(ibv_dereg_mr(sink_mr), 0);
  EXPECT_EQ(ibv_destroy_qp(responder.qp), 0);
  EXPECT_EQ(ibv_destroy_cq(responder.cq), 0);
  requester.Close();
}

TEST_F(ReadOnly, AWriteRightOnReadOnlyPagesIsEfault) {
  for (int access :
       {static_cast<int>(IBV_ACCESS_LOCAL_WRITE), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND}) {
    errno = 0;
    EXPECT_EQ(Register(file_, kBytes, access), nullptr) << "access " << access;
    EXPECT_EQ(errno, EFAULT) << "access " << access;
  }
}

TEST_F(ReadOnly, MprotectedAnonymousMemoryRegistersForRemoteRead) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  memset(buf, 'p', kBytes);
  ASSERT_EQ(mprotect(buf, kBytes, PROT_READ), 0);
  ibv_mr* mr = Register(buf, kBytes, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  char out[32] = {};
  EXPECT_EQ(client_.remote_read(mr->rkey, reinterpret_cast<uintptr_t>(buf) + 100, out, sizeof out),
            IBV_WC_SUCCESS);
  EXPECT_EQ(out[31], 'p');
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  mrs_.clear();
  munmap(buf, kBytes);
}

TEST_F(ReadOnly, ARemoteWriteThroughAReadOnlyMrIsARemoteAccessError) {
  ibv_mr* mr = Register(file_, kBytes, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  const char data[] = "no";
  EXPECT_EQ(client_.remote_write(mr->rkey, reinterpret_cast<uintptr_t>(file_), data, sizeof data),
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(client_.device_write(mr->lkey, reinterpret_cast<uintptr_t>(file_), data, sizeof data),
            EACCES);
}

TEST_F(ReadOnly, UnmappedOrUnreadableMemoryIsEfault) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  ASSERT_EQ(mprotect(buf, kBytes, PROT_NONE), 0);
  errno = 0;
  EXPECT_EQ(Register(buf, kBytes, IBV_ACCESS_REMOTE_READ), nullptr);
  EXPECT_EQ(errno, EFAULT);
  ASSERT_EQ(munmap(buf, kBytes), 0);
  errno = 0;
  EXPECT_EQ(Register(buf, kBytes, IBV_ACCESS_REMOTE_READ), nullptr);
  EXPECT_EQ(errno, EFAULT);
}

TEST_F(ReadOnly, PagesStayLockedUntilTheLastReadOnlyMrOverThemGoes) {
  const long before = LockedKib();
  ibv_mr* a = Register(file_, 8192, IBV_ACCESS_REMOTE_READ);
  ibv_mr* b = Register(file_ + 4096, 8192, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(LockedKib() - before, 12) << "three pages, each locked once";
  EXPECT_EQ(ibv_dereg_mr(a), 0);
  mrs_.erase(mrs_.begin());
  EXPECT_EQ(LockedKib() - before, 8) << "b's two pages stay locked";
  char out[8];
  EXPECT_EQ(client_.remote_read(b->rkey, reinterpret_cast<uintptr_t>(file_) + 4096, out, 8),
            IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_dereg_mr(b), 0);
  mrs_.clear();
  EXPECT_EQ(LockedKib(), before);
}

TEST_F(ReadOnly, ReadOnlyPinsAreChargedToRlimitMemlock) {
  if (HasCapIpcLock()) {
    GTEST_SKIP() << "CAP_IPC_LOCK lifts RLIMIT_MEMLOCK; run unprivileged to check the charge";
  }
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &old), 0);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(LockedKib()) * 1024 + 16 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &low), 0);
  errno = 0;
  ibv_mr* mr = Register(file_, kBytes, IBV_ACCESS_REMOTE_READ);  // 64 KiB > 16 KiB left
  const int err = errno;
  EXPECT_EQ(setrlimit(RLIMIT_MEMLOCK, &old), 0);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(err, ENOMEM);
}

TEST_F(ReadOnly, ReregToAWriteRightOnReadOnlyPagesIsEfaultAndKeepsTheMr) {
  ibv_mr* mr = Register(file_, kBytes, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EFAULT);
  char out[4];
  EXPECT_EQ(client_.remote_read(mr->rkey, reinterpret_cast<uintptr_t>(file_), out, 4),
            IBV_WC_SUCCESS);
}

TEST_F(ReadOnly, ReregFromReadOnlyToWritableRepinsForWrite) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, kBytes, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  const long locked = LockedKib();
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
            0);
  EXPECT_EQ(LockedKib(), locked - static_cast<long>(kBytes / 1024)) << "the mlock is released";
  const char data[] = "device";
  EXPECT_EQ(client_.device_write(mr->lkey, reinterpret_cast<uintptr_t>(buf), data, sizeof data), 0);
  EXPECT_STREQ(buf, "device");
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, kBytes);
}

}  // namespace
}  // namespace softverbs
