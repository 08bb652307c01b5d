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

// The operands of an all_reduce kernel: the first half of its arguments.
size_t operand_count(const codegen::Kernel& kernel) {
  return kernel.args.size() - static_cast<size_t>(kernel.num_outputs);
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
    : api_(api), nccl_(nccl), program_(program), addresses_(std::move(addresses)) {
  ncclUniqueId id{};
  if (world.rank() == 0) nccl_.check(nccl_.ncclGetUniqueId(&id), "ncclGetUniqueId");
  world.broadcast(&id, sizeof(id), 0);
  nccl_.check(nccl_.ncclCommInitRank(&comm_, world.size(), id, world.rank()), "ncclCommInitRank");
  CUstream stream = nullptr;
  api_.check(api_.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate",
             "the all-reduce stream");
  comm_stream_ = Owned<CUstream>(stream, api_.cuStreamDestroy_v2);
  for (size_t k = 0; k < program.kernels.size(); ++k) {
    const codegen::Kernel& kernel = program.kernels[k];
    if (!kernel.collective) continue;
    Bucket bucket;
    int64_t bytes = 0;
    for (size_t i = 0; i < operand_count(kernel); ++i) {
      bytes += program.buffers[kernel.args[i]].bytes;
      reader_of_.emplace(kernel.args[operand_count(kernel) + i], k);
    }
    if (kernel.collective->kind == codegen::Collective::Broadcast) {
      bucket.root = kernel.collective->index;  // bytes, whatever the tensors' types
      bucket.dtype = ncclInt8;
      bucket.count = bytes;
    } else {
      const ir::DType dtype = program.buffers[kernel.args.at(0)].type.dtype;
      bucket.dtype = nccl_type(dtype, kernel.name);
      bucket.count = bytes / static_cast<int64_t>(ir::dtype_size(dtype));
    }
    CUdeviceptr buffer = 0;
    api_.check(api_.cuMemAlloc_v2(&buffer, static_cast<size_t>(bytes)), "cuMemAlloc",
               fmt::format("the {} B buffer of collective kernel '{}'", bytes, kernel.name));
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
  if (pending_.empty()) return;
  const codegen::Kernel& kernel = program_.kernels[k];
  for (size_t i = 0; i < operand_count(kernel); ++i) {
    auto it = reader_of_.find(kernel.args[i]);
    if (it != reader_of_.end() && pending_.count(it->second)) finish(it->second, stream);
  }
}

void DeviceBuckets::start(size_t k, CUstream stream) {
  const codegen::Kernel& kernel = program_.kernels[k];
  Bucket& bucket = buckets_.at(k);
  CUdeviceptr cursor = bucket.buffer.get();
  for (size_t i = 0; i < operand_count(kernel); ++i) {
    const auto bytes = static_cast<size_t>(program_.buffers[kernel.args[i]].bytes);
    api_.check(api_.cuMemcpyDtoDAsync_v2(cursor, addresses_[kernel.args[i]], bytes, stream),
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
  pending_.insert(k);
}

void DeviceBuckets::finish(size_t k, CUstream stream) {
  const codegen::Kernel& kernel = program_.kernels[k];
  Bucket& bucket = buckets_.at(k);
  api_.check(api_.cuStreamWaitEvent(stream, bucket.done.get(), 0), "cuStreamWaitEvent");
  CUdeviceptr cursor = bucket.buffer.get();
  for (size_t i = 0; i < operand_count(kernel); ++i) {
    const int result = kernel.args[operand_count(kernel) + i];
    const auto bytes = static_cast<size_t>(program_.buffers[result].bytes);
    api_.check(api_.cuMemcpyDtoDAsync_v2(addresses_[result], cursor, bytes, stream),
               "cuMemcpyDtoDAsync", "unpacking a collective's tensors");
    cursor += bytes;
  }
  pending_.erase(k);
}

void DeviceBuckets::finish_all(CUstream stream) {
  while (!pending_.empty()) finish(*pending_.begin(), stream);
}

}  // namespace kiln::runtime::cuda
