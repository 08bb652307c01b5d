// Writes a TensorFlow.js layers model (model.json + weights.bin, from make_models.js) as the
// Keras HDF5 files that kiln reads, with the HDF5 C library (no h5py on the test machines):
//   OUT/model.h5                  Keras 2 whole model: attribute model_config (variable-length
//                                 string), /model_weights with layer_names and each layer's
//                                 weight_names (fixed-length, null-padded, as h5py writes them)
//                                 and datasets at <layer>/<layer>/<weight>:0
//   OUT/keras3/model.json         the model JSON (model.to_json())
//   OUT/keras3/model.weights.h5   Keras 3 weights: /layers/<layer>/vars/<i> in creation order
//                                 (a sublayer's: /layers/<layer>/<sublayer>_dense/vars/<i>)
// Usage: write_keras_h5 MODEL_DIR OUT_DIR
#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

using json = nlohmann::json;

struct Weight {
  std::string layer, name;  // "conv_a", "kernel"
  std::vector<hsize_t> shape;
  std::vector<float> values;
};

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "write_keras_h5: " << what << " failed\n";
    std::exit(1);
  }
}

void write_strings(hid_t object, const char* name, const std::vector<std::string>& values) {
  size_t size = 1;
  for (const auto& v : values) size = std::max(size, v.size());
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, size);
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  std::vector<char> bytes(size * values.size() + 1, 0);
  for (size_t i = 0; i < values.size(); ++i) std::copy(values[i].begin(), values[i].end(), bytes.begin() + i * size);
  hsize_t count = values.size();
  hid_t space = H5Screate_simple(1, &count, nullptr);
  hid_t attribute = H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  check(attribute >= 0 && H5Awrite(attribute, type, bytes.data()) >= 0, std::string("attribute ") + name);
  H5Aclose(attribute);
  H5Sclose(space);
  H5Tclose(type);
}

void write_vlen_string(hid_t object, const char* name, const std::string& value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attribute = H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  const char* data = value.c_str();
  check(attribute >= 0 && H5Awrite(attribute, type, &data) >= 0, std::string("attribute ") + name);
  H5Aclose(attribute);
  H5Sclose(space);
  H5Tclose(type);
}

void write_dataset(hid_t group, const std::string& path, const Weight& w) {
  hid_t links = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(links, 1);
  hid_t space = H5Screate_simple(static_cast<int>(w.shape.size()), w.shape.data(), nullptr);
  hid_t dataset = H5Dcreate2(group, path.c_str(), H5T_IEEE_F32LE, space, links, H5P_DEFAULT, H5P_DEFAULT);
  check(dataset >= 0 && H5Dwrite(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, w.values.data()) >= 0,
        "dataset " + path);
  H5Dclose(dataset);
  H5Sclose(space);
  H5Pclose(links);
}

hid_t group(hid_t parent, const std::string& path) {
  hid_t links = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(links, 1);
  hid_t g = H5Gcreate2(parent, path.c_str(), links, H5P_DEFAULT, H5P_DEFAULT);
  H5Pclose(links);
  check(g >= 0, "group " + path);
  return g;
}

// Creation order of a layer's variables (trainable first), as Keras 3 numbers them.
int creation_rank(std::string name) {
  name = name.substr(name.rfind('/') + 1);  // a sublayer's "query/kernel"
  static const std::vector<std::string> order = {"kernel", "depthwise_kernel", "pointwise_kernel", "bias",
                                                 "gamma", "beta", "moving_mean", "moving_variance"};
  return static_cast<int>(std::find(order.begin(), order.end(), name) - order.begin());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: write_keras_h5 MODEL_DIR OUT_DIR\n";
    return 2;
  }
  const std::filesystem::path in = argv[1], out = argv[2];
  std::ifstream model_file(in / "model.json");
  const json model = json::parse(model_file);
  std::ifstream bin(in / "weights.bin", std::ios::binary);
  std::ostringstream buffer;
  buffer << bin.rdbuf();
  const std::string bytes = buffer.str();
  std::vector<Weight> weights;
  size_t offset = 0;
  for (const json& spec : model.at("weightsManifest").at(0).at("weights")) {
    Weight w;
    const std::string full = spec.at("name");
    // "conv_a/kernel"; a sublayer's weight is "mha/query/kernel" (layer mha, name query/kernel).
    w.layer = full.substr(0, full.find('/'));
    w.name = full.substr(full.find('/') + 1);
    size_t count = 1;
    for (const json& d : spec.at("shape")) {
      w.shape.push_back(d.get<hsize_t>());
      count *= d.get<size_t>();
    }
    w.values.resize(count);
    std::memcpy(w.values.data(), bytes.data() + offset, count * 4);
    offset += count * 4;
    weights.push_back(std::move(w));
  }
  std::vector<std::string> layers;  // every layer, in the model's order
  for (const json& layer : model.at("modelTopology").at("config").at("layers"))
    layers.push_back(layer.contains("name") ? layer.at("name").get<std::string>()
                                            : layer.at("config").at("name").get<std::string>());
  std::filesystem::create_directories(out / "keras3");

  // Keras 2 whole model.
  hid_t file = H5Fcreate((out / "model.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  check(file >= 0, "model.h5");
  write_vlen_string(file, "model_config", model.at("modelTopology").dump());
  write_vlen_string(file, "keras_version", "2.11.0");
  hid_t model_weights = group(file, "model_weights");
  write_strings(model_weights, "layer_names", layers);
  for (const std::string& layer : layers) {
    hid_t g = group(model_weights, layer);
    std::vector<std::string> names;
    for (const Weight& w : weights)
      if (w.layer == layer) {
        names.push_back(layer + "/" + w.name + ":0");
        write_dataset(g, names.back(), w);
      }
    write_strings(g, "weight_names", names);
    H5Gclose(g);
  }
  H5Gclose(model_weights);
  H5Fclose(file);

  // Keras 3: the model JSON and its .weights.h5 beside it.
  std::ofstream(out / "keras3" / "model.json") << model.at("modelTopology").dump();
  file = H5Fcreate((out / "keras3" / "model.weights.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  check(file >= 0, "model.weights.h5");
  for (const std::string& layer : layers) {
    std::vector<const Weight*> own;
    for (const Weight& w : weights)
      if (w.layer == layer) own.push_back(&w);
    std::stable_sort(own.begin(), own.end(),
                     [](const Weight* a, const Weight* b) { return creation_rank(a->name) < creation_rank(b->name); });
    // A sublayer's weights (MultiHeadAttention's query/kernel) go to its own group, named as
    // Keras 3 names MultiHeadAttention's properties: layers/mha/query_dense/vars/<i>.
    std::map<std::string, std::vector<const Weight*>> groups;
    for (const Weight* w : own) {
      const size_t slash = w->name.find('/');
      std::string sub;
      if (slash != std::string::npos) {
        sub = w->name.substr(0, slash);
        sub = (sub == "attention_output" ? "output" : sub) + "_dense/";
      }
      groups[sub].push_back(w);
    }
    for (auto& [sub, members] : groups) {
      hid_t vars = group(file, "layers/" + layer + "/" + sub + "vars");
      for (size_t i = 0; i < members.size(); ++i) write_dataset(vars, std::to_string(i), *members[i]);
      H5Gclose(vars);
    }
  }
  H5Fclose(file);
  return 0;
}
