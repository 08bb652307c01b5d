// The communicator over MPI (OpenMPI from Debian; any MPI-3 implementation).
//
// The mean of a gradient bucket is an MPI_Iallgather of every rank's bucket followed by a sum
// over the ranks in pairwise_sum's order (ir/pairwise_sum.h) on each rank, not
// MPI_Iallreduce: MPI lets an implementation reduce in any order (and differently on different
// ranks for some algorithms), and data-parallel training promises the same bits on every rank
// and a fixed order run after run; with that order, and batch-invariant gradients, the same bits
// as one process (docs/distributed.md). The gather moves
// size() times the data of a reduction; the host backend trains models whose gradients are
// megabytes, and the CUDA backend's NCCL all-reduce is the bandwidth-optimal path.
//
// MPI is initialized with MPI_THREAD_FUNNELED: only the main thread calls it (the host
// backend's worker threads never do).
#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "ir/diagnostic.h"
#include "ir/pairwise_sum.h"
#include "runtime/distributed/communicator.h"

namespace kiln::runtime::distributed {
namespace {

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error("", fmt::format("MPI: {} failed: {}", call, std::string(text, length)));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    // Errors come back as codes (and become kiln::Error) instead of aborting inside MPI.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    MPI_Comm local;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    check(MPI_Comm_rank(local, &local_rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(local, &local_size_), "MPI_Comm_size");
    MPI_Comm_free(&local);
  }
  ~MpiCommunicator() override {
    for (auto& [id, request] : requests_) MPI_Request_free(&request.handle);
    MPI_Finalize();
  }

  int start_mean(void* data, int64_t count, ir::DType dtype) override {
    if (dtype != ir::DType::F32 && dtype != ir::DType::F64)
      throw Error("", fmt::format("averaging {} over the ranks is not supported (f32 and f64 are)",
                                  ir::dtype_name(dtype)));
    const int64_t bytes = count * static_cast<int64_t>(ir::dtype_size(dtype));
    if (bytes * size_ > INT_MAX)
      throw Error("", fmt::format("a gradient bucket of {} bytes gathered from {} ranks exceeds "
                                  "MPI's 2 GiB count",
                                  bytes, size_));
    Request request;
    request.mean = true;
    request.data = data;
    request.count = count;
    request.dtype = dtype;
    request.gathered.resize(static_cast<size_t>(bytes * size_));
    check(MPI_Iallgather(data, static_cast<int>(bytes), MPI_BYTE, request.gathered.data(),
                         static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD, &request.handle),
          "MPI_Iallgather");
    const int id = next_request_++;
    requests_.emplace(id, std::move(request));
    return id;
  }

  int start_broadcast(void* data, int64_t bytes, int root) override {
    if (bytes > INT_MAX)
      throw Error("", fmt::format("a broadcast of {} bytes exceeds MPI's 2 GiB count", bytes));
    Request request;
    check(MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD,
                     &request.handle),
          "MPI_Ibcast");
    const int id = next_request_++;
    requests_.emplace(id, std::move(request));
    return id;
  }

  void wait(int id) override {
    auto it = requests_.find(id);
    KILN_CHECK(it != requests_.end()) << "no outstanding collective " << id;
    Request& request = it->second;
    check(MPI_Wait(&request.handle, MPI_STATUS_IGNORE), "MPI_Wait");
    if (!request.mean) {
      requests_.erase(it);
      return;
    }
    if (request.dtype == ir::DType::F32)
      mean_over_ranks(static_cast<float*>(request.data),
                         reinterpret_cast<const float*>(request.gathered.data()), request.count);
    else
      mean_over_ranks(static_cast<double*>(request.data),
                         reinterpret_cast<const double*>(request.gathered.data()), request.count);
    requests_.erase(it);
  }

  void progress() override {
    for (auto& [id, request] : requests_) {
      int done = 0;
      check(MPI_Test(&request.handle, &done, MPI_STATUS_IGNORE), "MPI_Test");
      // A completed request keeps MPI_REQUEST_NULL; wait() then returns at once.
    }
  }

  void sum(double* values, int count) override {
    std::vector<double> gathered(static_cast<size_t>(count) * static_cast<size_t>(size_));
    check(MPI_Allgather(values, count, MPI_DOUBLE, gathered.data(), count, MPI_DOUBLE,
                        MPI_COMM_WORLD),
          "MPI_Allgather");
    for (int i = 0; i < count; ++i) {
      double total = gathered[static_cast<size_t>(i)];
      for (int r = 1; r < size_; ++r) total += gathered[static_cast<size_t>(r * count + i)];
      values[i] = total;
    }
  }

  void broadcast(void* data, int64_t bytes, int root) override {
    auto* cursor = static_cast<char*>(data);
    // MPI counts are ints: tensors past 2 GiB go in pieces.
    constexpr int64_t kPiece = int64_t{1} << 30;
    for (int64_t done = 0; done < bytes; done += kPiece) {
      const int piece = static_cast<int>(std::min(kPiece, bytes - done));
      check(MPI_Bcast(cursor + done, piece, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    }
  }

  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; should it, do not run MPI_Finalize
  }

 private:
  struct Request {
    MPI_Request handle = MPI_REQUEST_NULL;
    bool mean = false;  // else a broadcast, complete at its wait
    void* data = nullptr;
    int64_t count = 0;
    ir::DType dtype = ir::DType::F32;
    std::vector<std::byte> gathered;  // size() buckets, rank by rank
  };

  // data[i] = (gathered[0][i] + gathered[1][i] + ... ) / size, the ranks' values added in
  // pairwise_sum's order.
  template <typename T>
  void mean_over_ranks(T* data, const T* gathered, int64_t count) const {
    const T ranks = static_cast<T>(size_);
    for (int64_t i = 0; i < count; ++i)
      data[i] = ir::pairwise_sum<T>(size_, [&](int64_t r) { return gathered[r * count + i]; }) / ranks;
  }

  std::map<int, Request> requests_;
  int next_request_ = 0;
};

std::unique_ptr<MpiCommunicator>& world_storage() {
  static std::unique_ptr<MpiCommunicator> world;
  return world;
}

}  // namespace

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") ||
         std::getenv("PMI_SIZE");
}

Communicator* world() {
  static bool initialized = false;
  if (!initialized) {
    initialized = true;
    if (!launched_by_mpi()) return nullptr;
    world_storage() = std::make_unique<MpiCommunicator>();
    // MPI_Finalize before the process's other statics go.
    std::atexit([] { world_storage().reset(); });
  }
  Communicator* communicator = world_storage().get();
  return communicator && communicator->size() > 1 ? communicator : nullptr;
}

Communicator* started_world() {
  Communicator* communicator = world_storage().get();
  return communicator && communicator->size() > 1 ? communicator : nullptr;
}

std::string rank_prefix() {
  const MpiCommunicator* communicator = world_storage().get();
  if (communicator == nullptr || communicator->size() < 2) return "";
  return fmt::format("rank {} of {}: ", communicator->rank(), communicator->size());
}

}  // namespace kiln::runtime::distributed
