// Data-parallel training across processes (docs/distributed.md): the ranks of a run and the
// collectives a training step needs.
//
// `mpirun -np N kiln train ...` starts N processes; each trains on its shard of every global
// batch, and the gradients are averaged across them before the optimizer (the all_reduce
// kernels of passes/data_parallel.cpp). MPI launches the processes and carries the host
// backend's collectives; the CUDA backend averages device buffers with NCCL (runtime/cuda/
// nccl_api.h), bootstrapped over MPI. Outside a launcher there is no communicator and kiln
// trains as one process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace kiln::runtime::distributed {

class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The rank among the processes of this machine (the CUDA backend's device), and their number.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // Starts averaging `count` elements of `dtype` (f32 or f64) at `data` over the ranks, in
  // place; returns the request to wait() for. Every rank gets the same bits: the ranks' values
  // are summed in pairwise_sum's order (ir/pairwise_sum.h: ((x0 + x1) + (x2 + x3)) + ...), then
  // divided by size(), whatever the transport's own reduction order. `data` must stay valid and untouched until the wait.
  virtual int start_mean(void* data, int64_t count, ir::DType dtype) = 0;
  // Starts copying `bytes` at rank `root`'s `data` into every rank's `data`; a request too.
  virtual int start_broadcast(void* data, int64_t bytes, int root) = 0;
  // Completes request `request`: `data` then holds the mean, or the root's bytes.
  virtual void wait(int request) = 0;
  // Lets outstanding requests advance (MPI moves data only inside its calls): the executor
  // calls it between kernels, so that a bucket's transfer overlaps the backward pass.
  virtual void progress() = 0;
  // `values` summed over the ranks, in rank order, on every rank (the loss, correct counts).
  virtual void sum(double* values, int count) = 0;
  // `bytes` at `data` on rank `root` copied to every rank's `data`.
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // Ends every process of the run with `exit_code`, after this one has printed its error: the
  // other ranks, perhaps blocked in a collective, stop too instead of hanging.
  [[noreturn]] virtual void abort(int exit_code) = 0;

 protected:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

// Whether a launcher (mpirun, srun, mpiexec) started this process: its environment names the
// rank (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE).
bool launched_by_mpi();

// The communicator of this run, set up on the first call: MPI's world when launched_by_mpi()
// and it has more than one rank; nullptr otherwise (one process). kiln::Error when MPI cannot
// start. MPI is finalized at exit.
Communicator* world();

// world() if a call has set it up, else nullptr: for error paths, which must not start MPI.
Communicator* started_world();

// "rank 1 of 4: ", the prefix of this process's messages; empty outside a distributed run.
std::string rank_prefix();

}  // namespace kiln::runtime::distributed
