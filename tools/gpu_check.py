#!/usr/bin/env python3
"""The resume promise on a CUDA device, as one script: each check one line, PASS, FAIL or SKIP, with its figure.

  - the numeric environment recorded on CUDA (GPU, capability, drivers, CUDA, cuDNN, cuBLAS workspace, determinism
    flags) and shown by `dormouse inspect`;
  - a fresh run and a run killed after its first checkpoint and resumed in a new process, compared bitwise
    (default model: fp32, bf16 autocast, compile = true);
  - `dormouse verify` of the fresh run, in a new process;
  - one process accumulating 4 microbatches a step bitwise equal to the same steps on 2 and 4 workers (threads on the
    one device: `dormouse.testing.accumulation_check`);
  - a CPU-trained checkpoint resumed on CUDA, and a CUDA-trained one resumed on the CPU: each refused by the replay,
    naming a step, writing nothing;
  - the default model's speed: steps/s and tokens/s, and its FLOP rate as a fraction of this device's fp32 and bf16
    matmul rates measured in the same run;
  - what determinism costs: step time with deterministic algorithms ÷ without, in the same process.

Not part of the test suite (CI has no GPU). Exit 0 only if no check failed. `--device cpu` runs the same checks on
the CPU (the CUDA-only ones say SKIP): a dry run of the script itself.

  PYTHONPATH=. python tools/gpu_check.py --out results/   # every line also lands in results/gpu_check.{log,json}
"""

from __future__ import annotations

import argparse, dataclasses, json, os, shutil, statistics, subprocess, sys, tempfile, time, traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
RESULTS: list[dict] = []
LOG = None  # the full log: every line, and each failure's traceback


class Skip(Exception):
    "A check that does not apply here, with why."


def say(line: str = "") -> None:
    "Print a line and keep it in the log."
    print(line, flush=True)
    if LOG is not None:
        LOG.write(line + "\n")
        LOG.flush()


def check(name: str, fn, deadline: float) -> bool:
    "Run one check and print one line: PASS, FAIL or SKIP, what it found, and its seconds. False only on FAIL."
    t = time.time()
    if t > deadline:
        status, detail = "SKIP", "out of time (--budget)"
    else:
        try:
            status, detail = "PASS", fn()
        except Skip as e:
            status, detail = "SKIP", str(e)
        except BaseException as e:  # a check that fails says why and the next one still runs
            if isinstance(e, KeyboardInterrupt):
                raise
            status, detail = "FAIL", f"{type(e).__name__}: {' | '.join(str(e).splitlines()[:6])}"
            if LOG is not None:
                LOG.write(traceback.format_exc())
    secs = time.time() - t
    say(f"{status:4}  {name}: {detail} ({secs:.1f}s)")
    RESULTS.append({"check": name, "status": status, "detail": detail, "seconds": round(secs, 1)})
    return status != "FAIL"


