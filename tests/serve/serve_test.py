#!/usr/bin/env python3
"""`kiln serve` end to end: a real server on 127.0.0.1 (an ephemeral port), called with
Python's urllib and with curl, on the host backend.

Checks the Open Inference Protocol's endpoints, that answers equal `kiln run`'s bit for bit
(JSON, nested JSON and binary tensors), that concurrent requests are batched and each still
gets its own rows, the errors (400, 404, 413, 503) and that the server lives on after them,
/metrics and the access log, a model repository with load and unload, and the drain on SIGTERM.

Usage: serve_test.py --kiln BUILD/kiln --work DIR
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

import numpy as np

KILN = None
WORK = None
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def write_models(work):
    """mlp.json with a dynamic batch (<= 8), and static.json: one dense layer at batch 1."""
    mlp = json.loads((EXAMPLES / "mlp.json").read_text())
    mlp["dims"] = {"batch": 8}
    mlp["inputs"][0]["shape"][0] = "batch"
    (work / "mlp.json").write_text(json.dumps(mlp))
    static = {"format": "kiln.model", "version": 1, "name": "static",
              "inputs": [{"name": "v", "shape": [1, 4]}],
              "parameters": [{"name": "w", "shape": [3, 4], "init": {"kind": "glorot_uniform", "seed": 3}},
                             {"name": "b", "shape": [3], "init": {"kind": "zeros"}}],
              "nodes": [{"op": "dense", "name": "fc", "inputs": ["v", "w", "b"]}], "outputs": ["fc"]}
    (work / "static.json").write_text(json.dumps(static))


class Server:
    """`kiln serve ARGS --port 0`, up once it prints the port it listens on."""

    def __init__(self, *args, env=None):
        self.log = WORK / f"serve-{time.monotonic_ns()}.err"
        self.stderr = open(self.log, "w")
        environment = dict(os.environ, KILN_CACHE_DIR=str(WORK / "cache"), **(env or {}))
        self.process = subprocess.Popen([KILN, "serve", *map(str, args), "--port", "0"], stdout=subprocess.PIPE,
                                        stderr=self.stderr, text=True, env=environment)
        line = self.process.stdout.readline()  # blocks until the server listens, or exits
        match = re.search(r"listening on (http://[\d.]+:\d+)", line)
        if not match:
            self.process.wait(timeout=60)
            raise AssertionError(f"kiln serve did not start (exit {self.process.returncode}):\n{self.errors()}")
        self.url = match.group(1)

    def errors(self):
        self.stderr.flush()
        return self.log.read_text()

    def stop(self, signal_it=True):
        """SIGTERM (unless sent already: a second one ends the server at once); the exit code."""
        if signal_it and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=60)
        self.stderr.flush()
        return code

    def request(self, path, body=None, headers=None, method=None):
        """(status, headers, body bytes)."""
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read()

    def json(self, path, body=None, method=None):
        status, _, payload = self.request(path, body, method=method)
        return status, json.loads(payload) if payload else None

    def infer(self, model, inputs, **extra):
        return self.json(f"/v2/models/{model}/infer", {"inputs": inputs, **extra})


def fp32_input(name, array, nested=False):
    data = array.tolist() if nested else array.ravel().tolist()
    return {"name": name, "datatype": "FP32", "shape": list(array.shape), "data": data}


def kiln_run(model, **inputs):
    """The model's first output from `kiln run --backend=host` on .npy inputs."""
    out = WORK / f"run-{time.monotonic_ns()}"
    flags = []
    for name, array in inputs.items():
        np.save(out.with_suffix(f".{name}.npy"), array)
        flags += ["-i", f"{name}={out.with_suffix(f'.{name}.npy')}"]
    subprocess.run([KILN, "run", str(model), "--backend=host", *flags, "-o", str(out)], check=True,
                   stdout=subprocess.DEVNULL, env=dict(os.environ, KILN_CACHE_DIR=str(WORK / "cache")))
    return np.load(next(out.glob("*.npy")))


def rows(seed, count):
    return np.random.default_rng(seed).standard_normal((count, 784), dtype=np.float32)


