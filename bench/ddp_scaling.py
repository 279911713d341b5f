"""2-rank vs 1-rank training throughput for the default model, measured in one run on this machine.

Both arms train the same run (TrainCfg() defaults with micro_batch = batch / 2, so two ranks can share a step) for the
same steps through `dormouse train`: one process with `threads` = all cores, accumulating the two microbatches, and
`torchrun --nproc_per_node 2` with each rank on half of them, one microbatch each. Throughput is the
steady-state tokens/s read from the run's metrics (rows' wall clock `t`, after a warm-up), and the result is the ratio.

What limits it on a 2-core machine: the two ranks share the same two cores the single process already used, so there
is no extra arithmetic to gain; the ranks add an all-gather of their gradients (the canonical sum; gloo over
loopback) per step, a fingerprint all-gather at the log cadence and barriers at checkpoints; and each rank reads the
whole global batch to hash its n-grams. What the canonical sum costs against DistributedDataParallel at the same world
size is `bench/elastic.py`. A ratio near or below 1.0 here is expected; on a machine with a core (or GPU)
per rank the same code scales with the ranks.

Usage: python bench/ddp_scaling.py [--steps 60] [--cores 2]
"""

import argparse, json, os, subprocess, sys, tempfile
from pathlib import Path
from dormouse.testing import train_cmd


def steady_tok_s(run_dir: Path, batch: int, seq_len: int, warm: int) -> float:
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    a, b = rows[warm], rows[-1]
    return (b["step"] - a["step"]) * batch * seq_len / (b["t"] - a["t"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    from dormouse.config import TrainCfg

    cfg = TrainCfg()
    warm = min(10, args.steps // 3)
    common = ["--steps", str(args.steps), "--ckpt-every", str(10 * args.steps), "--log-every", "10",
              "--micro-batch", str(cfg.batch // 2)]  # two microbatches a step: one per rank
    with tempfile.TemporaryDirectory() as t:
        t = Path(t)
        cfgf = t / "cfg.toml"
        cfgf.write_text("eval = false\n")
        one = t / "one"
        r = subprocess.run(
            train_cmd(cfgf, one, "--threads", args.cores, *common),
            capture_output=True,
            text=True,
        )
        if r.returncode:
            sys.exit(r.stderr)
        two = t / "two"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc_per_node=2",
                *train_cmd(cfgf, two, "--threads", max(1, args.cores // 2), *common)[1:],
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": str(max(1, args.cores // 2))},
        )
        if r.returncode:
            sys.exit(r.stdout + r.stderr)
        a = steady_tok_s(one, cfg.batch, cfg.seq_len, warm)
        b = steady_tok_s(two, cfg.batch, cfg.seq_len, warm)
    print(f"1 rank x {args.cores} threads: {a:,.0f} tok/s")
    print(f"2 ranks x {max(1, args.cores // 2)} thread(s): {b:,.0f} tok/s")
    print(
        f"2-rank / 1-rank tokens/s: {b / a:.2f}x "
        f"(same global batch; on {args.cores} cores the ranks share the cores, see the docstring)"
    )


if __name__ == "__main__":
    main()
