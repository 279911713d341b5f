"""How much of a loss curve is data order: the same small config trained with `data_order="stream"` and "shuffled".

Prints, for each order, the std of the train loss over the second half of the run (noise an A/B has to see through)
and the final held-out bits/byte (the eval sample and the corpus are the same for both), then the ratios:

    std ratio   = std(stream) / std(shuffled)        target >= 3
    bpb ratio   = bpb(shuffled) / bpb(stream)         target <= 1 (shuffled no worse)

Run time: about two minutes on one quiet core at the defaults (two runs of --steps steps); the machine's load
average is printed beside the numbers, because a loaded machine only changes the wall time, never the numbers.

    python bench/curve_noise.py [--steps 300] [--threads 1]
"""

import argparse, os, tempfile, time
from pathlib import Path

from dormouse.config import ModelCfg, TrainCfg
from dormouse.train import fit


def small_cfg(order: str, steps: int, threads: int) -> TrainCfg:
    "A minutes-scale config: a narrow model, the default corpus, one eval at the end on 256 held-out sequences."
    m = ModelCfg(
        d_model=64,
        n_heads=2,
        depth=2,
        factor_rank=32,
        mlp_mult=4,
        ngram_orders=[2, 3, 4],
        ngram_slots=1 << 13,
        ngram_dim=16,
    )
    return TrainCfg(
        model=m,
        data_order=order,
        seq_len=128,
        batch=16,
        steps=steps,
        lr=3e-3,
        min_lr=3e-4,
        warmup=20,
        decay_start=steps // 3,
        decay_steps=steps,
        threads=threads,
        log_every=50,
        ckpt_every=steps,
        eval_every=steps,
        eval_batches=16,
        eval_depths=[2],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300, help="steps per run")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    a = ap.parse_args()
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for order in ["stream", "shuffled"]:
            t0 = time.time()
            df = fit(small_cfg(order, a.steps, a.threads), Path(tmp) / order, progress=False)
            half = df.loss.iloc[len(df) // 2 :]
            bpb = float(df["eval_cold_bpb_d2"].dropna().iloc[-1])
            res[order] = dict(std=float(half.std()), mean=float(half.mean()), bpb=bpb, wall=time.time() - t0)
            r = res[order]
            print(
                f"{order:9s} train loss over steps {len(df) // 2}..{len(df) - 1}: "
                f"mean {r['mean']:.3f} std {r['std']:.3f} nats; held-out {r['bpb']:.3f} bits/byte "
                f"({r['wall']:.0f} s)"
            )
    std_ratio = res["stream"]["std"] / res["shuffled"]["std"]
    bpb_ratio = res["shuffled"]["bpb"] / res["stream"]["bpb"]
    print(
        f"std ratio stream/shuffled {std_ratio:.2f}x (target >= 3)  "
        f"held-out bpb ratio shuffled/stream {bpb_ratio:.3f} (target <= 1)  "
        f"[load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores]"
    )


if __name__ == "__main__":
    main()