class ServeOneModel(unittest.TestCase):
    """One model file, batching up to 8 rows within 100 ms, two instances."""

    @classmethod
    def setUpClass(cls):
        cls.access_log = WORK / "access.log"
        cls.server = Server(WORK / "mlp.json", "--backend=host", "--max-batch", 8, "--max-queue-delay-ms", 100,
                            "--instances", 2, "--access-log", cls.access_log)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        assert code == 0, f"kiln serve exited {code}:\n{cls.server.errors()}"

    def test_health_and_metadata(self):
        self.assertEqual(self.server.json("/v2/health/live"), (200, {"live": True}))
        self.assertEqual(self.server.json("/v2/health/ready"), (200, {"ready": True}))
        status, server = self.server.json("/v2")
        self.assertEqual((status, server["name"]), (200, "kiln"))
        self.assertIn("binary_tensor_data", server["extensions"])
        status, meta = self.server.json("/v2/models/mlp")
        self.assertEqual(status, 200)
        self.assertEqual(meta["inputs"], [{"name": "x", "datatype": "FP32", "shape": [-1, 784]}])
        self.assertEqual(meta["outputs"], [{"name": "log_probs", "datatype": "FP32", "shape": [-1, 10]}])
        self.assertEqual(self.server.json("/v2/models/mlp/versions/1/ready"), (200, {"name": "mlp", "ready": True}))
        status, error = self.server.json("/v2/models/mlp/versions/2")
        self.assertEqual(status, 404)
        self.assertIn("no version '2'", error["error"])

    def test_answers_equal_kiln_run(self):
        x = rows(1, 3)
        expected = kiln_run(WORK / "mlp.json", x=x)
        status, response = self.server.infer("mlp", [fp32_input("x", x)], id="r1")
        self.assertEqual(status, 200, response)
        self.assertEqual((response["id"], response["model_name"], response["model_version"]), ("r1", "mlp", "1"))
        (output,) = response["outputs"]
        self.assertEqual((output["name"], output["datatype"], output["shape"]), ("log_probs", "FP32", [3, 10]))
        np.testing.assert_array_equal(np.array(output["data"], np.float32).reshape(3, 10), expected)
        # Nested data, as the shape.
        status, nested = self.server.infer("mlp", [fp32_input("x", x, nested=True)])
        self.assertEqual(status, 200, nested)
        self.assertEqual(nested["outputs"][0]["data"], output["data"])

    def test_binary_tensor_data(self):
        x = rows(2, 2)
        expected = kiln_run(WORK / "mlp.json", x=x)
        header = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 784],
                                         "parameters": {"binary_data_size": x.nbytes}}],
                             "outputs": [{"name": "log_probs", "parameters": {"binary_data": True}}]}).encode()
        status, headers, body = self.server.request(
            "/v2/models/mlp/infer", header + x.tobytes(),
            headers={"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"})
        self.assertEqual(status, 200, body)
        length = int(headers["Inference-Header-Content-Length"])
        meta = json.loads(body[:length])
        self.assertEqual(meta["outputs"][0]["parameters"], {"binary_data_size": 80})
        got = np.frombuffer(body[length:], np.float32).reshape(2, 10)
        np.testing.assert_array_equal(got, expected)

    def test_concurrent_requests_are_batched_and_keep_their_rows(self):
        before = self.metric("kiln_inference_runs_total")
        inputs = [rows(10 + i, 1 + i % 3) for i in range(16)]
        expected = kiln_run(WORK / "mlp.json", x=np.concatenate(inputs[:4]))  # the first 4 requests' 7 rows at once
        solo = [kiln_run(WORK / "mlp.json", x=x) for x in inputs[:3]]
        barrier = threading.Barrier(16)

        def call(x):
            barrier.wait()
            return self.server.infer("mlp", [fp32_input("x", x)])

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(call, inputs))
        for x, (status, response) in zip(inputs, answers):
            self.assertEqual(status, 200, response)
            self.assertEqual(response["outputs"][0]["shape"], [len(x), 10])
        for i in range(3):  # a request's rows are what it would get alone
            got = np.array(answers[i][1]["outputs"][0]["data"], np.float32).reshape(-1, 10)
            np.testing.assert_array_equal(got, solo[i])
        got = np.concatenate([np.array(a[1]["outputs"][0]["data"], np.float32).reshape(-1, 10) for a in answers[:4]])
        np.testing.assert_array_equal(got, expected)
        runs = self.metric("kiln_inference_runs_total") - before
        self.assertLess(runs, 16, "16 concurrent requests within 100 ms should share runs")
        self.assertGreaterEqual(runs, 4, "at most 8 rows per run: 32 rows need 4 runs or more")

    def test_bad_requests_get_400_and_the_server_lives_on(self):
        cases = [
            (b'{"inputs": [', "not valid JSON"),
            ({"inputs": [{"name": "x", "datatype": "INT32", "shape": [1, 784], "data": [0] * 784}]},
             "datatype \"INT32\" does not match the model's FP32"),
            ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [9, 784], "data": [0] * 9 * 784}]},
             "shape [9,784] does not fit the model's [1..8,784]"),
            ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 784], "data": [0] * 783}]},
             "holds 783 elements; shape [1,784] needs 784"),
            ({"inputs": [{"name": "y", "datatype": "FP32", "shape": [1], "data": [0]}]}, "has no input \"y\""),
            ({"inputs": []}, "input 'x' is missing"),
            ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 784], "data": ["a"] * 784}]},
             "FP32 data must be numbers"),
            ({"inputs": [fp32_input("x", rows(0, 1))], "outputs": [{"name": "z"}]}, "has no output \"z\""),
        ]
        for body, message in cases:
            status, _, payload = self.server.request("/v2/models/mlp/infer", body if isinstance(body, bytes)
                                                     else json.dumps(body).encode())
            self.assertEqual(status, 400, (body if isinstance(body, bytes) else "", payload))
            self.assertIn(message, json.loads(payload)["error"])
        status, error = self.server.infer("nope", [])
        self.assertEqual((status, error), (404, {"error": "no model 'nope' is loaded"}))
        status, error = self.server.json("/v3/anything")
        self.assertEqual((status, error), (404, {"error": "no endpoint GET /v3/anything"}))
        self.assertEqual(self.server.infer("mlp", [fp32_input("x", rows(0, 1))])[0], 200)
        self.assertGreater(self.metric("kiln_inference_failures_total"), 0)

    def test_curl(self):
        """curl -d sends application/x-www-form-urlencoded, which httplib caps at 8 KB unless the
        route reads the body itself: a 1-row request is 13 KB."""
        request = WORK / "curl_request.json"
        x = rows(3, 1)
        request.write_text(json.dumps({"inputs": [fp32_input("x", x)]}))
        result = subprocess.run(["curl", "-s", "-S", "-d", f"@{request}", self.server.url + "/v2/models/mlp/infer"],
                                capture_output=True, text=True, check=True)
        data = json.loads(result.stdout)["outputs"][0]["data"]
        np.testing.assert_array_equal(np.array(data, np.float32).reshape(1, 10), kiln_run(WORK / "mlp.json", x=x))

    def test_metrics_and_access_log(self):
        self.server.infer("mlp", [fp32_input("x", rows(0, 1))])
        status, _, page = self.server.request("/metrics")
        text = page.decode()
        self.assertEqual(status, 200)
        for line in ("# TYPE kiln_request_duration_seconds histogram", "# TYPE kiln_batch_requests histogram",
                     'kiln_queue_duration_seconds_bucket{model="mlp",le="+Inf"}',
                     'kiln_inference_requests_total{model="mlp"}'):
            self.assertIn(line, text)
        entries = [json.loads(line) for line in self.access_log.read_text().splitlines()]
        infer = [e for e in entries if e["path"] == "/v2/models/mlp/infer" and e["status"] == 200]
        self.assertTrue(infer)
        self.assertEqual(set(infer[0]), {"time", "remote", "method", "path", "status", "request_bytes",
                                         "response_bytes", "ms"})
        self.assertGreater(infer[0]["request_bytes"], 784)

    def test_a_port_in_use_is_an_error(self):
        port = self.server.url.rsplit(":", 1)[1]
        result = subprocess.run([KILN, "serve", str(WORK / "mlp.json"), "--backend=host", "--port", port],
                                capture_output=True, text=True, timeout=120,
                                env=dict(os.environ, KILN_CACHE_DIR=str(WORK / "cache")))
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn(f"127.0.0.1:{port}: error: cannot listen there", result.stderr)

    def metric(self, name):
        text = self.server.request("/metrics")[2].decode()
        return int(re.search(rf'^{name}{{model="mlp"}} (\d+)$', text, re.M).group(1))


