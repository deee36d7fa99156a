"""example_pps_torch.py: train a small model with a PPS schedule in PyTorch.

Splits an 8-layer MLP into 4 pipeline stages on 2 CPU processes (gloo, two stages
per process, interleaved), runs stdlib/interleaved_1f1b.pps through pps_torch and,
with --compare, the same steps under PyTorch's own ScheduleInterleaved1F1B from the
same initial weights, and prints both loss curves:

    PPSC=build/ppsc python python/example_pps_torch.py --steps 4 --compare

Exit 0 when the run finished (and, with --compare, the two curves agree within
--rtol). Needs torch only (CPU build is enough)."""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

P, V, M, DIM, BATCH = 2, 2, 4, 16, 8


def build_stage_modules(torch, seed):
    torch.manual_seed(seed)
    layers = [torch.nn.Sequential(torch.nn.Linear(DIM, DIM), torch.nn.Tanh()) for _ in range(2 * P * V)]
    # stage s holds layers 2s and 2s+1
    return [torch.nn.Sequential(layers[2 * s], layers[2 * s + 1]) for s in range(P * V)]


def data(torch, steps):
    """One fixed batch, every step: the loss must fall."""
    g = torch.Generator().manual_seed(1234)
    x, y = torch.randn(BATCH, DIM, generator=g), torch.randn(BATCH, DIM, generator=g)
    return [(x, y)] * steps


def run(rank, whiches, steps, store_dir, out):
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B

    from pps_torch import pps_schedule

    store = dist.FileStore(os.path.join(store_dir, "store"), P)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=P)
    for which in whiches:
        curve = train(torch, dist, PipelineStage, ScheduleInterleaved1F1B, pps_schedule, rank, which, steps)
        if rank == 0:
            with open(os.path.join(out, which + ".txt"), "w") as f:
                f.write(" ".join(repr(v) for v in curve) + "\n")
    dist.destroy_process_group()


def train(torch, dist, PipelineStage, ScheduleInterleaved1F1B, pps_schedule, rank, which, steps):
    mods = build_stage_modules(torch, seed=0)
    mine = [rank + k * P for k in range(V)]  # interleaved placement
    stages = [PipelineStage(mods[s], s, P * V, torch.device("cpu")) for s in mine]

    def loss_fn(y, target):
        return torch.nn.functional.mse_loss(y, target)

    if which == "pps":
        root = os.path.dirname(HERE)
        sched = pps_schedule(os.path.join(root, "stdlib", "interleaved_1f1b.pps"), stages, M, loss_fn=loss_fn,
                             defines={"P": P, "m": M, "v": V}, stdlib=os.path.join(root, "stdlib"))
    else:
        sched = ScheduleInterleaved1F1B(stages, M, loss_fn=loss_fn)
    params = [p for s in mine for p in mods[s].parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    curve = []
    for x, y in data(torch, steps):
        opt.zero_grad()
        losses = []
        if rank == 0:
            sched.step(x, target=y, losses=losses)
        else:
            sched.step(target=y, losses=losses)
        opt.step()
        # the last stage (on rank P-1) holds the losses; share the step's mean
        t = torch.tensor([float(sum(l.item() for l in losses) / M) if losses else 0.0])
        dist.broadcast(t, src=(P * V - 1) % P)
        curve.append(t.item())
    return curve


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--compare", action="store_true", help="also run PyTorch's ScheduleInterleaved1F1B")
    ap.add_argument("--rtol", type=float, default=1e-5)
    args = ap.parse_args()
    import torch.multiprocessing as mp

    curves = {}
    with tempfile.TemporaryDirectory(prefix="pps_example") as tmp:
        whiches = ["pps"] + (["torch"] if args.compare else [])
        mp.spawn(run, args=(whiches, args.steps, tmp, tmp), nprocs=P, join=True)
        for which in whiches:
            with open(os.path.join(tmp, which + ".txt")) as f:
                curves[which] = [float(v) for v in f.read().split()]
            print(f"{which:5s} loss per step: " + " ".join(f"{v:.6f}" for v in curves[which]))
    if args.compare:
        a, b = curves["pps"], curves["torch"]
        worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))
        print(f"largest relative difference: {worst:.3g}")
        if len(a) != len(b) or worst > args.rtol:
            print("the PPS schedule and PyTorch's give different losses", file=sys.stderr)
            return 1
    if not curves["pps"][-1] < curves["pps"][0]:
        print("the loss did not fall", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
