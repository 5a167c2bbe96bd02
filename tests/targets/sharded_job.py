"""A rank of a sharded data-parallel job on gloo, ZeRO-3 style, as FSDP shards: each rank owns
1/world of every parameter; each step all_gathers every parameter's shards before the forward,
and all_reduces the flat gradient after the backward (gloo has no reduce_scatter), keeping its
own shard; the rank SLOW_RANK computes SLOW_S seconds longer before it. Prints READY
{"param_bytes": N, "shard_bytes": S, "params": P}."""
import os
import json
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group('gloo')
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))
    params = list(model.parameters())
    shards = [nn.Parameter(p.detach().flatten().chunk(world)[rank].clone()) for p in params]
    opt = torch.optim.SGD(shards, lr=0.01)
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    shard_bytes = sum(s.numel() * s.element_size() for s in shards)
    slow = float(os.environ.get('SLOW_S', '0')) if rank == int(os.environ.get('SLOW_RANK', '-1')) \
        else 0.0
    step = 0
    while True:
        with torch.no_grad():  # the forward's all_gather of every parameter
            for p, s in zip(params, shards):
                parts = [torch.empty_like(s) for _ in range(world)]
                dist.all_gather(parts, s)
                p.copy_(torch.cat(parts).view_as(p))
        model.zero_grad()
        model(torch.randn(16, 64)).square().mean().backward()
        flat = torch.cat([p.grad.flatten() for p in params])
        if slow:
            time.sleep(slow)  # a slower rank: the others wait in the all_reduce
        dist.all_reduce(flat)  # a reduce_scatter: each rank keeps its shard of the sum
        offset = 0
        for p, s in zip(params, shards):
            s.grad = flat[offset:offset + p.numel()].chunk(world)[rank].clone() / world
            offset += p.numel()
        opt.step()
        if step == 2:
            print('READY ' + json.dumps({'param_bytes': param_bytes, 'shard_bytes': shard_bytes,
                                         'params': len(params)}), flush=True)
        step += 1
        time.sleep(0.02)


main()