class ServeLimits(unittest.TestCase):
    def test_body_limit_413_and_queue_timeout_503(self):
        server = Server(WORK / "mlp.json", "--backend=host", "--max-body-mb", 0.01, "--max-queue-delay-ms", 400,
                        "--queue-timeout-ms", 50, "--access-log", "")
        try:
            status, error = server.infer("mlp", [fp32_input("x", rows(0, 2))])  # 30 KB > 10 KB
            self.assertEqual(status, 413)
            self.assertIn("--max-body-mb", error["error"])
            small = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 784], "data": [0] * 784}]}
            status, error = server.json("/v2/models/mlp/infer", small)
            self.assertEqual(status, 503, error)
            self.assertIn("past the 50 ms timeout", error["error"])
        finally:
            self.assertEqual(server.stop(), 0)

    def test_sigterm_drains_requests_in_flight(self):
        # A lone request waits up to 1.5 s for company; SIGTERM arrives while it waits.
        server = Server(WORK / "mlp.json", "--backend=host", "--max-queue-delay-ms", 1500, "--access-log", "")
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(server.infer, "mlp", [fp32_input("x", rows(4, 1))])
            time.sleep(0.5)
            server.process.send_signal(signal.SIGTERM)
            status, response = pending.result(timeout=60)
        self.assertEqual(status, 200, response)
        self.assertEqual(server.stop(signal_it=False), 0)
        self.assertIn("SIGTERM: draining", server.errors())
        with self.assertRaises(urllib.error.URLError):
            urllib.request.urlopen(server.url + "/v2/health/live", timeout=5)

    def test_startup_errors(self):
        def serve(*args):
            return subprocess.run([KILN, "serve", *map(str, args)], capture_output=True, text=True, timeout=120,
                                  env=dict(os.environ, KILN_CACHE_DIR=str(WORK / "cache")))
        missing = serve(WORK / "missing.json")
        self.assertEqual(missing.returncode, 1)
        self.assertIn("missing.json: error: no such model file or repository directory", missing.stderr)
        self.assertEqual(serve(WORK / "mlp.json", "--port", "70000").returncode, 2)
        self.assertEqual(serve(WORK / "mlp.json", "--max-batch", "0").returncode, 2)
        broken = WORK / "broken_repo" / "m"
        broken.mkdir(parents=True, exist_ok=True)
        (broken / "config.json").write_text('{"model": "../../mlp.json", "max_batch": "eight"}')
        result = serve(broken.parent, "--backend=host")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("config.json: /max_batch: error: must be an integer >= 1, got \"eight\"", result.stderr)


