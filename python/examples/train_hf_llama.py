"""Trains a random-init Hugging Face LlamaForCausalLM (no download) on
variable-length sequences with DCP's per-batch plans: a standard loop, plus
the dcp_torch calls marked "DCP:".

One command on a CPU (starts a local dcp_planner and 2 Gloo processes):

    /opt/dcp/torch-venv/bin/python python/examples/train_hf_llama.py \
        --planner-binary=/path/to/dcp_planner

Under torchrun, against a running planner: DCP_PLANNER_ADDRESS=host:port
torchrun --nproc-per-node=N python/examples/train_hf_llama.py.
"""

import argparse
import math
import os
import random

import torch
import torch.distributed as dist
import transformers

import dcp_torch
from dcp_torch.local_planner import (LocalPlanner, built_planner_binary,
                                     spawn_gloo_ranks)

VOCAB = 128


def build_model(args):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048)
    return transformers.LlamaForCausalLM(config)


def length_of(sample_id):
    rng = random.Random(10_000 + sample_id)
    return int(min(16 * math.exp(rng.expovariate(0.8)), 512))


def fetch(sample_id):
    """A counting sequence with a 4-token prompt that has no loss."""
    rng = random.Random(sample_id)
    start, stride = rng.randrange(VOCAB), rng.randrange(1, 8)
    tokens = (start + stride * torch.arange(length_of(sample_id))) % VOCAB
    labels = tokens.clone()
    labels[:4] = -100  # HF-style labels: aligned with the tokens
    # DCP: shift the labels within the sequence and add the loss mask.
    return dcp_torch.causal_lm_sample(tokens, labels)


def sampler(steps, sequences):
    for step in range(steps):
        ids = range(step * sequences, (step + 1) * sequences)
        yield [(i, length_of(i)) for i in ids]


def train(args):
    model = build_model(args)
    # DCP: attention -> dcp_torch.attention, no KV cache, checked forwards.
    prepared = dcp_torch.prepare_hf_model(model)
    rt = dcp_torch.init(model, prepared.blocks, args.planner)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in rt.steps(sampler(args.steps, args.sequences), fetch=fetch):
        total = torch.zeros(())
        for mb in step:
            with mb:  # DCP: the micro-batch's SP group and recompute
                logits = model(input_ids=mb.inputs["input_ids"],
                               position_ids=mb.inputs["position_ids"]).logits
                # DCP: no labels= to the model; this rank's token loss sum.
                loss = dcp_torch.causal_lm_loss(logits, mb.inputs["labels"],
                                                mb) * step.loss_scale
                loss.backward()
            total += loss.detach()
        step.sync_gradients()
        optimizer.step()
        optimizer.zero_grad()
        step.report()
        dist.all_reduce(total)
        if rt.rank == 0:
            print(f"step {step.number}: {step.loss_tokens} loss tokens, "
                  f"loss {total.item():.3f}", flush=True)
    rt.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--planner", default=None)
    parser.add_argument("--planner-binary", default=built_planner_binary(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                     os.pardir)))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rank-memory-mb", type=float, default=8.0)
    args = parser.parse_args()
    if "RANK" in os.environ:
        train(args)
        return
    if args.planner or os.environ.get("DCP_PLANNER_ADDRESS"):
        spawn_gloo_ranks(train, (args,), args.ranks)
        return
    model = build_model(args)
    spec = dcp_torch.model_spec_from_module(model, model.model.layers)
    with LocalPlanner(spec, nodes=1, gpus_per_node=args.ranks,
                      rank_memory_bytes=args.rank_memory_mb * 1e6,
                      binary=args.planner_binary) as planner:
        args.planner = planner.address
        spawn_gloo_ranks(train, (args,), args.ranks)


if __name__ == "__main__":
    main()
