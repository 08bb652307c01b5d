#include "runtime/cuda/nccl_api.h"

#include <fmt/format.h>

#include "ir/diagnostic.h"
#include "runtime/distributed/communicator.h"

namespace kiln::runtime::cuda {
namespace {

constexpr int kOldestNccl = 21000;  // 2.10.0: ncclAvg

ncclDataType_t nccl_type(ir::DType dtype, const std::string& kernel) {
  switch (dtype) {
    case ir::DType::F32: return ncclFloat32;
    case ir::DType::F64: return ncclFloat64;
    case ir::DType::F16: return ncclFloat16;
    case ir::DType::BF16: return ncclBfloat16;
    default:
      throw Error("", fmt::format("NCCL: kernel '{}' averages {} gradients; only float types "
                                  "can be averaged",
                                  kernel, ir::dtype_name(dtype)));
  }
}

}  // namespace

std::unique_ptr<NcclApi> NcclApi::load(const std::string& path) {
  std::unique_ptr<NcclApi> api(new NcclApi());
  try {
    api->library_ = std::make_unique<SharedLibrary>(path, "NCCL");
  } catch (const Error& error) {
    throw Error("", error.diagnostic().message +
                        "; data-parallel training on GPUs needs NCCL 2.10 or newer (Debian: "
                        "libnccl2), or train with --backend=host");
  }
#define KILN_NCCL_RESOLVE(symbol) \
  api->symbol = resolve<decltype(&::symbol)>(*api->library_, #symbol, "kiln needs NCCL 2.10 or newer");
  KILN_NCCL_FUNCTIONS(KILN_NCCL_RESOLVE)
#undef KILN_NCCL_RESOLVE
  api->check(api->ncclGetVersion(&api->version_), "ncclGetVersion");
  if (api->version_ < kOldestNccl)
    throw Error("", fmt::format("NCCL: {} is version {}; kiln needs NCCL 2.10 or newer (ncclAvg)",
                                path, api->version_));
  return api;
}

void NcclApi::check(ncclResult_t result, std::string_view call) const {
  if (result == ncclSuccess) return;
  const char* reason = ncclGetErrorString ? ncclGetErrorString(result) : nullptr;
  throw Error("", fmt::format("NCCL: {} failed: {}", call,
                              reason ? reason : fmt::format("ncclResult_t {}", static_cast<int>(result))));
}

const NcclApi& nccl(const std::string& path) { return load_once<NcclApi>(path); }

DeviceBuckets::DeviceBuckets(const DriverApi& api, const NcclApi& nccl, const codegen::Program& program,
                             distributed::Communicator& world, std::vector<CUdeviceptr> addresses)
    : api_(api), nccl_(nccl), addresses_(std::move(addresses)), schedule_(program) {
  ncclUniqueId id{};
  if (world.rank() == 0) nccl_.check(nccl_.ncclGetUniqueId(&id), "ncclGetUniqueId");
  world.broadcast(&id, sizeof(id), 0);
  nccl_.check(nccl_.ncclCommInitRank(&comm_, world.size(), id, world.rank()), "ncclCommInitRank");
  CUstream stream = nullptr;
  api_.check(api_.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate",
             "the all-reduce stream");
  comm_stream_ = Owned<CUstream>(stream, api_.cuStreamDestroy_v2);
  for (const auto& [k, collective] : schedule_.collectives()) {
    const std::string& name = program.kernels[k].name;
    Bucket bucket;
    if (collective.what.kind == codegen::Collective::Broadcast) {
      bucket.root = collective.what.index;  // bytes, whatever the tensors' types
      bucket.dtype = ncclInt8;
      bucket.count = collective.bytes;
    } else {
      bucket.dtype = nccl_type(collective.dtype, name);
      bucket.count = collective.bytes / static_cast<int64_t>(ir::dtype_size(collective.dtype));
    }
    CUdeviceptr buffer = 0;
    api_.check(api_.cuMemAlloc_v2(&buffer, static_cast<size_t>(collective.bytes)), "cuMemAlloc",
               fmt::format("the {} B buffer of collective kernel '{}'", collective.bytes, name));
    bucket.buffer = Owned<CUdeviceptr>(buffer, api_.cuMemFree_v2);
    for (Owned<CUevent>* event : {&bucket.ready, &bucket.done}) {
      CUevent handle = nullptr;
      api_.check(api_.cuEventCreate(&handle, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      *event = Owned<CUevent>(handle, api_.cuEventDestroy_v2);
    }
    buckets_.emplace(k, std::move(bucket));
  }
}

DeviceBuckets::~DeviceBuckets() {
  if (comm_ != nullptr) (void)nccl_.ncclCommDestroy(comm_);
}

void DeviceBuckets::before(size_t k, CUstream stream) {
  for (size_t due : schedule_.due_before(k)) finish(due, stream);
}

void DeviceBuckets::start(size_t k, CUstream stream) {
  const distributed::CollectiveSchedule::Collective& collective = *schedule_.find(k);
  Bucket& bucket = buckets_.at(k);
  CUdeviceptr cursor = bucket.buffer.get();
  for (size_t i = 0; i < collective.operands.size(); ++i) {
    const auto bytes = static_cast<size_t>(collective.sizes[i]);
    api_.check(api_.cuMemcpyDtoDAsync_v2(cursor, addresses_[collective.operands[i]], bytes, stream),
               "cuMemcpyDtoDAsync", "packing a collective's tensors");
    cursor += bytes;
  }
  api_.check(api_.cuEventRecord(bucket.ready.get(), stream), "cuEventRecord");
  api_.check(api_.cuStreamWaitEvent(comm_stream_.get(), bucket.ready.get(), 0), "cuStreamWaitEvent");
  void* data = reinterpret_cast<void*>(bucket.buffer.get());
  const auto count = static_cast<size_t>(bucket.count);
  if (bucket.root >= 0)
    nccl_.check(nccl_.ncclBroadcast(data, data, count, bucket.dtype, bucket.root, comm_,
                                    comm_stream_.get()),
                "ncclBroadcast");
  else
    nccl_.check(nccl_.ncclAllReduce(data, data, count, bucket.dtype, ncclAvg, comm_,
                                    comm_stream_.get()),
                "ncclAllReduce");
  api_.check(api_.cuEventRecord(bucket.done.get(), comm_stream_.get()), "cuEventRecord");
  schedule_.started(k);
}

void DeviceBuckets::finish(size_t k, CUstream stream) {
  const distributed::CollectiveSchedule::Collective& collective = *schedule_.find(k);
  Bucket& bucket = buckets_.at(k);
  api_.check(api_.cuStreamWaitEvent(stream, bucket.done.get(), 0), "cuStreamWaitEvent");
  CUdeviceptr cursor = bucket.buffer.get();
  for (size_t i = 0; i < collective.results.size(); ++i) {
    const auto bytes = static_cast<size_t>(collective.sizes[i]);
    api_.check(api_.cuMemcpyDtoDAsync_v2(addresses_[collective.results[i]], cursor, bytes, stream),
               "cuMemcpyDtoDAsync", "unpacking a collective's tensors");
    cursor += bytes;
  }
}

void DeviceBuckets::finish_all(CUstream stream) {
  for (size_t due : schedule_.due_at_end()) finish(due, stream);
}

}  // namespace kiln::runtime::cuda