class ServeImported(unittest.TestCase):
    def test_onnx_symbolic_batch_becomes_the_batched_dim(self):
        """An ONNX model whose input is [N, 4]: with no --dim, N becomes the dynamic batch (<= 8)."""
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Relu", ["xw"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [numpy_helper.from_array(w, "w")])
        path = WORK / "linear.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
        server = Server(path, "--backend=host", "--access-log", "")
        try:
            status, meta = server.json("/v2/models/linear")
            self.assertEqual(meta["inputs"], [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}])
            self.assertIn("'linear' batches up to 8 rows", server.errors())
            x = np.random.default_rng(5).standard_normal((3, 4), dtype=np.float32)
            status, response = server.infer("linear", [fp32_input("x", x)])
            self.assertEqual(status, 200, response)
            got = np.array(response["outputs"][0]["data"], np.float32).reshape(3, 3)
            np.testing.assert_allclose(got, np.maximum(x @ w, 0), rtol=1e-6, atol=1e-6)
        finally:
            self.assertEqual(server.stop(), 0)


class ServeRepository(unittest.TestCase):
    def test_repository_load_unload(self):
        repo = WORK / "repo"
        shutil.rmtree(repo, ignore_errors=True)
        (repo / "classifier").mkdir(parents=True)
        (repo / "classifier" / "config.json").write_text(
            json.dumps({"model": "../../mlp.json", "max_batch": 4, "max_queue_delay_ms": 1}))
        shutil.copy(WORK / "static.json", repo / "static.json")
        subprocess.run([KILN, "compile", str(WORK / "mlp.json"), "--arch", "sm_80", "-o", str(repo / "packaged.kiln")],
                       check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, KILN_CACHE_DIR=str(WORK / "cache")))
        server = Server(repo, "--backend=host", "--access-log", "")
        try:
            status, index = server.json("/v2/repository/index", b"", method="POST")
            self.assertEqual(status, 200)
            self.assertEqual([(m["name"], m["state"]) for m in index],
                             [("classifier", "READY"), ("packaged", "READY"), ("static", "READY")])
            # A package serves as its model does, batching included.
            self.assertIn("'packaged' batches up to 8 rows", server.errors())
            x = rows(6, 2)
            status, response = server.infer("packaged", [fp32_input("x", x)])
            self.assertEqual(status, 200, response)
            np.testing.assert_array_equal(np.array(response["outputs"][0]["data"], np.float32).reshape(2, 10),
                                          kiln_run(WORK / "mlp.json", x=x))
            self.assertIn("'classifier' batches up to 4 rows", server.errors())
            self.assertIn("'static' runs each request alone", server.errors())
            v = np.arange(4, dtype=np.float32).reshape(1, 4)
            status, response = server.infer("static", [fp32_input("v", v)])
            self.assertEqual(status, 200, response)
            np.testing.assert_array_equal(np.array(response["outputs"][0]["data"], np.float32).reshape(1, 3),
                                          kiln_run(WORK / "static.json", v=v))
            # A static model takes its exact shape only.
            status, error = server.infer("static", [fp32_input("v", np.zeros((2, 4), np.float32))])
            self.assertEqual(status, 400)
            self.assertIn("does not fit the model's [1,4]", error["error"])

            self.assertEqual(server.json("/v2/repository/models/static/unload", b"", method="POST"), (200, {}))
            self.assertEqual(server.infer("static", [fp32_input("v", v)])[0], 404)
            status, index = server.json("/v2/repository/index", b"", method="POST")
            self.assertEqual(index[2], {"name": "static", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"})
            self.assertEqual(server.json("/v2/repository/models/static/load", b"", method="POST"), (200, {}))
            self.assertEqual(server.infer("static", [fp32_input("v", v)])[0], 200)

            # A model added later with a bad config: the load fails with the config's message.
            (repo / "later").mkdir()
            (repo / "later" / "config.json").write_text('{"model": "../static.json", "instance": 2}')
            status, error = server.json("/v2/repository/models/later/load", b"", method="POST")
            self.assertEqual(status, 400)
            self.assertIn("config.json: /instance: error: unknown setting 'instance'", error["error"])
            status, error = server.json("/v2/repository/models/absent/load", b"", method="POST")
            self.assertEqual(status, 404)
            status, index = server.json("/v2/repository/index", b"", method="POST")
            self.assertEqual((index[1]["name"], index[1]["state"]), ("later", "UNAVAILABLE"))
            self.assertIn("unknown setting", index[1]["reason"])
        finally:
            self.assertEqual(server.stop(), 0)


def main():
    global KILN, WORK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--work", required=True)
    args, rest = parser.parse_known_args()
    KILN = args.kiln
    WORK = pathlib.Path(args.work)
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    write_models(WORK)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
