#!/usr/bin/env python3
"""Tests that can fail: put each way dormouse's promise can break back into a scratch copy, and run the tests that
should notice.

Each mutant is a small text edit of the exported library (`dormouse/*.py`) in a scratch copy of the repository —
never the working tree — plus the tests that must kill it: pytest node ids, or a notebook run with `nbdev_test`.
An edit's anchor must occur exactly once in its file, so a refactor that moves the code makes the harness fail
loudly instead of testing nothing. A mutant is *killed* when its tests fail; it *survives* when they pass, and a
survivor means a missing test, not a weak mutant.

Usage:
  python tools/mutants.py                 run every mutant (2 at a time), print one line each and `N killed, M survived`
  python tools/mutants.py --list          the table of mutants and their kill sets, running nothing
  python tools/mutants.py --anchors       check that every edit still applies exactly once (seconds; after a merge)
  python tools/mutants.py --only NAME ..  run some mutants
  python tools/mutants.py --record        also write tools/mutants_score.json (the score README and the notebook show)
  python tools/mutants.py --check-record  fail unless the score is the recorded one (CI)
First the union of the kill sets runs on the unmutated library: a test that already fails would "kill" anything.
Exit status: 0 when every mutant is killed; 1 when one survives; 2 when an anchor is missing, a kill set is broken, or
a kill set fails without a mutant.
"""

from __future__ import annotations

import argparse
import compileall
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCORE_FILE = ROOT / "tools" / "mutants_score.json"
COPY = ("dormouse", "tests", "nbs", "tools", "bench", "settings.ini", "setup.py", "README.md")  # bench: results
TIMEOUT = 600  # seconds for one mutant's kill set
BASELINE = "(unmutated library)"  # the run of every kill set with no edit: must pass
# What every kill set imports before a test runs: a fork server imports it once, and each kill set's pytest or notebook
# is a fork of it, so a mutant pays for its tests, not for importing torch again (~2-3 s of its ~8; a notebook's
# nbdev_test in a process of its own paid ~3.5 s more). Never dormouse: the fork imports the mutated copy.
PRELOAD = ["torch", "numpy", "pandas", "safetensors.torch", "tqdm", "matplotlib.pyplot", "xxhash", "pytest",
           "nbdev.test", "execnb.shell"]
FORKS = multiprocessing.get_context("forkserver")  # the server is single-threaded, so forking it is safe


@dataclass
class Mutant:
    "One way the promise can break: edits to the library, and the tests that must notice."

    name: str  # short, unique
    why: str  # the promise it breaks, in words
    edits: list  # [(file under dormouse/, anchor text, replacement)]; each anchor occurs exactly once
    kill: list = field(default_factory=list)  # pytest node ids (tests/...) and notebooks (nbs/....ipynb)


def edit(file: str, old: str, new: str) -> tuple:
    "One text edit of `dormouse/<file>`."
    return (file, old, new)


