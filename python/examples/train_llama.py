"""Trains a small Llama-style model on variable-length sequences with DCP's
per-batch plans: a plain PyTorch model and training loop, plus the dcp_torch
calls marked "DCP:".

One command on a CPU (starts a local dcp_planner and 4 Gloo processes;
scripts/install_deps.sh installs dcp-torch into the venv, and
`bazel build //planner/service:dcp_planner` builds the planner):

    /opt/dcp/torch-venv/bin/python python/examples/train_llama.py

Under torchrun against a running planner, started for this model's
ModelSpec (`--write-model` writes it as dcp_planner's --model file):

    python/examples/train_llama.py --write-model=model.json
    dcp_planner --model=model.json ...   # on the planner's host
    DCP_PLANNER_ADDRESS=planner:50051 torchrun --nproc-per-node=8 \
        python/examples/train_llama.py --steps=100

To adapt it: give your model's blocks to dcp_torch.init (it reads the
ModelSpec from them, or says which field to pass), call dcp_torch.attention
where your model computes attention (on packed tokens [T, heads,
head_dim]), and give it the positions in mb.inputs.
"""

import argparse
import collections
import math
import os
import random
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import dcp_torch
from dcp_torch.local_planner import (LocalPlanner, built_planner_binary,
                                     spawn_gloo_ranks)

# --- The model: plain PyTorch ----------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) \
            * self.weight


def rotary(x, positions):
    half = x.shape[-1] // 2
    freqs = 10000.0 ** (-torch.arange(half, dtype=x.dtype) / half)
    angles = positions.to(x.dtype)[:, None, None] * freqs
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * angles.cos() - x2 * angles.sin(),
                      x1 * angles.sin() + x2 * angles.cos()], dim=-1)


class Block(nn.Module):
    def __init__(self, hidden, heads, kv_heads, ffn):
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, hidden // heads
        self.norm1, self.norm2 = RMSNorm(hidden), RMSNorm(hidden)
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.kv = nn.Linear(hidden, 2 * kv_heads * self.dim, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.gate_up = nn.Linear(hidden, 2 * ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x, positions):
        t = x.shape[0]
        h = self.norm1(x)
        q = rotary(self.q(h).view(t, self.heads, self.dim), positions)
        k, v = self.kv(h).view(t, 2, self.kv_heads, self.dim).unbind(1)
        # DCP: the drop-in attention (Ulysses all-to-all around it at SP>1).
        a = dcp_torch.attention(q, rotary(k, positions), v, causal=True)
        x = x + self.o(a.reshape(t, -1))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, vocab, hidden, layers, heads, kv_heads, ffn):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(Block(hidden, heads, kv_heads, ffn)
                                    for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids, position_ids):
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, position_ids)
        return self.head(self.norm(x))


# --- The data: variable-length sequences -----------------------------------

VOCAB = 256


def sample(sample_id):
    """A sequence that counts up by a per-sequence stride: learnable."""
    rng = random.Random(sample_id)
    length = lengths_of(sample_id)
    start, stride = rng.randrange(VOCAB), rng.randrange(1, 8)
    tokens = (start + stride * torch.arange(length + 1)) % VOCAB
    return {"input_ids": tokens[:-1], "labels": tokens[1:]}


def lengths_of(sample_id):
    """A long tail: most sequences short, a few 8-30x longer."""
    rng = random.Random(10_000 + sample_id)
    return int(min(32 * math.exp(rng.expovariate(0.8)), 1024))


def sampler(steps, sequences_per_step):
    """Global batches as (sample id, length) pairs, the same on every rank."""
    for step in range(steps):
        ids = range(step * sequences_per_step, (step + 1) * sequences_per_step)
        yield [(i, lengths_of(i)) for i in ids]


# --- Training ---------------------------------------------------------------


def describe(plan):
    """The plan's groups by SP size (each phase's, when it re-groups the ranks
    within the step), micro-batches and most recomputed layers."""
    layouts = dcp_torch.plan_layouts(plan)
    shapes = []
    for groups in layouts:
        sizes = collections.Counter(g.sp_size for g in groups)
        shapes.append(" + ".join(f"{n}xSP{sp}"
                                 for sp, n in sorted(sizes.items())))
    micro_batches = [m for groups in layouts for g in groups
                     for m in g.micro_batches]
    recomputed = max((m.checkpointed_layers for m in micro_batches), default=0)
    return (f"{', then '.join(shapes)}, {len(micro_batches)} micro-batches, "
            f"recompute <= {recomputed} layers")


