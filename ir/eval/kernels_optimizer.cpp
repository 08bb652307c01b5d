// Reference kernels for the optimizer updates (sgd_update, adam_update, adamw_update), written
// after the per-parameter loops of torch.optim.SGD / Adam / AdamW (foreach=False) so each line
// can be checked against PyTorch's source. Everything is in double; each result rounds once.
#include <cmath>

#include "ir/eval/kernel_util.h"

namespace kiln::eval {
namespace {

using Inputs = std::vector<const ir::Tensor*>;
using Results = std::vector<ir::Tensor>;

// torch.optim.SGD, with the momentum buffer carried by the caller (zeros before step 1; see
// ir/ops/optimizer.cpp for why that matches PyTorch when dampening is 0).
Results sgd_update(const ir::Node& node, const Inputs& in) {
  const double lr = ref::attr_float(node, "lr");
  const double momentum = ref::attr_float(node, "momentum");
  const double dampening = ref::attr_float(node, "dampening");
  const double weight_decay = ref::attr_float(node, "weight_decay");
  const bool nesterov = ref::attr_bool(node, "nesterov");
  std::vector<double> param = in[0]->to_doubles();
  const std::vector<double> grad = in[1]->to_doubles();
  const bool has_buffer = in.size() == 3;
  std::vector<double> buffer = has_buffer ? in[2]->to_doubles() : std::vector<double>();
  for (size_t i = 0; i < param.size(); ++i) {
    double d = grad[i] + weight_decay * param[i];
    if (has_buffer) {
      buffer[i] = momentum * buffer[i] + (1 - dampening) * d;
      d = nesterov ? d + momentum * buffer[i] : buffer[i];
    }
    param[i] -= lr * d;
  }
  Results results{ref::make_result(node, param)};
  if (has_buffer) results.push_back(ref::make_result(node, buffer, 1));
  return results;
}

// torch.optim.Adam (decoupled = false: weight decay joins the gradient) and AdamW (decoupled:
// the parameter decays by lr * weight_decay before the step).
Results adam_update(const ir::Node& node, const Inputs& in, bool decoupled) {
  const double lr = ref::attr_float(node, "lr");
  const double beta1 = ref::attr_float(node, "beta1");
  const double beta2 = ref::attr_float(node, "beta2");
  const double eps = ref::attr_float(node, "eps");
  const double weight_decay = ref::attr_float(node, "weight_decay");
  const double step = in[4]->get(0);
  // Step 0 would divide by a zero bias correction; on the GPU it silently makes NaNs.
  if (!(step >= 1)) ref::node_error(node, "step must be >= 1 (steps count from 1), got " +
                                              std::to_string(step));
  std::vector<double> param = in[0]->to_doubles();
  const std::vector<double> grad = in[1]->to_doubles();
  std::vector<double> m = in[2]->to_doubles();
  std::vector<double> v = in[3]->to_doubles();
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  const double step_size = lr / bias_correction1;
  for (size_t i = 0; i < param.size(); ++i) {
    double g = grad[i];
    if (decoupled)
      param[i] *= 1 - lr * weight_decay;
    else
      g += weight_decay * param[i];
    m[i] = beta1 * m[i] + (1 - beta1) * g;
    v[i] = beta2 * v[i] + (1 - beta2) * g * g;
    const double denom = std::sqrt(v[i]) / std::sqrt(bias_correction2) + eps;
    param[i] -= step_size * m[i] / denom;
  }
  return {ref::make_result(node, param), ref::make_result(node, m, 1),
          ref::make_result(node, v, 2)};
}

}  // namespace

void add_optimizer_kernels(KernelTable& table) {
  table[ir::OpId::SgdUpdate] = sgd_update;
  table[ir::OpId::AdamUpdate] = [](const ir::Node& node, const Inputs& in) {
    return adam_update(node, in, /*decoupled=*/false);
  };
  table[ir::OpId::AdamwUpdate] = [](const ir::Node& node, const Inputs& in) {
    return adam_update(node, in, /*decoupled=*/true);
  };
}

}  // namespace kiln::eval
