"""tests/torch/torchsched.py: drives torch.distributed.pipelining's schedules without
process groups, for the tests that check ppsc against PyTorch itself.

  dump NAME P M OUT.csv [--comms]   PyTorch's built-in schedule NAME (1F1B,
                                    Interleaved1F1B, LoopedBFS, InterleavedZeroBubble,
                                    ZBVZeroBubble, DualPipeV) for P ranks and M
                                    microbatches, as PyTorch writes it (compute-only
                                    or compute-comms)
  load CSV M [--comms]              load CSV with PyTorch's loader and validator
                                    (prints "valid"), then run its simulator (prints
                                    "ok STEPS", or "not simulated: WHY")
  batch                             the commands above, one a line on stdin (torch
                                    is imported once); prints "STATUS OUTPUT" a line
Exit 0 on success, 1 with PyTorch's error on stderr. Needs only torch."""
import sys

import torch.distributed.pipelining.schedules as S


class MockStage:
    """What the schedule classes read from a stage, without a process group."""

    def __init__(self, stage_index, num_stages, group_size, rank):
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = rank
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self.submod = None


def stages_for(P, v, rank, vshape=False):
    n = P * v
    if vshape:
        idx = [rank, 2 * P - 1 - rank]
    else:
        idx = [rank + k * P for k in range(v)]
    return [MockStage(i, n, P, rank) for i in idx]


CLASSES = {
    "1F1B": (S.Schedule1F1B, 1, False),
    "Interleaved1F1B": (S.ScheduleInterleaved1F1B, 2, False),
    "LoopedBFS": (S.ScheduleLoopedBFS, 2, False),
    "InterleavedZeroBubble": (S.ScheduleInterleavedZeroBubble, 2, False),
    "ZBVZeroBubble": (S.ScheduleZBVZeroBubble, 2, True),
    "DualPipeV": (S.ScheduleDualPipeV, 2, True),
}


def write_rows(path, order):
    import csv

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        for rank in sorted(order):
            w.writerow(["" if a is None else str(a) for a in order[rank]])


def dump(name, P, M, out, comms):
    cls, v, vshape = CLASSES[name]
    if v == 1:
        sched = cls(stages_for(P, 1, 0)[0], M, loss_fn=lambda a, b: a)
        order = {r: list(sched.pipeline_order[r]) for r in sched.pipeline_order} if hasattr(sched, "pipeline_order") else None
        if order is None:
            raise SystemExit(f"{name} has no pipeline_order in this torch")
    else:
        sched = cls(stages_for(P, v, 0, vshape), M, loss_fn=lambda a, b: a)
        order = sched.pipeline_order
    # compute actions only (single-stage schedules may carry REDUCE_GRAD markers)
    compute = {r: [a for a in order[r] if a is None or a.is_compute_op] for r in order}
    if not comms:
        write_rows(out, compute)
        return
    stage_to_rank = {}
    for r in compute:
        for a in compute[r]:
            if a is not None:
                for x in a.sub_actions or (a,):
                    stage_to_rank[x.stage_index] = r
    rt = S._PipelineScheduleRuntime(stages_for(P, v, 0, vshape), M, loss_fn=lambda a, b: a)
    rt._prepare_schedule_with_comms({r: list(compute[r]) for r in compute})
    rt._dump_csv(out, "compute_comms")


def load(path, M, comms):
    import csv

    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    P = len(rows)
    stage_rank = {}
    for r, row in enumerate(rows):
        for cell in row:
            a = S._Action.from_str(cell)
            if a is None:
                continue
            for x in a.sub_actions or (a,):
                stage_rank[x.stage_index] = r
    n = max(stage_rank) + 1
    mine = [MockStage(s, n, P, 0) for s in sorted(stage_rank) if stage_rank[s] == 0]
    rt = S._PipelineScheduleRuntime(mine, M, loss_fn=lambda a, b: a)
    if comms:
        rt._load_csv(path, format="compute_comms")
        # PyTorch's simulator takes neither the FSDP/gradient-reduction actions nor
        # the waits' placement into account beyond pairing: leave the former out
        skip = (S.UNSHARD, S.RESHARD, S.REDUCE_GRAD, S.WAIT_REDUCE_GRAD)
        order = {r: [a for a in rt.pipeline_order_with_comms[r] if a.computation_type not in skip]
                 for r in rt.pipeline_order_with_comms}
    else:
        # PyTorch's loader and validator; then its send/recv lowering (the runtime's
        # own lowering also adds FSDP UNSHARD actions, which its simulator does not take)
        S.PipelineScheduleMulti._load_csv(rt, path)
        order = {r: [a for a in rt.pipeline_order[r] if a is not None] for r in rt.pipeline_order}
    print("valid", flush=True)
    to_rank = rt.stage_index_to_group_rank
    # PyTorch's simulator does not take OVERLAP_F_B groups: it gets their passes in
    # order (what _PipelineScheduleRuntime runs for a group)
    order = {r: [x for a in order[r] for x in (a.sub_actions or (a,))] for r in order}
    try:
        if not comms:
            order = S._add_send_recv(order, stage_to_rank=lambda s: to_rank[s], num_stages=n)
        sim = S._simulate_comms_compute(order, lambda s: to_rank[s], n)
    except Exception as e:  # what this simulator does not take
        print(f"not simulated: {type(e).__name__}: {e}")
        return
    print("ok", max(len(sim[r]) for r in sim))


def one(argv):
    """Runs one command; returns (exit status, what it printed)."""
    import contextlib
    import io

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            if argv[0] == "dump":
                dump(argv[1], int(argv[2]), int(argv[3]), argv[4], "--comms" in argv)
            elif argv[0] == "load":
                load(argv[1], int(argv[2]), "--comms" in argv)
            else:
                raise SystemExit(__doc__)
    except Exception as e:  # PyTorch reports a bad schedule with several exception types
        return 1, out.getvalue() + f"torch: {type(e).__name__}: {e}"
    return 0, out.getvalue()


def main(argv):
    if argv[1:2] == ["batch"]:
        # one command a line on stdin; one line out each: STATUS OUTPUT (newlines as ' | ')
        for line in sys.stdin:
            if line.strip():
                rc, text = one(line.split())
                print(rc, " | ".join(text.strip().splitlines()), flush=True)
        return 0
    rc, text = one(argv[1:])
    print(text, end="", file=sys.stdout if rc == 0 else sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
