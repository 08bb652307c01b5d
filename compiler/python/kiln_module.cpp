// kiln._kiln: the C++ API (<kiln/kiln.h>) for Python, kept thin. The Pythonic layer (keyword
// options, type hints, torch tensors, kiln.compile for torch modules, exception classes) is
// kiln/*.py beside it; this file converts arrays and errors and releases the GIL.
//
// Arrays: an input that is C-contiguous with the model's dtype goes to the model as a view of
// its memory (Model::run_views: no copy on the way in); any other is converted by NumPy first,
// and counted (copy_stats), so that tests can tell. Outputs hand their tensor's buffer to the
// NumPy array that is returned: no copy on the way out either.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <mutex>
#include <ostream>
#include <streambuf>

#include "kiln/kiln.h"

namespace py = pybind11;

namespace {

// Errors reach Python as _kiln.KilnError(location, message, notes); kiln/_errors.py turns them
// into the exception class of the call that raised them.
PyObject* g_kiln_error = nullptr;

std::atomic<int64_t> g_input_copies{0};
std::atomic<int64_t> g_input_bytes_copied{0};

const char* numpy_format(kiln::DType dtype) {
  switch (dtype) {
    case kiln::DType::F32: return "float32";
    case kiln::DType::F16: return "float16";
    case kiln::DType::BF16: return "uint16";  // NumPy has no bfloat16: the raw bits
    case kiln::DType::I32: return "int32";
    case kiln::DType::I64: return "int64";
    case kiln::DType::Bool: return "bool";
    case kiln::DType::F64: return "float64";
    case kiln::DType::I8: return "int8";
    case kiln::DType::U8: return "uint8";
    case kiln::DType::I16: return "int16";
    case kiln::DType::U16: return "uint16";
    case kiln::DType::U32: return "uint32";
    case kiln::DType::U64: return "uint64";
  }
  return "float32";
}

std::optional<kiln::DType> dtype_of(const py::dtype& dtype) {
  for (kiln::DType candidate :
       {kiln::DType::F32, kiln::DType::F16, kiln::DType::I32, kiln::DType::I64, kiln::DType::Bool,
        kiln::DType::F64, kiln::DType::I8, kiln::DType::U8, kiln::DType::I16, kiln::DType::U16,
        kiln::DType::U32, kiln::DType::U64})
    if (dtype.is(py::dtype(numpy_format(candidate)))) return candidate;
  return std::nullopt;
}

// A NumPy array that owns `tensor`'s bytes (moved into a capsule, not copied).
py::array to_numpy(kiln::Tensor tensor) {
  auto* owned = new kiln::Tensor(std::move(tensor));
  py::capsule owner(owned, [](void* p) { delete static_cast<kiln::Tensor*>(p); });
  const py::dtype dtype(numpy_format(owned->dtype()));
  std::vector<py::ssize_t> shape(owned->shape().begin(), owned->shape().end());
  return py::array(dtype, shape, owned->data(), owner);
}

// `array` as a C-contiguous array of `dtype`: itself when it is one (no copy), else NumPy's
// conversion, counted.
py::array contiguous(py::array array, kiln::DType dtype) {
  const py::dtype wanted(numpy_format(dtype));
  if ((array.flags() & py::array::c_style) && array.dtype().is(wanted)) return array;
  py::array converted = py::array::ensure(py::module_::import("numpy").attr("ascontiguousarray")(array, wanted));
  g_input_copies += 1;
  g_input_bytes_copied += static_cast<int64_t>(converted.nbytes());
  return converted;
}

// A tensor owning a copy of a C-contiguous `array` (train_step, fit, parameters).
kiln::Tensor to_tensor(py::array array, kiln::DType dtype) {
  py::array dense = contiguous(std::move(array), dtype);
  std::vector<int64_t> shape(dense.shape(), dense.shape() + dense.ndim());
  kiln::Tensor tensor(dtype, shape);
  if (tensor.byte_size() > 0) std::memcpy(tensor.data(), dense.data(), tensor.byte_size());
  return tensor;
}

// The dtype an array should become for an input of `info`: the input's own, except that f64
// data for an f16/bf16 input stays f64 (kiln rounds it; NumPy cannot make bfloat16).
kiln::DType conversion_for(const kiln::TensorInfo& info, const py::array& array) {
  if ((info.dtype == kiln::DType::BF16 || info.dtype == kiln::DType::F16) &&
      !array.dtype().is(py::dtype(numpy_format(info.dtype))))
    return kiln::DType::F64;
  return info.dtype;
}

// std::cout-like stream that writes to Python's sys.stdout (the progress bar in a notebook),
// taking the GIL for each flush.
class PythonStdoutBuffer : public std::streambuf {
 protected:
  int_type overflow(int_type ch) override {
    if (ch != traits_type::eof()) pending_.push_back(static_cast<char>(ch));
    if (ch == '\n') sync();
    return ch;
  }
  std::streamsize xsputn(const char* data, std::streamsize n) override {
    pending_.append(data, static_cast<size_t>(n));
    return n;
  }
  int sync() override {
    if (pending_.empty()) return 0;
    py::gil_scoped_acquire gil;
    py::object out = py::module_::import("sys").attr("stdout");
    out.attr("write")(py::str(pending_));
    out.attr("flush")();
    pending_.clear();
    return 0;
  }

