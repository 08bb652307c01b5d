// A mock NCCL for the CUDA backend's data-parallel path (runtime/cuda/nccl_api.h), against the
// mock libcuda (device memory is host memory, streams run at once). It plays one rank of a run
// whose other ranks all hold `peer` in every element (kiln_mock_nccl_set_peer), so an average
// over n ranks is (x + (n - 1) * peer) / n, and a broadcast from another rank gives `peer`: a
// test sees that its buffers went through the collective, and where. Every function is defined against nccl.h's declaration.
#include <nccl.h>

#include <cstring>

namespace {

struct MockComm {
  int ranks = 0, rank = 0;
};

double peer = 0;
int all_reduces = 0, broadcasts = 0, live_comms = 0;

}  // namespace

extern "C" {

void kiln_mock_nccl_set_peer(double value) { peer = value; }
int kiln_mock_nccl_all_reduces() { return all_reduces; }
int kiln_mock_nccl_broadcasts() { return broadcasts; }
int kiln_mock_nccl_live_comms() { return live_comms; }

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  return result == ncclSuccess ? "no error" : "mock NCCL error";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id->internal, "kiln mock", 9);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int ranks, ncclUniqueId id, int rank) {
  if (std::memcmp(id.internal, "kiln mock", 9) != 0 || rank < 0 || rank >= ranks)
    return ncclInvalidArgument;
  *comm = reinterpret_cast<ncclComm_t>(new MockComm{ranks, rank});
  ++live_comms;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete reinterpret_cast<MockComm*>(comm);
  --live_comms;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

// The root's bytes, or (this mock rank not being the root) the root's tensors of kPeer floats.
ncclResult_t ncclBroadcast(const void* send, void* receive, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t) {
  if (type != ncclInt8 || comm == nullptr) return ncclInvalidArgument;
  if (reinterpret_cast<MockComm*>(comm)->rank == root) {
    std::memmove(receive, send, count);
  } else {
    auto* y = static_cast<float*>(receive);
    for (size_t i = 0; i < count / sizeof(float); ++i) y[i] = static_cast<float>(peer);
  }
  ++broadcasts;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* receive, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  if (type != ncclFloat32 || op != ncclAvg || comm == nullptr) return ncclInvalidArgument;
  const int ranks = reinterpret_cast<MockComm*>(comm)->ranks;
  const auto* x = static_cast<const float*>(send);
  auto* y = static_cast<float*>(receive);
  for (size_t i = 0; i < count; ++i)
    y[i] = static_cast<float>((x[i] + (ranks - 1) * peer) / ranks);
  ++all_reduces;
  return ncclSuccess;
}

}  // extern "C"
