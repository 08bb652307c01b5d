// Keras HDF5 files through the HDF5 C library (Debian's libhdf5-dev).
//
// Two layouts (keras/src/legacy/saving/legacy_h5_format.py and keras/src/saving/saving_lib.py):
//   Keras 2 (and Keras 3's legacy .h5): the root's attribute model_config holds the model JSON
//     (whole-model files); weights sit in /model_weights (or the root, for save_weights), whose
//     attribute layer_names lists the layers, each layer group's weight_names its datasets
//     ("conv2d/kernel:0", a path inside the layer's group).
//   Keras 3 .weights.h5: /layers/<layer name>/vars/<i>, the layer's variables in creation order
//     (trainable first), numbered; keras_model.h's weight_order names them.
// Every HDF5 call is checked; HDF5's own error printing is switched off and failures become
// located errors.
#include <hdf5.h>

#include <cstring>

#include "compiler/import/keras/keras_model.h"
#include "ir/diagnostic.h"

namespace kiln::compiler::keras_import {

namespace {

[[noreturn]] void fail(const std::string& message) { throw LayerError{message}; }

// An HDF5 handle closed by its own function.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

constexpr size_t kMaxAttributeBytes = size_t{64} << 20;

bool has_attribute(hid_t object, const char* name) { return H5Aexists(object, name) > 0; }

// A string attribute (one string or a list), fixed-length or variable-length.
std::vector<std::string> read_strings(hid_t object, const char* name, const std::string& where) {
  Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  if (!attribute.ok()) fail(where + ": cannot open attribute '" + name + "'");
  Handle type(H5Aget_type(attribute.get()), H5Tclose);
  Handle space(H5Aget_space(attribute.get()), H5Sclose);
  if (!type.ok() || !space.ok() || H5Tget_class(type.get()) != H5T_STRING)
    fail(where + ": attribute '" + name + "' is not a string");
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  if (count < 0 || count > 1000000) fail(where + ": attribute '" + name + "' has a bad size");
  std::vector<std::string> out;
  if (H5Tis_variable_str(type.get()) > 0) {
    std::vector<char*> pointers(static_cast<size_t>(count), nullptr);
    Handle memory(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(memory.get(), H5T_VARIABLE);
    H5Tset_cset(memory.get(), H5Tget_cset(type.get()));
    if (H5Aread(attribute.get(), memory.get(), pointers.data()) < 0)
      fail(where + ": cannot read attribute '" + name + "'");
    for (char* p : pointers) {
      out.emplace_back(p ? p : "");
      if (p) H5free_memory(p);
    }
    return out;
  }
  const size_t size = H5Tget_size(type.get());
  if (size == 0 || size * static_cast<size_t>(count) > kMaxAttributeBytes)
    fail(where + ": attribute '" + name + "' is too large");
  std::vector<char> bytes(size * static_cast<size_t>(count) + 1, 0);
  Handle memory(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(memory.get(), size);
  H5Tset_strpad(memory.get(), H5T_STR_NULLPAD);
  if (H5Aread(attribute.get(), memory.get(), bytes.data()) < 0) fail(where + ": cannot read attribute '" + name + "'");
  for (hssize_t i = 0; i < count; ++i) {
    const char* start = bytes.data() + static_cast<size_t>(i) * size;
    out.emplace_back(start, strnlen(start, size));
  }
  return out;
}

ir::Tensor read_dataset(hid_t group, const std::string& name, const std::string& where) {
  if (H5Lexists(group, name.c_str(), H5P_DEFAULT) <= 0) fail(where + ": no dataset '" + escape_for_message(name) + "'");
  Handle dataset(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dataset.ok()) fail(where + ": cannot open dataset '" + escape_for_message(name) + "'");
  Handle type(H5Dget_type(dataset.get()), H5Tclose);
  Handle space(H5Dget_space(dataset.get()), H5Sclose);
  const H5T_class_t kind = type.ok() ? H5Tget_class(type.get()) : H5T_NO_CLASS;
  if (kind != H5T_FLOAT && kind != H5T_INTEGER)
    fail(where + ": dataset '" + escape_for_message(name) + "' is not numeric");
  const int rank = space.ok() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  if (rank < 0 || rank > 8) fail(where + ": dataset '" + escape_for_message(name) + "' has a bad rank");
  hsize_t dims[8] = {};
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  ir::Shape shape(dims, dims + rank);
  for (int64_t d : shape)
    if (d < 0 || d > (int64_t{1} << 40)) fail(where + ": dataset '" + escape_for_message(name) + "' is too large");
  if (!ir::checked_num_elements(shape) || ir::num_elements(shape) > (int64_t{1} << 33))
    fail(where + ": dataset '" + escape_for_message(name) + "' is too large");
  ir::Tensor tensor(ir::TensorType{ir::DType::F32, shape});
  if (tensor.num_elements() > 0 &&
      H5Dread(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tensor.data()) < 0)
    fail(where + ": cannot read dataset '" + escape_for_message(name) + "'");
  return tensor;
}

// Keras 2: layer_names on `group`, weight_names on each layer's group.
void read_keras2_weights(hid_t group, WeightStore& store) {
  for (const std::string& layer : read_strings(group, "layer_names", "the weights")) {
    const std::string where = "weights of layer '" + escape_for_message(layer) + "'";
    if (layer.empty() || H5Lexists(group, layer.c_str(), H5P_DEFAULT) <= 0) fail(where + ": no such group");
    Handle layer_group(H5Gopen2(group, layer.c_str(), H5P_DEFAULT), H5Gclose);
    if (!layer_group.ok()) fail(where + ": cannot open its group");
    if (!has_attribute(layer_group.get(), "weight_names")) continue;
    for (const std::string& weight : read_strings(layer_group.get(), "weight_names", where)) {
      // Keyed by the layer's group (a nested model's weights may carry another prefix), and by
      // the path after the layer's own name: "mha/query/kernel:0" is a sublayer's "query/kernel".
      std::string inner = weight;
      const std::string own = layer + "/";
      if (const size_t at = weight.rfind(own); at != std::string::npos && (at == 0 || weight[at - 1] == '/'))
        inner = weight.substr(at + own.size());
      else if (const size_t slash = weight.rfind('/'); slash != std::string::npos)
        inner = weight.substr(slash + 1);
      std::string key = inner;
      if (const size_t colon = key.rfind(':'); colon != std::string::npos) key.erase(colon);
      store.add(layer, key, layer + "/" + inner, read_dataset(layer_group.get(), weight, where));
    }
  }
}

// Keras 3: <group>/vars/<i> of layer `layer`, stored as (layer, "<prefix>#<i>").
void read_vars(hid_t parent, const std::string& group_path, const std::string& layer, const std::string& prefix,
               WeightStore& store) {
  const std::string vars = group_path + "/vars";
  if (H5Lexists(parent, group_path.c_str(), H5P_DEFAULT) <= 0 || H5Lexists(parent, vars.c_str(), H5P_DEFAULT) <= 0) return;
  Handle group(H5Gopen2(parent, vars.c_str(), H5P_DEFAULT), H5Gclose);
  if (!group.ok()) return;
  H5G_info_t info;
  if (H5Gget_info(group.get(), &info) < 0 || info.nlinks > 1000)
    fail("weights of layer '" + escape_for_message(layer) + "': bad vars group");
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const std::string index = std::to_string(i);
    store.add(layer, prefix + "#" + index, group_path + "/vars/" + index,
              read_dataset(group.get(), index, "weights of layer '" + escape_for_message(layer) + "'"));
  }
}

// A layer's sublayers (MultiHeadAttention's query_dense…) keep their variables one level down:
// /layers/<name>/<sublayer>/vars/<i>, stored as (name, "<sublayer>/#<i>").
struct SublayerVisit {
  WeightStore& store;
  const std::string& layer;
  std::string error;  // an exception may not cross HDF5's C frames
};

herr_t visit_sublayer(hid_t layer_group, const char* child, const H5L_info_t*, void* data) {
  auto& visit = *static_cast<SublayerVisit*>(data);
  try {
    if (std::strcmp(child, "vars") != 0) read_vars(layer_group, child, visit.layer, std::string(child) + "/", visit.store);
  } catch (const LayerError& e) {
    visit.error = e.message;
    return -1;
  }
  return 0;
}

herr_t visit_layer(hid_t layers, const char* name, const H5L_info_t*, void* data) {
  auto& [store, error] = *static_cast<std::pair<WeightStore*, std::string*>*>(data);
  try {
    if (H5Lexists(layers, name, H5P_DEFAULT) <= 0) return 0;
    read_vars(layers, name, name, "", *store);
    Handle group(H5Gopen2(layers, name, H5P_DEFAULT), H5Gclose);
    if (!group.ok()) return 0;  // not a group
    const std::string layer = name;
    SublayerVisit visit{*store, layer, {}};
    hsize_t index = 0;
    if (H5Literate(group.get(), H5_INDEX_NAME, H5_ITER_INC, &index, visit_sublayer, &visit) < 0 && !visit.error.empty())
      fail(visit.error);
  } catch (const LayerError& e) {
    *error = e.message;
    return -1;
  }
  return 0;
}

void read_keras3_weights(hid_t file, const char* group, WeightStore& store) {
  Handle layers(H5Gopen2(file, group, H5P_DEFAULT), H5Gclose);
  if (!layers.ok()) fail(std::string("cannot open the group '") + group + "'");
  std::string error;
  std::pair<WeightStore*, std::string*> data{&store, &error};
  hsize_t index = 0;
  if (H5Literate(layers.get(), H5_INDEX_NAME, H5_ITER_INC, &index, visit_layer, &data) < 0)
    fail(error.empty() ? "cannot list the layers' weights" : error);
}

}  // namespace

bool looks_like_hdf5(std::string_view head) { return head.starts_with("\x89HDF\r\n\x1a\n"); }

KerasHdf5 read_keras_hdf5(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported by kiln, located
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) fail("cannot open it as an HDF5 file (damaged or truncated?)");
  KerasHdf5 result;
  if (has_attribute(file.get(), "model_config")) {
    const auto config = read_strings(file.get(), "model_config", "the file");
    if (config.size() != 1) fail("attribute model_config must be one string");
    result.model_config = config[0];
  }
  if (H5Lexists(file.get(), "model_weights", H5P_DEFAULT) > 0) {
    Handle weights(H5Gopen2(file.get(), "model_weights", H5P_DEFAULT), H5Gclose);
    if (!weights.ok()) fail("cannot open the group 'model_weights'");
    read_keras2_weights(weights.get(), result.weights);
  } else if (has_attribute(file.get(), "layer_names")) {
    read_keras2_weights(file.get(), result.weights);
  } else if (H5Lexists(file.get(), "layers", H5P_DEFAULT) > 0) {
    read_keras3_weights(file.get(), "layers", result.weights);
  } else if (H5Lexists(file.get(), "_layer_checkpoint_dependencies", H5P_DEFAULT) > 0) {
    // The same layout in TensorFlow 2.12-2.15's Keras (its first .keras format).
    read_keras3_weights(file.get(), "_layer_checkpoint_dependencies", result.weights);
  } else if (result.model_config.empty()) {
    fail("neither a Keras model (attribute model_config) nor Keras weights (model_weights, layer_names or layers/)");
  }
  return result;
}

}  // namespace kiln::compiler::keras_import
