"""`embedpipe serve` as a process: an index made by `embedpipe index`, graceful SIGTERM, start-up errors."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from support.numerics import cosine
from embedpipe.pipeline.batching.embed import embed_texts
from embedpipe.pipeline.text.tokenizer import make_tokenizer
from support.processes import spawned_children, wait_until_gone
from support.serve_client import ServerProcess, embed, free_port, metric, vectors

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("http_workers", [1, 2])
def test_sigterm_finishes_in_flight_requests_refuses_new_ones_and_exits_0(tmp_path, minilm, texts, http_workers):
    server = ServerProcess(tmp_path / "server.log", "--http-workers", str(http_workers))
    requests = [[f"shutdown {i}-{j}: {texts[(8 * i + j) % len(texts)][:200]}" for j in range(8)] for i in range(24)]
    results, finished_at = {}, {}

    def client(i):
        try:
            results[i] = embed(server.url, input=requests[i])
        except httpx.TransportError as error:
            results[i] = error
        finished_at[i] = time.monotonic()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while not admitted_all(server.url, len(requests)):  # so every request is the server's, answered or in flight
        assert time.monotonic() < deadline, "the requests were never all admitted"
        time.sleep(0.01)
    server.proc.send_signal(signal.SIGTERM)
    signalled_at = time.monotonic()
    late = []  # (sent at, status or the transport error): 503 while admitted requests finish
    for _ in range(3):
        sent_at = time.monotonic()
        try:
            late.append((sent_at, embed(server.url, input="after the signal").status_code))
        except httpx.TransportError as error:
            late.append((sent_at, error))
        time.sleep(0.2)
    for thread in threads:
        thread.join(120)
    # with --http-workers 2 these were reset connections (queued on the engine process's copy of the sockets)
    draining = [outcome for sent_at, outcome in late if sent_at < max(finished_at.values())]
    assert draining and all(outcome == 503 for outcome in draining), late
    assert server.proc.wait(60) == 0, (tmp_path / "server.log").read_text()
    assert sorted(results) == list(range(len(requests)))
    failed = {i: r for i, r in results.items() if not isinstance(r, httpx.Response) or r.status_code != 200}
    assert not failed, failed
    assert any(t > signalled_at for t in finished_at.values()), "no request was still in flight at the signal"
    tokenizer = make_tokenizer(minilm)
    for i in (0, len(requests) - 1):
        assert cosine(vectors(results[i]), embed_texts(minilm, tokenizer, requests[i])).min() >= 0.9999
    with pytest.raises(httpx.TransportError):
        httpx.get(server.url + "/health", timeout=5)


def test_search_an_index_made_by_the_index_command(tmp_path):
    docs = ["the cat sat on the mat", "stock markets fell sharply today", "a recipe for lemon cake"]
    rows = [{"id": f"doc-{i}", "text": text, "title": text.split()[1]} for i, text in enumerate(docs)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    made = subprocess.run([sys.executable, "-m", "embedpipe.cli.main", "index", str(tmp_path / "docs.jsonl"),
                           "-o", str(tmp_path / "out"), "--device", "cpu", "--keep-columns", "title", "-q"],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    server = ServerProcess(tmp_path / "server.log", "--index", str(tmp_path / "out"))
    try:
        response = httpx.post(server.url + "/v1/search", json={"query": "where did the cat sit", "k": 3}, timeout=60)
        hits = response.json()["data"][0]["hits"]
        assert [h["id"] for h in hits][0] == "doc-0" and hits[0]["title"] == "cat" and len(hits) == 3
        assert httpx.get(server.url + "/health").json()["index_rows"] == 3
    finally:
        assert server.terminate() == 0


def admitted_all(url: str, num_requests: int) -> bool:
    answered = metric(url, "embedpipe_request_seconds_count")
    return answered + metric(url, "embedpipe_requests_active") == num_requests


@pytest.mark.parametrize("args, message", [
    (["--model", "/no/such/model"], "is neither a local folder, a short name"),
    (["--index", "/no/such/index"], "holds no index"),
    (["--device", "tpu"], "--device must be"),
    (["--max-input-tokens", "1000"], "more than the model's max_seq_length 256"),
    (["--http-workers", "2", "--port", "0"], "--port 0 (any free port) needs --http-workers 1"),
    (["--port", "99999"], "port must be between 0 and 65535, not 99999"),
    (["--api-key", ""], "the API key (--api-key or EMBEDPIPE_API_KEY) must be a non-empty string"),
    (["--served-model-name", ""], "a served model name (--served-model-name) must not be empty"),
])
def test_start_up_errors_exit_2_with_a_message(args, message):
    result = subprocess.run([sys.executable, "-m", "embedpipe.cli.main", "serve", "--device", "cpu", *args],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr


API_KEY = "sk-from-the-environment-42"


def test_the_api_key_from_the_environment_guards_every_http_process(tmp_path):
    """EMBEDPIPE_API_KEY stands for --api-key; the HTTP processes of --http-workers get it with their config."""
    server = ServerProcess(tmp_path / "server.log", "--http-workers", "2", env={"EMBEDPIPE_API_KEY": API_KEY})
    try:
        assert len(spawned_children(server.proc.pid)) == 2
        for _ in range(8):  # a new connection each: the kernel spreads them over both HTTP processes
            assert embed(server.url, input="no key").status_code == 401
            wrong = httpx.post(server.url + "/embed", json={"inputs": "x"}, headers={"Authorization": "Bearer x"})
            assert wrong.status_code == 401 and wrong.headers["www-authenticate"].startswith("Bearer")
            right = httpx.post(server.url + "/v1/embeddings", json={"input": "with the key"},
                               headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
            assert vectors(right).shape == (1, 384)
            assert httpx.get(server.url + "/health").status_code == 200
    finally:
        assert server.terminate() == 0
    assert API_KEY not in (tmp_path / "server.log").read_text()


def test_an_empty_api_key_in_the_environment_is_refused_not_ignored(tmp_path):
    """An empty variable (a secret that did not render) would otherwise leave the server open."""
    result = subprocess.run([sys.executable, "-m", "embedpipe.cli.main", "serve", "--device", "cpu"],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "EMBEDPIPE_API_KEY": ""})
    assert result.returncode == 2 and result.stderr.strip() == (
        "embedpipe: error: the API key (--api-key or EMBEDPIPE_API_KEY) must be a non-empty string of printable "
        "ASCII without spaces"), result.stderr


def test_a_busy_port_is_a_one_line_exit_2_before_the_model_loads():
    """It exited 3 after "Application shutdown complete."."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "embedpipe.cli.main", "serve", "--device", "cpu", "--port",
                                 str(port)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and time.perf_counter() - started < 30


