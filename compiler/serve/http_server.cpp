#include "compiler/serve/http_server.h"

#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fmt/format.h>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "ir/diagnostic.h"

namespace kiln::serve {

using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

// The stop-signal watcher's state: a signal arrived, and the server it must stop.
std::atomic<int> g_signal{0};
std::mutex g_server_mutex;
std::shared_ptr<httplib::Server> g_server;  // while serve() listens

// When the request being handled on this thread arrived (set before routing, read by the logger).
thread_local Clock::time_point t_request_start;
// The body's size, for the log, when a handler read it itself (req.body is empty then).
thread_local size_t t_request_bytes = 0;

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void send_error(httplib::Response& res, int status, std::string_view message) {
  send_json(res, status, error_json(message));
}

// The access log: one JSON object per request, written whole under a lock.
class AccessLog {
 public:
  explicit AccessLog(const std::string& target) {
    if (target == "-") {
      file_ = stderr;
    } else if (!target.empty()) {
      file_ = std::fopen(target.c_str(), "a");
      if (!file_) throw Error("--access-log " + target, "cannot open the file for appending");
      owned_ = true;
    }
  }
  ~AccessLog() {
    if (owned_) std::fclose(file_);
  }
  void write(const httplib::Request& req, const httplib::Response& res, double seconds) {
    if (!file_) return;
    char time[32];
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    std::strftime(time, sizeof time, "%Y-%m-%dT%H:%M:%SZ", &utc);
    const std::string line = dump({{"time", time}, {"remote", req.remote_addr}, {"method", req.method},
                                   {"path", req.path}, {"status", res.status},
                                   {"request_bytes", std::max(req.body.size(), t_request_bytes)}, {"response_bytes", res.body.size()},
                                   {"ms", std::round(seconds * 1e5) / 100}}) + "\n";
    std::lock_guard lock(mutex_);
    std::fputs(line.c_str(), file_);
    std::fflush(file_);
  }

 private:
  std::FILE* file_ = nullptr;
  bool owned_ = false;
  std::mutex mutex_;
};


void add_model_routes(httplib::Server& server, ModelRepository& repository, Metrics& metrics) {
  // {name} and an optional /versions/{v}: kiln serves one version of each model, "1".
  const std::string model = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";
  auto find = [&repository](const httplib::Request& req) -> std::shared_ptr<ServedModel> {
    const std::string name = req.matches[1];
    std::shared_ptr<ServedModel> found = repository.find(name);
    if (!found) throw RequestError(404, "no model '" + name + "' is loaded");
    const std::string version = req.matches[2];
    if (!version.empty() && version != found->version())
      throw RequestError(404, fmt::format("model '{}' has no version '{}' (kiln serves version {})", name,
                                          version, found->version()));
    return found;
  };
  auto guarded = [](auto handler) {
    return [handler](const httplib::Request& req, httplib::Response& res) {
      try {
        handler(req, res);
      } catch (const RequestError& error) {
        send_error(res, error.status(), error.what());
      } catch (const Error& error) {
        send_error(res, 500, error.what());
      }
    };
  };

  server.Get(model, guarded([find](const httplib::Request& req, httplib::Response& res) {
    const std::shared_ptr<ServedModel> served = find(req);
    send_json(res, 200, model_metadata_json(served->signature(), served->version()));
  }));
  server.Get(model + "/ready", guarded([find](const httplib::Request& req, httplib::Response& res) {
    send_json(res, 200, dump({{"name", find(req)->signature().name}, {"ready", true}}));
  }));
  // The body comes through a content reader, not req.body: httplib caps a body it reads itself
  // at 8 KB when its Content-Type is application/x-www-form-urlencoded, which is what
  // `curl -d` sends unless told otherwise. --max-body-mb still applies (413).
  server.Post(model + "/infer", [find, &metrics, &repository](const httplib::Request& req, httplib::Response& res,
                                                              const httplib::ContentReader& read_body) {
    const std::string name = req.matches[1];
    bool success = false;
    std::string body;
    const bool whole = read_body([&body](const char* data, size_t length) {
      body.append(data, length);
      return true;
    });
    t_request_bytes = body.size();
    if (!whole) {  // httplib set the status: 413 past --max-body-mb, 400 for a broken body
      if (res.status == 413) send_error(res, 413, "the request body is larger than --max-body-mb allows");
      else send_error(res, 400, "the request body could not be read (a connection cut or a malformed chunk)");
      return;
    }
    try {
      const std::shared_ptr<ServedModel> served = find(req);
      std::optional<size_t> json_length;
      if (req.has_header("Inference-Header-Content-Length")) {
        const std::string value = req.get_header_value("Inference-Header-Content-Length");
        size_t length = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
        if (value.empty() || ec != std::errc() || end != value.data() + value.size())
          throw RequestError(400, "Inference-Header-Content-Length '" + value + "' is not a byte count");
        json_length = length;
      }
      InferRequest request = parse_infer_request(body, json_length, served->signature());
      const std::vector<ir::Tensor> outputs = served->infer(std::move(request.inputs));
      EncodedResponse response = encode_infer_response(served->signature(), served->version(), request, outputs);
      if (response.json_length) {
        res.set_header("Inference-Header-Content-Length", std::to_string(*response.json_length));
        res.set_content(std::move(response.body), "application/octet-stream");
      } else {
        res.set_content(std::move(response.body), "application/json");
      }
      success = true;
    } catch (const RequestError& error) {
      send_error(res, error.status(), error.what());
    } catch (const Error& error) {
      send_error(res, 500, error.what());
    }
    // Only models that exist get a series: an unknown name would let clients grow the page.
    if (repository.find(name)) metrics.request(name, success, std::chrono::duration<double>(Clock::now() - t_request_start).count());
  });
}

void add_repository_routes(httplib::Server& server, ModelRepository& repository) {
  server.Post("/v2/repository/index", [&repository](const httplib::Request&, httplib::Response& res) {
    try {
      json list = json::array();
      for (const ModelStatus& status : repository.index()) {
        json entry = {{"name", status.name}, {"version", "1"}, {"state", status.state}};
        if (!status.reason.empty()) entry["reason"] = status.reason;
        list.push_back(entry);
      }
      send_json(res, 200, dump(list));
    } catch (const Error& error) {
      send_error(res, 500, error.what());
    }
  });
  server.Post(R"(/v2/repository/models/([^/]+)/(load|unload))",
              [&repository](const httplib::Request& req, httplib::Response& res) {
                const std::string name = req.matches[1];
                try {
                  if (req.matches[2] == "load") repository.load(name);
                  else repository.unload(name);
                  send_json(res, 200, "{}");
                } catch (const RequestError& error) {
                  send_error(res, error.status(), error.what());
                } catch (const Error& error) {
                  send_error(res, 400, error.what());  // the model or its config is bad
                }
              });
}

// Waits for SIGTERM and SIGINT (blocked in every other thread): the first asks the server to
// stop, again until it has; a second ends the process at once.
void watch_stop_signals(sigset_t signals) {
  const timespec tick{0, 50'000'000};
  while (true) {
    const int signal = sigtimedwait(&signals, nullptr, &tick);
    if (signal > 0) {
      if (g_signal.exchange(signal) != 0) {
        const char message[] = "kiln serve: second stop signal; exiting at once\n";
        (void)!::write(STDERR_FILENO, message, sizeof message - 1);
        std::_Exit(130);
      }
      std::fprintf(stderr, "kiln serve: %s: draining (answering the requests already received)\n",
                   signal == SIGTERM ? "SIGTERM" : "SIGINT");
    }
    if (g_signal != 0) {
      std::lock_guard lock(g_server_mutex);
      if (g_server) g_server->stop();
    }
  }
}

}  // namespace