 private:
  std::string pending_;
};

// A kiln::Model with the lock that keeps two Python threads from running it at once (the GIL is
// released during runs; a Model is not thread-safe).
struct PyModel {
  kiln::Model model;
  std::mutex lock;
};

// `read(model)` under the model's lock, taken without the GIL: a fit in another thread holds
// the lock (and may replace the model) while its progress output takes the GIL.
template <typename F>
auto locked(PyModel& self, F&& read) {
  py::gil_scoped_release release;
  std::lock_guard<std::mutex> guard(self.lock);
  return read(self.model);
}

py::dict info_dict(const kiln::TensorInfo& info) {
  py::dict d;
  d["name"] = info.name;
  d["dtype"] = std::string(kiln::dtype_name(info.dtype));
  d["shape"] = info.shape;
  d["dynamic_dims"] = info.dynamic_dims;
  return d;
}

kiln::Backend backend_of(const std::string& name) {
  if (name == "auto") return kiln::Backend::Auto;
  if (name == "host") return kiln::Backend::Host;
  if (name == "cuda") return kiln::Backend::Cuda;
  throw kiln::Error("backend", "'" + name + "' is not one of auto, cuda, host");
}

std::unique_ptr<PyModel> load(const std::string& path, const std::string& backend, bool use_cache,
                              int opt_level, std::vector<std::string> archs,
                              const std::string& precision,
                              std::map<std::string, std::vector<int64_t>> input_shapes,
                              std::map<std::string, int64_t> dynamic_dims,
                              int64_t train_batch_size, const std::string& optimizer) {
  kiln::Options options;
  options.backend = backend_of(backend);
  options.use_cache = use_cache;
  options.opt_level = opt_level;
  options.archs = std::move(archs);
  options.precision = precision;
  options.input_shapes = std::move(input_shapes);
  options.dynamic_dims = std::move(dynamic_dims);
  options.train_batch_size = train_batch_size;
  if (!optimizer.empty()) options.optimizer = optimizer;
  py::gil_scoped_release release;
  return std::unique_ptr<PyModel>(new PyModel{kiln::Model::load(path, options), {}});
}

py::dict run(PyModel& self, const py::dict& arrays) {
  std::map<std::string, kiln::TensorRef> refs;
  std::vector<py::array> keep;  // the arrays the views point into, alive until the run ends
  const auto [inputs, output_infos] = locked(self, [](kiln::Model& m) { return std::pair(m.inputs(), m.outputs()); });
  for (const kiln::TensorInfo& info : inputs) {
    if (!arrays.contains(info.name)) continue;  // Model::run_views names what is missing
    py::array given = py::array::ensure(arrays[py::str(info.name)]);
    if (!given) {
      PyErr_Clear();
      throw kiln::Error("input '" + info.name + "'", "is not an array (nor convertible to one)");
    }
    py::array array = contiguous(given, conversion_for(info, given));
    const std::optional<kiln::DType> dtype = dtype_of(array.dtype());
    if (!dtype) throw kiln::Error("input '" + info.name + "'", "an array of an unsupported dtype");
    refs[info.name] = {*dtype, std::vector<int64_t>(array.shape(), array.shape() + array.ndim()), array.data()};
    keep.push_back(std::move(array));
  }
  for (const auto& [name, value] : arrays)
    if (refs.count(name.cast<std::string>()) == 0) refs[name.cast<std::string>()] = {};
  std::map<std::string, kiln::Tensor> outputs;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> guard(self.lock);
    bool any_f64 = false;
    for (const auto& [name, ref] : refs) any_f64 |= ref.dtype == kiln::DType::F64 && ref.data;
    if (!any_f64) {
      outputs = self.model.run_views(refs);
    } else {
      // f64 data for an f16/bf16 input: the API rounds it (set_input); the others bound as views' copies.
      std::map<std::string, kiln::Tensor> tensors;
      for (const auto& [name, ref] : refs) {
        kiln::Tensor tensor(ref.dtype, ref.shape);
        if (ref.data && tensor.byte_size() > 0) std::memcpy(tensor.data(), ref.data, tensor.byte_size());
        tensors[name] = std::move(tensor);
      }
      outputs = self.model.run(tensors);
    }
  }
  py::dict result;
  for (const kiln::TensorInfo& info : output_infos)
    result[py::str(info.name)] = to_numpy(std::move(outputs.at(info.name)));
  return result;
}

