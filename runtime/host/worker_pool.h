// The worker threads that run a launch's blocks (internal to runtime/host/).
//
// A launch used to start one std::thread per core and join them: 20-50 µs per launch, which
// is most of a small kernel's time and, over a training step's 34 launches, a few percent of
// the seed CNN's step. The pool's threads live for the process and wait for work between
// launches.
//
// run(task, helpers) runs `task` on the calling thread and on up to `helpers` pool threads at
// once, and returns when every copy that started has returned. The task is expected to share
// its work through an atomic counter (HostModule::launch's blocks), so any number of copies
// finishes it: copies that have not started when the caller's own copy returns are withdrawn.
// So concurrent launches (several executables, a server's requests) never wait for each other,
// and a launch after fork(), when the child has no pool threads, runs on the caller alone.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

namespace kiln::runtime::host::detail {

class WorkerPool {
 public:
  // The process's pool; its threads start on first use and grow to the most helpers asked for.
  static WorkerPool& instance();

  void run(const std::function<void()>& task, size_t helpers);

 private:
  struct Job;
  WorkerPool() = default;
  void serve();  // a pool thread: takes jobs until the process exits

  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<Job*> queue_;  // jobs that helpers may still take
  size_t threads_ = 0;      // started (detached: they wait for work until exit)
};

}  // namespace kiln::runtime::host::detail