void block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread(watch_stop_signals, signals).detach();
}

bool stop_requested() { return g_signal != 0; }

void serve(ModelRepository& repository, Metrics& metrics, const HttpOptions& options,
           const std::function<void(int port)>& ready) {
  auto server = std::make_shared<httplib::Server>();
  AccessLog log(options.access_log);
  const size_t threads = static_cast<size_t>(std::max(options.threads, 1));
  server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // SO_REUSEADDR (a restart binds while the old sockets linger in TIME_WAIT), not httplib's
  // default SO_REUSEPORT: with it a second server on the same port starts without error and
  // the kernel splits the connections between the two.
  server->set_socket_options([](socket_t socket) {
    const int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server->set_payload_max_length(options.max_body_bytes);
  server->set_read_timeout(options.read_timeout_s);
  server->set_write_timeout(options.write_timeout_s);
  server->set_keep_alive_timeout(options.keep_alive_timeout_s);
  server->set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
    t_request_start = Clock::now();
    t_request_bytes = 0;
    return httplib::Server::HandlerResponse::Unhandled;
  });
  server->set_logger([&log](const httplib::Request& req, const httplib::Response& res) {
    log.write(req, res, std::chrono::duration<double>(Clock::now() - t_request_start).count());
  });
  // Statuses httplib sets itself (404 for no route, 413 past the body limit, 400 for a
  // malformed request line) get a JSON body like every other error.
  server->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) send_error(res, 404, "no endpoint " + req.method + " " + req.path);
    else if (res.status == 413) send_error(res, 413, "the request body is larger than --max-body-mb allows");
    else send_error(res, res.status, fmt::format("HTTP status {}", res.status));
  });
  server->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      send_error(res, 500, std::string("internal error: ") + e.what());
    } catch (...) {
      send_error(res, 500, "internal error");
    }
  });

  server->Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, R"({"live":true})");
  });
  server->Get("/v2/health/ready", [](const httplib::Request&, httplib::Response& res) {
    const bool draining = g_signal != 0;
    send_json(res, draining ? 503 : 200, draining ? R"({"ready":false})" : R"({"ready":true})");
  });
  server->Get("/v2", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, dump({{"name", "kiln"}, {"version", KILN_VERSION},
                              {"extensions", {"binary_tensor_data", "model_repository"}}}));
  });
  server->Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  });
  add_model_routes(*server, repository, metrics);
  add_repository_routes(*server, repository);

  const int port = options.port == 0 ? server->bind_to_any_port(options.host)
                                     : (server->bind_to_port(options.host, options.port) ? options.port : -1);
  if (port < 0)
    throw Error(fmt::format("{}:{}", options.host, options.port),
                "cannot listen there (the port is in use, or the address is not this machine's)");
  {
    std::lock_guard lock(g_server_mutex);
    g_server = server;
  }
  if (g_signal == 0) {  // a signal during the loads: drain at once
    ready(port);
    server->listen_after_bind();  // until stop(); its pool answers every request it accepted
  }
  {
    std::lock_guard lock(g_server_mutex);
    g_server.reset();
  }
  repository.stop_all();
}

}  // namespace kiln::serve