def build_model(args):
    torch.manual_seed(0)
    return Llama(VOCAB, args.hidden, args.layers, heads=8, kv_heads=4,
                 ffn=2 * args.hidden)


def train(args):
    model = build_model(args)
    # DCP: register, profile this process's blocks, prepare checkpointing
    # (the ModelSpec the planner plans with is read from the module).
    rt = dcp_torch.init(model, model.layers, args.planner,
                        node_name=os.environ.get("DCP_NODE_NAME"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in rt.steps(sampler(args.steps, args.sequences),
                         fetch=sample):  # DCP: this rank's share of each step
        start = time.perf_counter()
        loss_sum = torch.zeros(())
        for mb in step:
            with mb:  # DCP: the micro-batch's SP group and recompute
                logits = model(mb.inputs["input_ids"],
                               mb.inputs["position_ids"])
                per_token = F.cross_entropy(logits, mb.inputs["labels"],
                                            reduction="none")
                loss = mb.token_loss_sum(per_token) * step.loss_scale
                loss.backward()
            loss_sum += loss.detach()
        step.sync_gradients()  # DCP: one all-reduce, on every rank
        optimizer.step()
        optimizer.zero_grad()
        step.report()  # DCP: measured times to the planner, in background
        dist.all_reduce(loss_sum)  # for printing only
        seconds = time.perf_counter() - start
        if rt.rank == 0:
            print(f"step {step.number}: {len(step.batch)} sequences, "
                  f"{step.loss_tokens} tokens; plan {describe(step.plan)}; "
                  f"predicted {step.plan.predicted_step_seconds:.3f} s, "
                  f"measured {seconds:.3f} s; loss {loss_sum.item():.3f}",
                  flush=True)
    rt.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--planner", default=None,
                        help="HOST:PORT of dcp_planner (default "
                             "$DCP_PLANNER_ADDRESS; without either, start "
                             "one locally)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--sequences", type=int, default=32,
                        help="sequences per global batch")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--ranks", type=int, default=4,
                        help="local processes when not under torchrun")
    parser.add_argument("--ranks-per-node", type=int, default=2)
    parser.add_argument("--planner-binary", default=built_planner_binary(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                     os.pardir)),
        help="the dcp_planner to start locally (default: the "
             "checkout's bazel-bin, else bazel-out/k8-opt)")
    parser.add_argument("--rank-memory-mb", type=float, default=8.0,
                        help="memory per rank the local planner plans for: "
                             "small, so that long sequences need SP")
    parser.add_argument("--write-model", metavar="FILE", default=None,
                        help="write the model's ModelSpec as the JSON file of "
                             "`dcp_planner --model=FILE` and exit")
    args = parser.parse_args()
    if args.write_model:
        model = build_model(args)
        dcp_torch.write_model_file(
            dcp_torch.model_spec_from_module(model, model.layers),
            args.write_model)
        print(f"wrote the ModelSpec to {args.write_model}")
        return
    if "RANK" in os.environ:  # under torchrun: this process is one rank
        train(args)
        return
    if args.planner or os.environ.get("DCP_PLANNER_ADDRESS"):
        spawn_gloo_ranks(train, (args,), args.ranks, args.ranks_per_node)
        return
    # The local planner plans for the model's ModelSpec, read from the
    # module as init reads it (a planner started elsewhere: write it with
    # dcp_torch.write_model_file and pass `dcp_planner --model=FILE`).
    model = build_model(args)
    spec = dcp_torch.model_spec_from_module(model, model.layers)
    with LocalPlanner(spec, nodes=args.ranks // args.ranks_per_node,
                      gpus_per_node=args.ranks_per_node,
                      rank_memory_bytes=args.rank_memory_mb * 1e6,
                      binary=args.planner_binary) as planner:
        print(f"dcp_planner on {planner.address} for {args.ranks} CPU ranks "
              f"of {args.rank_memory_mb:g} MB", flush=True)
        args.planner = planner.address
        spawn_gloo_ranks(train, (args,), args.ranks, args.ranks_per_node)


if __name__ == "__main__":
    main()
