#!/usr/bin/env python3
"""A bounded load test of `kiln serve` on loopback: the seed CNN (examples/mnist_cnn.json with a
dynamic batch) on the host backend, one image per request, from C concurrent clients with
keep-alive connections, with dynamic batching off (--max-batch 1) and on (--max-batch 16).
Each configuration serves a fixed number of requests (or stops at --seconds); the figures are
throughput, p50 and p99 latency as the clients measured them, and the mean rows per run from
the server's /metrics. Figures only; nothing is asserted.

Usage: /usr/bin/python3 bench/serve_load.py [--kiln build/kiln] [--requests 400] [--clients 16]
                                             [--binary]
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import pathlib
import re
import signal
import subprocess
import tempfile
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def start(kiln, model, cache, *flags):
    process = subprocess.Popen([kiln, "serve", str(model), "--backend=host", "--port", "0", "--access-log", "",
                                *map(str, flags)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, KILN_CACHE_DIR=str(cache)))
    line = process.stdout.readline()
    match = re.search(r"http://([\d.]+):(\d+)", line)
    if not match:
        raise SystemExit(f"kiln serve did not start:\n{process.stderr.read()}")
    return process, match.group(1), int(match.group(2))


def request_body(image, binary):
    if not binary:
        body = json.dumps({"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 1, 28, 28],
                                       "data": image.ravel().tolist()}]}).encode()
        return body, {"Content-Type": "application/json"}
    header = json.dumps({"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 1, 28, 28],
                                     "parameters": {"binary_data_size": image.nbytes}}],
                         "parameters": {"binary_data_output": True}}).encode()
    return header + image.tobytes(), {"Content-Type": "application/octet-stream",
                                      "Inference-Header-Content-Length": str(len(header))}


def load(host, port, bodies, clients, deadline):
    latencies, lock, next_index = [], threading.Lock(), [0]

    def client():
        connection = http.client.HTTPConnection(host, port, timeout=60)
        while time.monotonic() < deadline:
            with lock:
                if next_index[0] >= len(bodies):
                    break
                body, headers = bodies[next_index[0]]
                next_index[0] += 1
            start = time.perf_counter()
            connection.request("POST", "/v2/models/cnn/infer", body, headers)
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise SystemExit(f"request failed: {response.status}")
            with lock:
                latencies.append(time.perf_counter() - start)
        connection.close()

    began = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        for future in [pool.submit(client) for _ in range(clients)]:
            future.result()
    return latencies, time.perf_counter() - began


def rows_per_run(host, port):
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request("GET", "/metrics")
    page = connection.getresponse().read().decode()
    runs = int(re.search(r'^kiln_inference_runs_total\{model="cnn"\} (\d+)$', page, re.M).group(1))
    samples = int(re.search(r'^kiln_inference_samples_total\{model="cnn"\} (\d+)$', page, re.M).group(1))
    return samples / max(runs, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln", default=str(ROOT / "build" / "kiln"))
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=120, help="stop a configuration after this long")
    parser.add_argument("--binary", action="store_true", help="binary tensor data instead of JSON")
    args = parser.parse_args()

    work = pathlib.Path(tempfile.mkdtemp(prefix="kiln-serve-load-"))
    model = json.loads((ROOT / "examples" / "mnist_cnn.json").read_text())
    model["dims"] = {"batch": 16}
    model["inputs"][0]["shape"][0] = "batch"
    (work / "cnn.json").write_text(json.dumps(model))
    images = np.random.default_rng(0).random((args.requests, 1, 1, 28, 28), dtype=np.float32)
    bodies = [request_body(image, args.binary) for image in images]

    print(f"kiln serve, host backend, {os.cpu_count()} cores; seed CNN, 1 image per request, "
          f"{'binary' if args.binary else 'JSON'} tensors; {args.requests} requests from {args.clients} "
          f"clients over loopback\n")
    print(f"{'configuration':<44} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'rows/run':>9}")
    for label, flags in [("no batching (--max-batch 1)", ["--max-batch", 1]),
                         ("dynamic batching (--max-batch 16, 2 ms)", ["--max-batch", 16, "--max-queue-delay-ms", 2])]:
        process, host, port = start(args.kiln, work / "cnn.json", work / "cache", *flags)
        try:
            load(host, port, bodies[:args.clients], args.clients, time.monotonic() + args.seconds)  # warm-up
            latencies, seconds = load(host, port, bodies, args.clients, time.monotonic() + args.seconds)
            per_run = rows_per_run(host, port)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
        ms = np.array(latencies) * 1000
        print(f"{label:<44} {len(latencies) / seconds:8.1f} {np.percentile(ms, 50):8.2f} "
              f"{np.percentile(ms, 99):8.2f} {per_run:9.2f}")


if __name__ == "__main__":
    main()
