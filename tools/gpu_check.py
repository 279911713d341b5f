#!/usr/bin/env python3
"""The resume promise on a CUDA device, in under 4 minutes: a fresh run, a killed-and-resumed run compared bitwise with
it, and `dormouse verify` of the fresh run. One line per check; exit 0 only if every check passed. Not part of the
test suite (CI has no GPU). Where torch sees no CUDA device it says so and exits 1.

  python tools/gpu_check.py              # a small default-architecture config on cuda
  python tools/gpu_check.py --steps 40   # longer
"""

from __future__ import annotations

import argparse, os, subprocess, sys, tempfile, time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def check(name: str, fn) -> bool:
    "Run one check and print one line: PASS or FAIL, what it found, and its seconds."
    t = time.time()
    try:
        detail = fn()
        print(f"PASS  {name}: {detail} ({time.time() - t:.1f}s)", flush=True)
        return True
    except Exception as e:  # a check that fails says why and the next one still runs
        print(f"FAIL  {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} ({time.time() - t:.1f}s)",
              flush=True)
        return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=24, help="steps of the fresh run (a checkpoint every steps/3)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print(f"gpu_check: no CUDA device: torch {torch.__version__} sees none (torch.cuda.is_available() is False; "
              f"built with CUDA {torch.version.cuda}). Run it on a machine with a GPU.")
        return 1
    from dormouse.config import TrainCfg
    from dormouse.testing import assert_same_run, stopped_at
    from dormouse.train import fit

    print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    every = max(1, args.steps // 3)
    cfg = TrainCfg(steps=args.steps, ckpt_every=every, log_every=max(1, every // 2), keep_ckpts=10, batch=8,
                   eval=False)
    tmp = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    ok = check("fresh run", lambda: f"{len(fit(cfg, tmp / 'ref', progress=False, device='cuda'))} steps")

    def resumed():
        stopped_at(tmp / "ref", tmp / "run", every)  # killed after its first checkpoint; later rows remain
        df = fit(cfg, tmp / "run", resume=True, progress=False, device="cuda")
        assert_same_run(tmp / "ref", tmp / "run")
        return f"resumed at step {every}, {df.attrs['overlap_compared']} re-trained steps compared, bitwise equal"
    ok &= check("killed and resumed, compared bitwise", resumed)

    def verified():
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        r = subprocess.run([sys.executable, "-m", "dormouse.cli", "verify", str(tmp / "ref"), "--device", "cuda",
                            "--quiet"], capture_output=True, text=True, timeout=180, env=env)
        if r.returncode != 0:
            raise RuntimeError((r.stdout + r.stderr).strip().replace("\n", " | "))
        return r.stdout.strip().splitlines()[-1]
    ok &= check("dormouse verify", verified)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
