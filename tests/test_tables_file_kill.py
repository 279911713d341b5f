"""A process SIGKILLed while it writes n-gram tables files never leaves a torn one behind: after every kill the
tables file at the target path loads (old or new, never a mix), its weight/momentum are exactly the tables stamped
with its train_step, and what else is in the directory is at most the writer's hidden temp file."""

import os, signal, subprocess, sys, time

import torch

from dormouse.ngram import NgramTables
from dormouse.tables_file import load_tables_file, save_tables_file
from dormouse.rng import keyed_uniform

KILLS = 8
ORDERS, SLOTS, DIM = [2, 3], 1 << 16, 64  # 32 MiB per tensor: a write takes long enough for kills to land inside it

WRITER = f"""
import sys, torch
from dormouse.ngram import NgramTables
from dormouse.tables_file import save_tables_file
t = NgramTables({ORDERS}, {SLOTS}, {DIM})
path, start = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
for s in range(start, start + 10_000):
    t.weight.fill_(float(s)); t.momentum.fill_(-float(s)); t.table_step = s
    save_tables_file(path, t, train_step=s)
    print(s, flush=True)
"""


def check(path):
    tables, train_step, table_step = load_tables_file(path)
    assert table_step == train_step
    assert torch.equal(tables.weight, torch.full_like(tables.weight, float(train_step)))
    assert torch.equal(tables.momentum, torch.full_like(tables.momentum, -float(train_step)))
    return train_step


def test_sidecar_survives_kill9(tmp_path):
    path = tmp_path / "step_000100.ngram"
    t = NgramTables(ORDERS, SLOTS, DIM)
    t.weight.fill_(100.0)
    t.momentum.fill_(-100.0)
    t.table_step = 100
    save_tables_file(path, t, train_step=100)
    assert check(path) == 100
    delays = keyed_uniform(seed=2026, step=1, stream=99, n=KILLS)
    last, torn = 100, 0
    for k in range(KILLS):
        start = 1000 * (k + 1)
        p = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(start)], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        first = []
        if k % 2:  # aimed: after one completed save, once the next save's temp file is open
            first = [int(p.stdout.readline())]
            tmp = tmp_path / f".step_000100.ngram.tmp.{p.pid}"
            t0 = time.time()
            while not tmp.exists() and time.time() - t0 < 60:
                time.sleep(0.0005)
            time.sleep(0.002 * float(delays[k]))
        else:  # at a keyed random moment
            time.sleep(0.05 + 0.6 * float(delays[k]))
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        done = first + [int(line) for line in p.stdout.read().split()]
        got = check(path)
        # the file is the last completed save, or (killed between os.replace and the print) the one after it
        expect = done[-1] if done else last
        assert got in (expect, expect + 1 if done else start), (got, done[-3:], last)
        last = got
        others = [q.name for q in tmp_path.iterdir() if q != path]
        assert all(n.startswith(".step_000100.ngram.tmp.") for n in others), others
        torn += bool(others)
        for n in others:
            (tmp_path / n).unlink()  # a torn temp file is garbage the run directory's rotation removes
    assert last != 100, "no save completed before any kill: the test did not exercise replacement"
    assert torn >= KILLS // 2, (
        f"only {torn} of {KILLS} kills landed inside a write: the test did not exercise torn writes"
    )
