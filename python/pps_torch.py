"""pps_torch.py: run a PPS schedule in PyTorch's pipeline runtime.

Compiles a .pps file with `ppsc export-csv` (which verifies it first) and returns a
torch.distributed.pipelining schedule object for the caller's stages, so a schedule
proven by `ppsc check` drives a user's PyTorch training loop:

    from pps_torch import pps_schedule
    sched = pps_schedule("stdlib/interleaved_1f1b.pps", stages, n_microbatches=8,
                         loss_fn=loss_fn, defines={"P": 2, "m": 8, "v": 2})
    sched.step(x, target=y, losses=losses)     # on the first rank: inputs

No dependency beyond torch and the ppsc executable (found on PATH, or given with
ppsc=..., or $PPSC). See docs/pytorch.md and python/example_pps_torch.py.
"""
import csv
import os
import subprocess
import tempfile

__all__ = ["export_csv", "pps_schedule", "PpsError"]


class PpsError(RuntimeError):
    """ppsc refused the schedule (its diagnostics are the message)."""


def _ppsc(ppsc):
    return ppsc or os.environ.get("PPSC") or "ppsc"


def export_csv(pps_file, out_csv, *, defines=None, schedule=None, comms=True, drop=False, ppsc=None, stdlib=None):
    """Writes the schedule of pps_file as PyTorch's CSV (compute-comms form when comms,
    else compute-only). defines: {name: value} passed as -D name=value. Raises
    PpsError with ppsc's diagnostics when the schedule is invalid or not expressible."""
    cmd = [_ppsc(ppsc), "export-csv", os.fspath(pps_file), "-o", os.fspath(out_csv), "--color=never"]
    for k, v in (defines or {}).items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        cmd += ["-D", f"{k}={v}"]
    if schedule:
        cmd += ["--schedule", schedule]
    if comms:
        cmd.append("--comms")
    if drop:
        cmd.append("--drop")
    if stdlib:
        cmd += ["--stdlib", os.fspath(stdlib)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise PpsError(f"ppsc export-csv failed (exit {r.returncode}):\n{r.stderr}")
    return r.stderr  # warnings, if any


def _shape(path):
    """(ranks, stages, microbatches) of a schedule CSV."""
    from torch.distributed.pipelining.schedules import _Action

    ranks, stages, mbs = 0, set(), set()
    with open(path, newline="") as f:
        for row in csv.reader(f):
            ranks += 1
            for cell in row:
                a = _Action.from_str(cell)
                if a is None:
                    continue
                for x in a.sub_actions or (a,):
                    stages.add(x.stage_index)
                    if x.microbatch_index is not None:
                        mbs.add(x.microbatch_index)
    return ranks, len(stages), len(mbs)


def pps_schedule(pps_file, stages, n_microbatches, loss_fn=None, *, defines=None, schedule=None,
                 comms=None, ppsc=None, stdlib=None, keep_csv=None, **schedule_kwargs):
    """A torch.distributed.pipelining schedule running pps_file's verified order.

    stages: this rank's PipelineStage objects (one, or several for interleaved and
    V-shaped placements; their stage_index must match the .pps placement).
    comms: None = the compute-comms form when this torch has WAIT_SEND actions (the
    order ppsc proved, sends and receives included), else the compute-only form
    (PyTorch then adds its own sends and receives). keep_csv: a path to keep the CSV.
    Other keyword arguments go to _PipelineScheduleRuntime (e.g. scale_grads)."""
    from torch.distributed.pipelining import schedules as S

    if not isinstance(stages, (list, tuple)):
        stages = [stages]
    if comms is None:
        comms = hasattr(S._ComputationType, "WAIT_SEND_F")
    with tempfile.TemporaryDirectory(prefix="pps_torch") as tmp:
        path = keep_csv or os.path.join(tmp, "schedule.csv")
        export_csv(pps_file, path, defines=defines, schedule=schedule, comms=comms, ppsc=ppsc, stdlib=stdlib)
        ranks, nstages, nmb = _shape(path)
        want = (stages[0].group_size, stages[0].num_stages, n_microbatches)
        if (ranks, nstages, nmb) != want:
            raise ValueError(f"{pps_file}: the schedule has {ranks} ranks, {nstages} stages, {nmb} microbatches; "
                             f"the stages and n_microbatches given are for {want[0]}, {want[1]}, {want[2]} "
                             f"(set the schedule's parameters with defines=...)")
        sched = S._PipelineScheduleRuntime(list(stages), n_microbatches, loss_fn=loss_fn, **schedule_kwargs)
        sched._load_csv(path, format="compute_comms" if comms else "compute_only")
    return sched
