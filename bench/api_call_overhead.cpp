// Per-call time of kiln::Model::run through the C++ API, on the host backend: the anchor for
// the Python package's per-call overhead (bench/python_call_overhead.py runs both).
//
// Usage: kiln_api_call_overhead MODEL [CALLS]   prints "run_views <median us> run <median us>"
#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

template <typename F>
double median_microseconds(int calls, F&& call) {
  std::vector<double> times;
  for (int i = 0; i < calls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + calls / 2, times.end());
  return times[static_cast<size_t>(calls / 2)];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL [CALLS]\n", argv[0]);
    return 2;
  }
  const int calls = argc > 2 ? std::max(1, std::atoi(argv[2])) : 200;
  try {
    kiln::Options options;
    options.backend = kiln::Backend::Host;
    kiln::Model model = kiln::Model::load(argv[1], options);
    std::mt19937 rng(0);
    std::uniform_real_distribution<float> uniform(0.f, 1.f);
    std::map<std::string, kiln::Tensor> inputs;
    std::map<std::string, kiln::TensorRef> refs;
    for (const kiln::TensorInfo& info : model.inputs()) {
      kiln::Tensor tensor(info.dtype, info.shape);
      if (info.dtype == kiln::DType::F32) {
        auto* data = reinterpret_cast<float*>(tensor.data());
        for (int64_t i = 0; i < tensor.num_elements(); ++i) data[i] = uniform(rng);
      }
      inputs[info.name] = std::move(tensor);
    }
    for (const auto& [name, tensor] : inputs) refs[name] = {tensor.dtype(), tensor.shape(), tensor.data()};
    for (int i = 0; i < 10; ++i) model.run_views(refs);  // warm-up
    const double views = median_microseconds(calls, [&] { model.run_views(refs); });
    const double copies = median_microseconds(calls, [&] { model.run(inputs); });
    std::printf("run_views %.1f run %.1f\n", views, copies);
  } catch (const kiln::Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
  return 0;
}