def test_a_dead_http_process_stops_the_server_with_its_cause_and_leaves_no_process(tmp_path):
    server = ServerProcess(tmp_path / "server.log", "--http-workers", "2")
    fronts = spawned_children(server.proc.pid)
    assert len(fronts) == 2
    assert vectors(embed(server.url, input="served by either")).shape == (1, 384)
    fronts[0].kill()
    assert server.proc.wait(60) == 1
    log = (tmp_path / "server.log").read_text()
    assert "exited (exit code -9, SIGKILL); the server stopped" in log and "Traceback" not in log, log
    assert wait_until_gone([front.pid for front in fronts]), "an HTTP process outlived the server"


def test_sigterm_while_http_processes_start_exits_0_and_leaves_no_process(tmp_path):
    log = tmp_path / "server.log"
    command = [sys.executable, "-m", "embedpipe.cli.main", "serve", "--device", "cpu", "--http-workers", "2",
               "--port", str(free_port())]
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while len(fronts := spawned_children(proc.pid)) < 2:  # spawned: still importing, not yet listening
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, log.read_text()
    assert "error" not in log.read_text() and "embedpipe: serving" not in log.read_text(), log.read_text()
    assert wait_until_gone([front.pid for front in fronts]), "an HTTP process outlived the server"


def test_http_processes_exit_with_a_killed_engine_process(tmp_path):
    server = ServerProcess(tmp_path / "server.log", "--http-workers", "2")
    fronts = [child.pid for child in spawned_children(server.proc.pid)]
    assert len(fronts) == 2
    server.proc.kill()  # no cleanup runs in it
    assert server.proc.wait(60) == -signal.SIGKILL
    assert wait_until_gone(fronts), "an HTTP process outlived the engine process"


def test_health_answers_within_100_ms_while_4_clients_send_10_mb_one_word_texts(tmp_path):
    """One such request delayed /health by 14.7 s: the prefix search held the GIL re-encoding the whole word."""
    server = ServerProcess(tmp_path / "server.log", "--max-body-bytes", "20000000")
    body = json.dumps({"input": "x" * 10_000_000}).encode()
    stop, statuses = threading.Event(), []

    def sender():
        with httpx.Client(timeout=120) as client:
            while not stop.is_set():
                statuses.append(client.post(server.url + "/v1/embeddings", content=body,
                                            headers={"content-type": "application/json"}).status_code)

    senders = [threading.Thread(target=sender) for _ in range(4)]
    for thread in senders:
        thread.start()
    latencies = []
    try:
        with httpx.Client(timeout=30) as client:
            end = time.monotonic() + 10
            while time.monotonic() < end:
                started = time.perf_counter()
                assert client.get(server.url + "/health").status_code == 200
                latencies.append(time.perf_counter() - started)
                time.sleep(0.02)
    finally:
        stop.set()
        for thread in senders:
            thread.join(120)
    assert len(statuses) >= 4 and set(statuses) == {200}, statuses
    latencies.sort()
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    assert p99 < 0.1, f"/health p99 {p99 * 1e3:.0f} ms over {len(latencies)} requests, max {latencies[-1] * 1e3:.0f} ms"
    assert server.terminate() == 0
