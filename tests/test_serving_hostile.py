"""What a hostile review of serving, keys and extraction broke, each held now: a batcher that survives any batch,
pickle checkpoints refused, every bad request a short 4xx, state files never followed through links, a run's serving
config checked at start, a locked store a one-line CLI error, no paths without a key, an explicit host, bounded
numbers, printable key names, and an extraction client that trusts nothing the victim says."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sqlite3
import stat
import time

import httpx
import pytest
import torch
import yaml
from safetensors.torch import load_file

from ptmlab.core.errors import PtmlabError
from ptmlab.extraction.client import VictimClient, retry_after
from ptmlab.serve.app import create_app
from ptmlab.serve.batcher import Batcher
from ptmlab.serve.config import ServeConfig, is_loopback
from ptmlab.serve.server import serve_in_thread
from ptmlab.serve.state import open_store
from tests.conftest import assert_clean_error, run_cli
from tests.test_serve_support import hostile_victim


def post_raw(url, key, raw: bytes):
    return httpx.post(f"{url}/v1/predict", content=raw, timeout=60,
                      headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})


def task_files(victim) -> list[str]:
    data = victim.parent / "data"
    return ["--task", "synthetic", "--train-file", str(data / "train.csv"), "--dev-file", str(data / "dev.csv")]


# -- 1. the batching thread --------------------------------------------------------------------------------------

def test_batcher_survives_an_overflowing_wait_and_a_closed_loop():
    def forward(encs, task=None):
        return [[0.5, 0.5] for _ in encs]

    batcher = Batcher(forward, max_batch=4, max_wait=1e13)  # the old thread died of OverflowError here

    async def ask(n):
        return await asyncio.wait_for(batcher.submit([{"input_ids": [1]}] * n), 10)

    async def two():
        first = asyncio.ensure_future(ask(1))
        await asyncio.sleep(0.3)
        assert batcher.thread.is_alive()
        return await asyncio.gather(first, ask(3))  # the second fills the batch: both are answered

    a, b = asyncio.run(two())
    assert len(a) == 1 and len(b) == 3 and batcher.thread.is_alive()

    gone = asyncio.new_event_loop()  # a request whose event loop closed before its answer came back
    fut = gone.create_future()
    with batcher.lock:
        batcher.waiting += 4
    from ptmlab.serve.batcher import Job

    batcher.jobs.put(Job([{"input_ids": [1]}] * 4, fut, gone))
    gone.close()
    time.sleep(0.3)
    assert batcher.thread.is_alive()
    assert len(asyncio.run(ask(4))) == 4
    batcher.close()
    with pytest.raises(PtmlabError, match="max-wait-ms"):
        ServeConfig(max_wait_ms=1e13).validate()


# -- 2. pickle checkpoints ---------------------------------------------------------------------------------------

def test_a_folder_with_only_a_pickle_checkpoint_is_refused_by_serve_evaluate_and_verify(victim, tmp_path, store):
    pickled = tmp_path / "pickled"
    shutil.copytree(victim, pickled)
    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    with pytest.raises(PtmlabError, match="pickle"):  # the old loader unpickled and served it
        create_app(str(pickled), ServeConfig(detector=False), store)
    env = {"PTMLAB_HOME": str(tmp_path / "h")}
    (tmp_path / "q.txt").write_text("a query\nanother one\n")
    for args in (["serve", str(pickled)], ["evaluate", str(pickled), *task_files(victim)],
                 ["extract", "verify-watermark", str(pickled), "--queries", str(tmp_path / "q.txt")]):
        assert_clean_error(run_cli(*args, env=env), "pickle", "--trust-pickle")
    key = store.create_key("trusted")
    app = create_app(str(pickled), ServeConfig(detector=False, trust_pickle=True), store)  # the user vouches
    with serve_in_thread(app) as url:
        r = httpx.post(f"{url}/v1/predict", json={"texts": ["good film"]}, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    assert run_cli("evaluate", str(pickled), *task_files(victim), "--trust-pickle", env=env).returncode == 0


# -- 3, 7 and the minor points: requests and endpoints -----------------------------------------------------------

def test_bad_bodies_are_short_4xx_and_endpoints_show_no_paths(victim, store):
    key = store.create_key("hostile", rate=1e4, burst=1e4)
    with serve_in_thread(create_app(str(victim), ServeConfig(detector=False), store)) as url:
        bodies = [b'{"texts":' + b"[" * 100_000, b'{"texts": ["a"], "task": "\\ud800"}',
                  b'{"texts": ["a"], "' + b"k" * 900_000 + b'": 1}',
                  json.dumps({"texts": ["a"], "task": "t" * 900_000}).encode(),
                  b'{"texts": ["a"], "texts": ["b"]}', b'{"texts": ["\\u001b[2J"], "task": "\\u001b[2J\\n"}',
                  '{"texts": ["a"]}'.encode("utf-16")]
        for raw in bodies:
            r = post_raw(url, key, raw)
            assert 400 <= r.status_code < 500, (raw[:40], r.status_code, r.text[:200])
            error = r.json()["error"]
            assert len(error) < 400 and "\x1b" not in error and "\n" not in error, error[:500]
        assert "duplicate key 'texts'" in post_raw(url, key, bodies[4]).json()["error"]
        assert httpx.get(f"{url}/v1/predict/").status_code == 404  # no redirect
        health = httpx.get(f"{url}/healthz")
        spec = httpx.get(f"{url}/openapi.json")
        answer = post_raw(url, key, b'{"texts": ["good film"]}')
        metrics = httpx.get(f"{url}/metrics")
        for r in (health, spec, answer):
            assert str(victim) not in r.text and str(store.home) not in r.text, r.text[:300]
        assert "detector" not in health.json() and "state" not in health.json()
        assert health.json()["labels"] == ["neg", "pos"] and answer.json()["model"] == victim.name
        assert metrics.status_code == 401
        assert httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {key}"}).status_code == 403
        admin = store.create_key("ops", scopes="admin")  # /metrics shows every key's counts: admin keys only
        assert httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {admin}"}).status_code == 200

        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as s:  # leaves mid-body
            s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode() +
                      b"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"texts\": [")
            time.sleep(0.3)
        time.sleep(0.5)
        text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {admin}"}).text
        assert 'status="500"' not in text and 'status="499"} 1' in text, text
        assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
    with serve_in_thread(create_app(str(victim), ServeConfig(detector=False, public_metrics=True), store)) as url:
        assert httpx.get(f"{url}/healthz").json()["model"] == str(victim)
        assert httpx.get(f"{url}/metrics").status_code == 200


# -- 4. state files ----------------------------------------------------------------------------------------------

def test_state_files_are_never_followed_through_links_and_open_folders_are_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    target = tmp_path / "victim-file"
    target.write_text("someone else's file")
    os.chmod(target, 0o644)
    (shared / "state.db").symlink_to(target)
    with pytest.raises(PtmlabError, match="symbolic link"):
        open_store(str(shared))
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644  # the old store chmod-ed the link's target to 600
    assert_clean_error(run_cli("keys", "list", "--state", str(shared)), "symbolic link")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644
    (shared / "state.db").unlink()
    open_store(str(shared)).close()
    (shared / "state.db-wal").unlink(missing_ok=True)
    (shared / "state.db-wal").symlink_to(target)
    with pytest.raises(PtmlabError, match="symbolic link"):
        open_store(str(shared))
    public = tmp_path / "public"
    public.mkdir()
    os.chmod(public, 0o777)
    with pytest.raises(PtmlabError, match="other users"):
        open_store(str(public))
    assert not (public / "state.db").exists()


# -- 5. the run's serving config ---------------------------------------------------------------------------------

def test_a_bad_serving_config_in_the_run_is_refused_at_start(victim, tmp_path, store):
    def variant(name, config_yaml=None, config_json=None):
        d = tmp_path / name
        shutil.copytree(victim, d)
        if config_yaml:
            cfg = yaml.safe_load((d / "config.yaml").read_text())
            cfg.update(config_yaml)
            (d / "config.yaml").write_text(yaml.safe_dump(cfg))
        if config_json:
            cfg = json.loads((d / "config.json").read_text())
            cfg.update(config_json)
            (d / "config.json").write_text(json.dumps(cfg))
        return d

    cases = [(variant("neg", {"max_length": -5}), "max_length"), (variant("abc", {"max_length": "abc"}), "max_length"),
             (variant("ids", config_json={"id2label": {"0": "a", "5": "b"}, "label2id": {"a": 0, "b": 5}}), "labels"),
             (variant("task", {"task": ["x"]}), "task")]
    for folder, needle in cases:
        with pytest.raises(PtmlabError, match=needle):
            create_app(str(folder), ServeConfig(detector=False), store)
    for folder, needle in cases[:3]:  # the old server started on -5 (then charged a 422 per request) or exited 1
        assert_clean_error(run_cli("serve", str(folder), "--port", "1", env={"PTMLAB_HOME": str(tmp_path / "h")}),
                           needle)
    assert store.usage() == {}


# -- 6. a locked store in the CLI --------------------------------------------------------------------------------

def test_a_locked_store_is_a_one_line_retryable_cli_error(victim, tmp_path):
    home = tmp_path / "h"
    s = open_store(str(home))
    s.create_key("held")
    s.close()
    env = {"PTMLAB_HOME": str(home)}
    lock = sqlite3.connect(home / "state.db", isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    try:
        for args in (["keys", "create", "--name", "x"], ["keys", "revoke", "held"],
                     ["serve", str(victim), "--watermark-rate", "0.1", "--no-detector", "--state-timeout", "0.5"]):
            assert_clean_error(run_cli(*args, env=env), "locked", "retry")
    finally:
        lock.execute("ROLLBACK")
        lock.close()


# -- 8. the host -------------------------------------------------------------------------------------------------

def test_an_empty_host_is_refused_and_only_loopback_is_quiet(victim, tmp_path):
    assert_clean_error(run_cli("serve", str(victim), "--host", "", env={"PTMLAB_HOME": str(tmp_path / "h")}),
                       "--host", "every interface")
    with socket.socket() as taken:  # the port is busy, so the server stops after its start-up checks
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        p = run_cli("serve", str(victim), "--host", "0.0.0.0", "--port", str(taken.getsockname()[1]), "--no-detector",
                    env={"PTMLAB_HOME": str(tmp_path / "h")})
    assert p.returncode == 2 and p.stderr.startswith("warning: --host 0.0.0.0 is not loopback"), p.stderr
    for host, local in (("127.0.0.1", True), ("::1", True), ("localhost", True), ("127.0.0.2", True),
                        ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("example.org", False)):
        assert is_loopback(host) is local, host


# -- 9 and 10. numbers, URLs and key names in the CLI --------------------------------------------------------------

def test_huge_numbers_bad_urls_and_unprintable_key_names_exit_2(tmp_path):
    home = tmp_path / "h"
    env = {"PTMLAB_HOME": str(home)}
    huge = "99999999999999999999999"
    for args, needle in ((["keys", "create", "--name", "a", "--daily-budget", huge], "too large"),
                         (["keys", "create", "--name", "a", "--rate", "1e300"], "too large"),
                         (["keys", "flagged", "--last", huge], "--last"),
                         (["keys", "list", "--state", "postgresql://%zz@[::1"], "postgresql"),
                         (["keys", "create", "--name", "\x1b[2Jroot\n   1  admin", "--rate", "1"], "printable"),
                         (["keys", "create", "--name", "n" * 65], "printable")):
        assert_clean_error(run_cli(*args, env=env), needle)
    assert not (home / "state.db").exists() or open_store(str(home)).list_keys() == []
    store = open_store(str(home))
    store.create_key("legit")
    with sqlite3.connect(home / "state.db") as db:  # a name stored before names were checked
        db.execute("UPDATE keys SET name = ? WHERE name = 'legit'", ("\x1b[2Jevil\n   9  fake row",))
    listed = run_cli("keys", "list", env=env)
    assert listed.returncode == 0 and "\x1b" not in listed.stdout
    assert len(listed.stdout.strip().splitlines()) == 2, listed.stdout  # the header and one row


def test_the_extraction_client_treats_every_victim_answer_as_untrusted(victim, tmp_path):
    assert retry_after("-5") == 1.0 and retry_after("soon") == 1.0 and retry_after("nan") == 1.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 1.0 and retry_after("3") == 3.0
    for mode, needle in (("date", "max-wait"), ("negative", "max-wait"), ("huge", "max-wait"), ("html", "not JSON"),
                         ("no-names", "label_names"), ("label-out", "label id"), ("nan", r"numbers in \[0, 1\]"),
                         ("list", "malformed")):
        with hostile_victim(mode) as url:
            client = VictimClient(url, "k", max_wait=1.5)
            with pytest.raises(PtmlabError, match=needle):
                client.query(["a text"])
            client.close()
    out = tmp_path / "copy"
    with hostile_victim("no-names") as url:
        args = ["extract", "--victim", url, "--key", "k", "--model", "tiny", *task_files(victim), "--budget", "4",
                "--output", str(out)]
        assert_clean_error(run_cli(*args), "label_names")
        assert not out.exists()  # a refused extraction leaves nothing that blocks the rerun
        assert_clean_error(run_cli(*args), "label_names")
    assert_clean_error(run_cli("extract", "--victim", "http://[::1", "--key", "k", "--model", "tiny",
                               *task_files(victim), "--budget", "4", "--output", str(out)), "victim")
