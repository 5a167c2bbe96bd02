"""A real PyTorch job (Debian's python3-torch) for the torch trace tests and benchmark.

    torchjob.py MODEL MODE EPOCHS STEPS GO_FILE LOG_FILE
      MODEL  mlp | inplace | oddnames | transformer | transformer-128 | gated (a small MLP; one with
             BatchNorm and in-place ReLUs; one whose module names JSON must escape; an embedding + one pre-norm transformer block + a head, dim
             64 on 8x16 tokens, or dim 128 on 8x32 tokens; the MLP with a gate between fc1 and
             the rest whose first call writes GO_FILE.inside and waits for GO_FILE.resume, so
             that a test can turn the trace on in the middle of a forward; on random data)
      MODE   train (SGD steps: zero_grad, forward, loss, backward, step) | infer (no_grad
             forward calls, no optimizer) | train-loader (train, the mlp's batches from a
             DataLoader whose two forked workers run a module for each item, as torchvision's
             transforms do: they inherit the trace's hooks)
      GO_FILE  the loop waits (sleeping, no module called) until this file exists, so that a
               test can turn the trace on first
      LOG_FILE one JSON line per step: {"step": global index from 0, "loss": float, "t": s,
               "held": whether the last step's output was still alive after this step's
               forward (the trace must not keep a job's tensors alive)}

Prints `READY {"pid": N}` once built, then, after the last step, `DONE` and sleeps until
killed, so that the daemon can still drain and turn the trace off.
"""
import json
import os
import sys
import time
import weakref

import torch
import torch.nn as nn

torch.manual_seed(0)
torch.set_num_threads(1)  # steady timings on a small, busy machine


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Gate(nn.Module):
    """Its first call says so (a file) and waits for the test's go-ahead (another)."""

    def __init__(self, path):
        super().__init__()
        self.path, self.waited = path, False

    def forward(self, x):
        if not self.waited:
            self.waited = True
            open(self.path + '.inside', 'w').close()
            while not os.path.exists(self.path + '.resume'):
                time.sleep(0.02)
        return x


class Gated(nn.Module):
    def __init__(self, path):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.gate = Gate(path)
        self.body = nn.Sequential(nn.ReLU(), nn.Linear(128, 128), nn.ReLU())
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(self.body(self.gate(self.fc1(x))))


class InPlace(nn.Module):
    """BatchNorm then an in-place ReLU, as in ResNet: what torch's global full backward
    hooks break ("Output 0 of BackwardHookFunctionBackward is a view and is being modified
    inplace"), and the trace must not."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.bn = nn.BatchNorm1d(128)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(self.relu(self.bn(self.fc1(x))))


ODD_NAME = 'fc"1\\\t'  # a quote, a backslash, a tab: JSON escapes each


class Modèle(nn.Module):
    """Names the trace must carry through JSON as they are: a class name that is not ASCII, a
    submodule name with characters JSON escapes."""

    def __init__(self):
        super().__init__()
        self.add_module(ODD_NAME, nn.Linear(64, 10))

    def forward(self, x):
        return self._modules[ODD_NAME](x)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=100, dim=64, heads=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.block = Block(dim, heads)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.head(self.block(self.embed(tokens)))


def batch(model_name):
    if model_name in ('mlp', 'inplace', 'oddnames', 'gated'):
        return torch.randn(32, 64), torch.randint(0, 10, (32,))
    seq = 32 if model_name == 'transformer-128' else 16
    tokens = torch.randint(0, 100, (8, seq))
    return tokens, torch.randint(0, 100, (8 * seq,))


class Features(torch.utils.data.Dataset):
    """Items made by a module, in the DataLoader's worker processes."""

    def __init__(self, n):
        self.n = n
        self.transform = nn.Linear(64, 64)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        with torch.no_grad():
            return self.transform(torch.randn(64)), i % 10


def batches(model_name, steps, loader):
    if loader is None and model_name.endswith('-cuda'):  # made on the host, copied over
        return (tuple(t.cuda() for t in batch(model_name)) for _ in range(steps))
    if loader is None:
        return (batch(model_name) for _ in range(steps))
    return iter(loader)


def train(model, model_name, epochs, steps, log, loader=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    last_out = lambda: None  # noqa: E731
    for epoch in range(epochs):
        for x, y in batches(model_name, steps, loader):
            opt.zero_grad()
            out = model(x)
            loss = loss_fn(out.reshape(-1, out.shape[-1]), y)
            held = last_out() is not None  # the last step's output, kept alive by someone
            loss.backward()
            opt.step()
            last_out = weakref.ref(out)
            log.write(json.dumps({'step': step, 'epoch': epoch, 'loss': loss.item(),
                                  'held': held, 't': time.perf_counter()}) + '\n')
            step += 1


def infer(model, model_name, epochs, steps, log):
    step = 0
    with torch.no_grad():
        for epoch in range(epochs):
            for i in range(steps):
                x, _ = batch(model_name)
                out = model(x)
                log.write(json.dumps({'step': step, 'epoch': epoch, 'mean': out.mean().item(),
                                      't': time.perf_counter()}) + '\n')
                step += 1


def main():
    model_name, mode, epochs, steps, go, log_path = sys.argv[1:7]
    model = {'mlp': MLP, 'inplace': InPlace, 'oddnames': Modèle, 'transformer': TinyTransformer,
             'transformer-128': lambda: TinyTransformer(dim=128, heads=4),
             'transformer-cuda': lambda: TinyTransformer().cuda(),
             'gated': lambda: Gated(go)}[model_name]()
    print('READY ' + json.dumps({'pid': os.getpid()}))
    sys.stdout.flush()
    while not os.path.exists(go):
        time.sleep(0.02)
    with open(log_path, 'w', buffering=1) as log:  # a line per step, as it happens
        if mode == 'train-loader':
            loader = torch.utils.data.DataLoader(Features(32 * int(steps)), batch_size=32,
                                                 num_workers=2,
                                                 multiprocessing_context='fork')
            train(model, model_name, int(epochs), int(steps), log, loader)
        else:
            (train if mode == 'train' else infer)(model, model_name, int(epochs), int(steps),
                                                  log)
    print('DONE')
    sys.stdout.flush()
    while True:
        time.sleep(1)


if __name__ == '__main__':
    main()