# The mutants: the decisions chapter's rules broken one at a time, and every other way the promise can break.
RESUME = "tests/test_resume_every_piece.py"  # a seconds-scale run with every piece of state, resumed two ways
FINAL = f"{RESUME}::test_a_final_save_off_the_cadence_writes_its_sidecar_and_extending_it_is_the_same_run"
CRASH = f"{RESUME}::test_a_crash_after_a_checkpoint_resumes_as_the_same_run"
UNITS = "tests/test_same_run_units.py"  # fast unit checks of each piece
FUZZ = "tests/test_container_fuzz.py"
DELTAS = "tests/test_table_deltas.py"
RANGES = "tests/test_config_ranges.py"  # issue 23: the validation boundary
FILES = "tests/test_input_files.py"  # issue 23: files opened safely, parsed within bounds, type-checked
LOCK = "tests/test_lock.py"
SCORE_NB = "nbs/20_score.ipynb"  # the score chapter: windows, first bytes, SE, determinism
MIX_NB = "nbs/21_mix.ipynb"  # the mix chapter: the counts by hand, a distribution, causal
DATA_NB = "nbs/10_data.ipynb"  # the data chapter: batches, match codes and their cache
HELDOUT_NB = "nbs/11_heldout.ipynb"  # the held-out sample chapter
BASELINES_NB = "nbs/19_baselines.ipynb"  # the baselines chapter: the compressors and their cache
BASELINES = "tests/test_data_baselines.py"
CAUSAL = "tests/test_score_causality.py"  # the score reads only the past: the real model, real codes, real units
OUTPUT = "tests/test_progress_output.py"  # issue 25: progress where it lands
TRACK_VIEWS = "tests/test_track_views.py"  # issue 41: trackers are views
TRACK_TB_NB = "nbs/34_track_tensorboard.ipynb"  # the TensorBoard tracker across a resume
TRACK_ML_NB = "nbs/35_track_mlflow.ipynb"  # the MLflow tracker across a resume
TRUST = "tests/test_replay_before_trust.py"  # issue 39: replay before trust, code is environment, the curve proven
PROOF = "tests/test_proof_covers.py"  # issue 55: every column, the whole kit as code, the prefix said
WORKERS = "tests/test_workers.py"  # issue 40: one process accumulating = 2 and 4 workers (threads), in seconds
AB_NB = "nbs/52_ab.ipynb"
ELASTIC = "nbs/00_resume_continuity.ipynb"  # torchrun: 2 -> 1 -> 4, each change verified, the same run as 1 process
PANEL = "tests/test_live_panel.py"
PROCESS = "tests/test_process_state.py"  # issue 23: what fit does to its process
HISTORY = "tests/test_history.py"
RESUME_KEYS = "tests/test_resume_keys.py"
CLI = "tests/test_cli_errors.py"
MUTANTS = [
    # the rules of the decisions chapter (plan vs run state, randomness, data by step, identity)
    Mutant(
        "teacher_not_saved",
        "item 1: the container carries no EMA teacher, so a resume cannot continue it",
        [
            edit(
                "parts.py",
                "teacher=parts.teacher.state_dict() if parts.teacher is not None else None,",
                "teacher=None,",
            )
        ],
        [CRASH],
    ),
    Mutant(
        "teacher_not_frozen_after_load",
        "item 1: restore rebuilds the teacher from the student and loads its record without the freeze",
        [
            edit("parts.py", "import hashlib, inspect, json", "import copy, hashlib, inspect, json"),
            edit(
                "parts.py",
                "            parts.teacher.load_state_dict(ck.teacher)",
                "            parts.teacher = copy.deepcopy(parts.model)\n"
                "            parts.teacher.load_state_dict(ck.teacher)",
            ),
            edit("parts.py", "        freeze(parts.teacher)\n", ""),
        ],
        [f"{UNITS}::test_restore_leaves_the_teacher_frozen_and_in_eval_mode"],
    ),
    Mutant(
        "latch_not_persisted",
        "item 2: the fp32 fallback latch is not in the container; a resume quantises again",
        [
            edit("parts.py", "flags=parts.latch.flags,", "flags=0,"),
            edit("parts.py", "latch=parts.latch.to_json())", "latch=None)"),
        ],
        [CRASH],
    ),
    Mutant(
        "compute_not_reapplied_after_load",
        "the forward that ran is not the forward logged: a resumed quant run trains the default forward while its log "
        "names the quant format",
        [edit("parts.py", "    apply_settings(parts, cfg)  # after the load as well as before it", "    pass  #")],
        ["tests/test_same_run_forward.py::test_a_load_into_fresh_parts_runs_the_forward_the_run_ran"],
    ),
    Mutant(
        "mask_from_global_rng",
        "item 3: the JEPA mask is drawn from torch's global RNG, not keyed by (seed, step)",
        [
            edit(
                "mask.py",
                "keyed_uniform(seed, step, STREAM_MASK, batch * t).reshape(batch, t)",
                "torch.rand(batch, t).numpy()",
            )
        ],
        [f"{UNITS}::test_the_mask_is_a_pure_function_of_seed_and_step"],
    ),
    Mutant(
        "mask_keyed_on_a_counter",
        "item 3: the mask is keyed on how many masks this process drew, not the step",
        [
            edit(
                "mask.py",
                "    starts = keyed_uniform(seed, step,",
                "    mask_stream.calls = getattr(mask_stream, 'calls', -1) + 1\n"
                "    starts = keyed_uniform(seed, mask_stream.calls,",
            )
        ],
        [f"{UNITS}::test_the_mask_is_a_pure_function_of_seed_and_step"],
    ),
    *[
        Mutant(
            f"snapshot_drops_{key}",
            f"items 5/8: `{key}` is not in the config snapshot, so its drift goes unseen",
            [
                edit(
                    "config.py",
                    "    return SNAPSHOT_MARK + tomli_w.dumps(cfg_to_dict(cfg))",
                    "    return SNAPSHOT_MARK + tomli_w.dumps({k: v for k, v in cfg_to_dict(cfg).items() "
                    f"if k != '{key}'}})",
                )
            ],
            [f"{UNITS}::test_the_snapshot_carries_every_field_and_each_reaches_the_drift_check"],
        )
        for key in ("seed", "rand_depth", "eval_batches", "eval_depths")
    ],
    Mutant(
        "pre_batches_not_counted_on_resume",
        "item 6: a resumed run lands pre_batches behind and re-trains batches",
        [
            edit(
                "train.py",
                "for row in run_steps(seg.parts, corpus, cfg, seg.start,",
                "for row in run_steps(seg.parts, corpus, dataclasses.replace(cfg, warmup_forwards=False) if seg.start "
                "else cfg, seg.start,",
            )
        ],
        [CRASH],
    ),
    Mutant(
        "sidecar_not_written_on_final_save",
        "item 7: a final save off the ckpt_every cadence writes no sidecar; the tables fall behind the model",
        [
            edit(
                "train.py",
                "                    checkpoint(seg, log, commits, dist_info)\n",
                "                    checkpoint(seg, log, commits, dist_info) if done % cfg.ckpt_every == 0 else \\\n"
                "                        commits.submit(to_run_state(seg.parts, seg.env), None)\n",
            )
        ],
        [FINAL],
    ),
    Mutant(
        "sidecar_stamp_not_checked",
        "item 7: a sidecar stamped with another train_step pairs with the container",
        [
            edit("checkpoints.py", "    if hd.train_step != ck.step:", "    if False:"),
            edit("checkpoints.py", "expect_train_step=ck.step", "expect_train_step=None"),
        ],
        [f"{FUZZ}::test_sidecar_damage_and_mismatch"],
    ),
    # the drift check's exempt class, and the schedule
    Mutant(
        "strict_key_made_progress",
        "rule 1: a key that reaches the forward (jepa_weight) may change on a resume",
        [edit("config.py", '"eval", "eval_every"})', '"eval", "eval_every", "jepa_weight"})')],
        [f"{UNITS}::test_exactly_the_progress_keys_may_change_on_a_resume"],
    ),
    Mutant(
        "progress_key_made_strict",
        "rule 1: extending a run with another eval_every is refused as drift",
        [edit("config.py", '"eval", "eval_every"})', '"eval"})')],
        [f"{UNITS}::test_exactly_the_progress_keys_may_change_on_a_resume"],
    ),
    Mutant(
        "lr_reads_steps",
        "extending a run changes LRs it already used: the decay is tied to `steps`",
        [
            edit(
                "step.py",
                "(step - cfg.decay_start) / max(1, cfg.decay_steps)",
                "(step - cfg.decay_start) / max(1, cfg.steps - cfg.decay_start)",
            )
        ],
        [f"{UNITS}::test_the_lr_schedule_does_not_read_steps"],
    ),
    # run state the container carries
    Mutant(
        "stress_not_saved",
        "item 4: the stress window is not in the container",
        [edit("parts.py", "stress=parts.stress, table_step=", "stress=None, table_step=")],
        [CRASH],
    ),
    Mutant(
        "stress_not_restored",
        "item 4: the stress window restarts empty on a resume",
        [edit("parts.py", "        parts.stress = ck.stress", "        pass")],
        [CRASH],
    ),
    Mutant(
        "tables_not_restored",
        "a resume trains from empty n-gram tables",
        [edit("parts.py", "        parts.tables = tables", "        pass")],
        [CRASH],
    ),
    Mutant(
        "table_step_not_restored",
        "the sidecar's table_step is not read back: the tables count from 0 again",
        [edit("tables_file.py", "    tables.table_step = hd.table_step", "    tables.table_step = 0")],
        [f"{DELTAS}::test_a_resume_from_any_checkpoint_of_a_chain_is_the_same_run_and_writes_the_same_tables_files[24]"],
    ),
    Mutant(
        "optimiser_not_restored",
        "a resume restarts AdamW's moments from zero",
        [edit("parts.py", "    parts.optim.load_state_dict(ck.optim)", "    pass")],
        [CRASH],
    ),
    Mutant(
        "depth_keyed_on_a_counter",
        "rule 3: rand_depth's draw is keyed on a process counter, not the step",
        [
            edit(
                "model.py",
                "    return int(keyed_randint(cfg.seed, step, STREAM_DEPTH,",
                "    depth_for_step.calls = getattr(depth_for_step, 'calls', -1) + 1\n"
                "    return int(keyed_randint(cfg.seed, depth_for_step.calls, STREAM_DEPTH,",
            )
        ],
        [f"{UNITS}::test_the_depth_of_a_step_is_a_pure_function_of_seed_and_step"],
    ),
    # files on disk
    Mutant(
        "checksum_not_verified",
        "a container section whose bytes changed loads as if intact",
        [edit("container_format.py", "    if crc is not None and src.crc != crc:\n", "    if False:\n")],
        [f"{FUZZ}::test_v3_two_byte_bursts_in_every_section"],
    ),
    Mutant(
        "atomic_write_is_direct",
        "a crash mid-write leaves a torn file: the temp file + rename is gone",
        [edit("fsio.py", 'tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")', "tmp = path")],
        [f"{UNITS}::test_a_failed_atomic_write_leaves_the_old_file_and_no_temp"],
    ),
    Mutant(
        "rotation_deletes_newest",
        "rotation deletes the checkpoint it was asked to keep: the one just written",
        [
            edit(
                "checkpoints.py",
                "(m and int(m[1]) not in kept and int(m[1]) < newest and p.name not in needed)",
                "(m and (int(m[1]) not in kept or int(m[1]) == newest))",
            )
        ],
        [f"{FUZZ}::test_rotation_of_a_clean_directory"],
    ),
    Mutant(
        "torn_pair_loaded_without_tables",
        "a checkpoint whose sidecar is torn or missing loads with fresh tables instead of being skipped",
        [edit("checkpoints.py", "        msg, pre = str(e), ", "        return ck, None\n        msg, pre = str(e), ")],
        [f"{FUZZ}::test_sidecar_damage_and_mismatch"],
    ),
    # what the log and the fingerprint say
    Mutant(
        "quant_column_from_config",
        "the row names the plan's quant format, not the forward that ran",
        [edit("step.py", '"quant": ran["quant"]', '"quant": cfg.quant')],
        ["tests/test_same_run_forward.py::test_the_row_reports_what_ran_not_what_the_plan_says"],
    ),
    Mutant(
        "compiled_step_runs_eager",
        "compile = true builds the compiled model, but the step runs the eager one: the log says compiled, falsely",
        [edit("step.py", "    model = parts.model if parts.fwd is None else parts.fwd", "    model = parts.model")],
        ["tests/test_compile.py::test_every_step_runs_through_the_compiled_model"],
    ),
    Mutant(
        "compiled_not_logged",
        "the container's forward record says eager for a step that ran compiled",
        [edit("parts.py", '"compiled": parts.compiled}', '"compiled": False}')],
        ["tests/test_compile.py::test_the_log_and_the_checkpoints_say_the_step_ran_compiled"],
    ),
    Mutant(
        "older_snapshot_reads_compiled",
        "a run from before `compile` existed reads back as compiled, so its own resume is refused as drift",
        [edit("config.py", '4: ({"compile": False}, {}),', '4: ({"compile": True}, {}),')],
        ["nbs/03_config.ipynb"],
    ),
    Mutant(
        "newer_snapshot_read_as_this_format",
        "a snapshot from a newer kit is read as if its new keys did not exist, instead of being refused by format",
        [edit("config.py", "    if fmt > SNAPSHOT_FORMAT:", "    if False:")],
        ["nbs/03_config.ipynb"],
    ),
    Mutant(
        "fingerprint_skips_teacher",
        "two runs whose teachers differ fingerprint the same",
        [
            edit(
                "parts.py",
                'for tag, model in (("", parts.model), ("T", parts.teacher)):',
                'for tag, model in (("", parts.model),):',
            )
        ],
        [f"{UNITS}::test_the_fingerprint_covers_every_piece_of_run_state"],
    ),
    Mutant(
        "fingerprint_skips_tables",
        "two runs whose n-gram tables differ fingerprint the same",
        [edit("parts.py", "    fingerprint_update(h, parts.tables)", "    pass")],
        [f"{UNITS}::test_the_fingerprint_covers_every_piece_of_run_state"],
    ),
    Mutant(
        "fingerprint_skips_optimiser",
        "two runs whose AdamW moments differ fingerprint the same",
        [edit("parts.py", "    osd = optim.state_dict()", '    osd = {"state": {}}')],
        [f"{UNITS}::test_the_fingerprint_covers_every_piece_of_run_state"],
    ),
    Mutant(
        "fingerprint_skips_stress",
        "two runs whose stress windows differ fingerprint the same",
        [edit("parts.py", "        h.update(parts.stress.to_bytes())", "        pass")],
        [f"{UNITS}::test_the_fingerprint_covers_every_piece_of_run_state"],
    ),
    # resuming
    Mutant(
        "env_drift_not_checked",
        "a resume under another numeric environment goes ahead unrecorded, its interval not replayed whole",
        [edit("resume.py", "    drift = env_diff(found.ckpt.env, env) if found.ckpt.env is not None else {}",
              "    drift = {}")],
        ["tests/test_verify_resume.py::test_a_thread_change_is_verified_by_replay_and_the_run_is_the_same"],
    ),
    Mutant(
        "drift_not_checked_on_resume",
        "rule 1: config.toml is not diffed on resume: a checkpoint from before plan pinning is checked by nothing",
        [edit("resume.py", "    check_drift(snapshot, cfg, where=str(paths.config))", "    pass")],
        [f"{RESUME}::test_a_checkpoint_from_before_plan_pinning_is_still_checked_against_config_toml"],
    ),
    Mutant(
        "pinned_plan_not_checked",
        "rule 1: an edited config.toml lets another plan resume the run",
        [
            edit(
                "checkpoints.py",
                '    check_drift(plan, cfg, where=f"{path}, the plan pinned in the checkpoint")',
                "    pass",
            )
        ],
        ["tests/test_pinned_plan.py::test_edited_config_toml_is_drift_naming_the_key_and_the_checkpoint"],
    ),
    Mutant(
        "steps_below_reached_allowed",
        "a resume with fewer steps than reached rewrites the run's history",
        [edit("resume.py", "    if cfg.steps < found.ckpt.step:", "    if False:")],
        [f"{RESUME}::test_a_resume_that_would_be_another_run_is_refused_before_anything_is_written"],
    ),
    Mutant(
        "missing_state_not_refused",
        "rule 4: a v3 container lacking the teacher or stress resumes quietly",
        [edit("parts.py", 'if lacks and not getattr(ck, "legacy", False):', "if False:")],
        ["tests/test_same_run_missing.py::test_a_v3_container_lacking_what_the_plan_needs_is_refused"],
    ),
    Mutant(
        "metrics_rows_duplicated_on_resume",
        "the curve has two rows for the steps past the resumed checkpoint",
        [edit("rundir.py", 'if r["step"] < step:\n                f.write(', 'if True:\n                f.write(')],
        [CRASH],
    ),
    Mutant(
        "history_truncated_silently",
        "a bad line in the middle of metrics.jsonl silently drops the rows after it",
        [edit("rundir.py", "if torn_tail and nxt is _EOF:", "if torn_tail:")],
        [f"{UNITS}::test_a_bad_line_in_the_middle_of_the_history_is_an_error_not_a_truncation"],
    ),
    Mutant(
        "run_dir_lock_not_taken",
        "two writers can train into one run directory at once",
        [
            edit(
                "train.py",
                "with RunLock(paths.lock, enabled=dist_info.lead and paths.root.is_dir()):",
                "with RunLock(paths.lock, enabled=False):",
            )
        ],
        [f"{UNITS}::test_a_run_dir_held_by_another_writer_is_refused_before_anything_is_written"],
    ),
    Mutant(
        "sigterm_not_handled",
        "a scheduler's SIGTERM kills the run between checkpoints instead of stopping at one",
        [edit("train.py", "signals = (signal.SIGINT, signal.SIGTERM)", "signals = (signal.SIGINT,)")],
        ["tests/test_signals.py::test_sigterm_in_process_stops_at_a_step_boundary_and_resumes_bitwise"],
    ),
    # scale-out under torchrun
    Mutant(
        "ddp_rank_slice_shifted",
        "every rank trains the first slice of the global batch",
        [edit("step.py", "slice(block.start * mb, block.stop * mb)", "slice(0, len(block) * mb)")],
        [f"{UNITS}::test_every_rank_slice_of_a_global_batch_concatenates_to_the_batch"],
    ),
    Mutant(
        "fingerprints_not_compared_across_ranks",
        "ranks that diverged go on training",
        [edit("dist.py", "    if dist_info.world == 1:\n        return\n    mine", "    return\n    mine")],
        [f"{UNITS}::test_ranks_whose_fingerprints_differ_are_a_hard_error"],
    ),
    # table deltas (issue 15 item 3)
    Mutant(
        "delta_misses_touched_rows",
        "a delta leaves out the rows the steps wrote: a resume from it loads stale tables",
        [edit("ngram.py", "            self.parts.append(rows.cpu())", "            pass")],
        [f"{DELTAS}::test_a_resume_from_any_checkpoint_of_a_chain_is_the_same_run_and_writes_the_same_tables_files[12]"],
    ),
    Mutant(
        "rotation_deletes_a_chains_files",
        "rotation deletes the full sidecar and deltas a kept checkpoint reads",
        [edit("checkpoints.py", "int(m[1]) < newest and p.name not in needed)", "int(m[1]) < newest)")],
        [f"{DELTAS}::test_rotation_keeps_every_file_a_kept_checkpoint_reads"],
    ),
    Mutant(
        "no_compaction",
        "deltas chain forever: a resume replays every checkpoint since the start",
        [edit("commit.py", "self.deltas >= FULL_EVERY - 1 or self.chain_bytes + new >= whole",
              "self.chain_bytes + new >= whole")],
        [f"{DELTAS}::test_deltas_on_zero_tables_then_a_compacted_full_sidecar"],
    ),
    Mutant(
        "chains_outweigh_full_sidecars",
        "a chain of deltas grows past the size of the tables: more on disk and more to replay than one full sidecar",
        [edit("commit.py", "self.deltas >= FULL_EVERY - 1 or self.chain_bytes + new >= whole",
              "self.deltas >= FULL_EVERY - 1")],
        [f"{DELTAS}::test_a_chain_is_compacted_before_its_deltas_outweigh_a_full_sidecar"],
    ),
    Mutant(
        "delta_digest_not_checked",
        "a delta applied to another base with the same steps and id loads silently wrong tables",
        [edit("deltas.py", "        if tuple(got) != tuple(d.digest):", "        if False:")],
        [f"{DELTAS}::test_a_delta_applied_to_another_base_is_refused_by_its_digest"],
    ),
    Mutant(
        "row_hash_xorshift_dropped",
        "the tables' row hash in torch int64 words drifts from its uint64 definition (fingerprints change meaning)",
        [edit("digest.py", "    x32[:, _LO::2] ^= x32[:, 1 - _LO::2]\n", "")],
        ["nbs/15_digest.ipynb"],
    ),
    Mutant(
        "write_behind_never_drops",
        "a large checkpoint file stays in the page cache: each checkpoint takes 100+ MB of fresh memory again",
        [edit("fsio.py", "        if self.can_drop and self.pending >= WRITE_BEHIND:\n            self.drop()\n", "")],
        ["nbs/02_fsio.ipynb"],
    ),
    Mutant(
        "digest_dirty_rows_lost",
        "the rows a step touched are not rehashed: the fingerprint misses a change of the tables",
        [edit("digest.py", "    mask[rows] = True\n", "")],
        ["tests/test_scale_digest.py::test_incremental_equals_full_after_steps", "nbs/15_digest.ipynb"],
    ),
    Mutant(
        "delta_base_id_not_checked",
        "a delta names its base by id, and nothing compares it",
        [edit("deltas.py", "    if hd.base_id != want_id:", "    if False:")],
        [f"{DELTAS}::test_a_delta_applied_to_another_base_is_refused_by_its_digest"],
    ),
    Mutant(
        "foreign_checkpoint_skipped_not_refused",
        "rule 1: another run's checkpoint whose chain does not load is skipped, and the run resumes quietly",
        [edit("resume.py", "check=pinned)", "check=None)")],
        [f"{DELTAS}::test_another_runs_delta_pair_is_refused_not_skipped"],
    ),
    # the input boundary (issue 23): every value checked once, every file opened safely, every parse bounded
    Mutant(
        "key_rules_not_applied",
        "a value outside its key's range (lr -1, beta1 1.5, mlp_mult 0) reaches torch or trains silently wrong",
        [edit("validate.py", "    errs = rule_problems(flat)\n", "    errs = []\n")],
        [f"{RANGES}::test_every_problem_is_listed_in_one_error"],
    ),
    Mutant(
        "momentum_may_be_one",
        "a decay or momentum of 1 (beta2, ngram_momentum) passes: AdamW raises, the n-gram rows never forget",
        [edit("validate.py", '_DECAY = Range(0.0, 1.0, "[)")', '_DECAY = Range(0.0, 1.0, "[]")')],
        [f"{RANGES}::test_every_problem_is_listed_in_one_error"],
    ),
    Mutant(
        "joint_rules_not_applied",
        "min_lr above lr, heads of odd width, orders longer than a sequence pass validation",
        [edit("validate.py", "    errs += joint_problems(cfg, ", "    errs += 0 * joint_problems(cfg, ")],
        [f"{RANGES}::test_the_rules_between_keys"],
    ),
    Mutant(
        "memory_not_checked",
        "a plan needing terabytes is allocated until the allocator fails, instead of refused with the figure",
        [edit("validate.py", "        errs = memory_problems(cfg, machine_memory())", "        errs = []")],
        [f"{RANGES}::test_fit_refuses_before_anything_is_allocated_or_written"],
    ),
    Mutant(
        "orders_past_the_header",
        "65 n-gram orders pass validation, then every tables file they write is refused as corrupt",
        [edit("validate.py", "MAX_NGRAM_ORDERS = 64  #", "MAX_NGRAM_ORDERS = 65  #")],
        [f"{RANGES}::test_the_orders_limit_is_the_tables_files_header_limit"],
    ),
    Mutant(
        "huge_cli_integer_unchecked",
        "a 5,000-digit flag reaches int(): Python's 'Exceeds the limit' instead of one line",
        [edit("flags.py", "        if digits > MAX_INT_DIGITS:\n", "        if False:\n")],
        [f"{RANGES}::test_a_huge_integer_flag_is_one_problem_naming_the_flag"],
    ),
    Mutant(
        "any_file_opened",
        "a FIFO or a device in place of a file the kit reads is opened: /dev/zero is an 'empty' corpus, a FIFO blocks",
        [
            edit("fsio.py", "            raise _not_regular(path, st.st_mode)  # before opening it",
                 "            pass  # before opening it"),
            edit("fsio.py", "        if not stat.S_ISREG(st.st_mode):  # swapped in",
                 "        if False:  # swapped in"),
        ],
        [f"{FILES}::test_dev_zero_as_the_corpus_is_not_an_empty_file"],
    ),
    Mutant(
        "fifo_swapped_after_the_check",
        "a FIFO swapped in between the path's check and the open is read (the descriptor is not checked)",
        [edit("fsio.py", "        if not stat.S_ISREG(st.st_mode):  # swapped in", "        if False:  # swapped in")],
        ["nbs/02_fsio.ipynb"],
    ),
    Mutant(
        "json_depth_unbounded",
        "a row nested 100 deep (short of Python's recursion limit) is read as history",
        [edit("fsio.py", "    if deep and (why := _unbounded(obj, False)):", "    if False:")],
        [f"{FILES}::test_unbounded_history_rows_are_damage_named_by_line"],
    ),
    Mutant(
        "json_integers_unbounded",
        "a 5,000-digit step reaches int(): Python's 'Exceeds the limit' instead of damage named by its line",
        [edit("fsio.py", '    if len(s.lstrip("-")) > MAX_INT_DIGITS:', "    if False:")],
        [f"{FILES}::test_unbounded_history_rows_are_damage_named_by_line"],
    ),
    Mutant(
        "meta_types_unchecked",
        "a checksum-valid container with env: \"threads\" loads, and the environment check iterates over characters",
        [edit("container.py", '    if why := json_type_problem(m, META_SCHEMA, "meta"):', "    if why := None:")],
        [f"{FILES}::test_a_crafted_checksum_valid_meta_is_refused_naming_the_field_by_inspect_and_resume"],
    ),
    Mutant(
        "tensor_shape_unbounded",
        "a [2^62, 0] tensor loads ('verdict: loads') and resume fails deep inside torch",
        [edit("stcodec.py", "    if len(shape) > MAX_DIMS or math.prod(max(d, 1) for d in shape) > MAX_ELEMENTS:",
              "    if False:")],
        [f"{FILES}::test_an_impossible_tensor_shape_is_refused_by_inspect_and_resume"],
    ),
    Mutant(
        "lock_on_the_note_file",
        "one writer: the lock is on run.lock, so deleting (or replacing) the note lets a second writer in",
        [edit("rundir.py", "        fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)",
              "        fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)")],
        [f"{LOCK}::test_the_lock_survives_its_note_being_deleted_or_replaced"],
    ),
    Mutant(
        "readers_take_the_lock_exclusive",
        "two verifiers of one run refuse each other",
        [edit("rundir.py", "(fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX)", "fcntl.LOCK_EX")],
        [f"{LOCK}::test_readers_share_the_lock_write_nothing_and_keep_writers_out"],
    ),
    Mutant(
        "fresh_over_history_allowed",
        "history is evidence: a fresh start over metrics, lineage and config.toml without checkpoints replaces them",
        [edit("rundir.py", "    held = paths.history()\n    if held:", "    held = paths.history()\n    if False:")],
        ["tests/test_history.py::test_a_fresh_start_over_history_is_refused_naming_it_and_the_two_ways_on"],
    ),
    Mutant(
        "fresh_fit_over_history",
        "a second fresh fit in a directory whose run died before its first checkpoint replaces its rows and plan",
        [edit("train.py", "        refuse_fresh_over_history(paths)  # history is evidence", "        pass  #")],
        ["tests/test_history.py::test_a_second_fresh_fit_in_one_directory_is_refused_and_every_row_is_still_there"],
    ),
    Mutant(
        "run_dir_name_unchecked",
        "a run directory whose name is not UTF-8 is created, then fails half-way (the lock's note, the lineage)",
        [edit("rundir.py", "        if why := path_text_problem(self.root):", "        if why := None:")],
        ["tests/test_cli_errors.py::test_a_run_dir_name_that_is_not_utf8_is_refused_by_fit_and_nothing_is_created"],
    ),
    # the compressor-like score and the baselines (issue 24; issue 23's bounded baselines)
    Mutant(
        "score_context_crosses_units",
        "a held-out file's first byte is predicted from the previous file's last byte, not from no context",
        [edit("score.py", "return [np.frombuffer(bytes([START_BYTE]) + bytes(b), dtype=np.uint8) for b in units]",
              "return [np.frombuffer((bytes(units[u - 1][-1:]) if u else bytes([START_BYTE])) + bytes(b), "
              "dtype=np.uint8) for u, b in enumerate(units)]")],
        [SCORE_NB],
    ),
    Mutant(
        "score_windows_rescore",
        "each sliding window scores all its bytes: bytes already scored are scored again with less context",
        [edit("score.py", "        out.append((start, done, hi))", "        out.append((start, start, hi))")],
        [SCORE_NB],
    ),
    Mutant(
        "score_se_without_fpc",
        "the standard error ignores that the sample is a large share of a finite split",
        [edit("score.py", "math.sqrt((1 - m / n_units) * s2 / m)", "math.sqrt(s2 / m)")],
        [SCORE_NB],
    ),
    Mutant(
        "score_leaves_eval_mode",
        "scoring leaves the model in eval mode: the run's state changes because someone looked at it",
        [edit("score.py", "        model.train(was)\n    return out", "        model.train(False)\n    return out")],
        [SCORE_NB],
    ),
    Mutant(
        "sample_not_keyed",
        "the held-out sample is the first files in sorted order (a few neighbouring packages), not a keyed sample",
        [
            edit(
                "heldout.py",
                "rank = sorted(units, key=lambda u: _rank_key(u[0]))",
                "rank = list(units)",
            )
        ],
        [HELDOUT_NB],
    ),
    Mutant(
        "sample_skips_big_files",
        "a unit that does not fit is skipped and smaller ones taken: the sample favours small files",
        [edit("heldout.py", "            break  # stop at the first that does not fit", "            continue  #")],
        [HELDOUT_NB],
    ),
    Mutant(
        "baselines_on_the_whole_split",
        "the compressors read the whole held-out split, not the bytes the score reads (unbounded on a big corpus)",
        [
            edit(
                "baselines.py",
                "base = stream_baselines(corpus, sample.stream(corpus), ",
                "base = stream_baselines(corpus, bytes(corpus.data[corpus.n_train:]), ",
            )
        ],
        [BASELINES_NB],
    ),
    Mutant(
        "baselines_key_ignores_corpus",
        "another corpus with the same sizes reads this corpus's cached baselines",
        [edit("baselines.py", "[BASELINE_FORMAT, corpus.sha256, corpus.n_train]", "[BASELINE_FORMAT, corpus.n_train]")],
        [BASELINES_NB],
    ),
    Mutant(
        "unwritable_cache_fails_the_run",
        "a cache that cannot be written turns a run that trained and checkpointed into a failed one",
        [
            edit(
                "baselines.py",
                "    except OSError as e:\n        (log or",
                "    except ArithmeticError as e:\n        (log or",
            )
        ],
        [BASELINES_NB]  # its test of an unwritable cache directory never reaches the baselines' write,
    ),
    Mutant(
        "ctrl_c_in_the_baselines_interrupts_a_finished_run",
        "Ctrl-C during the final score turns a finished, checkpointed run into 'interrupted' (exit 130)",
        [
            edit(
                "scorecard.py",
                "    except KeyboardInterrupt:\n        return None, f\"final score interrupted",
                "    except ZeroDivisionError:\n        return None, f\"final score interrupted",
            )
        ],
        [f"{BASELINES}::test_ctrl_c_during_the_baselines_leaves_a_finished_run_finished"],
    ),
    # issue 23 (round 3): a stop mid-eval, one run per process, the caller's process put back, history streamed,
    # keep_ckpts a progress key, the corpus path's refusal, the CLI's three messages
    Mutant(
        "eval_ignores_a_stop",
        "SIGTERM during a long eval waits for the whole eval (eval_batches 100000: minutes) before the checkpoint",
        [edit("step.py", "            if stop is not None and stop():", "            if False:")],
        [f"{PROCESS}::test_a_stop_during_an_endless_eval_is_honoured_within_one_batch_and_checkpoints_the_step"],
    ),
    Mutant(
        "second_fit_in_a_process_runs",
        "two fits from two threads train under each other's process-wide torch settings and restore them crosswise",
        [edit("dist.py", "    if not _ONE_RUN.acquire(blocking=False):", "    if _ONE_RUN.acquire(False) and False:")],
        [f"{PROCESS}::test_a_second_fit_from_another_thread_is_refused_and_changes_no_setting"],
    ),
    Mutant(
        "lazy_import_env_left_behind",
        "the first fit of a process leaves TORCHINDUCTOR_CACHE_DIR in os.environ",
        [edit("numerics.py", "for k in (*(env or {}), *TORCH_SETS_ENV)}", "for k in (*(env or {}),)}")],
        [f"{PROCESS}::test_fit_leaves_the_callers_process_as_it_was"],
    ),
    Mutant(
        "warnings_filter_left_behind",
        "the first fit of a process leaves a warnings filter behind",
        [edit("dist.py", "        warnings.filters[:] = filters", "        pass")],
        [f"{PROCESS}::test_fit_leaves_the_callers_process_as_it_was"],
    ),
    Mutant(
        "warn_only_not_restored",
        "a caller's deterministic mode with warn_only comes back from fit without warn_only (errors where it warned)",
        [edit("numerics.py", "            torch.use_deterministic_algorithms(det, warn_only=warn)",
              "            torch.use_deterministic_algorithms(det)")],
        [f"{PROCESS}::test_fit_leaves_the_callers_process_as_it_was"],
    ),
    Mutant(
        "failed_fit_keeps_the_corpus_open",
        "a failed fit keeps the corpus open for as long as its traceback lives",
        [edit("train.py", "        owned.callback(corpus.close)", "        pass")],
        [f"{PROCESS}::test_fit_leaves_the_callers_process_as_it_was"],
    ),
    Mutant(
        "plot_trace_unbounded",
        "plot draws every row of a long run: memory and time grow with the run",
        [edit("view.py", "            if len(self.done) == 2 * self.most:", "            if False:")],
        [f"{HISTORY}::test_compare_and_plot_stream_a_long_history_in_bounded_memory"],
    ),
    Mutant(
        "steps_out_of_order_accepted",
        "a metrics file whose steps go back is walked as if in order: compare pairs the wrong rows",
        [edit("rundir.py", '        if row["step"] <= last:', "        if False:")],
        ["nbs/32_view.ipynb"],
    ),
    Mutant(
        "compare_a_missing_directory",
        "compare against a directory that does not exist says 'has 0 rows' instead of naming it",
        [edit("view.py", "        if not Path(run).is_dir():", "        if False:")],
        ["nbs/32_view.ipynb"],
    ),
    Mutant(
        "keep_ckpts_strict",
        "keeping fewer checkpoints from a resume on is refused as drift, though no step reads them",
        [edit("config.py", '"ckpt_every", "keep_ckpts", ', '"ckpt_every", ')],
        [f"{RESUME_KEYS}::test_keep_ckpts_may_change_on_a_resume_and_the_run_is_the_same"],
    ),
    Mutant(
        "moved_corpus_without_a_way_on",
        "a corpus refused as drift on data (other bytes, or a plan that pins none) is not told how to go on",
        [edit("config.py", 'if "data" in diffs else ""', 'if False else ""')],
        [f"{RESUME_KEYS}::test_other_bytes_at_any_path_are_refused_and_an_older_plan_names_its_path"],
    ),
    Mutant(
        "generate_prints_the_prompt_first",
        "generate prints the prompt, then rejects an argument",
        [
            edit("cli.py", "    chunks = generate(model, prompt, ", "    chunks = lambda: generate(model, prompt, "),
            edit("cli.py", "    for chunk in chunks:", "    for chunk in chunks():"),
        ],
        [f"{CLI}::test_generate_rejects_an_argument_before_printing_the_prompt"],
    ),
    Mutant(
        "plot_appends_png",
        "plot -o X writes X.png and says 'wrote X'",
        [edit("cli.py", 'format=ext or "png")', "format=None)")],
        [f"{CLI}::test_plot_writes_the_file_it_names"],
    ),
    Mutant(
        "inspect_raises_on_an_ascii_terminal",
        "under PYTHONIOENCODING=ascii inspect prints a codec error instead of its verdict",
        [edit("cli.py", 'or "utf-8", "backslashreplace")', 'or "utf-8")')],
        [f"{CLI}::test_inspect_prints_its_verdict_under_an_ascii_terminal"],
    ),
    Mutant(
        "corpus_builds_pile_up",
        "every touch of a directory corpus adds another full cached copy, and none is ever removed",
        [edit("corpus_cache.py", "            old.unlink(missing_ok=True)", "            pass")],
        ["tests/test_data_cache.py::test_touching_a_directory_corpus_replaces_its_build"],
    ),
    Mutant(
        "deleted_cache_ends_the_run",
        "deleting the cache under a healthy run ends it at its next checkpoint, though its open file still reads",
        [edit("train.py", 'corpus.data.path if corpus.manifest is None else ""', "corpus.data.path")],
        ["tests/test_data_cache.py::test_deleting_the_cache_under_a_run_does_not_end_it"],
    ),
    Mutant(
        "first_checkpoint_advises_a_resume",
        "ENOSPC at a run's first checkpoint says the previous one is intact and to resume: there is none",
        [edit("commit.py", 'and resume." if prev else', 'and resume." or')],
        [f"{CLI}::test_a_full_disk_at_the_first_checkpoint_does_not_advise_a_resume"],
    ),
    Mutant(
        "resume_holds_every_row",
        "a resume holds every row of the run's history in memory (a million-step run: gigabytes before step one)",
        [edit("rundir.py", 'if r["step"] < step), maxlen=keep)', 'if r["step"] < step), maxlen=None)')],
        [f"{HISTORY}::test_a_resume_holds_a_bounded_tail_of_the_history_and_keeps_every_row"],
    ),
    # what a person sees of a run (issue 25)
    Mutant(
        "progress_redraws_into_a_log",
        "a pipe or a log file gets the terminal's bar: a carriage-return redraw per step, not a line per log step",
        [edit("view.py", '        return "terminal" if stream.isatty() else "lines"', '        return "terminal"')],
        [f"{OUTPUT}::test_a_pipe_gets_one_plain_line_per_log_step"],
    ),
    Mutant(
        "stop_between_refreshes_not_shown",
        "a run stopped between two refreshes ends its output on an older step than the one its checkpoint holds",
        [edit("view.py", "        if self.row is not None and self.shown != self.done:", "        if False:")],
        [f"{PANEL}::test_progress_in_a_kernel_is_the_panel_and_ends_with_the_last_line"],
    ),
    # issue 22: resume anywhere, proven (evidence, the overlap check, verification by replay, dormouse verify)
    Mutant(
        "evidence_not_compared",
        "a resume re-trains the steps after its checkpoint without comparing them with the run's rows",
        [edit("evidence.py", '        rec = self.recorded.get(row["step"])', "        rec = None")],
        ["tests/test_verify_resume.py::test_a_re_trained_step_that_differs_stops_the_resume_before_its_checkpoint"],
    ),
    Mutant(
        "evidence_compared_only_at_checkpoints",
        "the overlap check looks only at fingerprinted steps: a loss that differs between them goes unseen",
        [
            edit(
                "train.py",
                "    seg.overlap.check(row)  # a step",
                '    seg.overlap.check(row) if row["fingerprint"] else None  # a step',
            )
        ],
        ["tests/test_verify_resume.py::test_a_killed_run_resumes_comparing_every_step_it_re_trains"],
    ),
    Mutant(
        "replay_writes_into_the_run_dir",
        "dormouse verify takes the run's lock as a writer: it writes its note into the run directory it proves",
        [edit("verify.py", "RunLock(paths.lock, shared=True):", "RunLock(paths.lock):")],
        ["tests/test_verify_resume.py::test_dormouse_verify_reproduces_every_interval_and_writes_nothing"],
    ),
    Mutant(
        "verified_resume_not_recorded",
        "a resume verified by replay leaves no record of what was verified in lineage.jsonl",
        [edit("train.py", '"env_verified": o.env_verified,', '"env_verified": None,')],
        ["tests/test_verify_resume.py::test_a_thread_change_is_verified_by_replay_and_the_run_is_the_same"],
    ),
    Mutant(
        "overlap_mismatch_only_warned",
        "a re-trained step that differs from the run's row is a warning, and the diverged run goes on",
        [edit("evidence.py", "        if self.waived:", "        if True:")],
        ["tests/test_verify_resume.py::test_a_re_trained_step_that_differs_stops_the_resume_before_its_checkpoint"],
    ),
    Mutant(
        "replay_mismatch_only_warned",
        "a replay of a changed environment that differs is said, and the resume goes on in the new environment",
        [edit("replay.py", "    if got.differs:", "    if got.differs and False:")],
        ["tests/test_verify_resume.py::test_a_replay_that_differs_is_refused_naming_the_step"],
    ),
    # issue 23 (round 3, the lead): a full disk outside a checkpoint names its file
    Mutant(
        "full_disk_unnamed_in_atomic_write",
        "a full disk while config.toml, lineage or the metrics rewrite is written says 'No space left' and no file",
        [edit("fsio.py", "        if isinstance(e, OSError) and e.errno is not None and e.filename is None:",
              "        if False:")],
        ["tests/test_full_disk.py::test_the_atomic_writer_names_the_file_a_full_disk_stopped"],
    ),
    Mutant(
        "full_disk_unnamed_in_metrics_log",
        "a full disk while a metrics row is appended says 'No space left' and no file",
        [edit("rundir.py", "            except OSError as e:  # a full disk names the file it could not append to\n"
                           "                raise OSError(e.errno, e.strerror, str(self.path)) from e",
              "            except OSError as e:\n                raise")],
        ["tests/test_full_disk.py::test_the_metrics_log_names_its_file_when_the_disk_is_full"],
    ),
    Mutant(
        "delta_size_unchecked",
        "a tables delta that claims 8 GiB it does not hold is read as far as its header points and said to load",
        [edit("deltas.py", "        if os.fstat(f.fileno()).st_size != hd.file_bytes:", "        if False:"),
         edit("deltas.py", "    if path.stat().st_size != hd.file_bytes:", "    if False:")],
        ["tests/test_sparse_tables.py"],
    ),
    # issue 22, the rest of the matrix (verify2): offline targets in the replay, the ISA cap named
    Mutant(
        "replay_without_offline_targets",
        "a replay of a changed environment trains without the run's offline JEPA targets",
        [edit("replay.py", "    got = replay_steps(parts, corpus, cfg, ev, stop, device, di, targets)",
              "    got = replay_steps(parts, corpus, cfg, ev, stop, device, di, None)")],
        ["tests/test_verify_resume.py::test_a_thread_change_is_verified_for_each_feature_set[aux-targets]"],
    ),
    Mutant(
        "aten_capability_variable_not_recorded",
        "ATEN_CPU_CAPABILITY is not in the environment record: a refusal under it does not name what to unset",
        [edit("numerics.py", '    "ATEN_CPU_CAPABILITY": "caps ATen', '    "ATEN_UNRECORDED": "caps ATen')],
        ["tests/test_verify_matrix.py::test_aten_avx2_is_judged_by_the_evidence"],
    ),
    # integration (the lead): rows trained while the corpus changed are not evidence
    Mutant(
        "corpus_changed_rows_kept_as_evidence",
        "rows a run logged on a rewritten corpus (its checkpoint refused) stop the resume on the restored one",
        [edit("train.py", "        mark_segment(seg.paths.root, seg.index, corpus_changed_by_step=seg.parts.step)",
              "        pass")],
        ["tests/test_pinned_corpus.py::test_corpus_rewritten_mid_run_and_restored_refuses_the_checkpoint"],
    ),
    # match codes (issue 24): what followed the last earlier occurrence, never what follows now
    Mutant(
        "match_codes_peek_at_the_next_byte",
        "a match code names the byte after the current one: the model reads the byte it must predict",
        [edit("match.py", "code[cur] = np.where(unit[prev] == unit[cur], nxt[prev], MATCH_TRAIN + nxt[prev])",
              "code[cur] = np.where(unit[prev] == unit[cur], nxt[cur], MATCH_TRAIN + nxt[prev])")],
        ["nbs/08_match.ipynb"],
    ),
    Mutant(
        "match_codes_cross_files",
        "a file's codes match into the file before it: the units of a directory corpus run together",
        [edit("data.py", 'return [f["offset"] for f in corpus.manifest["files"]]', "return [0]")],
        [DATA_NB],
    ),
    Mutant(
        "match_cache_trusted_unchecked",
        "a damaged match-code cache entry is read as the codes: the model trains on bytes the corpus does not have",
        [edit("data.py", '_digest(cache_dir() / f"{key}.{x}") == meta[x]', "x in meta")],
        [DATA_NB],
    ),
    Mutant(
        "generation_codes_see_only_the_window",
        "generation codes only the last seq_len bytes: a completion gets other codes than its text would when scored",
        [edit("infer.py", "stream_codes(whole, orders)[-len(ctx):]", "stream_codes(ctx, orders)")],
        ["nbs/46_infer.ipynb"],
    ),
    # issue 41: trackers are views (track, track_tensorboard, track_mlflow)
    Mutant(
        "tracker_purge_step_dropped",
        "TensorBoard's writer names no purge step: after a kill and a resume it shows the re-trained steps twice",
        [edit("track_tensorboard.py", "SummaryWriter(str(logdir), purge_step=run.start)",
              "SummaryWriter(str(logdir))")],
        [TRACK_TB_NB],
    ),
    Mutant(
        "mlflow_run_not_continued",
        "a resume opens a new MLflow run instead of the one the run directory kept: one experiment, scattered runs",
        [edit("track_mlflow.py", "self.run_id = ids.get(uri)", "self.run_id = None")],
        [TRACK_ML_NB],
    ),
    Mutant(
        "mlflow_resent_steps_logged_twice",
        "the steps a resume re-sends are logged again: MLflow, which keeps every value, holds them twice",
        [edit("track_mlflow.py", "for k, v in values.items() if held.get(k) != v]", "for k, v in values.items()]")],
        [TRACK_ML_NB],
    ),
    Mutant(
        "failing_tracker_kept_on",
        "a tracker that raised is still called: a failing store is hit, and reported, at every row",
        [edit("track.py", "        self.trackers.remove(t)\n        try:\n", "        try:\n")],
        ["nbs/33_track.ipynb"],  # its failing tracker is called after it raised (the views' test of it takes 30 s)
    ),
    Mutant(
        "failing_tracker_not_marked_in_lineage",
        "a tracker switched off leaves no mark in lineage.jsonl: the run's record hides that a view stopped",
        [edit("track.py", "            mark_segment(self.root, self.segment, trackers_off=dict(self.off))",
              "            pass")],
        [f"{TRACK_VIEWS}::test_a_failing_tracker_is_reported_once_switched_off_marked_and_the_run_is_the_run_without"],
    ),
    Mutant(
        "tracker_package_not_checked",
        "a tracker whose package is missing is not refused up front: the run starts and its view silently is not",
        [edit("track.py", 'if gone := missing_packages(getattr(t, "packages", ())):', "if gone := []:")],
        [f"{TRACK_VIEWS}::test_a_tracker_whose_package_is_missing_is_refused_naming_the_extra_before_anything_is_written"],
    ),
    Mutant(
        "mlflow_store_left_open",
        "the MLflow tracker leaves its SQLite store open after the run: fit does not leave the process as it found it",
        [edit("track_mlflow.py", "        store.engine.dispose()", "        pass")],
        [f"{TRACK_VIEWS}::test_a_run_with_trackers_leaves_no_thread_and_no_file_of_the_run_open"],
    ),
    Mutant(
        "trackers_open_beside_the_first_steps",
        "the loop does not wait for its trackers to open: importing mlflow and making its store compete with the steps",
        [edit("track.py", "if not self.opened.wait(OPEN_SECS):", "if not self.opened.wait(0):")],
        [f"{TRACK_VIEWS}::test_the_trackers_open_before_the_first_step_and_are_fed_in_batches_on_a_nicer_thread"],
    ),
    Mutant(
        "feed_woken_per_row",
        "each row wakes the feed's thread: a wake-up, and the trackers' work, beside every step instead of every 2 s",
        [edit("track.py", "self.items.put((\"log\", row))  # wakes nothing",
              "self.wake.set()\n        self.items.put((\"log\", row))  # wakes nothing")],
        [f"{TRACK_VIEWS}::test_the_trackers_open_before_the_first_step_and_are_fed_in_batches_on_a_nicer_thread"],
    ),
    Mutant(
        "feed_thread_not_nicer",
        "the feed's thread runs at the loop's priority: on a machine the step's threads fill, it takes their cores",
        [edit("track.py", "os.setpriority(os.PRIO_PROCESS, me,", "min(os.PRIO_PROCESS, me,")],
        [f"{TRACK_VIEWS}::test_the_trackers_open_before_the_first_step_and_are_fed_in_batches_on_a_nicer_thread"],
    ),
    Mutant(
        "mlflow_store_made_by_migrations_every_run",
        "every new run directory's MLflow store is made by MLflow's migrations: 1.5 s of CPU before a fresh run starts",
        [edit("track_mlflow.py", "if uri == default and not (home / \"mlflow.db\").exists():", "if False:")],
        [f"{TRACK_VIEWS}::test_a_new_mlflow_store_is_the_cached_empty_store"],
    ),
    # issue 55: the proof covers every number a reader sees
    Mutant(
        "curve_compares_loss_and_fingerprint_only",
        "dormouse verify compares two columns: an eval figure, an lr or a grad_norm edited and resealed passes",
        [edit("evidence.py", "            keys = list(ev.proves) + [k for k in measured(r) if ev.columns is not None",
              '            keys = ["loss", "fingerprint"] + [k for k in [] if ev.columns is not None')],
        [f"{PROOF}::test_verify_names_each_column_edited_and_resealed_and_the_replay_compares_eval_figures"],
    ),
    Mutant(
        "replay_compares_loss_and_fingerprint_only",
        "a replay compares the loss and the fingerprint: an eval figure or an lr that differs is not seen",
        [edit("replay.py", 'if what := row_disagrees(row, ev.row(step), "replayed"):',
              'if what := row_disagrees(row, ev.row(step), "replayed", keys=["loss", "fingerprint"]):')],
        [f"{PROOF}::test_verify_names_each_column_edited_and_resealed_and_the_replay_compares_eval_figures"],
    ),
    Mutant(
        "evidence_holds_losses_only",
        "a checkpoint's evidence holds its steps' losses and fingerprints only: the other columns prove nothing",
        [edit("evidence.py", "                      {k: tuple(r.get(k) for r in self.rows) for k in names})",
              "                      None)")],
        [f"{PROOF}::test_every_column_of_a_logged_row_is_in_its_checkpoints_evidence"],
    ),
    Mutant(
        "overlap_compares_loss_and_fingerprint_only",
        "a re-trained step is compared with the run's row in its loss and fingerprint only",
        [edit("evidence.py", "        what = row_disagrees(row, rec, keys=measured(rec))",
              '        what = row_disagrees(row, rec, keys=[k for k in ("loss", "fingerprint") if rec.get(k)])')],
        ["nbs/41_evidence.ipynb"],
    ),
    Mutant(
        "verify_steps_all_is_a_prefix",
        "verify_steps=\"all\" replays a prefix of the interval, not all of it: a difference past it resumes",
        [edit("replay.py", 'None if drift or check_verify_steps(verify_steps) == "all" else verify_steps',
              "None if drift else 1 if verify_steps == \"all\" else verify_steps")],
        [f"{PROOF}::test_the_default_replay_is_a_prefix_that_says_so_and_all_replays_the_whole_interval"],
    ),
    Mutant(
        "verify_data_of_other_bytes_replayed",
        "verify --data naming other bytes is not refused: every interval is tried and said unverifiable",
        [edit("verify.py", "            check_moved(data, _plan(", "            0 and check_moved(data, _plan(")],
        [f"{PROOF}::test_verify_data_that_is_not_there_or_other_bytes_is_refused_in_one_line"],
    ),
    Mutant(
        "tracker_not_caught_up",
        "a tracker is fed from the segment's start only: the rows a kill kept it from showing are lost for good",
        [edit("track.py", "                    since.append((t, max(0, last + 1)))", "                    pass")],
        ["nbs/33_track.ipynb"],
    ),
    Mutant(
        "tracker_system_exit_kills_the_feed",
        "a tracker raising SystemExit ends the feed's thread unreported: every other tracker stops too",
        [edit("track.py", "        except BaseException as e:  # anything a tracker raises",
              "        except Exception as e:  # anything a tracker raises")],
        ["nbs/33_track.ipynb"],
    ),
    Mutant(
        "hung_tracker_unnamed",
        "a tracker stuck in a call is reported as 'trackers', not by its name",
        [edit("track.py", '            name, where = self.busy or ("trackers", "close")',
              '            name, where = ("trackers", "close")')],
        [f"{TRACK_VIEWS}::test_a_hung_tracker_is_named_with_the_call_it_is_stuck_in"],
    ),
    Mutant(
        "trackers_of_any_type_taken",
        "fit(trackers=42) fails deep inside with a raw TypeError",
        [edit("track.py", '    raise ConfigError(f"trackers={trackers!r}: {USE}")', "    return list(trackers)")],
        [f"{TRUST}::test_fit_refuses_each_bad_argument_in_one_line_naming_it"],
    ),
    Mutant(
        "ranks_environments_not_compared",
        "ranks under different MKL_CBWR train on, and die later as 'ranks diverged', naming nothing",
        [edit("dist.py", "        if drift := env_diff(envs[0], env):", "        if drift := {}:")],
        ["nbs/37_dist.ipynb"],
    ),
    Mutant(
        "lost_peer_is_a_raw_traceback",
        "a rank whose peer was killed prints gloo's traceback instead of one line",
        [edit("dist.py", "    except RuntimeError as e:  # gloo's", "    except OSError as e:  # gloo's")],
        ["nbs/37_dist.ipynb"],
    ),
    Mutant(
        "inspect_waits_on_a_fifo",
        "dormouse inspect opens a FIFO with open() to read its magic, and waits for a writer",
        [edit("report.py", "        with open_regular(path) as f:", '        with open(path, "rb") as f:')],
        ["tests/test_input_files.py::test_a_fifo_in_place_of_a_file_is_refused_in_one_line_and_never_waited_on"
         "[ckpt/step_000010.dmck (inspect)]"],
    ),
    # issue 39 (proof): replay before trust, code is environment, verify proves the curve, a corpus is its bytes
    Mutant(
        "replay_before_trust_skipped",
        "a resume whose environment record is unchanged trusts its checkpoint: an SDPA switch flipped in the process "
        "trains another run",
        [edit("resume.py", "    replayed = None if allow_env_drift else replay(found)",
              "    replayed = replay(found) if drift and not allow_env_drift else None")],
        [f"{TRUST}::test_a_resume_after_flipping_an_sdpa_switch_is_refused_naming_the_step",
         f"{TRUST}::test_every_resume_replays_the_first_steps_of_its_interval_and_lineage_says_which"],
    ),
    Mutant(
        "changed_record_replays_only_the_first_steps",
        "a resume whose environment record changed replays only the first steps of the interval, not all of it",
        [edit("replay.py", 'stop = replay_stop(ev, None if drift or check_verify_steps(verify_steps) == "all" else',
              'stop = replay_stop(ev, None if check_verify_steps(verify_steps) == "all" else')],
        [f"{TRUST}::test_a_changed_record_still_replays_the_whole_interval"],
    ),
    Mutant(
        "unverified_resume_recorded_as_replayed",
        "a resume with nothing to replay is recorded as if a replay had proved it",
        [edit("replay.py", "        return Replayed(ck.step, ck.step, 0, 0, unverified=str(e))",
              "        return Replayed(ck.step, ck.step, 0, 0)")],
        [f"{TRUST}::test_nothing_to_replay_with_the_record_unchanged_resumes_unverified_and_says_so"],
    ),
    Mutant(
        "kit_code_not_recorded",
        "the environment record holds the kit's version only: a kit edited in place resumes as the same run",
        [edit("numerics.py", '"kit_code": kit_code(), "kit_replaced": kit_replaced(), **DEFINITIONS}',
              '"kit_replaced": kit_replaced(), **DEFINITIONS}')],
        [f"{TRUST}::test_a_kit_edited_in_place_is_refused_naming_the_step_and_a_comment_edit_resumes"],
    ),
    Mutant(
        "kit_code_hashes_only_the_modules_a_step_imports",
        "the kit's code is hashed without the loop, the replay and the rest: an edit of fit's loop is no change",
        [edit("kit.py", 'files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)',
              'files = sorted(p for p in root.rglob("*.py") if p.stem in ("step", "model", "numerics", "parts"))')],
        [f"{PROOF}::test_an_edit_of_any_module_of_the_package_or_an_exported_cell_changes_the_code_hash"],
    ),
    Mutant(
        "kit_code_without_the_notebooks",
        "installed from source, an edit of a notebook's exported cell (the code its cells run) is no change of code",
        [edit("kit.py", "        for nb in kit_notebooks(root):", "        for nb in []:")],
        [f"{PROOF}::test_an_edit_of_any_module_of_the_package_or_an_exported_cell_changes_the_code_hash"],
    ),
    Mutant(
        "kit_replaced_not_recorded",
        "a kit function replaced in the process (a notebook cell's patch) is no change of code: a prefix is replayed",
        [edit("numerics.py", '"kit_code": kit_code(), "kit_replaced": kit_replaced(), **DEFINITIONS}',
              '"kit_code": kit_code(), **DEFINITIONS}')],
        [f"{PROOF}::test_a_kit_function_replaced_in_the_process_is_a_change_of_code_replayed_in_full"],
    ),
    Mutant(
        "curve_resealed_edit_unseen",
        "dormouse verify compares the rows with their seals only: a row edited and resealed passes",
        [edit("evidence.py", "            for k in differing(r, ev.row(step), keys):", "            for k in []:")],
        [f"{TRUST}::test_verify_of_an_edited_row_fails_naming_the_step[edited-and-resealed]"],
    ),
    Mutant(
        "curve_missing_rows_unseen",
        "a step the evidence holds and the curve lacks is not named: a dropped row passes",
        [edit("evidence.py", "    disagree[kinds[1]] = sorted(set(held) - seen)", "    disagree[kinds[1]] = []")],
        [f"{TRUST}::test_verify_names_missing_and_duplicated_rows_and_says_what_it_covered"],
    ),
    Mutant(
        "verify_passes_what_it_could_not_verify",
        "dormouse verify exits 0 though the newest checkpoint is corrupt and its interval was never verified",
        [edit("verify.py", '        return "unverifiable" if any(i.verdict == "unverifiable" for i in self.intervals)',
              '        return "reproduced" if any(i.verdict == "unverifiable" for i in self.intervals)')],
        [f"{TRUST}::test_verify_of_a_run_with_a_corrupt_newest_checkpoint_exits_non_zero"],
    ),
    Mutant(
        "verify_threads_unchecked",
        "dormouse verify --threads 0 is read as the plan's, --threads -3 fails after output has started",
        [edit("verify.py", "    _check_threads(threads)\n", "")],
        [f"{TRUST}::test_verify_bad_arguments_are_one_line_before_any_output"],
    ),
    Mutant(
        "corpus_known_by_its_path",
        "a run moved with its corpus to another path is refused as drift although the bytes are the pinned ones",
        [edit("config.py", "            continue  # the same bytes, found at another path",
              "            pass  # the same bytes, found at another path")],
        ["tests/test_resume_keys.py::test_a_run_moved_with_its_corpus_resumes_and_verifies_with_data"],
    ),
    Mutant(
        "corpus_form_unchecked",
        "a directory's bytes given as one file resume: the same sha256, another split, another run",
        [edit("resume.py", "    if was_file != is_file:", "    if False:")],
        ["tests/test_resume_keys.py::test_the_same_bytes_in_another_form_are_refused"],
    ),
    Mutant(
        "corpus_bytes_unchecked_at_a_new_path",
        "the corpus at a new path is taken on its path's word: other bytes resume under the pinned hash",
        [edit("data.py", "    if cfg.data_sha256 and corpus.sha256 != cfg.data_sha256:", "    if False:")],
        ["tests/test_resume_keys.py::test_other_bytes_at_any_path_are_refused_and_an_older_plan_names_its_path"],
    ),
    Mutant(
        "lineage_names_no_corpus_path",
        "a segment's lineage row does not say which path its corpus was read from",
        [edit("train.py", '"data": cfg.data,', '"data": None,')],
        ["tests/test_resume_keys.py::test_a_run_moved_with_its_corpus_resumes_and_verifies_with_data"],
    ),
    Mutant(
        "fit_arguments_unchecked",
        "fit(progress='x') is accepted, and a bad verify_steps fails deep in a resume",
        [edit("train.py", "    if progress not in (None, True, False):", "    if False:"),
         edit("train.py", "        check_verify_steps(verify_steps)  # an integer", "        pass  # an integer")],
        [f"{TRUST}::test_fit_refuses_each_bad_argument_in_one_line_naming_it"],
    ),
    Mutant(
        "ctrl_c_while_importing_is_a_traceback",
        "Ctrl-C while the command imports torch prints a KeyboardInterrupt traceback",
        [edit("console.py", "    except KeyboardInterrupt:", "    except OSError:")],
        [f"{TRUST}::test_ctrl_c_while_the_command_imports_is_one_line_and_130"],
    ),
    Mutant(
        "inspect_reads_a_tables_file_as_a_container",
        "dormouse inspect calls a tables file a truncated v1 container claiming gigabytes",
        [edit("report.py", "        if kind:\n", "        if False:\n")],
        ["tests/test_cli_errors.py::test_inspect_names_a_tables_file_as_one"],
    ),
    Mutant(
        "failed_commit_leaves_its_tables_file",
        "a container write that fails (a full disk) leaves the tables file it would have named",
        [edit("checkpoints.py", "            Path(written).unlink(missing_ok=True)", "            pass")],
        ["tests/test_cli_errors.py::test_a_full_disk_mid_checkpoint_is_one_line_and_loses_nothing"],
    ),
    Mutant(
        "one_line_joins_sentences_with_a_semicolon",
        "a refusal of several sentences reads '.;' where one sentence ends and the next begins",
        [edit("cli.py", 'out.endswith((":", ".", ";"))', 'out.endswith(":")')],
        ["tests/test_cli_errors.py::test_bad_input_is_one_line[another corpus, unpinned]"],
    ),
    # one canonical sum (issue 40): a run moves between 1, 2 and 4 processes and accumulation bit for bit
    Mutant(
        "last_rank_sums_in_arrival_order",
        "one rank adds its microbatches in a running sum (as plain gradient accumulation does), not over the tree",
        [
            edit(
                "step.py",
                "            own.add(i, i + 1, _microbatch(parts, cfg, step, b, micro_rows(cfg, i), first=i == first))",
                "            v = _microbatch(parts, cfg, step, b, micro_rows(cfg, i), first=i == first)\n"
                "            if rank == world - 1 and own.nodes:\n"
                "                own.nodes[-1] = (own.nodes[-1][0], i + 1, own.nodes[-1][2].add_(v))\n"
                "            else:\n"
                "                own.add(i, i + 1, v)",
            )
        ],
        [f"{WORKERS}::test_one_process_accumulating_equals_2_and_4_workers", ELASTIC],
    ),
    Mutant(
        "loss_averaged_over_local_microbatches",
        "each rank logs (and decides the latch on) the mean loss of its own microbatches, not of the global batch",
        [
            edit(
                "step.py",
                "        total = canonical_total(own, rank, world) if exchange is None else exchange(own)\n",
                "        local = sum(v[-3:].clone() for _, _, v in own.nodes) / (last - first)\n"
                "        total = canonical_total(own, rank, world) if exchange is None else exchange(own)\n"
                "        total[-3:] = local * k\n",
            )
        ],
        [f"{WORKERS}::test_one_process_accumulating_equals_2_and_4_workers", ELASTIC],
    ),
    Mutant(
        "ngram_rows_reduced_with_all_reduce",
        "the n-gram rows' gradient is an all_reduce of each rank's sum: its order depends on the world size",
        [
            edit(
                "step.py",
                "        total.div_(k)  # the same bits on every rank, on any number of ranks\n",
                "        total.div_(k)\n"
                "        if world > 1:\n"
                "            at = sum(p.numel() for p in _trained(parts))\n"
                "            rows = sum(v[at:-3].clone() for _, _, v in own.nodes)\n"
                "            torch.distributed.all_reduce(rows)\n"
                "            total[at:-3] = rows / k\n",
            )
        ],
        [f"{WORKERS}::test_one_process_accumulating_equals_2_and_4_workers", ELASTIC],
    ),
    # the final held-out score (issues 42 and 43): causal codes, honest adaptation, the overlap, the outside sample,
    # the strong compressors and the scorecard
    Mutant(
        "score_codes_shifted_by_one",
        "the score feeds each position the match codes of the next one: they read the byte being predicted",
        [edit("score.py", "c = codes[u][start:start + window]", "c = codes[u][start + 1:start + window + 1]")],
        [f"{CAUSAL}::test_the_score_reads_only_the_past_with_the_real_model_and_real_codes"],
    ),
    Mutant(
        "mix_context_reads_the_byte",
        "the count model's context is the k bytes ending at the byte it predicts, not before it: it reads the byte",
        [edit("mix.py", "yield k, np.r_[np.uint64(0), hs[:-1]], ", "yield k, hs, ")],
        [MIX_NB],
    ),
    Mutant(
        "mix_own_count_counts_the_byte",
        "a byte's count in its unit's past includes the byte itself",
        [edit("mix.py", "    rank[order] = at - start\n", "    rank[order] = at - start + 1\n")],
        [MIX_NB],
    ),
    Mutant(
        "mix_counts_shared_across_units",
        "the units' own counts are pooled: a held-out file's counts read the held-out files scored beside it",
        [edit("mix.py", "_keys(ctx ^ (unit.astype(np.uint64) * _UNIT), stream)", "_keys(ctx, stream)")],
        [MIX_NB],
    ),
    Mutant(
        "mix_weight_ignores_the_past",
        "the mixing weight leaves out how much the unit's own past has seen: one weight for a context either way",
        [edit("mix.py", " + np.asarray(mix.own_bias)[own])))\n    p = w", ")))\n    p = w")],
        [MIX_NB],
    ),
    Mutant(
        "scorecard_mixes_the_adaptive_bits_as_static",
        "the static mixed figure is the adaptive bits mixed: the report's static figure adapts",
        [edit("scorecard.py", '"mixed": mixed_bits(bits["alone"], counted, mix)',
              '"mixed": mixed_bits(bits["adapting"] or bits["alone"], counted, mix)')],
        ["nbs/22_scorecard.ipynb"],
    ),
    Mutant(
        "adaptive_trains_before_it_scores",
        "the adaptive copy takes its step on a group of windows before it scores them: it has seen their bytes",
        [edit("score.py", "                bits = _bits(mine.top(h), y)\n",
              "                _bits(mine.top(h), y).mean().backward()\n                opt.step()\n"
              "                opt.zero_grad(set_to_none=True)\n                bits = _bits(mine.top(h), y)\n")],
        [f"{CAUSAL}::test_the_adaptive_score_reads_only_the_past"],
    ),
    Mutant(
        "adaptive_writes_into_the_run",
        "the adaptive score trains the run's own model, not a copy: looking at a run changes it",
        [edit("score.py", "mine = copy.deepcopy(model)  # only its top", "mine = model  # only its top")],
        [SCORE_NB],
    ),
    Mutant(
        "adaptive_carries_across_units",
        "the adaptive copy is made once, not per unit: a unit's figure depends on the units scored before it",
        [edit("score.py", "        for u, b in enumerate(units):\n            mine = copy.deepcopy(model)",
              "        mine = copy.deepcopy(model)\n        for u, b in enumerate(units):\n            mine = mine")],
        [SCORE_NB],
    ),
    Mutant(
        "shared_marks_only_the_last_byte",
        "a held-out byte counts as shared only at the end of a matched string, not across it",
        [edit("heldout.py", "np.add.at(d, ends - (k - 1), 1)", "np.add.at(d, ends, 1)")],
        [HELDOUT_NB],
    ),
    Mutant(
        "outside_sample_keeps_corpus_files",
        "the outside sample keeps an installed file whose bytes are a corpus file's: text the model trained on",
        [edit("heldout.py", "if hashlib.sha256(raw).hexdigest() in held:", "if False:")],
        [HELDOUT_NB],
    ),
    Mutant(
        "given_figure_without_the_training_text",
        "a compressor's figure 'given the training text' is its figure on the stream alone",
        [edit("baselines.py", '[(f"{n} +train", n, (prefix, stream))]', '[(f"{n} +train", n, (stream,))]')],
        [BASELINES_NB],
    ),
    Mutant(
        "ppmd_variant_i_restarts",
        "PPMd variant I restarts its model when its memory fills: given 30 MB of training text, the anchor forgets it",
        [edit("baselines.py", ", restore_method=pyppmd.PPMD8_RESTORE_METHOD_CUT_OFF)", ")")],
        [BASELINES_NB],
    ),
    Mutant(
        "ppmd_worst_order",
        "PPMd's figure is its worst order, not its best: the anchor is made weaker than a reader would pick",
        [edit("baselines.py", "if key not in bits or b < bits[key]:", "if key not in bits or b > bits[key]:")],
        [BASELINES_NB],
    ),
    Mutant(
        "zpaq_headers_counted",
        "zpaq's archive headers are charged to the bytes it compresses: zpaq made weaker than it is",
        [edit("baselines.py", "return sizes[1] - sizes[0]", "return sizes[1]")],
        [BASELINES_NB],
    ),
    Mutant(
        "gap_to_the_weakest",
        "the gap is reported against the weakest compressor, not the strongest",
        [edit("baselines.py", "return min(have, key=lambda n:", "return max(have, key=lambda n:")],
        [BASELINES_NB, "nbs/22_scorecard.ipynb"],
    ),
    Mutant(
        "train_codes_read_held_out_text",
        "a held-out file's codes also read the held-out files before it: the score reads text that is not the past",
        [edit("match.py", "None if train is None else train[x], learn, n_src, not learn)",
              "None if train is None else train[x], learn, n_src, False)")],
        ["nbs/08_match.ipynb"],
    ),
    # issue 51: a corpus of any size in bounded memory (match's blocks and tables, the streamed count model and overlap)
    Mutant(
        "train_codes_source_the_held_out_byte",
        "the training text's last byte is a source: the tables a held-out file reads name the first held-out byte",
        [edit("match.py", "n_src = m - (units[j - 1][0] + (b or units[j - 1][1]) == last)", "n_src = m")],
        ["nbs/08_match.ipynb"],
    ),
    Mutant(
        "match_table_drops_the_front",
        "a new string in a bucket drops the one at its front, not its back: a bucket forgets what it saw last",
        [edit("match.py", "        self.slots[bo[one] + 1] = np.where(keep, was, self.slots[bo[one] + 1])\n", "")],
        ["nbs/08_match.ipynb"],
    ),
    Mutant(
        "match_table_check_ignored",
        "a slot's string is not checked: a string that shares a slot reads another string's next byte",
        [edit("match.py", "hit = np.where((first & np.uint32(0xFFFFFF00)) == want,",
              "hit = np.where((first & _USED) != 0,")],
        ["nbs/08_match.ipynb"],
    ),
    Mutant(
        "overlap_misses_strings_across_chunks",
        "the training text's strings that cross a chunk's start are never looked up: shared bytes go unseen",
        [edit("heldout.py", "lo, b = max(0, a - k + 1), min(a + READ_CHUNK, corpus.n_train)",
              "lo, b = a, min(a + READ_CHUNK, corpus.n_train)")],
        [HELDOUT_NB],
    ),
    Mutant(
        "mix_budget_ignored",
        "a full count model goes on adding pairs: its memory grows with the training text after all",
        [edit("mix.py", "                p.merge()  # the exact number held: is it full?\n"
                         "            closed = sum(p.nbytes() for p in pairs.values()) > budget\n",
              "                p.merge()  # the exact number held: is it full?\n            closed = False\n")],
        [MIX_NB],
    ),
    Mutant(
        "corpus_coded_without_the_memory_check",
        "the match codes start without asking for their memory: a corpus too big is a raw MemoryError half-way",
        [edit("data.py", '    check_memory(need, what, "train with fewer model.match_orders")\n', "")],
        ["tests/test_corpus_scale.py::test_a_request_that_cannot_fit_is_refused_in_one_line_and_leaves_nothing"],
    ),
    Mutant(
        "compressor_started_without_its_memory_check",
        "PPMd's 2 GiB model is allocated without asking: under a memory limit the final score dies in a MemoryError",
        [edit("baselines.py", "        check_memory(JOB_MEMORY.get(", "        (JOB_MEMORY.get(")],
        ["nbs/19_baselines.ipynb"],
    ),
    Mutant(
        "a_baseline_that_cannot_run_loses_the_report",
        "a compressor refused for memory raises out of the report instead of leaving its figure missing with why",
        [edit("baselines.py", "except (BudgetError, MemoryError, OSError) as e:  # this figure is missing",
              "except OSError as e:  # this figure is missing")],
        ["nbs/19_baselines.ipynb"],
    ),
    Mutant(
        "count_model_estimate_leaves_out_its_pairs",
        "the count model's memory check forgets the pairs it holds: it passes a job that then runs out",
        [edit("mix.py", "+ pairs + tables + 96 * MIX_CHUNK", "+ tables + 96 * MIX_CHUNK")],
        ["tests/test_corpus_scale.py::test_the_count_model_fits_in_the_memory_its_check_asks_for"],
    ),
    Mutant(
        "torch_out_of_memory_is_a_bug",
        "torch's allocator failing (a RuntimeError) is not read as out of memory: a raw traceback, a lost score",
        [edit("budget.py", "return isinstance(e, RuntimeError) and any(", "return False and any(")],
        ["nbs/07_budget.ipynb", "nbs/22_scorecard.ipynb"],
    ),
    Mutant(
        "near_copies_kept",
        "the figure 'without near-copies' keeps them: it is the held-out figure again",
        [edit("scorecard.py", "keep = [i for i, f in enumerate(near) if not f]", "keep = list(range(len(near)))")],
        ["nbs/22_scorecard.ipynb"],
    ),
    # the prose checked against the code: a count the chapters state, an object they name
    Mutant(
        "verify_steps_not_what_the_prose_says",
        "resumes replay 8 steps before they trust while the decisions chapter and README say 16",
        [edit("replay.py", "VERIFY_STEPS = 16  #", "VERIFY_STEPS = 8  #")],
        ["tests/test_prose.py::test_the_counts_the_decisions_chapter_states_are_the_codes"],
    ),
    Mutant(
        "object_the_prose_names_renamed",
        "a helper the config chapter names (`dormouse.testing.flipped`) is renamed and the prose still names it",
        [edit("testing.py", "def flipped(value):", "def flip_value(value):")],
        ["tests/test_prose.py::test_every_object_the_prose_names_exists"],
    ),
    # issue 53: the A/B's verdict (the chapter reads bench/results, which a scratch copy lacks: its test file kills)
    Mutant(
        "ab_paired_interval_computed_unpaired",
        "the A/B's 'paired' interval is the unpaired one: the noise the arms share is not cancelled",
        [
            edit(
                "ab.py",
                "    mean, lo, hi = paired_interval(np.subtract(xb, xa))\n",
                "    mean, (lo, hi) = float(np.mean(xb) - np.mean(xa)), unpaired_interval(xa, xb)\n",
            )
        ],
        [AB_NB],  # the chapter's A/A and A/B (the SIGKILLed A/B test kills it too, in 22 s)
    ),
    Mutant(
        "ab_arms_on_different_seeds",
        "arm B runs at the seeds after arm A's: no draw is shared and an A/A is not 0",
        [
            edit(
                "ab.py",
                "    plans = {arm: [dataclasses.replace(c, seed=a.seed + k) for k in range(seeds)]",
                "    plans = {arm: [dataclasses.replace(c, seed=a.seed + k + (arm == 'B')) for k in range(seeds)]",
            )
        ],
        [AB_NB],  # the chapter's A/A and A/B (the SIGKILLed A/B test kills it too, in 22 s)
    ),
]