py::dict fit(PyModel& self, py::array x, py::array y, int64_t epochs, int64_t batch_size,
             const std::string& optimizer, double lr, double momentum, double weight_decay,
             uint64_t seed, std::optional<py::array> val_x, std::optional<py::array> val_y,
             const std::string& checkpoint, const std::string& resume, bool progress) {
  kiln::FitOptions options;
  const kiln::DType sample_type = locked(self, [](kiln::Model& m) { return m.inputs().at(0).dtype; });
  const bool tokens = sample_type == kiln::DType::I32 || sample_type == kiln::DType::I64;
  const kiln::DType x_type = tokens ? kiln::DType::I32 : kiln::DType::F32;
  const kiln::Tensor x_tensor = to_tensor(std::move(x), x_type);
  const kiln::Tensor y_tensor = to_tensor(std::move(y), kiln::DType::I64);
  if (val_x) options.validation_x = to_tensor(*val_x, x_type);
  if (val_y) options.validation_y = to_tensor(*val_y, kiln::DType::I64);
  options.epochs = epochs;
  options.batch_size = batch_size;
  options.optimizer = optimizer;
  options.lr = lr;
  options.momentum = momentum;
  options.weight_decay = weight_decay;
  options.seed = seed;
  options.checkpoint = checkpoint;
  options.resume = resume;
  options.progress = progress;
  PythonStdoutBuffer buffer;
  std::ostream out(&buffer);
  options.out = &out;
  kiln::FitHistory history;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> guard(self.lock);
    try {
      history = self.model.fit(x_tensor, y_tensor, options);
    } catch (...) {
      out.flush();
      throw;
    }
    out.flush();
  }
  py::list epochs_list;
  for (const kiln::EpochStats& e : history.epochs) {
    py::dict d;
    d["epoch"] = e.epoch;
    d["loss"] = e.loss;
    d["accuracy"] = e.accuracy;
    if (e.val_accuracy >= 0) d["val_accuracy"] = e.val_accuracy;
    d["seconds"] = e.seconds;
    d["samples_per_second"] = e.samples_per_second;
    epochs_list.append(d);
  }
  py::dict result;
  result["epochs"] = epochs_list;
  result["steps"] = history.steps;
  result["seconds"] = history.seconds;
  return result;
}

}  // namespace

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "kiln's C++ API, thin; use the kiln package above it.";
  static py::exception<kiln::Error> error(m, "KilnError");
  g_kiln_error = error.ptr();
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const kiln::Interrupted&) {
      PyErr_SetNone(PyExc_KeyboardInterrupt);
    } catch (const kiln::Error& e) {
      // A Ctrl-C while the call ran (the GIL released, Python's handler only noted it; from a
      // terminal it also stopped the host compiler): the interruption is the news.
      if (PyErr_CheckSignals() != 0) return;
      const kiln::Diagnostic& d = e.diagnostic();
      py::tuple args = py::make_tuple(d.location, d.message, d.notes, std::string(e.what()));
      PyErr_SetObject(g_kiln_error, args.ptr());
    }
  });

  py::class_<PyModel>(m, "Model")
      .def_property_readonly("name", [](PyModel& s) { return locked(s, [](kiln::Model& m) { return m.name(); }); })
      .def_property_readonly("path", [](PyModel& s) { return locked(s, [](kiln::Model& m) { return m.path(); }); })
      .def_property_readonly("backend", [](PyModel& s) { return locked(s, [](kiln::Model& m) { return m.backend(); }); })
      .def_property_readonly("inputs", [](PyModel& s) {
        py::list l;
        for (const auto& i : locked(s, [](kiln::Model& m) { return m.inputs(); })) l.append(info_dict(i));
        return l;
      })
      .def_property_readonly("outputs", [](PyModel& s) {
        py::list l;
        for (const auto& i : locked(s, [](kiln::Model& m) { return m.outputs(); })) l.append(info_dict(i));
        return l;
      })
      .def_property_readonly("can_train", [](PyModel& s) { return locked(s, [](kiln::Model& m) { return m.can_train(); }); })
      .def_property_readonly("train_batch_size", [](PyModel& s) {
        return locked(s, [](kiln::Model& m) { return m.train_batch_size(); });
      })
      .def("run", &run)
      .def("train_step", [](PyModel& s, py::array x, py::array y) {
        const kiln::Tensor batch = to_tensor(std::move(x), locked(s, [](kiln::Model& m) { return m.inputs().at(0).dtype; }));
        const kiln::Tensor labels = to_tensor(std::move(y), kiln::DType::I32);
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> guard(s.lock);
        return s.model.train_step(batch, labels);
      })
      .def("fit", &fit)
      .def("parameters", [](PyModel& s) {
        std::map<std::string, kiln::Tensor> values = locked(s, [](kiln::Model& m) { return m.parameters(); });
        py::dict d;
        for (auto& [name, value] : values) d[py::str(name)] = to_numpy(std::move(value));
        return d;
      })
      .def("set_parameters", [](PyModel& s, const py::dict& arrays) {
        const std::map<std::string, kiln::Tensor> current = locked(s, [](kiln::Model& m) { return m.parameters(); });
        std::map<std::string, kiln::Tensor> values;
        for (const auto& [key, value] : arrays) {
          const std::string name = key.cast<std::string>();
          auto it = current.find(name);
          if (it == current.end()) throw kiln::Error("parameter '" + name + "'", "the model has no such parameter");
          values[name] = to_tensor(py::array::ensure(value), it->second.dtype());
        }
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> guard(s.lock);
        s.model.set_parameters(values);
      })
      .def("report_json", [](PyModel& s) { return locked(s, [](kiln::Model& m) { return m.report_json(); }); })
      .def("save", [](PyModel& s, const std::string& path) {
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> guard(s.lock);
        s.model.save(path);
      });

  m.def("load", &load);
  m.def("load_dataset", [](const std::string& name, const std::string& split, int64_t first) {
    std::pair<kiln::Tensor, kiln::Tensor> data;
    {
      py::gil_scoped_release release;
      data = kiln::load_dataset(name, split, first);
    }
    return py::make_tuple(to_numpy(std::move(data.first)), to_numpy(std::move(data.second)));
  });
  m.def("cache_info", [] {
    const kiln::CacheStats stats = kiln::cache_info();
    py::dict d;
    d["directory"] = stats.directory;
    d["entries"] = stats.entries;
    d["bytes"] = stats.bytes;
    d["max_bytes"] = stats.max_bytes;
    return d;
  });
  m.def("copy_stats", [] {
    py::dict d;
    d["input_copies"] = g_input_copies.load();
    d["input_bytes_copied"] = g_input_bytes_copied.load();
    return d;
  });
}
