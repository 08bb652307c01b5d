#include "runtime/host/worker_pool.h"

#include <algorithm>
#include <thread>

namespace kiln::runtime::host::detail {

// One run(): how many helpers may still take it, and how many are inside its task.
struct WorkerPool::Job {
  const std::function<void()>* task = nullptr;
  size_t open = 0;
  size_t running = 0;
  std::condition_variable finished;
};

WorkerPool& WorkerPool::instance() {
  static auto* pool = new WorkerPool();  // never destroyed: its threads wait until exit
  return *pool;
}

void WorkerPool::serve() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] { return !queue_.empty(); });
    Job* job = queue_.front();
    if (--job->open == 0) queue_.pop_front();
    ++job->running;
    lock.unlock();
    (*job->task)();  // it catches what it throws (HostModule::launch records it)
    lock.lock();
    if (--job->running == 0) job->finished.notify_all();
  }
}

void WorkerPool::run(const std::function<void()>& task, size_t helpers) {
  Job job;
  job.task = &task;
  if (helpers > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (; threads_ < helpers; ++threads_) std::thread([this] { serve(); }).detach();
    job.open = helpers;
    queue_.push_back(&job);
  }
  if (helpers == 1) work_.notify_one();
  if (helpers > 1) work_.notify_all();
  task();
  if (helpers == 0) return;
  std::unique_lock<std::mutex> lock(mutex_);
  // Withdraw the copies no helper has taken: the work they would have shared is done.
  if (job.open > 0) queue_.erase(std::find(queue_.begin(), queue_.end(), &job));
  job.open = 0;
  job.finished.wait(lock, [&] { return job.running == 0; });
}

}  // namespace kiln::runtime::host::detail
