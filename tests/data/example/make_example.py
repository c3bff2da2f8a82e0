#!/usr/bin/env python3
"""make_example.py - writes the README example's inputs (q, k, v as fp16 NPY,
[1, 1000, 4, 64]; k and v with 2 kv heads) next to this file. Deterministic.
Run: python3 tests/data/example/make_example.py"""
import os

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(2307)
for name, heads in (("q", 4), ("k", 2), ("v", 2)):
    np.save(os.path.join(here, f"{name}.npy"), rng.standard_normal((1, 1000, heads, 64)).astype(np.float16))
