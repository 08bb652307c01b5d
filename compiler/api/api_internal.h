// What the API's source files share: conversions between the public types (kiln/kiln.h) and
// kiln's own, and the Model's state.
#pragma once

#include <optional>

#include "ir/tensor.h"
#include "kiln/kiln.h"
#include "runtime/executor/executable.h"
#include "runtime/package/package.h"

namespace kiln::api {

ir::Tensor to_ir(const Tensor& tensor);
ir::DType to_ir(DType dtype);
Tensor from_ir(const ir::Tensor& tensor);
DType from_ir(ir::DType dtype);

// Models from packages already in memory as kiln's own type (model.cpp).
class ModelFactory {
 public:
  // `name` names the package in errors.
  static Model from_package(runtime::Package package, const std::string& name,
                            const Options& options);
  // The package a model holds (its parameters as loaded), for report_json and save.
  static const runtime::Package& package(const Model& model);
  static const Options& options(const Model& model);
};

}  // namespace kiln::api
