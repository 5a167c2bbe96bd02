"""A small training loop that runs until killed and uses no JSON module of its own: what the
allocation tests see of json/ is probed's (Debian's /usr/bin/python3 with python3-torch).
Prints `READY {"pid": N}`."""
import os
import time

import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
print('READY {"pid": %d}' % os.getpid(), flush=True)
while True:
    x = torch.randn(32, 64)  # MARK:batch
    loss = model(x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.005)
