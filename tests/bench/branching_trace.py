#!/usr/bin/env python3
"""A synthetic Mooncake-format trace with shared prefixes, for gpucache-replay.

Writes 6,000 requests to stdout: conversations that start from one of 12 shared "system
prompts" (1-6 blocks) and grow by 1-4 blocks a turn, so that blocks have many children and
chains branch. Deterministic (seed 15). Used to check that a change to an eviction policy's
data structures leaves its victims alone: the hit ratios gpucache-replay prints must not move
(docs/performance.md, "Daemon memory", third step).

    tests/bench/branching_trace.py > /tmp/trace.jsonl
    build/gpucache-replay /tmp/trace.jsonl --capacities 0.02,0.05,0.1,0.2
"""
import json
import random
import sys


def main():
    random.seed(15)
    next_id = [0]

    def new():
        next_id[0] += 1
        return next_id[0]

    systems = [[new() for _ in range(random.randint(1, 6))] for _ in range(12)]
    conversations = []
    t = 0
    for _ in range(6000):
        t += 1000
        if conversations and random.random() < 0.6:
            c = random.choice(conversations)
            c.extend(new() for _ in range(random.randint(1, 4)))
        else:
            c = list(random.choice(systems)) + [new() for _ in range(random.randint(1, 8))]
            conversations.append(c)
            if len(conversations) > 400:
                conversations.pop(random.randrange(len(conversations)))
        sys.stdout.write(json.dumps({"timestamp": t, "input_length": len(c) * 512 - random.randint(0, 500),
                                     "output_length": 10, "hash_ids": c}) + "\n")


if __name__ == "__main__":
    main()
