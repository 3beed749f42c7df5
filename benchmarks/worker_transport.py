"""Benchmark: the transport that carries finished records from load workers to the kit — stdlib
`multiprocessing.connection` frames over an OS pipe (what k3lib.io.workers uses), `multiprocessing.Queue`, and
pyzmq PUSH/PULL over ipc:// (as AIPerf does) — for cost per record on each side and for what a sender killed with
-9 right after its last send loses.

    .venv/bin/python benchmarks/worker_transport.py          # table on stdout (about 20 s)
    .venv/bin/python benchmarks/worker_transport.py --json

The record is a real `ChatRecord` of a 64-chunk stream (as a capacity step's: no raw lines) and one with its 66 raw
SSE lines (as a calibration's). Sender CPU per record: the sending process's CPU over the records it sent; receiver
CPU: the receiving process's over the records it got. The kill test: the sender sends its records and kills itself
with SIGKILL at once; "lost" counts the records whose send had returned but that never arrived. Not a test: the
figures depend on the host and its load (printed).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from k3lib.io.client import ChatRecord  # noqa: E402


def sample_record(raw: bool) -> ChatRecord:
    t = time.perf_counter_ns()
    lines = tuple('{"id":"chatcmpl-x","object":"chat.completion.chunk","choices":[{"index":0,"delta":'
                  f'{{"content":" w{i}"}}}}]}}' for i in range(66)) if raw else ()
    return ChatRecord(request_id="c256-1234", url="http://127.0.0.1:8000/v1/chat/completions", stream=True,
                      wall_anchor_ns=time.time_ns(), perf_anchor_ns=t, enqueued_ns=t, sent_ns=t + 1000,
                      first_byte_ns=t + 50_000_000, first_content_ns=t + 50_000_000, last_token_ns=t + 700_000_000,
                      done_ns=t + 700_100_000, output_chunk_ns=tuple(t + 50_000_000 + i * 10_000_000 for i in range(64)),
                      chunk_count=66, http_status=200, model="kimi-k3", finish_reason="length", content="w " * 128,
                      prompt_tokens=512, completion_tokens=128, total_tokens=640, usage_present=True, raw_lines=lines)


# -- senders (child processes) ------------------------------------------------------------------------------------


def send_pipe(fd: int, n: int, raw: bool, kill: bool) -> None:
    from multiprocessing.connection import Connection

    conn, rec = Connection(fd, readable=False), sample_record(raw)
    c0 = time.process_time()
    for _ in range(n):
        conn.send(("rec", 1, rec))
    conn.send(("cpu", time.process_time() - c0))
    if kill:
        os.kill(os.getpid(), signal.SIGKILL)


def send_queue(q: Any, n: int, raw: bool, kill: bool) -> None:
    rec = sample_record(raw)
    c0 = time.process_time()
    for _ in range(n):
        q.put(("rec", 1, rec))
    q.put(("cpu", time.process_time() - c0))
    if kill:
        os.kill(os.getpid(), signal.SIGKILL)
    q.close()
    q.join_thread()


def send_zmq(addr: str, n: int, raw: bool, kill: bool) -> None:
    import pickle

    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(addr)
    rec = sample_record(raw)
    c0 = time.process_time()
    for _ in range(n):
        sock.send(pickle.dumps(("rec", 1, rec), protocol=pickle.HIGHEST_PROTOCOL))
    sock.send(pickle.dumps(("cpu", time.process_time() - c0)))
    if kill:
        os.kill(os.getpid(), signal.SIGKILL)
    sock.close(linger=5000)
    ctx.term()


# -- the receiving side ------------------------------------------------------------------------------------------


def measure(kind: str, n: int, raw: bool, kill: bool) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    got, sender_cpu = 0, None
    t0 = time.perf_counter()
    c0 = time.process_time()
    if kind == "pipe":
        from multiprocessing.connection import Connection

        r, w = os.pipe()
        p = ctx.Process(target=send_pipe, args=(w, n, raw, kill))
        p.start()
        os.close(w)
        conn = Connection(r, writable=False)
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                break
            if msg[0] == "rec":
                got += 1
            else:
                sender_cpu = msg[1]
        conn.close()
    elif kind == "queue":
        q = ctx.Queue()
        p = ctx.Process(target=send_queue, args=(q, n, raw, kill))
        p.start()
        while True:
            try:
                msg = q.get(timeout=2.0)
            except Exception:  # noqa: BLE001 — queue.Empty: nothing more is coming
                break
            if msg[0] == "rec":
                got += 1
            else:
                sender_cpu = msg[1]
                if not kill:
                    break
    else:
        import pickle

        import zmq

        zctx = zmq.Context()
        sock = zctx.socket(zmq.PULL)
        addr = f"ipc://{tempfile.mkdtemp(prefix='k3-zmq-')}/s"
        sock.bind(addr)
        p = ctx.Process(target=send_zmq, args=(addr, n, raw, kill))
        p.start()
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        while poller.poll(2000):
            msg = pickle.loads(sock.recv())
            if msg[0] == "rec":
                got += 1
            else:
                sender_cpu = msg[1]
                if not kill:
                    break
        sock.close(linger=0)
        zctx.term()
    p.join(10)
    wall = time.perf_counter() - t0
    recv_cpu = time.process_time() - c0
    return {"transport": kind, "raw_lines": raw, "killed": kill, "sent": n, "received": got, "lost": n - got,
            "sender_cpu_us_per_record": None if sender_cpu is None else sender_cpu / n * 1e6,
            "receiver_cpu_us_per_record": recv_cpu / max(got, 1) * 1e6, "records_per_s": got / wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--records", type=int, default=20_000)
    args = ap.parse_args(argv)
    load = [round(x, 2) for x in os.getloadavg()]
    rows = [measure(kind, args.records, raw, kill) for kind in ("pipe", "queue", "zmq")
            for raw in (False, True) for kill in (False, True)]
    out = {"load_before": load, "load_after": [round(x, 2) for x in os.getloadavg()], "rows": rows}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"load {out['load_before']} -> {out['load_after']}; {args.records} records per run")
    print(f"{'transport':>9} {'raw lines':>9} {'killed':>6} {'received':>9} {'lost':>6} {'sender us/rec':>13} "
          f"{'receiver us/rec':>15} {'records/s':>10}")
    for r in rows:
        s = r["sender_cpu_us_per_record"]
        print(f"{r['transport']:>9} {str(r['raw_lines']):>9} {str(r['killed']):>6} {r['received']:>9} {r['lost']:>6} "
              f"{'-' if s is None else f'{s:.1f}':>13} {r['receiver_cpu_us_per_record']:>15.1f} "
              f"{r['records_per_s']:>10.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