def _source_notebook(py: Path) -> Path | None:
    "The notebook a library module is exported from (named in its AUTOGENERATED header)."
    for line in py.read_text().splitlines()[:5]:
        if "File to edit: ../" in line:
            return py.parent / line.split("File to edit: ")[1].strip().rstrip(".")
    return None


def _edit_notebook(nb: Path, old: str, new: str) -> int:
    "Replace `old` in the notebook's cell sources; returns how many cells held it."
    d = json.loads(nb.read_text())
    hits = 0
    for c in d["cells"]:
        src = "".join(c["source"])
        if old in src:
            hits += src.count(old)
            lines = src.replace(old, new).split("\n")
            c["source"] = [x + "\n" for x in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    nb.write_text(json.dumps(d, indent=1, ensure_ascii=False) + "\n")
    return hits


def apply(m: Mutant, root: Path) -> None:
    "Apply `m`'s edits to the library module and its notebook in the copy at `root`; each anchor exactly once."
    for file, old, new in m.edits:
        p = root / "dormouse" / file
        text = p.read_text()
        n = text.count(old)
        if n != 1:
            raise LookupError(f"{m.name}: anchor occurs {n} times in dormouse/{file} (want 1): {old[:70]!r}")
        p.write_text(text.replace(old, new))
        nb = _source_notebook(p)  # the notebook runs its own copy of the code under nbdev_test: mutate it too
        if nb is not None and _edit_notebook(nb, old, new) != 1:
            raise LookupError(f"{m.name}: anchor is not exactly once in {nb.relative_to(root)}: {old[:70]!r}")


def scratch_copy(names=COPY) -> Path:
    "A copy of the repository's sources (`names` under the root) in a temporary directory."
    root = Path(tempfile.mkdtemp(prefix="dormouse-mutant-"))
    ignore = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints", "*.pyc")
    for name in names:
        src = ROOT / name
        if src.is_dir():  # the kit's compiled modules come along: a pyc is read only while its source is unchanged
            shutil.copytree(src, root / name, ignore=None if name == "dormouse" else ignore)
        elif src.exists():
            shutil.copy2(src, root / name)
    return root


def commands(m: Mutant) -> list[list[str]]:
    "The commands of `m`'s kill set: one pytest call for its node ids, one nbdev_test per notebook."
    bindir = Path(sys.executable).parent
    ids = [k for k in m.kill if not k.endswith(".ipynb")]
    # a verdict needs no assertion rewriting and no anyio plugin: each cost ~0.4 s of every kill set's start
    quick = ["--assert=plain", "-p", "no:anyio", "-p", "no:cacheprovider"]
    cmds = [[sys.executable, "-m", "pytest", "-x", "-q", "--color=no", *quick, *ids]] if ids else []
    for nb in [k for k in m.kill if k.endswith(".ipynb")]:
        cmds.append([str(bindir / "nbdev_test"), "--path", nb, "--do_print"])
    return cmds


def _enter_copy(root: str, env: dict, log: str) -> None:
    "In a fork of the preloaded server: work in the copy at `root` under `env`, output into `log`."
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(root)
    os.environ.clear()
    os.environ.update(env)  # the same environment a subprocess gets; the tests' own subprocesses inherit it
    sys.path.insert(0, root)  # PYTHONPATH is read at startup, and the server started before the copy existed
    sys.dont_write_bytecode = True


def _pytest_in_fork(root: str, args: list, env: dict, log: str) -> None:
    "In a fork of the preloaded server: run pytest with `args` on the copy at `root` under `env`, output into `log`."
    _enter_copy(root, env, log)
    import pytest

    code = pytest.main(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


def _notebook_in_fork(root: str, nb: str, env: dict, log: str) -> None:
    "In a fork of the preloaded server: test notebook `nb` of the copy at `root` as `nbdev_test --path nb` does."
    _enter_copy(root, env, log)
    from nbdev.config import get_config
    from nbdev.test import test_nb

    cfg = get_config()  # the copy's settings.ini: its test flags
    ok, _ = test_nb(Path(root) / nb, skip_flags=cfg.tst_flags.split(), basepath=cfg.config_path, do_print=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if ok else 1)


def run_command(cmd: list, root: Path, env: dict) -> tuple[int | None, str]:
    "Run one kill-set command in `root`: pytest and nbdev_test as forks of the preloaded server, else a subprocess."
    notebook = Path(cmd[0]).name == "nbdev_test"
    if cmd[1:3] != ["-m", "pytest"] and not notebook:
        try:
            r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return None, ""
        return r.returncode, r.stdout + r.stderr
    log = root / "kill-set-output.txt"
    target, args = (_notebook_in_fork, cmd[2]) if notebook else (_pytest_in_fork, cmd[3:])
    p = FORKS.Process(target=target, args=(str(root), args, env, str(log)))
    p.start()
    p.join(TIMEOUT)
    if p.is_alive():
        p.kill()
        p.join()
        return None, ""
    return p.exitcode, log.read_text(errors="replace")


def run_mutant(m: Mutant) -> dict:
    "Apply `m` in a scratch copy and run its kill set; returns the verdict and the evidence."
    t0 = time.time()
    root = scratch_copy()
    try:
        apply(m, root)
        env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
        for cmd in commands(m):
            code, out = run_command(cmd, root, env)
            if code is None:
                return {"name": m.name, "verdict": "killed", "by": f"{cmd[-1]} (timed out)", "s": time.time() - t0}
            if code in (4, 5) or "ERROR: not found" in out or "no tests ran" in out:
                tail = out.strip().splitlines()[-3:]
                return {"name": m.name, "verdict": "ERROR", "by": f"kill set broken: {tail}", "s": time.time() - t0}
            if code != 0:
                why = [x for x in out.splitlines() if "Error" in x or "FAILED" in x or "assert" in x][-1:]
                by = (cmd[-2] if cmd[-1] == "--do_print" else "pytest") + (f": {why[0].strip()[:90]}" if why else "")
                return {"name": m.name, "verdict": "killed", "by": by, "s": time.time() - t0}
        return {"name": m.name, "verdict": "SURVIVED", "by": "", "s": time.time() - t0}
    except LookupError as e:
        return {"name": m.name, "verdict": "ERROR", "by": str(e), "s": time.time() - t0}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def check_anchors(todo: list) -> list[str]:
    "Apply each mutant to a copy of dormouse/ and nbs/ only, running nothing; the anchors that are not exactly once."
    problems = []
    for m in todo:
        root = scratch_copy(("dormouse", "nbs"))
        try:
            apply(m, root)
        except LookupError as e:
            problems.append(str(e))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the mutants and their kill sets, run nothing")
    ap.add_argument("--only", nargs="*", default=None, help="run only these mutants")
    ap.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    ap.add_argument("--anchors", action="store_true", help="check every edit applies exactly once, run nothing")
    ap.add_argument("--no-baseline", action="store_true", help="skip running the kill sets on the unmutated library")
    ap.add_argument("--record", action="store_true", help=f"write the score to {SCORE_FILE.relative_to(ROOT)}")
    ap.add_argument(
        "--check-record",
        action="store_true",
        help="fail unless this run's score is the recorded one (what README and the notebook show)",
    )
    a = ap.parse_args(argv)
    names = [m.name for m in MUTANTS]
    if len(set(names)) != len(names):
        print("duplicate mutant names", file=sys.stderr)
        return 2
    todo = [m for m in MUTANTS if a.only is None or m.name in a.only]
    if a.only and len(todo) != len(a.only):
        print(f"unknown mutants: {sorted(set(a.only) - set(names))}", file=sys.stderr)
        return 2
    if a.list:
        for m in todo:
            print(f"{m.name:<34} {m.why}\n{'':<34} killed by: {', '.join(m.kill)}")
        print(f"{len(todo)} mutants")
        return 0
    if a.anchors:
        problems = check_anchors(todo)
        print("\n".join(problems + [f"{len(todo) - len(problems)} of {len(todo)} mutants apply cleanly"]))
        return 2 if problems else 0
    print(f"{len(todo)} mutants, {a.jobs} at a time, each in a scratch copy of {ROOT.name}/", flush=True)
    FORKS.set_forkserver_preload(PRELOAD)
    t0 = time.time()
    compileall.compile_dir(str(ROOT / "dormouse"), quiet=1)  # each copy reads these (its mutated module: its source)
    runs = list(todo)
    if not a.no_baseline:  # a kill set that fails on the unmutated library would "kill" every mutant it is given
        runs.insert(
            0,
            Mutant(
                BASELINE, "every kill set passes on the library as it is", [], sorted({k for m in todo for k in m.kill})
            ),
        )
    results, base_ok = [], True
    width = max(len(m.name) for m in runs)
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for r in pool.map(run_mutant, runs):
            if r["name"] == BASELINE:
                base_ok = r["verdict"] == "SURVIVED"  # nothing mutated, so every test passed
                r = {**r, "verdict": "passes" if base_ok else "FAILS"}
            else:
                results.append(r)
            print(f"{r['name']:<{width}} {r['verdict']:<9} {r['s']:6.1f}s  {r['by']}", flush=True)
    killed = sum(r["verdict"] == "killed" for r in results)
    survived = [r["name"] for r in results if r["verdict"] == "SURVIVED"]
    errors = [r["name"] for r in results if r["verdict"] == "ERROR"]
    print(
        f"{killed} killed, {len(survived)} survived"
        + (f", {len(errors)} broken" if errors else "")
        + f" ({time.time() - t0:.0f}s)"
    )
    if a.record and a.only is None and base_ok:
        score = {
            "mutants": len(results),
            "killed": killed,
            "survived": survived,
            "broken": errors,
            "names": [r["name"] for r in results],
        }
        SCORE_FILE.write_text(json.dumps(score, indent=1) + "\n")
    if a.check_record and a.only is None:
        rec = json.loads(SCORE_FILE.read_text()) if SCORE_FILE.exists() else {}
        now = {"mutants": len(results), "killed": killed, "names": [r["name"] for r in results]}
        if {k: rec.get(k) for k in now} != now:
            print(
                f"the recorded score ({rec.get('killed')} of {rec.get('mutants')}) is not this run's ({killed} of "
                f"{len(results)}): run `python tools/mutants.py --record` and commit {SCORE_FILE.name}",
                file=sys.stderr,
            )
            return 1
    if not base_ok:
        print(
            f"{BASELINE}: the kill sets fail without any mutant, so no kill above means anything; fix the tests",
            file=sys.stderr,
        )
    if errors or not base_ok:
        return 2
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