def env_pythonpath() -> dict:
    "This process's environment with the checkout first on PYTHONPATH (the subprocesses run the same kit)."
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def kit(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    "`python -m dormouse.cli ARGS` in a new process."
    return subprocess.run([sys.executable, "-m", "dormouse.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env_pythonpath())


def one_line(r: subprocess.CompletedProcess) -> str:
    return (r.stdout + r.stderr).strip().replace("\n", " | ")[-600:]


def main() -> int:
    global LOG
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (the proof) or cpu (a dry run of this script)")
    p.add_argument("--steps", type=int, default=24, help="steps of each fresh run (a checkpoint every steps/3)")
    p.add_argument("--speed-steps", type=int, default=400, help="steps of the default plan timed for the speed line")
    p.add_argument("--tiny", action="store_true", help="the tests' tiny model instead of the default one (dry runs)")
    p.add_argument("--skip", default="", help="comma-separated check groups to leave out: "
                   "env,fp32,bf16,compile,verify,accum,cross,speed,det")
    p.add_argument("--budget", type=float, default=480, help="seconds; checks not started by then are SKIPped")
    p.add_argument("--out", default="", help="folder for gpu_check.log and gpu_check.json (default: a temp folder)")
    args = p.parse_args()
    deadline = time.time() + args.budget
    skip = set(filter(None, args.skip.split(",")))
    out = Path(args.out or tempfile.mkdtemp(prefix="gpu_check_out_"))
    out.mkdir(parents=True, exist_ok=True)
    LOG = open(out / "gpu_check.log", "w")
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        say(f"gpu_check: no CUDA device: torch {torch.__version__} sees none (torch.cuda.is_available() is False; "
            f"built with CUDA {torch.version.cuda}). Run it on a machine with a GPU, or pass --device cpu.")
        return 1

    from dormouse.config import TrainCfg
    from dormouse.testing import assert_same_run, save_snapshot, stopped_at, tiny_cfg
    from dormouse.train import fit
    from dormouse.rundir import RunPaths

    dev = args.device
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    say(f"gpu_check: {name}, torch {torch.__version__}, CUDA {torch.version.cuda}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M:%S')}")
    tmp = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    base = tiny_cfg() if args.tiny else TrainCfg()
    every = max(1, args.steps // 3)
    plan = lambda **kw: dataclasses.replace(base, steps=args.steps, ckpt_every=every, log_every=max(1, every // 2),
                                            keep_ckpts=10, eval=False, **kw)
    facts: dict = {"device": name, "torch": torch.__version__, "cuda": torch.version.cuda}

    def fresh_and_resumed(tag: str, cfg) -> str:
        "A fresh run here; a copy killed after its first checkpoint, resumed in a new process; compared bitwise."
        ref, run, toml = tmp / f"{tag}_ref", tmp / f"{tag}_run", tmp / f"{tag}.toml"
        t = time.time()
        df = fit(cfg, ref, progress=False, device=dev)
        fresh_s = time.time() - t
        save_snapshot(cfg, toml)
        stopped_at(ref, run, every)  # killed after its first checkpoint; the later rows remain, to be compared
        r = kit("train", "--config", str(toml), "--run-dir", str(run), "--resume", "--quiet", "--device", dev)
        if r.returncode != 0:
            raise RuntimeError(f"the resume exited {r.returncode}: {one_line(r)}")
        assert_same_run(ref, run)
        facts[f"{tag}_fresh_seconds"] = round(fresh_s, 1)
        return (f"{len(df)} steps fresh ({fresh_s:.1f}s, loss {df.loss.iloc[-1]:.4f}); killed at step {every}, "
                f"resumed in a new process: every loss, fingerprint and the final state bitwise equal")

    # 1. the environment as recorded, and as `dormouse inspect` shows it
    def environment() -> str:
        from dormouse.numerics import numeric_env, run_scope
        with run_scope(base.threads, dev):
            env = numeric_env(base.threads, torch.device(dev).type)
        facts["env"] = env
        want = ["gpu", "gpu_capability", "cuda", "cudnn", "cuda_driver", "nvidia_driver", "CUBLAS_WORKSPACE_CONFIG",
                "deterministic", "cudnn.deterministic", "cudnn.benchmark", "fill_uninitialized_memory"]
        if not cuda:
            raise Skip("CPU: no CUDA facts to record")
        missing = [k for k in want if env.get(k) is None]
        shown = ", ".join(f"{k}={env.get(k)!r}" for k in want + ["cuda.matmul.fp32_precision"])
        if missing or env["CUBLAS_WORKSPACE_CONFIG"] != ":4096:8" or env["deterministic"] is not True:
            raise AssertionError(f"missing or wrong: {missing}; {shown}")
        return shown
    if "env" not in skip:
        check("numeric environment recorded on the device", environment, deadline)

    ok = True
    if "fp32" not in skip:
        ok &= check("fp32: fresh vs killed and resumed in a new process, bitwise",
                    lambda: fresh_and_resumed("fp32", plan()), deadline)

    def inspected() -> str:
        ck = sorted((tmp / "fp32_ref" / "ckpt").glob("*.dmck"))[-1]
        r = kit("inspect", str(ck), timeout=120)
        if r.returncode != 0:
            raise RuntimeError(one_line(r))
        keys = ["device", "gpu", "gpu_capability", "cuda", "cudnn", "cuda_driver", "CUBLAS_WORKSPACE_CONFIG",
                "deterministic"] if cuda else ["device", "threads", "deterministic"]
        lines = {ln.strip().split(":")[0]: ln.strip() for ln in r.stdout.splitlines() if ln.startswith("  ")}
        absent = [k for k in keys if k not in lines]
        if absent:
            raise AssertionError(f"inspect does not show {absent}")
        facts["inspect"] = r.stdout
        return "; ".join(lines[k] for k in keys)
    if "env" not in skip and "fp32" not in skip:
        ok &= check("dormouse inspect shows the recorded environment", inspected, deadline)

    def verified() -> str:
        r = kit("verify", str(tmp / "fp32_ref"), "--device", dev, "--quiet")
        if r.returncode != 0:
            raise RuntimeError(f"exit {r.returncode}: {one_line(r)}")
        return r.stdout.strip().splitlines()[-1]
    if "verify" not in skip and "fp32" not in skip:
        ok &= check("dormouse verify of the fresh run, in a new process", verified, deadline)

    def cross(train_dev: str, resume_dev: str) -> str:
        "A run trained on one device, resumed on the other: the replay must refuse it naming a step."
        from dormouse.numerics import EnvDriftError
        cfg = dataclasses.replace(plan(), steps=8, ckpt_every=4, log_every=2)
        src = tmp / f"cross_{train_dev}"
        fit(cfg, src, progress=False, device=train_dev)
        run = stopped_at(src, tmp / f"cross_{train_dev}_to_{resume_dev}", 4)
        before = sorted(p.name for p in RunPaths(run).ckpt_dir.iterdir())
        try:
            fit(cfg, run, resume=True, progress=False, device=resume_dev)
        except EnvDriftError as e:
            msg = str(e)
            after = sorted(p.name for p in RunPaths(run).ckpt_dir.iterdir())
            assert after == before, f"the refusal wrote checkpoints: {sorted(set(after) - set(before))}"
            assert "step " in msg and "device" in msg, msg
            first = next(ln for ln in msg.splitlines() if "Replaying" in ln or "step " in ln)
            return f"refused, nothing written: {first.strip()[:300]}"
        raise AssertionError(f"a run trained on {train_dev} resumed on {resume_dev} without a refusal")
    if "cross" not in skip:
        if cuda:
            ok &= check("a CPU-trained checkpoint resumed on CUDA is refused by the replay",
                        lambda: cross("cpu", dev), deadline)
            ok &= check("a CUDA-trained checkpoint resumed on the CPU is refused by the replay",
                        lambda: cross(dev, "cpu"), deadline)
        else:
            check("CPU <-> CUDA resumes refused", lambda: (_ for _ in ()).throw(Skip("CPU only")), deadline)

    if "bf16" not in skip:
        ok &= check("bf16 autocast: fresh vs killed and resumed in a new process, bitwise",
                    lambda: fresh_and_resumed("bf16", plan(bf16=True)), deadline)

    def accumulation() -> str:
        from dormouse.testing import accumulation_check
        return accumulation_check(plan(), dev, tmp / "accum")
    if "accum" not in skip:
        ok &= check("gradient accumulation bitwise equal to the same microbatches on 2 and 4 workers", accumulation,
                    deadline)

    def rate(tag: str, cfg) -> float:
        "Steps per second of `fit` on the default plan, over its steps after the first 50 (warm-up, compile)."
        df = fit(cfg, tmp / f"speed_{tag}", progress=False, device=dev)
        t = df.t.to_numpy()
        lo = min(50, len(t) // 4)
        return (len(t) - 1 - lo) / (t[-1] - t[lo])

    def speed(variants: tuple) -> str:
        from train_overhead import step_flops
        from dormouse.data import corpus_for
        cfg = dataclasses.replace(base, steps=args.speed_steps, eval=False, ckpt_every=args.speed_steps)
        res = {tag: rate(tag, dataclasses.replace(cfg, **kw)) for tag, kw in variants}
        flops, _ = step_flops(cfg, corpus_for(cfg))
        peak = facts.setdefault("matmul_peak", matmul_rates(dev))
        tok = base.batch * base.seq_len
        facts.setdefault("speed", {}).update({f"{k}_steps_per_s": v for k, v in res.items()})
        facts["speed"].update(tokens_per_step=tok, step_flops=flops)
        line = [f"default plan ({base.batch}x{base.seq_len} tokens a step, {flops / 1e9:.2f} GFLOP of fwd+bwd "
                f"matmuls), fit's steps after the first {min(50, args.speed_steps // 4)} of {args.speed_steps}"]
        for tag, sps in res.items():
            p = peak["bf16" if tag == "bf16" else "fp32"]
            line.append(f"{tag}: {sps:.1f} steps/s = {sps * tok / 1e3:.0f}k tokens/s, {flops * sps / 1e12:.3f} TFLOP/s "
                        f"= {flops * sps / p:.4f} of the measured {'bf16' if tag == 'bf16' else 'fp32'} matmul rate "
                        f"({p / 1e12:.1f} TFLOP/s); {TrainCfg().steps} steps: {TrainCfg().steps / sps:.0f}s")
        return "; ".join(line)
    if "speed" not in skip:
        check("speed of the default model (fp32, bf16 autocast)",
              lambda: speed((("fp32", {}), ("bf16", {"bf16": True}))), deadline)

    def det_cost() -> str:
        from dormouse.data import corpus_for
        from dormouse.numerics import numeric_scope, run_scope
        from dormouse.parts import build_parts
        from dormouse.step import pre_batches, run_probes, train_step
        cfg, times = base, {True: [], False: []}
        corpus = corpus_for(cfg)
        with run_scope(cfg.threads, dev):
            parts = build_parts(cfg, dev)
            run_probes(parts, corpus, cfg, device=dev, log=lambda m: None)
            pb, step = pre_batches(cfg), 0
            for det in (True, False, True, False, True, False):
                with numeric_scope(deterministic=det):
                    fill = torch.utils.deterministic.fill_uninitialized_memory
                    torch.utils.deterministic.fill_uninitialized_memory = det
                    try:
                        for i in range(35):
                            if cuda:
                                torch.cuda.synchronize()
                            t = time.perf_counter()
                            train_step(parts, corpus, cfg, step, probe_batches=pb, device=dev)
                            if cuda:
                                torch.cuda.synchronize()
                            if i >= 5:
                                times[det].append(time.perf_counter() - t)
                            step += 1
                    finally:
                        torch.utils.deterministic.fill_uninitialized_memory = fill
        on, off = statistics.median(times[True]), statistics.median(times[False])
        facts["determinism"] = {"median_step_s_deterministic": on, "median_step_s_not": off}
        return (f"median step {1e3 * on:.2f} ms with deterministic algorithms (+ fill_uninitialized_memory), "
                f"{1e3 * off:.2f} ms without: ratio {on / off:.3f} (3 interleaved rounds of 30 steps each; the cuBLAS "
                "workspace setting stays, as cuBLAS reads it once per process)")
    if "det" not in skip:
        check("cost of the deterministic settings", det_cost, deadline)

    if "compile" not in skip:
        ok &= check("compile = true: fresh vs killed and resumed in a new process, bitwise",
                    lambda: fresh_and_resumed("compile", plan(compile=True)), deadline)
    if "compile" not in skip and "speed" not in skip:
        check("speed of the default model (compile = true)", lambda: speed((("compile", {"compile": True}),)),
              deadline)

    (out / "gpu_check.json").write_text(json.dumps({"results": RESULTS, "facts": facts}, indent=1, default=str))
    fails = [r["check"] for r in RESULTS if r["status"] == "FAIL"]
    say(f"gpu_check: {sum(r['status'] == 'PASS' for r in RESULTS)} PASS, {len(fails)} FAIL, "
        f"{sum(r['status'] == 'SKIP' for r in RESULTS)} SKIP; results in {out}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if fails else 0


def matmul_rates(dev: str) -> dict:
    "Best torch.mm FLOP/s in fp32 (IEEE: no TF32, as the kit trains) and bf16 on `dev`, random 8192^2 (2048^2 on CPU)."
    n = 8192 if dev.startswith("cuda") else 2048
    out = {}
    for tag, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a = torch.randn(n, n, device=dev, dtype=dtype)
        b = torch.randn(n, n, device=dev, dtype=dtype)
        best = 0.0
        for rep in range(6):
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(5):
                torch.mm(a, b)
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            if rep:
                best = max(best, 2 * n**3 * 5 / (time.perf_counter() - t))
        out[tag] = best
    return out


if __name__ == "__main__":
    sys.exit(main())
