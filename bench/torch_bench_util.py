"""What the torch benchmarks share: a job's step times from its own log."""
import json

SETTLE_S = 0.3  # after a switch: steps in flight, a first drain


def step_times(log_path, since, until):
    """Each step's time (s) between two perf_counter instants, from the job's log."""
    stamps = []
    with open(log_path) as f:
        for line in f:
            try:
                t = json.loads(line)['t']
            except ValueError:
                continue  # a line being written
            if since <= t <= until:
                stamps.append(t)
    return [b - a for a, b in zip(stamps, stamps[1:])]
